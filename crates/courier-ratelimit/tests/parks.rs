//! A park that lands while requests already wait for their slots holds them too.

use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use tower::{Layer, ServiceExt, service_fn};

#[tokio::test(start_paused = true)]
async fn waiters_already_sleeping_obey_a_park_that_lands_meanwhile() {
    let t0 = tokio::time::Instant::now();
    let hits: Arc<Mutex<Vec<f64>>> = Arc::default();
    let up = {
        let hits = hits.clone();
        service_fn(move |_req: Request<()>| {
            let mut hits = hits.lock().unwrap();
            hits.push(t0.elapsed().as_secs_f64());
            let mut resp = Response::new(());
            if hits.len() == 2 {
                // The second request (at 1 s) is told: nothing for 10 s.
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                resp.headers_mut()
                    .insert("retry-after", "10".parse().unwrap());
            }
            std::future::ready(Ok::<_, Infallible>(resp))
        })
    };
    let svc =
        TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN).layer(up);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let req = Request::get("http://a/x").body(()).unwrap();
        set.spawn(svc.clone().oneshot(req));
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
    let mut hits = hits.lock().unwrap().clone();
    hits.sort_by(f64::total_cmp);
    assert_eq!(hits.len(), 4);
    // Host a is parked from 1 s until 11 s; nothing reaches it in between.
    assert!(
        hits.iter().all(|&t| t <= 1.0 || t >= 11.0),
        "requests reached host a while it was parked: {hits:?}"
    );
}

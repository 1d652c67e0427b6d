//! `N` requests over loopback through the raw hyper-util client or a courier stack over it,
//! from `TASKS` tasks, for instruction counts under callgrind (the server runs in the same
//! process, so its share is the same for every variant and cancels out in a difference).
//!
//! ```text
//! cargo run --release -p courier-bench --example loopback_calls -- VARIANT N TASKS
//! ```
//!
//! VARIANT: `raw`, `preset`, `bare` (the preset with every layer off), `bare_no_ua` (the same,
//! sending no `User-Agent`, as the raw client does not), `deadline`, `attempt_timeout`, `cache`,
//! `retry`, `breaker` (that layer alone).

use bytes::Bytes;
use courier::CourierLayer;
use courier::transport::hyper_client;
use courier_bench::server::{BODY, LoopbackServer};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceExt};

type Body = Full<Bytes>;

fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

fn layer(name: &str) -> Option<CourierLayer> {
    let bare = CourierLayer::bare();
    Some(match name {
        "preset" => CourierLayer::new(),
        "bare" => bare,
        "bare_no_ua" => bare.user_agent(None),
        "deadline" => bare.deadline(courier::preset::DEFAULT_DEADLINE),
        "attempt_timeout" => bare.attempt_timeout(courier::preset::DEFAULT_ATTEMPT_TIMEOUT),
        "cache" => bare.cache(courier::cache::EtagCacheLayer::new()),
        "retry" => bare.retry(courier::retry::RetryLayer::new()),
        "breaker" => bare.circuit_breaker(courier::breaker::CircuitBreakerLayer::new()),
        _ => return None,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variant = args.first().map_or("raw", String::as_str).to_owned();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let tasks: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let server = LoopbackServer::start().expect("the loopback server starts");
    let uri: Uri = server.url("/v1/items").parse().expect("a valid uri");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let ok = rt.block_on(async move {
        let raw = hyper_client::<Body>();
        let stack = layer(&variant).map(|l| l.hyper::<Body>());
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let (raw, stack, uri) = (raw.clone(), stack.clone(), uri.clone());
            set.spawn(async move {
                let mut svc = stack;
                let mut ok = 0;
                for _ in 0..n / tasks {
                    let body = match &mut svc {
                        None => match raw.request(request(&uri)).await {
                            Ok(resp) => resp.into_body().collect().await.ok().map(|c| c.to_bytes()),
                            Err(_) => None,
                        },
                        Some(svc) => match svc.ready().await {
                            Ok(svc) => match svc.call(request(&uri)).await {
                                Ok(resp) => {
                                    resp.into_body().collect().await.ok().map(|c| c.to_bytes())
                                }
                                Err(_) => None,
                            },
                            Err(_) => None,
                        },
                    };
                    ok += usize::from(body.is_some_and(|b| b == BODY));
                }
                ok
            });
        }
        let mut ok = 0;
        while let Some(done) = set.join_next().await {
            ok += done.unwrap_or(0);
        }
        ok
    });
    assert_eq!(ok, n / tasks * tasks, "some requests failed");
}

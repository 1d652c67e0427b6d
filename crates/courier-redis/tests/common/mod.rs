//! What the Redis tests share: the quota, host and request they use, one replica's loop, and
//! the four-replicas check every topology passes.

#![allow(dead_code, unreachable_pub)]

use courier_core::{BoxError, HostKey};
use courier_ratelimit::{Quota, Rate, TokenBucketRateLimitLayer};
use courier_redis::RedisStore;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt, service_fn};

pub fn quota(rps: f64, burst: u32) -> Quota {
    Quota::new(
        Rate::per_second(rps).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

pub fn host() -> HostKey {
    HostKey::from_request(&http::Request::get("https://api.example/").body(()).unwrap())
}

pub fn request() -> http::Request<()> {
    http::Request::get("https://api.example/x")
        .body(())
        .unwrap()
}

/// Generous: these tests are about sharing, not about timeouts, and the machine may be busy.
pub const PATIENT: Duration = Duration::from_millis(500);

/// One replica: calls in a loop until `run_for` has passed since `t0`.
pub async fn replica<S>(svc: S, t0: Instant, run_for: Duration)
where
    S: tower::Service<http::Request<()>, Response = http::Response<()>, Error = BoxError> + Clone,
{
    let mut n = 0u32;
    while t0.elapsed() < run_for && n < 1000 {
        timeout(Duration::from_secs(5), svc.clone().oneshot(request()))
            .await
            .expect("each call within 5 s")
            .expect("admitted");
        n += 1;
    }
}

/// Four replicas, each one of `stores` (its own connection, one key prefix), share one key at
/// 10/s, burst 5, for 3 s: at most 5 + 30 + 1 calls start in any 3 s window, where each alone
/// would start 35; and every decision came from Redis.
pub async fn four_replicas_share_one_limit(stores: [RedisStore<HostKey>; 4]) {
    let starts = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let run_for = Duration::from_secs(3);
    let services = stores.clone().map(|store| {
        let layer = TokenBucketRateLimitLayer::with_quota(quota(10.0, 5)).store_in(store);
        let starts = Arc::clone(&starts);
        ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(move |_req: http::Request<()>| {
                starts.lock().unwrap().push(Instant::now());
                async { Ok::<_, BoxError>(http::Response::new(())) }
            }))
    });
    let [a, b, c, d] = services;
    tokio::join!(
        replica(a, t0, run_for),
        replica(b, t0, run_for),
        replica(c, t0, run_for),
        replica(d, t0, run_for)
    );
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let in_first = starts.iter().filter(|t| **t - t0 < run_for).count();
    let busiest = (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < run_for)
                .count()
        })
        .max()
        .unwrap_or(0);
    println!("{in_first} starts in the first 3 s, {busiest} in the busiest 3 s window");
    assert!(busiest <= 5 + 30 + 1, "{busiest} starts in 3 s");
    assert!(
        in_first >= 15,
        "the shared limit lets traffic through: {in_first}"
    );
    for s in &stores {
        assert_eq!(s.outages(), 0, "every decision came from redis");
    }
}

/// `store`'s bucket for [`host`], drained at 1/s, burst 5, then reset: after the `DEL` has
/// landed (200 ms, far less than the one interval that would refill a slot), the burst is
/// there again, all of it at once, and no more.
pub async fn reset_starts_from_a_full_bucket(store: &RedisStore<HostKey>) {
    use courier_ratelimit::{Decision, RateLimitStore};
    let q = quota(1.0, 5);
    let decide = || async {
        timeout(
            Duration::from_secs(5),
            store.acquire(&host(), q, Duration::ZERO),
        )
        .await
        .expect("a decision within 5 s")
        .expect("never an error")
    };
    let mut drained = false;
    for _ in 0..10 {
        if matches!(decide().await, Decision::Deny(_)) {
            drained = true;
            break;
        }
    }
    assert!(drained, "a burst of 5 is drained within 10 decisions");
    store.reset(&host());
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..5 {
        let decision = decide().await;
        assert!(
            matches!(decision, Decision::Admit(g) if g.at() <= Instant::now()),
            "slot {i} of a full bucket is free at once: {decision:?}"
        );
    }
    let Decision::Deny(denial) = decide().await else {
        panic!("a burst of 5, no more")
    };
    assert!(denial.retry_in() > Duration::from_millis(500), "{denial:?}");
    assert_eq!(store.outages(), 0, "every decision came from redis");
}

//! The window bound through the whole service: many concurrent callers on a paused
//! current-thread runtime, some giving up (dropping their future) while they wait.
//!
//! Real time cannot be used on a multi-thread runtime for exact bounds (the scheduler's delays
//! would land in the measured start times); the GCRA core itself is driven from several OS
//! threads with synthetic timestamps in `src/gcra.rs`. Here tokio's paused clock makes every
//! start time exact while hundreds of tasks race for the same bucket.

use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
use http::{Request, Response};
use proptest::prelude::*;
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

fn run(
    interval_ms: u64,
    burst: u32,
    max_wait_ms: u64,
    callers: Vec<(u64, Option<u64>)>,
) -> (Vec<u64>, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let origin = Instant::now();
        let starts = Arc::new(Mutex::new(Vec::new()));
        let seen = starts.clone();
        let inner = service_fn(move |_req: Request<()>| {
            seen.lock()
                .unwrap()
                .push(origin.elapsed().as_nanos() as u64);
            async { Ok::<_, Infallible>(Response::new(())) }
        });
        let rate = Rate::every(Duration::from_millis(interval_ms)).unwrap();
        let svc = TokenBucketRateLimitLayer::new(rate, NonZeroU32::new(burst).unwrap())
            .max_wait(Duration::from_millis(max_wait_ms))
            .layer(inner);
        let mut tasks = tokio::task::JoinSet::new();
        for (arrive_ms, give_up_ms) in callers {
            let svc = svc.clone();
            tasks.spawn(async move {
                tokio::time::sleep(Duration::from_millis(arrive_ms)).await;
                let req = Request::get("http://h/").body(()).unwrap();
                match give_up_ms {
                    Some(ms) => {
                        let _ =
                            tokio::time::timeout(Duration::from_millis(ms), svc.oneshot(req)).await;
                    }
                    None => {
                        let _ = svc.oneshot(req).await;
                    }
                }
            });
        }
        tasks.join_all().await;
        let mut v = starts.lock().unwrap().clone();
        v.sort_unstable();
        (v, interval_ms * 1_000_000)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_window_exceeds_burst_plus_rate_through_the_service(
        interval_ms in 1u64..500,
        burst in 1u32..5,
        max_wait_ms in 0u64..3_000,
        callers in proptest::collection::vec(
            (0u64..5_000, proptest::option::weighted(0.3, 0u64..1_000)),
            1..120,
        ),
    ) {
        let (starts, t) = run(interval_ms, burst, max_wait_ms, callers);
        for i in 0..starts.len() {
            for j in i..starts.len() {
                let n = (j - i + 1) as u64;
                let d = starts[j] - starts[i];
                prop_assert!(
                    n <= u64::from(burst) + d / t,
                    "{n} starts in {d} ns with burst {burst} and interval {t} ns"
                );
            }
        }
    }
}

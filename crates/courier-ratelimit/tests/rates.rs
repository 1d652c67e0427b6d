//! A configured rate is never run faster than asked: "in any window of length d, at most
//! burst + rate × d requests start", whatever the rounding to whole nanoseconds.

use courier_ratelimit::{Decision, InMemoryStore, Quota, Rate};
use std::num::NonZeroU32;
use std::time::Duration;

/// Starts (ns after the first) of every request admitted at one instant with `max_wait`.
fn starts_within(quota: Quota, max_wait: Duration) -> Vec<u64> {
    let store = InMemoryStore::<()>::new();
    let t0 = tokio::time::Instant::now();
    let mut starts = Vec::new();
    for _ in 0..100_000 {
        match store.decide(&(), quota, max_wait) {
            Decision::Admit(g) => starts.push((g.at() - t0).as_nanos() as u64),
            Decision::Deny(_) => break,
        }
    }
    starts
}

fn assert_window_bound(starts: &[u64], burst: u64, rate_per_s: f64) {
    let (first, last) = (starts[0], *starts.last().expect("admitted"));
    let d = (last - first) as f64 / 1e9;
    let bound = burst as f64 + rate_per_s * d;
    assert!(
        starts.len() as f64 <= bound,
        "{} starts in a window of {} ns; bound burst + rate*d = {bound}",
        starts.len(),
        last - first
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_whose_interval_is_not_whole_nanoseconds_is_never_exceeded() {
    let three = Rate::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(1)).unwrap();
    for (rate, per_s, window) in [
        (three, 3.0, Duration::from_secs(1)),
        (Rate::per_second(3.0).unwrap(), 3.0, Duration::from_secs(1)),
        (
            Rate::per_second(7e8).unwrap(),
            7e8,
            Duration::from_nanos(1000),
        ),
    ] {
        let starts = starts_within(Quota::new(rate, NonZeroU32::MIN), window);
        assert!(starts.len() > 1, "{per_s}/s admits more than one");
        assert_window_bound(&starts, 1, per_s);
    }
    // A whole interval stays exact.
    let starts = starts_within(
        Quota::new(Rate::per_second(1000.0).unwrap(), NonZeroU32::MIN),
        Duration::from_millis(5),
    );
    assert_eq!(
        starts,
        [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000]
    );
}

#[test]
fn a_rate_above_1e9_per_second_is_refused_as_documented() {
    assert!(Rate::per_second(1.5e9).is_err());
    assert!(Rate::per_second(1e9).is_ok());
    assert!(Rate::new(NonZeroU32::new(3).unwrap(), Duration::from_nanos(2)).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_never_sent_after_its_deadline() {
    // tokio's timer wakes on whole milliseconds: a slot at 333.333 ms with a deadline at
    // 333.9 ms would wake at 334 ms, past the deadline. Such a request is refused.
    use courier_core::{BoxError, CallContext, RateLimited};
    use courier_ratelimit::TokenBucketRateLimitLayer;
    use http::{Request, Response};
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use tower::{Layer, ServiceExt, service_fn};
    let sent: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let up = {
        let sent = sent.clone();
        service_fn(move |_req: Request<()>| {
            sent.lock().unwrap().push(tokio::time::Instant::now());
            std::future::ready(Ok::<_, Infallible>(Response::new(())))
        })
    };
    let rate = Rate::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(1)).unwrap();
    let svc = TokenBucketRateLimitLayer::new(rate, NonZeroU32::MIN).layer(up);
    let get = || Request::get("http://a/x").body(()).unwrap();
    svc.clone().oneshot(get()).await.unwrap();
    let mut req = get();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::from_micros(333_900));
    let res: Result<Response<()>, BoxError> = svc.clone().oneshot(req).await;
    let err = res.expect_err("the slot comes too close to the deadline");
    assert!(err.is::<RateLimited>(), "{err}");
    assert_eq!(sent.lock().unwrap().len(), 1, "never sent");
    // With a millisecond to spare, it waits for its slot.
    let mut req = get();
    let deadline =
        CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::from_millis(700));
    svc.clone().oneshot(req).await.unwrap();
    let at = *sent.lock().unwrap().last().unwrap();
    assert!(at <= deadline);
}

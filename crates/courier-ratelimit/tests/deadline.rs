//! A wait the request's deadline cuts short fails with `RateLimited { retry_in }` (the crate's
//! contract), nothing sent, and `retry_in` is when a slot is free: the real wait, never a
//! placeholder zero.

use courier_core::{BoxError, CallContext, DeadlineExceeded, RateLimited, is_caused_by};
use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
use http::{Request, Response};
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, sleep_until};
use tower::{Layer, ServiceExt, service_fn};

fn get() -> Request<()> {
    Request::get("http://a/x").body(()).unwrap()
}

fn with_deadline(after: Duration) -> Request<()> {
    let mut req = get();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(after);
    req
}

fn rate_limited(err: &BoxError) -> RateLimited {
    assert!(!is_caused_by::<DeadlineExceeded>(&**err), "{err}");
    *err.downcast_ref::<RateLimited>()
        .unwrap_or_else(|| panic!("expected RateLimited, got {err}"))
}

type Sent = Arc<Mutex<Vec<Duration>>>;

fn upstream(
    origin: Instant,
    sent: &Sent,
) -> impl tower::Service<
    Request<()>,
    Response = Response<()>,
    Error = Infallible,
    Future = std::future::Ready<Result<Response<()>, Infallible>>,
> + Clone
+ use<> {
    let sent = sent.clone();
    service_fn(move |_req: Request<()>| {
        sent.lock().unwrap().push(origin.elapsed());
        std::future::ready(Ok::<_, Infallible>(Response::new(())))
    })
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_deadline_is_refused_at_once_with_the_real_wait() {
    let (origin, sent) = (Instant::now(), Sent::default());
    let svc = TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN)
        .layer(upstream(origin, &sent));
    svc.clone().oneshot(get()).await.unwrap(); // slot 0
    let waiter = tokio::spawn(svc.clone().oneshot(get())); // slot 1 s
    tokio::task::yield_now().await;
    // The next slot is at 2 s; the deadline at 1.5 s.
    let err = svc
        .clone()
        .oneshot(with_deadline(Duration::from_millis(1500)))
        .await
        .expect_err("its slot is past its deadline");
    assert_eq!(rate_limited(&err).retry_in(), Duration::from_secs(2));
    assert_eq!(origin.elapsed(), Duration::ZERO, "refused at once");
    waiter.await.unwrap().unwrap();
    assert_eq!(
        sent.lock().unwrap().len(),
        2,
        "the refused request was not sent"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_woke_past_its_deadline_says_when_the_next_slot_is() {
    // 3 per second: slots 333.333 ms apart. The second request's slot is at 333.333 ms, its
    // deadline at 333.9 ms; the third one reserves the slot after it. tokio's timer wakes the
    // second at 334 ms, past its deadline: refused. Its slot cannot go back (the third is
    // stacked on it), so the next free slot is the one after the third's, at 1 s (and 2 ns:
    // the interval is rounded up to 333 333 334 ns).
    let (origin, sent) = (Instant::now(), Sent::default());
    let rate = Rate::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(1)).unwrap();
    let svc = TokenBucketRateLimitLayer::new(rate, NonZeroU32::MIN).layer(upstream(origin, &sent));
    svc.clone().oneshot(get()).await.unwrap();
    let second = tokio::spawn(
        svc.clone()
            .oneshot(with_deadline(Duration::from_micros(333_900))),
    );
    tokio::task::yield_now().await;
    let third = tokio::spawn(svc.clone().oneshot(get()));
    tokio::task::yield_now().await;
    let err = second.await.unwrap().expect_err("woke past its deadline");
    assert_eq!(origin.elapsed(), Duration::from_millis(334));
    let retry_in = rate_limited(&err).retry_in();
    assert_eq!(
        retry_in,
        Duration::from_nanos(3 * 333_333_334) - Duration::from_millis(334)
    );
    third.await.unwrap().unwrap();
    // Asking again after `retry_in` finds a slot free at once.
    sleep_until(origin + Duration::from_millis(334) + retry_in).await;
    let asked = origin.elapsed();
    svc.clone().oneshot(get()).await.unwrap();
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[2], asked, "started at once");
}

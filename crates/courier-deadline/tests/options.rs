//! A call's own deadline (`CallOptions::deadline`) through the deadline layers, on paused time.

use courier_core::{AttemptTimedOut, BoxError, CallContext, CallOptions, DeadlineExceeded};
use courier_deadline::scope::scope;
use courier_deadline::{AttemptTimeoutLayer, DeadlineLayer};
use http::{Request, Response};
use http_body_util::Empty;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Answers 200 after `delay`, recording the deadline each request carried.
fn upstream(
    delay: Duration,
    seen: Arc<Mutex<Vec<Option<Instant>>>>,
) -> impl Service<
    Request<()>,
    Response = Response<Empty<bytes::Bytes>>,
    Error = BoxError,
    Future = impl Send,
> + Clone {
    service_fn(move |req: Request<()>| {
        seen.lock()
            .unwrap()
            .push(CallContext::deadline_in(req.extensions()));
        async move {
            tokio::time::sleep(delay).await;
            Ok::<_, BoxError>(Response::new(Empty::new()))
        }
    })
}

fn with_deadline(budget: Duration) -> Request<()> {
    let mut req = Request::new(());
    CallOptions::new()
        .deadline(budget)
        .expect("a valid deadline")
        .apply(&mut req);
    req
}

fn exceeded(err: &BoxError) -> DeadlineExceeded {
    *err.downcast_ref::<DeadlineExceeded>()
        .unwrap_or_else(|| panic!("expected DeadlineExceeded, got {err:?}"))
}

#[tokio::test(start_paused = true)]
async fn a_shorter_option_ends_the_call_by_its_own_deadline() {
    let seen = Arc::default();
    let svc = DeadlineLayer::new(ms(10_000)).layer(upstream(ms(5_000), Arc::clone(&seen)));
    let start = Instant::now();
    let err = svc.oneshot(with_deadline(ms(300))).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(300));
    let err = exceeded(&err);
    assert_eq!((err.budget(), err.elapsed()), (ms(300), ms(300)));
    assert_eq!(*seen.lock().unwrap(), [Some(start + ms(300))]);
}

#[tokio::test(start_paused = true)]
async fn a_longer_option_lets_the_call_outlast_the_layers_budget() {
    let seen = Arc::default();
    let svc = DeadlineLayer::new(ms(1_000)).layer(upstream(ms(3_000), Arc::clone(&seen)));
    let start = Instant::now();
    let res = svc.oneshot(with_deadline(ms(5_000))).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(start.elapsed(), ms(3_000));
    assert_eq!(*seen.lock().unwrap(), [Some(start + ms(5_000))]);
    // Without the option the same call fails by the layer's budget.
    let err = DeadlineLayer::new(ms(1_000))
        .layer(upstream(ms(3_000), Arc::default()))
        .oneshot(Request::new(()))
        .await
        .unwrap_err();
    assert_eq!(exceeded(&err).budget(), ms(1_000));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_already_in_force_still_bounds_a_longer_option() {
    // From the request's context (an outer layer's deadline) ...
    let seen = Arc::default();
    let svc = DeadlineLayer::new(ms(10_000)).layer(upstream(ms(5_000), Arc::clone(&seen)));
    let start = Instant::now();
    let mut req = with_deadline(ms(4_000));
    CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(700));
    let err = svc.oneshot(req).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(700));
    assert_eq!(exceeded(&err).budget(), ms(700));
    assert_eq!(*seen.lock().unwrap(), [Some(start + ms(700))]);

    // ... and from a server-side scope.
    let seen = Arc::default();
    let svc = DeadlineLayer::new(ms(10_000)).layer(upstream(ms(5_000), Arc::clone(&seen)));
    let start = Instant::now();
    let err = scope(start + ms(200), svc.oneshot(with_deadline(ms(4_000))))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(200));
    assert_eq!(exceeded(&err).budget(), ms(200));
    assert_eq!(*seen.lock().unwrap(), [Some(start + ms(200))]);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_stays_the_lesser_of_its_own_and_what_the_option_leaves() {
    // The option's deadline is nearer than the attempt's bound: the deadline ends the call.
    let stack = |per_attempt| {
        DeadlineLayer::new(ms(10_000))
            .layer(AttemptTimeoutLayer::new(per_attempt).layer(upstream(ms(5_000), Arc::default())))
    };
    let start = Instant::now();
    let err = stack(ms(1_000))
        .oneshot(with_deadline(ms(400)))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(400));
    assert!(
        courier_core::is_caused_by::<DeadlineExceeded>(&*err),
        "{err}"
    );
    // The attempt's bound is nearer than the option's deadline: the attempt times out.
    let start = Instant::now();
    let err = stack(ms(1_000))
        .oneshot(with_deadline(ms(3_000)))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(1_000));
    assert!(
        courier_core::is_caused_by::<AttemptTimedOut>(&*err),
        "{err}"
    );
}

//! What a setter does to the retry budget: a layer is a value, and each setter gives the
//! services made after it a budget of its own.

use courier_core::BoxError;
use courier_retry::{RetryBudget, RetryLayer};
use http::{Request, Response, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::{Layer, ServiceExt, service_fn};

fn get() -> Request<String> {
    Request::get("http://api.example/v1/items")
        .body(String::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_setter_leaves_earlier_services_their_settings_and_their_budget() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&hits);
    let failing = service_fn(move |_: Request<String>| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, BoxError>(Response::builder().status(503).body(String::new()).unwrap()) }
    });
    let hits = move || hits.swap(0, Ordering::SeqCst);

    // One retry per window, and none earned by the calls themselves.
    let first = RetryLayer::new()
        .seed(1)
        .attempts(2)
        .budget(RetryBudget::new().ratio(0.0).floor(1));
    let early = first.layer(failing.clone());
    let second = first.attempts(3);
    let late = second.layer(failing.clone());

    let res = early.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(hits(), 2, "the early service keeps its 2 attempts");
    early.clone().oneshot(get()).await.unwrap();
    assert_eq!(hits(), 1, "its budget is spent");

    late.clone().oneshot(get()).await.unwrap();
    assert_eq!(hits(), 2, "a budget of its own, with one retry in it");
    late.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        hits(),
        1,
        "shared by every call of the later layer's services"
    );
    let again = second.layer(failing);
    again.oneshot(get()).await.unwrap();
    assert_eq!(hits(), 1, "and by every service that layer makes");
}

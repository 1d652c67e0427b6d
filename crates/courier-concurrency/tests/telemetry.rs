//! A wait and a refusal are recorded on the current span, and a refusal is one `tracing`
//! event with target `courier::concurrency`.
//!
//! Alone in its own test binary: tracing caches per-callsite interest, so events from tests
//! running at the same time on other threads would race the subscriber.

use courier_concurrency::ConcurrencyLimitLayer;
use http::{Request, Response};
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};
use tracing::Instrument;
use tracing::field::{Empty, Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() != "message" {
            self.0.push(format!("{}={:?}", field.name(), value));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: Context<'_, S>,
    ) {
        let mut f = Fields(Vec::new());
        values.record(&mut f);
        self.0
            .lock()
            .unwrap()
            .push(format!("span {}", f.0.join(" ")));
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "courier::concurrency" {
            let mut f = Fields(Vec::new());
            event.record(&mut f);
            self.0
                .lock()
                .unwrap()
                .push(format!("event {}", f.0.join(" ")));
        }
    }
}

fn attempt() -> tracing::Span {
    tracing::info_span!(
        "courier.attempt",
        courier.concurrency.wait_ms = Empty,
        courier.concurrency.refused = Empty,
    )
}

#[tokio::test(start_paused = true)]
async fn a_wait_and_a_refusal_are_on_the_span() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(capture.clone()))
        .unwrap();

    let layer = ConcurrencyLimitLayer::new()
        .fixed(NonZeroUsize::MIN)
        .max_queue(1)
        .max_wait(Duration::from_secs(1));
    let svc = layer.layer(service_fn(|_req: Request<()>| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let get = || Request::get("http://h.example/").body(()).unwrap();

    let first = tokio::spawn(svc.clone().oneshot(get()));
    tokio::task::yield_now().await;
    let queued = tokio::spawn(svc.clone().oneshot(get()).instrument(attempt()));
    tokio::task::yield_now().await;
    let refused = svc.clone().oneshot(get()).instrument(attempt()).await;
    assert!(refused.is_err());
    drop(first.await.unwrap().unwrap());
    drop(queued.await.unwrap().unwrap());

    let seen = capture.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "span courier.concurrency.refused=true",
            "event host=HostKey(http://h.example) in_flight=1 limit=1 waited_ms=0",
            "span courier.concurrency.wait_ms=100",
        ]
    );
}

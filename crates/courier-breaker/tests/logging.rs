//! Every state change is one `tracing` event with target `courier::breaker`.
//!
//! Alone in its own test binary: tracing caches per-callsite interest, so events from tests
//! running at the same time on other threads would race the subscriber.

use courier_breaker::CircuitBreakerLayer;
use courier_core::{BoxError, HostKey};
use http::{Request, Response};
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::advance;
use tower::{Layer, ServiceExt, service_fn};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(Vec<String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() != "message" && field.name() != "open_ms" {
            self.0.push(format!("{}={:?}", field.name(), value));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={}", field.name(), value));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "courier::breaker" {
            let mut f = Fields(Vec::new());
            event.record(&mut f);
            self.0.lock().unwrap().push(f.0.join(" "));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn every_state_change_is_logged_with_host_from_to_and_why() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(capture.clone()))
        .unwrap();

    let statuses = Arc::new(Mutex::new(VecDeque::from([503u16, 503, 200])));
    let upstream = service_fn(move |_: Request<()>| {
        let status = statuses.lock().unwrap().pop_front().unwrap_or(200);
        async move { Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap()) }
    });
    let layer = CircuitBreakerLayer::new().consecutive_failures(NonZeroU32::MIN);
    let handle = layer.handle();
    let svc = layer.layer(upstream);
    let send = || {
        svc.clone()
            .oneshot(Request::get("http://a/").body(()).unwrap())
    };

    send().await.unwrap(); // 503: closed -> open
    advance(Duration::from_secs(30)).await;
    send().await.unwrap(); // trial 503: open -> half_open -> open
    advance(Duration::from_secs(30)).await;
    send().await.unwrap(); // trial 200: open -> half_open -> closed
    let key = HostKey::from_request(&Request::get("http://a/").body(()).unwrap());
    handle.force_open(key.clone());
    handle.force_closed(key.clone());
    handle.reset(&key);
    handle.reset(&key); // no change, no event

    let got = capture.0.lock().unwrap().clone();
    let host = "host=HostKey(http://a)";
    assert_eq!(
        got,
        [
            format!("{host} from=closed to=open why=consecutive_failures"),
            format!("{host} from=open to=half_open why=open_elapsed"),
            format!("{host} from=half_open to=open why=trial_failed"),
            format!("{host} from=open to=half_open why=open_elapsed"),
            format!("{host} from=half_open to=closed why=trial_succeeded"),
            format!("{host} from=closed to=forced_open why=forced_open"),
            format!("{host} from=forced_open to=forced_closed why=forced_closed"),
            format!("{host} from=forced_closed to=closed why=reset"),
        ]
    );
}

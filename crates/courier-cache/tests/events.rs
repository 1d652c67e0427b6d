//! The `tracing` events of the cache: store, hit, revalidated, stale, evict; no credentials.

mod common;

use common::*;
use courier_core::CacheStatus;
use http::Method;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::Layer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records the fields of every `courier::cache` event.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<String>>>,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "courier::cache"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.events.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    fn has(&self, event: &str) -> bool {
        let needle = format!("event={event} ");
        self.events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains(&needle))
    }
}

#[tokio::test(start_paused = true)]
async fn store_hit_revalidated_stale_and_evict_are_logged() {
    let recorder = Recorder::default();
    let _guard = tracing::subscriber::set_default(recorder.clone());

    let mock = Mock::new();
    let mut svc = layer().capacity(4096).layer(mock.service());
    let secret = "http://api.example/a?token=s3cret";
    mock.push(ok(
        &[
            ("cache-control", "max-age=10, stale-if-error=100"),
            ("etag", "\"a\""),
        ],
        "a",
    ));
    send(
        &mut svc,
        req(Method::GET, secret, &[("authorization", "Bearer hunter2")]),
    )
    .await
    .unwrap();
    assert!(recorder.has("store"));

    let hit = send(
        &mut svc,
        req(Method::GET, secret, &[("authorization", "Bearer hunter2")]),
    )
    .await
    .unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert!(recorder.has("hit"));

    tokio::time::advance(Duration::from_secs(20)).await;
    mock.push(not_modified(&[("etag", "\"a\"")]));
    send(
        &mut svc,
        req(Method::GET, secret, &[("authorization", "Bearer hunter2")]),
    )
    .await
    .unwrap();
    assert!(recorder.has("revalidated"));

    tokio::time::advance(Duration::from_secs(20)).await;
    mock.push(respond(503, &[], ""));
    send(
        &mut svc,
        req(Method::GET, secret, &[("authorization", "Bearer hunter2")]),
    )
    .await
    .unwrap();
    assert!(recorder.has("stale"));

    // The store holds 4 KiB: a few 1 KiB bodies push the first ones out.
    for i in 0..8 {
        mock.push(ok(&[("etag", "\"b\"")], &"b".repeat(1024)));
        send(&mut svc, get(&format!("http://api.example/b/{i}")))
            .await
            .unwrap();
    }
    assert!(recorder.has("evict"));

    for e in recorder.events.lock().unwrap().iter() {
        assert!(!e.contains("s3cret"), "query logged: {e}");
        assert!(!e.contains("hunter2"), "credentials logged: {e}");
    }
}

//! With the `metrics` feature: calls in flight, the limit, waits and refusals per host.

use courier_concurrency::{ConcurrencyLimitLayer, telemetry};
use http::{Request, Response};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn in_flight_limit_waits_and_refusals_per_host() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let layer = ConcurrencyLimitLayer::new()
        .fixed(NonZeroUsize::new(2).unwrap())
        .max_queue(1)
        .max_wait(Duration::from_secs(1));
    let svc = layer.layer(service_fn(|_req: Request<()>| async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let get = || Request::get("http://h.example/").body(()).unwrap();
    let calls: Vec<_> = (0..3).map(|_| svc.clone().oneshot(get())).collect();
    let refused = svc.clone().oneshot(get());
    let (answers, refused) = tokio::join!(futures_util::future::join_all(calls), refused);
    assert!(answers.iter().all(Result::is_ok));
    assert!(refused.is_err());

    let snap = snapshotter.snapshot().into_vec();
    let value = |name: &str| {
        snap.iter()
            .find(|(key, _, _, _)| {
                key.key().name() == name
                    && key
                        .key()
                        .labels()
                        .any(|l| l.key() == "host" && l.value() == "http://h.example")
            })
            .map(|(_, _, _, v)| format!("{v:?}"))
    };
    assert_eq!(
        value(telemetry::LIMIT),
        Some(format!("{:?}", DebugValue::Gauge(2.0.into())))
    );
    assert_eq!(
        value(telemetry::IN_FLIGHT),
        Some(format!("{:?}", DebugValue::Gauge(0.0.into())))
    );
    assert_eq!(
        value(telemetry::REFUSALS),
        Some(format!("{:?}", DebugValue::Counter(1)))
    );
    assert_eq!(
        value(telemetry::WAIT_DURATION),
        Some(format!("{:?}", DebugValue::Histogram(vec![0.1.into()]))),
        "the third call waited for the first to end"
    );
}

//! Parking a host logs when the park ends as an HTTP-date; a wall clock that no HTTP-date can
//! name (before 1970, after 9999) must not panic the call.

use courier_core::{HintConfig, ManualClock};
use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::time::{Duration, UNIX_EPOCH};
use tower::{Layer, ServiceExt, service_fn};

/// A subscriber with every level enabled, as in production logging.
struct On;

impl tracing::Subscriber for On {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn too_many(_: Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>> {
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    resp.headers_mut()
        .insert("retry-after", "10".parse().unwrap());
    std::future::ready(Ok(resp))
}

#[tokio::test(start_paused = true)]
async fn a_park_is_logged_whatever_the_wall_clock_says() {
    let _log = tracing::subscriber::set_default(On);
    for now in [
        UNIX_EPOCH - Duration::from_secs(60),
        UNIX_EPOCH + Duration::from_secs(253_402_300_795),
    ] {
        let svc = TokenBucketRateLimitLayer::new(Rate::per_second(10.0).unwrap(), NonZeroU32::MIN)
            .hint_config(HintConfig::new().clock(ManualClock::new(now)))
            .layer(service_fn(too_many));
        let req = Request::get("http://a/x").body(()).unwrap();
        let resp = svc.oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{now:?}");
    }
}

//! The facade from a user's side: the preset's types, boxing, the preset as a plain
//! `tower::Layer`, `courier::Error` on real failures, `bare()`, the cache and POST through the
//! preset over both transports. Loopback against the fault server; every test is bounded.

mod common;

use bytes::Bytes;
use common::{Boxed, TRANSPORTS, Transport, bounded, get, over, quick_retry};
use courier::breaker::CircuitBreakerLayer;
use courier::core::{Attempts, BoxError, CacheStatus, FailureKind};
use courier::ratelimit::{Mode, Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;
use courier::transport::{HyperService, ReqwestService};
use courier::{Courier, CourierLayer, ServiceBuilderExt};
use courier_faultserver::{FaultServer, Step};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::util::MapRequestLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

// === types ===

fn assert_preset<S>()
where
    S: Service<Request<Full<Bytes>>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + Sync + 'static,
{
}

/// Checked when this file compiles: both presets can be cloned into tasks and threads, with no
/// `Buffer`.
const _: fn() = || {
    assert_preset::<Courier<HyperService<Full<Bytes>>>>();
    assert_preset::<Courier<ReqwestService<Full<Bytes>>>>();
    assert_preset::<Boxed>();
};

/// Checked when this file compiles: the preset's stack is the eight services, each named once,
/// whatever is switched on, and its body is the five wrappers.
#[allow(clippy::type_complexity)]
const _: fn(Courier<HyperService<Full<Bytes>>>) = |preset| {
    use courier::breaker::CircuitBreaker;
    use courier::cache::{CacheBody, EtagCache};
    use courier::concurrency::{ConcurrencyBody, ConcurrencyLimit};
    use courier::core::PerHost;
    use courier::deadline::{AttemptTimeout, Deadline, DeadlineBody};
    use courier::preset::{PresetBody, PresetStore};
    use courier::ratelimit::{AdaptivePacing, TokenBucketRateLimit};
    use courier::retry::{ClassifiedBody, ClassifyBody, Retry};
    let _stack: Deadline<
        EtagCache<
            Retry<
                CircuitBreaker<
                    TokenBucketRateLimit<
                        AdaptivePacing<
                            ConcurrencyLimit<
                                AttemptTimeout<ClassifyBody<HyperService<Full<Bytes>>>>,
                            >,
                        >,
                        PerHost,
                        PresetStore,
                    >,
                >,
            >,
        >,
    > = preset.into_inner();
    let _body: fn(
        PresetBody<hyper::body::Incoming>,
    ) -> DeadlineBody<
        CacheBody<ConcurrencyBody<DeadlineBody<ClassifiedBody<hyper::body::Incoming>>>>,
    > = |b| b;
};

/// With every layer off, the preset hands requests and answers through untouched; each layer
/// switched on alone is the only one that is not passing through.
#[tokio::test(start_paused = true)]
async fn bare_preset_passes_everything_through() {
    courier_testkit::pass_through::check(|inner| CourierLayer::bare().service(inner)).await;

    fn off(preset: &Courier<()>) -> [bool; 8] {
        let deadline = preset.get_ref();
        let cache = deadline.get_ref();
        let retry = cache.get_ref();
        let breaker = retry.get_ref();
        let limiter = breaker.get_ref();
        let pacing = limiter.get_ref();
        let concurrency = pacing.get_ref();
        let attempt = concurrency.get_ref();
        [
            deadline.is_pass_through(),
            cache.is_pass_through(),
            retry.is_pass_through(),
            breaker.is_pass_through(),
            limiter.is_pass_through(),
            pacing.is_pass_through(),
            concurrency.is_pass_through(),
            attempt.is_pass_through(),
        ]
    }
    let limiter = TokenBucketRateLimitLayer::new(
        Rate::per_second(10.0).unwrap(),
        NonZeroU32::new(5).unwrap(),
    );
    assert_eq!(off(&CourierLayer::bare().service(())), [true; 8]);
    assert_eq!(
        off(&CourierLayer::new().service(())),
        [false, false, false, false, true, false, false, false],
        "the defaults: every layer but the rate limiter"
    );
    let alone = [
        CourierLayer::bare().deadline(Duration::from_secs(1)),
        CourierLayer::bare().cache(courier::cache::EtagCacheLayer::new()),
        CourierLayer::bare().retry(RetryLayer::new()),
        CourierLayer::bare().circuit_breaker(CircuitBreakerLayer::new()),
        CourierLayer::bare().rate_limit(limiter),
        CourierLayer::bare().adaptive_pacing(courier::ratelimit::AdaptivePacingLayer::new()),
        CourierLayer::bare().concurrency_limit(courier::concurrency::ConcurrencyLimitLayer::new()),
        CourierLayer::bare().attempt_timeout(Duration::from_secs(1)),
    ];
    for (i, layer) in alone.iter().enumerate() {
        let mut want = [true; 8];
        want[i] = false;
        assert_eq!(off(&layer.service(())), want, "layer {i} alone");
    }
    // Hedging is the retry service's own, with or without retry's loop.
    let hedge = courier::retry::hedge::HedgeLayer::new;
    let hedged = CourierLayer::bare().hedge(hedge()).service(());
    let mut want = [true; 8];
    want[2] = false;
    assert_eq!(off(&hedged), want, "hedging alone");
    assert!(hedged.get_ref().get_ref().get_ref().is_hedged());
    let both = CourierLayer::new().hedge(hedge()).service(());
    assert!(both.get_ref().get_ref().get_ref().is_hedged());
    assert!(
        !CourierLayer::new()
            .service(())
            .get_ref()
            .get_ref()
            .get_ref()
            .is_hedged()
    );
}

#[tokio::test]
async fn boxed_preset_is_a_clone_sync_service_that_moves_into_tasks() {
    let server = FaultServer::start().await.unwrap();
    let layer = CourierLayer::new().retry(quick_retry());
    for transport in TRANSPORTS {
        server.clear("boxed");
        server.set_plan("boxed", vec![Step::status(503), Step::ok().body("fine")]);
        let client: Boxed = over(transport, &layer);
        let url = server.url_for("/s/boxed");
        let task = tokio::spawn(client.clone().oneshot(get(&url)));
        let resp = bounded(task).await.unwrap().unwrap();
        assert_eq!(resp.status(), 200, "{transport:?}");
        let attempts = resp.extensions().get::<Attempts>().cloned().unwrap();
        assert_eq!(attempts.count(), 2, "{transport:?}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body.as_ref(), b"fine");
        assert_eq!(server.hits("boxed").len(), 2, "{transport:?}");
    }
}

// === the preset as a layer ===

#[tokio::test]
async fn preset_is_a_plain_layer_between_user_layers() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("layered", vec![Step::status(503), Step::ok()]);

    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let client = ServiceBuilder::new()
        // Around the preset: runs once per call.
        .layer(MapRequestLayer::new(|mut req: Request<Full<Bytes>>| {
            req.headers_mut()
                .insert("x-outer", http::HeaderValue::from_static("once"));
            req
        }))
        .layer(CourierLayer::new().retry(quick_retry()))
        // Between the preset and the transport: runs once per attempt.
        .layer(MapRequestLayer::new(
            move |mut req: Request<Full<Bytes>>| {
                let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
                req.headers_mut().insert("x-attempt", n.into());
                req
            },
        ))
        .service(courier::transport::hyper_client::<Full<Bytes>>());

    let resp = bounded(client.oneshot(get(&server.url_for("/s/layered"))))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.extensions().get::<Attempts>().map(Attempts::count),
        Some(2)
    );
    assert_eq!(sent.load(Ordering::Relaxed), 2);
    let hits = server.hits("layered");
    assert_eq!(hits.len(), 2);
    for (i, hit) in hits.iter().enumerate() {
        assert_eq!(hit.header("x-outer"), Some("once"));
        assert_eq!(hit.header("x-attempt"), Some((i + 1).to_string().as_str()));
    }
}

#[tokio::test]
async fn preset_as_a_service_builder_method() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("builder", vec![Step::status(502), Step::ok()]);
    let client = ServiceBuilder::new()
        .concurrency_limit(4)
        .courier(CourierLayer::new().retry(quick_retry()))
        .service(courier::transport::hyper_client::<Full<Bytes>>());
    let resp = bounded(client.oneshot(get(&server.url_for("/s/builder"))))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(server.hits("builder").len(), 2);
}

// === courier::Error on real failures ===

#[tokio::test]
async fn open_circuit_converts_to_circuit_open() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("down");
        server.set_plan("down", vec![Step::status(503).times(10)]);
        let layer = CourierLayer::new().retry(None).circuit_breaker(
            CircuitBreakerLayer::new()
                .consecutive_failures(NonZeroU32::new(5).unwrap())
                .open_duration(Duration::from_secs(30)),
        );
        let client = over(transport, &layer);
        let url = server.url_for("/s/down");

        for _ in 0..5 {
            let resp = bounded(client.clone().oneshot(get(&url))).await.unwrap();
            assert_eq!(resp.status(), 503, "a status is never an error");
        }
        let err = bounded(client.clone().oneshot(get(&url)))
            .await
            .expect_err("the circuit is open");
        let err = courier::Error::from(err);
        match &err {
            courier::Error::CircuitOpen(open) => {
                assert!(open.retry_in() <= Duration::from_secs(30));
                assert!(open.retry_in() > Duration::from_secs(25));
            }
            other => panic!("{transport:?}: unexpected {other}"),
        }
        assert!(err.nothing_sent());

        // Another service made by the same layer shares the breaker: it refuses too.
        let sibling = over(transport, &layer);
        let err = bounded(sibling.oneshot(get(&url)))
            .await
            .expect_err("the circuit is shared");
        assert!(matches!(
            courier::Error::from(err),
            courier::Error::CircuitOpen(_)
        ));
        assert_eq!(
            server.hits("down").len(),
            5,
            "{transport:?}: neither refused call was sent"
        );
    }
}

#[tokio::test]
async fn closed_port_converts_to_a_connect_failure() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/nothing");

    for transport in TRANSPORTS {
        let client = over(transport, &CourierLayer::new().retry(quick_retry()));
        let err = bounded(client.oneshot(get(&url)))
            .await
            .expect_err("nothing listens");
        let err = courier::Error::from(err);
        assert!(
            matches!(
                err,
                courier::Error::Transport {
                    kind: FailureKind::Connect,
                    ..
                }
            ),
            "{transport:?}: unexpected {err}"
        );
        assert!(err.nothing_sent());
    }
}

#[tokio::test]
async fn tiny_deadline_converts_to_deadline_exceeded() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("slow");
        server.set_plan("slow", vec![Step::ok().delay(Duration::from_secs(2))]);
        let client = over(
            transport,
            &CourierLayer::new().deadline(Duration::from_millis(100)),
        );
        let err = bounded(client.oneshot(get(&server.url_for("/s/slow"))))
            .await
            .expect_err("the answer comes after the deadline");
        // The attempt timeout below ends the wait at the deadline (the deadline layer arms no
        // timer of its own for the headers); the error still carries the call's budget.
        match courier::Error::from(err) {
            courier::Error::DeadlineExceeded(e) => {
                assert_eq!(e.budget(), Duration::from_millis(100), "{transport:?}");
                assert!(e.elapsed() >= Duration::from_millis(100), "{transport:?}");
            }
            err => panic!("{transport:?}: unexpected {err}"),
        }
        assert_eq!(
            server.hits("slow").len(),
            1,
            "{transport:?}: no retry past the deadline"
        );
    }
}

#[tokio::test]
async fn a_deadline_spent_after_sending_does_not_say_nothing_was_sent() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("slowpost", vec![Step::ok().delay(Duration::from_secs(2))]);
    let client = over(
        Transport::Hyper,
        &CourierLayer::new().deadline(Duration::from_millis(200)),
    );
    let req = Request::post(server.url_for("/s/slowpost"))
        .body(Full::new(Bytes::from_static(b"{\"order\":1}")))
        .unwrap();
    let err = courier::Error::from(bounded(client.oneshot(req)).await.unwrap_err());
    assert!(matches!(err, courier::Error::DeadlineExceeded(_)), "{err}");
    assert_eq!(
        server.hits("slowpost").len(),
        1,
        "the POST reached the server"
    );
    assert!(!err.nothing_sent(), "{err}");
}

/// With the attempt timeout on, the deadline layer leaves the wait for the headers to the layers
/// below. A caller waiting on another caller's revalidation in the cache is one of them: it
/// stops waiting at its own deadline and the attempt timeout ends the call there.
#[tokio::test(start_paused = true)]
async fn a_deadline_holds_while_the_cache_waits_on_another_revalidation() {
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = {
        let calls = calls.clone();
        tower::service_fn(move |_req: Request<Full<Bytes>>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let res = match n {
                    0 => Response::builder()
                        .header("etag", "\"v1\"")
                        .header("cache-control", "no-cache")
                        .body(Full::new(Bytes::from_static(b"hello")))?,
                    // The first revalidation hangs for 20 s.
                    1 => {
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        Response::builder()
                            .status(304)
                            .header("etag", "\"v1\"")
                            .body(Full::default())?
                    }
                    _ => Response::builder()
                        .status(304)
                        .header("etag", "\"v1\"")
                        .body(Full::default())?,
                };
                Ok::<_, BoxError>(res)
            }
        })
    };
    let get = || {
        Request::get("http://api.example/doc")
            .body(Full::<Bytes>::default())
            .unwrap()
    };
    let client = CourierLayer::new().service(upstream);
    let first = client.clone().oneshot(get()).await.unwrap();
    first.into_body().collect().await.unwrap();
    let leader = tokio::spawn(client.clone().oneshot(get()));
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the leader is upstream");

    let mut req = get();
    courier_core::CallContext::get_or_insert(&mut req)
        .shrink_deadline_after(Duration::from_secs(1));
    let start = tokio::time::Instant::now();
    let err = client.clone().oneshot(req).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert!(
        matches!(
            courier::Error::from(err),
            courier::Error::DeadlineExceeded(_)
        ),
        "the call ends with its deadline"
    );
    leader.abort();
}

#[tokio::test]
async fn rate_limit_in_reject_mode_converts_to_rate_limited() {
    let server = FaultServer::start().await.unwrap();
    let limiter =
        TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::new(1).unwrap())
            .mode(Mode::Reject);
    let client = CourierLayer::new()
        .rate_limit(limiter)
        .hyper::<Full<Bytes>>();
    let url = server.url_for("/s/paced");

    let resp = bounded(client.clone().oneshot(get(&url))).await.unwrap();
    assert_eq!(resp.status(), 200);
    let err = bounded(client.clone().oneshot(get(&url)))
        .await
        .expect_err("the bucket is empty");
    let err = courier::Error::from(err);
    match &err {
        courier::Error::RateLimited(limited) => {
            assert!(limited.retry_in() <= Duration::from_secs(1));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(err.retry_in().is_some());
    assert_eq!(
        server.hits("paced").len(),
        1,
        "the refused call was not sent"
    );
}

// === bare, cache, POST ===

#[tokio::test]
async fn bare_preset_passes_calls_straight_through() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("plain");
        server.set_plan("plain", vec![Step::status(503)]);
        let client = over(transport, &CourierLayer::bare());
        let resp = bounded(client.oneshot(get(&server.url_for("/s/plain"))))
            .await
            .unwrap();
        assert_eq!(resp.status(), 503, "{transport:?}");
        assert!(
            resp.extensions().get::<Attempts>().is_none(),
            "no retry layer"
        );
        assert!(resp.extensions().get::<CacheStatus>().is_none(), "no cache");
        assert_eq!(server.hits("plain").len(), 1, "{transport:?}: not retried");
    }
}

#[tokio::test]
async fn cache_merges_a_304_on_the_second_get_over_both_transports() {
    for transport in TRANSPORTS {
        let server = FaultServer::start().await.unwrap();
        let client = over(transport, &CourierLayer::new());
        let url = server.url_for("/conditional");

        let first = bounded(client.clone().oneshot(get(&url))).await.unwrap();
        assert_eq!(first.status(), 200);
        assert_eq!(
            first.extensions().get::<CacheStatus>(),
            Some(&CacheStatus::Miss),
            "{transport:?}"
        );
        let first_body = first.into_body().collect().await.unwrap().to_bytes();
        assert!(!first_body.is_empty());

        let second = bounded(client.clone().oneshot(get(&url))).await.unwrap();
        assert_eq!(second.status(), 200, "{transport:?}: the 304 was merged");
        assert_eq!(
            second.extensions().get::<CacheStatus>(),
            Some(&CacheStatus::Revalidated),
            "{transport:?}"
        );
        let second_body = second.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(second_body, first_body);

        let hits = server.hits("conditional");
        assert_eq!(hits.len(), 2, "{transport:?}");
        assert!(hits[0].header("if-none-match").is_none());
        assert!(
            hits[1].header("if-none-match").is_some(),
            "{transport:?}: the second GET carried the stored validator"
        );
    }
}

#[tokio::test]
async fn post_without_a_key_is_sent_once_over_both_transports() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("orders");
        server.set_plan("orders", vec![Step::status(503).times(3)]);
        let client = over(transport, &CourierLayer::new().retry(quick_retry()));
        let req = Request::post(server.url_for("/s/orders"))
            .body(Full::new(Bytes::from_static(b"{\"qty\":1}")))
            .unwrap();
        let resp = bounded(client.oneshot(req)).await.unwrap();
        assert_eq!(resp.status(), 503, "{transport:?}");
        let attempts = resp.extensions().get::<Attempts>().cloned().unwrap();
        assert_eq!(attempts.count(), 1);
        assert_eq!(
            attempts.last().map(|a| a.reason),
            Some(courier::core::extensions::Reason::NotRetrySafe)
        );
        let hits = server.hits("orders");
        assert_eq!(
            hits.len(),
            1,
            "{transport:?}: a POST without a key is not repeated"
        );
        assert_eq!(hits[0].method, "POST");
        assert!(hits[0].idempotency_key.is_none());
    }
}

#[tokio::test]
async fn status_codes_are_responses_not_errors() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("teapot", vec![Step::status(418)]);
    let client = CourierLayer::new().hyper::<Full<Bytes>>();
    let resp = bounded(client.oneshot(get(&server.url_for("/s/teapot"))))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::IM_A_TEAPOT);
    assert_eq!(server.hits("teapot").len(), 1);
}

// === more failures, over both transports ===

#[tokio::test]
async fn attempts_that_all_time_out_convert_to_attempt_timed_out() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("stuck");
        server.set_plan(
            "stuck",
            vec![Step::ok().delay(Duration::from_secs(3)).times(3)],
        );
        let layer = CourierLayer::new()
            .retry(quick_retry())
            .attempt_timeout(Duration::from_millis(100));
        let client = over(transport, &layer);
        let err = bounded(client.oneshot(get(&server.url_for("/s/stuck"))))
            .await
            .expect_err("every attempt times out");
        let err = courier::Error::from(err);
        assert!(
            matches!(err, courier::Error::AttemptTimedOut(_)),
            "{transport:?}: unexpected {err}"
        );
        assert_eq!(err.kind(), FailureKind::Timeout);
        assert_eq!(server.hits("stuck").len(), 3, "{transport:?}");
    }
}

#[tokio::test]
async fn post_without_a_key_is_not_repeated_after_a_reset() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("pay");
        server.set_plan("pay", vec![Step::reset()]);
        let client = over(transport, &CourierLayer::new().retry(quick_retry()));
        let req = Request::post(server.url_for("/s/pay"))
            .body(Full::new(Bytes::from_static(b"{\"amount\":1}")))
            .unwrap();
        let err = bounded(client.oneshot(req))
            .await
            .expect_err("the connection was reset");
        let err = courier::Error::from(err);
        assert!(
            matches!(
                err,
                courier::Error::Transport {
                    kind: FailureKind::Read,
                    ..
                }
            ),
            "{transport:?}: unexpected {err}"
        );
        assert!(!err.nothing_sent(), "the request may have run");
        assert_eq!(
            server.hits("pay").len(),
            1,
            "{transport:?}: a POST that may have run is not sent again"
        );
    }
}

#[tokio::test]
async fn a_body_read_past_the_deadline_converts_to_deadline_exceeded() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("drip");
        server.set_plan(
            "drip",
            vec![
                Step::ok()
                    .body("a slow body, one byte at a time")
                    .drip(Duration::from_millis(100)),
            ],
        );
        let client = over(
            transport,
            &CourierLayer::new().deadline(Duration::from_millis(400)),
        );
        let resp = bounded(client.oneshot(get(&server.url_for("/s/drip"))))
            .await
            .expect("the headers arrive in time");
        assert_eq!(resp.status(), 200);
        let err = bounded(resp.into_body().collect())
            .await
            .expect_err("the body is still dripping when the deadline passes");
        let err = courier::Error::from(err);
        assert!(
            matches!(err, courier::Error::DeadlineExceeded(_)),
            "{transport:?}: unexpected {err}"
        );
    }
}

/// The preset's deadline layer arms no timer for the headers. When the upstream hangs, the
/// attempt timeout ends the attempt at the deadline and the cache answers with a stored entry
/// (stale-if-error): the call must not come back as a 200 whose body fails at its first read.
#[tokio::test(start_paused = true)]
async fn a_stale_answer_at_the_deadline_is_not_a_response_with_an_unreadable_body() {
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = {
        let calls = calls.clone();
        tower::service_fn(move |_req: Request<Full<Bytes>>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                }
                let res = Response::builder()
                    .header("etag", "\"v1\"")
                    .header("cache-control", "max-age=0, stale-if-error=600")
                    .body(Full::new(Bytes::from_static(b"hello")))?;
                Ok::<_, BoxError>(res)
            }
        })
    };
    let get = || {
        Request::get("http://api.example/doc")
            .body(Full::<Bytes>::default())
            .unwrap()
    };
    let client = CourierLayer::new()
        .deadline(Duration::from_secs(1))
        .service(upstream);
    let first = client.clone().oneshot(get()).await.unwrap();
    first.into_body().collect().await.unwrap();

    match client.clone().oneshot(get()).await {
        Err(err) => assert!(
            matches!(
                courier::Error::from(err),
                courier::Error::DeadlineExceeded(_)
            ),
            "the call ends with its deadline"
        ),
        Ok(resp) => {
            let status = resp.extensions().get::<CacheStatus>().copied();
            let body = resp.into_body().collect().await;
            assert!(
                body.is_ok(),
                "a {status:?} response came back whose body cannot be read: {:?}",
                body.err().map(courier::Error::from)
            );
        }
    }
}

/// A redirect is an answer the stack sees, over either transport: the breaker, the rate limiter
/// and the cache key by the server that answered, and pagination checks every origin it is sent
/// to. reqwest would otherwise follow it inside the transport, unseen.
#[tokio::test]
async fn a_redirect_comes_back_to_the_caller_over_either_transport() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("moved");
        server.clear("target");
        server.set_plan(
            "moved",
            vec![Step::status(302).header("location", server.url_for("/s/target"))],
        );
        server.set_plan("target", vec![Step::ok().body("here")]);
        let client = over(transport, &CourierLayer::new());
        let resp = bounded(client.oneshot(get(&server.url_for("/s/moved"))))
            .await
            .unwrap();
        assert_eq!(resp.status(), 302, "{transport:?}");
        assert_eq!(server.hits("moved").len(), 1, "{transport:?}");
        assert!(
            server.hits("target").is_empty(),
            "{transport:?} followed it"
        );
    }
}

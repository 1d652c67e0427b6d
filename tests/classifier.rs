//! One classifier, set once on the preset, read alike by retry, the breaker and adaptive
//! pacing; and the same answer through each layer alone, classified the same way.

use bytes::Bytes;
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::core::{BoxError, CircuitOpen, Classifier, HostKey, Verdict, is_caused_by};
use courier::ratelimit::AdaptivePacingLayer;
use courier::retry::RetryLayer;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

type Req = Request<Full<Bytes>>;
type Resp = Response<Full<Bytes>>;

fn get() -> Req {
    Request::get("http://api.example/x")
        .body(Full::default())
        .unwrap()
}

fn host() -> HostKey {
    HostKey::from_request(&get())
}

/// For this API a 409 is transient, and a 200 with `x-throttled` is an overload of the host.
fn classifier() -> Classifier {
    Classifier::new().reclassify(|head, verdict| {
        if head.status() == StatusCode::CONFLICT {
            Verdict::transient()
        } else if head.headers().contains_key("x-throttled") {
            Verdict::overload(false).against_host(true)
        } else {
            verdict
        }
    })
}

#[derive(Clone, Copy, Debug)]
enum Answer {
    Conflict,
    Throttled,
}

/// A host that always gives `answer`, counting what reaches it.
fn scripted(
    answer: Answer,
    reached: Arc<AtomicUsize>,
) -> impl Service<Req, Response = Resp, Error = BoxError, Future: Send> + Clone + Send + 'static {
    service_fn(move |_req: Req| {
        reached.fetch_add(1, Ordering::SeqCst);
        let resp = match answer {
            Answer::Conflict => Response::builder().status(StatusCode::CONFLICT),
            Answer::Throttled => Response::builder().header("x-throttled", "1"),
        };
        std::future::ready(Ok::<_, BoxError>(resp.body(Full::default()).unwrap()))
    })
}

/// A host that serves `per_second` calls in each second with a plain 200 and gives `answer`
/// to the rest: a host at its capacity.
fn serving(
    answer: Answer,
    per_second: usize,
) -> impl Service<Req, Response = Resp, Error = BoxError, Future: Send> + Clone + Send + 'static {
    let window = Arc::new(std::sync::Mutex::new((Instant::now(), 0)));
    let over = scripted(answer, Arc::default());
    service_fn(move |req: Req| {
        let mut w = window.lock().unwrap();
        if w.0.elapsed() >= Duration::from_secs(1) {
            *w = (Instant::now(), 0);
        }
        w.1 += 1;
        let within = w.1 <= per_second;
        drop(w);
        let over = over.clone();
        async move {
            if within {
                Ok(Response::new(Full::default()))
            } else {
                over.oneshot(req).await
            }
        }
    })
}

/// Calls every 500 ms until the circuit opens; when it did, if it did within 60 s.
async fn time_to_open<S>(client: S) -> Option<Instant>
where
    S: Service<Req, Error = BoxError> + Clone,
{
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        match client.clone().oneshot(get()).await {
            Ok(_) => {}
            Err(e) if is_caused_by::<CircuitOpen>(&*e) => return Some(Instant::now()),
            Err(e) => panic!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// A crowd of 40 calls at once, to two paths (one path's signals pace only that path); whether
/// pacing then paces the host within 3 s.
async fn crowd_paces<S>(client: S, pacing: &AdaptivePacingLayer) -> bool
where
    S: Service<Req, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
{
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let req = Request::get(format!("http://api.example/{}", ["a", "b"][i % 2]))
                .body(Full::default())
                .unwrap();
            tokio::spawn(client.clone().oneshot(req))
        })
        .collect();
    // Pacing learns within the crowd's first seconds (with retry above it, from the answers
    // of the crowd's first attempts and their retries together).
    let mut paced = false;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if pacing.learned_rate(&host()).is_some() {
            paced = true;
            break;
        }
    }
    for call in calls {
        call.abort();
    }
    paced
}

#[tokio::test(start_paused = true)]
async fn a_409_declared_transient_is_retried_and_counted_by_the_whole_preset() {
    for (with, attempts, opens) in [(true, 3, true), (false, 1, false)] {
        let reached = Arc::new(AtomicUsize::new(0));
        let mut layer = CourierLayer::new();
        if with {
            layer = layer.classifier(classifier());
        }
        let client = layer.service(scripted(Answer::Conflict, reached.clone()));
        let first = Instant::now();
        let resp = client.clone().oneshot(get()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::CONFLICT);
        assert_eq!(
            reached.load(Ordering::SeqCst),
            attempts,
            "classifier: {with}"
        );
        let opened = time_to_open(client).await;
        assert_eq!(opened.is_some(), opens, "classifier: {with}, {opened:?}");
        if let Some(at) = opened {
            // The preset's breaker opens on 30 s of nothing but failing answers.
            let after = at - first;
            assert!(after >= Duration::from_secs(30), "{after:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_200_carrying_an_overload_header_is_retried_counted_and_paced() {
    // The classifier set before the layers it reaches, and after them: the same result.
    let before = CourierLayer::new()
        .classifier(classifier())
        .adaptive_pacing(AdaptivePacingLayer::new());
    let after = CourierLayer::new().classifier(classifier());
    for layer in [before, after] {
        let reached = Arc::new(AtomicUsize::new(0));
        let client = layer.service(scripted(Answer::Throttled, reached.clone()));
        let pacing = layer.pacing_layer().expect("pacing is on").clone();
        let resp = client.clone().oneshot(get()).await.unwrap();
        assert!(resp.headers().contains_key("x-throttled"));
        assert_eq!(reached.load(Ordering::SeqCst), 3, "retried");
        let crowd = layer.service(serving(Answer::Throttled, 5));
        assert!(crowd_paces(crowd, &pacing).await, "paced");
        assert!(
            time_to_open(client).await.is_some(),
            "counted by the breaker"
        );
    }
    // Without the classifier the same answer is a success for every layer.
    let reached = Arc::new(AtomicUsize::new(0));
    let layer = CourierLayer::new();
    let client = layer.service(scripted(Answer::Throttled, reached.clone()));
    let pacing = layer.pacing_layer().unwrap().clone();
    client.clone().oneshot(get()).await.unwrap();
    assert_eq!(reached.load(Ordering::SeqCst), 1);
    let crowd = layer.service(serving(Answer::Throttled, 5));
    assert!(!crowd_paces(crowd, &pacing).await);
    assert_eq!(time_to_open(client).await, None);
}

#[tokio::test(start_paused = true)]
async fn each_layer_alone_reads_the_same_answer_the_same_way() {
    for answer in [Answer::Conflict, Answer::Throttled] {
        // Retry alone repeats it.
        let reached = Arc::new(AtomicUsize::new(0));
        let retry = RetryLayer::new()
            .classifier(classifier())
            .layer(scripted(answer, reached.clone()));
        retry.oneshot(get()).await.unwrap();
        assert_eq!(reached.load(Ordering::SeqCst), 3, "{answer:?}");

        // The breaker alone counts it: five in a row open the circuit.
        let reached = Arc::new(AtomicUsize::new(0));
        let breaker = CircuitBreakerLayer::new()
            .classifier(classifier())
            .layer(scripted(answer, reached.clone()));
        for _ in 0..5 {
            breaker.clone().oneshot(get()).await.unwrap();
        }
        let err = breaker.clone().oneshot(get()).await.unwrap_err();
        assert!(is_caused_by::<CircuitOpen>(&*err), "{answer:?}: {err}");
        assert_eq!(reached.load(Ordering::SeqCst), 5);

        // Pacing alone paces the overload, and only it.
        let pacing = AdaptivePacingLayer::new().classifier(classifier());
        let paced = crowd_paces(pacing.layer(serving(answer, 5)), &pacing).await;
        assert_eq!(paced, matches!(answer, Answer::Throttled), "{answer:?}");
    }
}

/// With a body rule on the preset, a 200 whose body breaks within the bytes the rule reads is
/// retried when the request may be repeated, over both transports against a real server; a
/// POST without a key is not; without the rule neither is, and the break is the caller's.
#[tokio::test]
async fn a_200_whose_body_breaks_is_retried_only_with_the_body_rule_and_only_when_safe() {
    use courier_faultserver::{FaultServer, Step};
    use http::Method;
    use http_body_util::BodyExt;

    let server = FaultServer::start().await.unwrap();
    let rule = Classifier::new()
        .classify_body(1024, |_head, _prefix, verdict| verdict)
        .unwrap();
    let retry = RetryLayer::new()
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(2));
    let reqwest = || {
        courier::transport::reqwest_client_builder()
            .build()
            .expect("a plain-HTTP client")
    };
    let mut n = 0;
    for with_rule in [true, false] {
        let mut layer = CourierLayer::new().retry(retry.clone());
        if with_rule {
            layer = layer.classifier(rule.clone());
        }
        let clients = [
            ("hyper", layer.hyper::<Full<Bytes>>().boxed()),
            ("reqwest", layer.reqwest::<Full<Bytes>>(reqwest()).boxed()),
        ];
        for (transport, client) in clients {
            for method in [Method::GET, Method::POST] {
                n += 1;
                let name = format!("broken{n}");
                // Announces 100 bytes, sends 11, and ends the response.
                server.set_plan(
                    &name,
                    vec![
                        Step::status(200)
                            .header("content-length", "100")
                            .body("{\"items\": ["),
                        Step::status(200).body("whole"),
                    ],
                );
                let req = Request::builder()
                    .method(method.clone())
                    .uri(server.url_for(&format!("/s/{name}")))
                    .body(Full::default())
                    .unwrap();
                let call = client.clone().oneshot(req);
                let result = tokio::time::timeout(Duration::from_secs(10), call)
                    .await
                    .expect("bounded");
                let case = format!("{transport}, {method}, rule: {with_rule}");
                let hits = server.hits(&name).len();
                match (with_rule, method == Method::GET) {
                    (true, true) => {
                        let resp = result.expect(&case);
                        let body = resp.into_body().collect().await.expect(&case);
                        assert_eq!(body.to_bytes(), "whole", "{case}");
                        assert_eq!(hits, 2, "{case}");
                    }
                    (true, false) => {
                        let err = courier::Error::from(result.expect_err(&case));
                        assert_eq!(err.kind(), courier::core::FailureKind::Read, "{case}");
                        assert_eq!(err.attempts().count(), 1, "{case}");
                        assert_eq!(hits, 1, "{case}");
                    }
                    (false, _) => {
                        let resp = result.expect(&case);
                        assert_eq!(resp.status(), StatusCode::OK, "{case}");
                        assert!(resp.into_body().collect().await.is_err(), "{case}");
                        assert_eq!(hits, 1, "{case}");
                    }
                }
            }
        }
    }
    server.shutdown().await;
}

//! One classifier decides what retry repeats: a reclassified answer, and with the body rule,
//! an answer whose first bytes break or carry an error envelope.

use bytes::Bytes;
use courier_core::classify::{FailureKind, TransportError};
use courier_core::extensions::Reason;
use courier_core::{Attempts, BoxError, Class, Classifier, Verdict, attempts_of, cause_ref};
use courier_retry::{ClassifyBodyLayer, RetryLayer};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

/// A body that sends its frames in order; an `Err` breaks it there.
struct Script(VecDeque<Result<Bytes, io::ErrorKind>>);

impl Body for Script {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Poll::Ready(
            self.0
                .pop_front()
                .map(|r| r.map(Frame::data).map_err(io::Error::from)),
        )
    }
}

/// One answer of the upstream: a status, headers, and the body's frames.
#[derive(Clone)]
struct Answer {
    status: u16,
    header: Option<(&'static str, &'static str)>,
    frames: Vec<Result<&'static str, io::ErrorKind>>,
}

fn answer(status: u16, body: &'static str) -> Answer {
    Answer {
        status,
        header: None,
        frames: vec![Ok(body)],
    }
}

/// A 200 whose body breaks after its first bytes.
fn broken() -> Answer {
    Answer {
        status: 200,
        header: None,
        frames: vec![Ok("{\"items\": ["), Err(io::ErrorKind::ConnectionReset)],
    }
}

/// An upstream that answers by its script (200 "ok" once it runs out), counting its calls.
fn upstream(
    script: Vec<Answer>,
) -> (
    impl Service<Request<String>, Response = Response<Script>, Error = BoxError, Future = impl Send>
    + Clone
    + Send
    + 'static,
    Arc<Mutex<u32>>,
) {
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let calls = Arc::new(Mutex::new(0));
    let svc = service_fn({
        let calls = calls.clone();
        move |_req: Request<String>| {
            *calls.lock().unwrap() += 1;
            let next = script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| answer(200, "ok"));
            async move {
                let frames = next
                    .frames
                    .iter()
                    .map(|f| f.map(|s| Bytes::from_static(s.as_bytes())))
                    .collect();
                let mut res = Response::new(Script(frames));
                *res.status_mut() = StatusCode::from_u16(next.status).unwrap();
                if let Some((name, value)) = next.header {
                    res.headers_mut()
                        .insert(name, HeaderValue::from_static(value));
                }
                Ok::<_, BoxError>(res)
            }
        }
    });
    (svc, calls)
}

fn request(method: Method) -> Request<String> {
    Request::builder()
        .method(method)
        .uri("http://api.example/items")
        .body(String::new())
        .unwrap()
}

/// For this API a 409 is transient, and a 200 with `x-throttled` an overload.
fn reclassifying() -> Classifier {
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

#[tokio::test(start_paused = true)]
async fn a_409_declared_transient_is_retried_and_recorded_so() {
    let (svc, calls) = upstream(vec![answer(409, ""), answer(409, "")]);
    let retry = RetryLayer::new().classifier(reclassifying());
    let res = retry
        .layer(svc)
        .oneshot(request(Method::GET))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(*calls.lock().unwrap(), 3);
    let attempts = res.extensions().get::<Attempts>().unwrap();
    let first = attempts.iter().next().unwrap();
    assert_eq!(first.reason, Reason::RetryableStatus);
    assert_eq!(first.verdict.class(), Class::Failed);
    assert!(first.verdict.may_change());
    assert_eq!(attempts.last().unwrap().verdict, Verdict::success());

    // The default classifier: a 409 is final.
    let (svc, calls) = upstream(vec![answer(409, "")]);
    let res = RetryLayer::new()
        .layer(svc)
        .oneshot(request(Method::GET))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CONFLICT);
    assert_eq!(*calls.lock().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_200_declared_an_overload_is_retried_after_the_overload_base() {
    let throttled = Answer {
        status: 200,
        header: Some(("x-throttled", "1")),
        frames: vec![],
    };
    let (svc, calls) = upstream(vec![throttled]);
    let retry = RetryLayer::new()
        .classifier(reclassifying())
        .base(Duration::from_millis(1))
        .overload_base(Duration::from_secs(20))
        .seed(7);
    let res = retry
        .layer(svc)
        .oneshot(request(Method::GET))
        .await
        .unwrap();
    assert_eq!(*calls.lock().unwrap(), 2);
    let attempts = res.extensions().get::<Attempts>().unwrap();
    let first = attempts.iter().next().unwrap();
    assert_eq!(first.verdict.class(), Class::Overload { hinted: false });
    // Drawn from [0, 20 s] rather than [0, 1 ms]: with this seed, well past the base.
    assert!(first.wait > Duration::from_millis(1), "{:?}", first.wait);
}

/// Reads a body whose first bytes start with `{"error"` as a transient failure.
fn with_body_rule(classifier: Classifier) -> Classifier {
    classifier
        .classify_body(64, |_head, prefix, verdict| {
            if prefix.starts_with(b"{\"error\"") {
                Verdict::transient()
            } else {
                verdict
            }
        })
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn with_the_body_rule_a_get_whose_200_breaks_mid_read_is_retried() {
    let classifier = with_body_rule(Classifier::new());
    let (svc, calls) = upstream(vec![broken()]);
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new().classifier(classifier.clone()))
        .layer(ClassifyBodyLayer::new(classifier))
        .service(svc);
    let res = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(*calls.lock().unwrap(), 2);
    let first = res
        .extensions()
        .get::<Attempts>()
        .unwrap()
        .iter()
        .next()
        .cloned()
        .unwrap();
    assert_eq!(first.verdict.failure_kind(), Some(FailureKind::Read));
    assert_eq!(first.reason, Reason::RetryableFailure);
    // The caller reads the whole body of the answer, the bytes read for the rule included.
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
}

#[tokio::test(start_paused = true)]
async fn with_the_body_rule_a_post_without_a_key_is_not_retried() {
    let classifier = with_body_rule(Classifier::new());
    let (svc, calls) = upstream(vec![broken()]);
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new().classifier(classifier.clone()))
        .layer(ClassifyBodyLayer::new(classifier))
        .service(svc);
    let err = svc.oneshot(request(Method::POST)).await.unwrap_err();
    assert_eq!(*calls.lock().unwrap(), 1);
    let transport = cause_ref::<TransportError>(&*err).expect("the attempt's failure");
    assert_eq!(transport.kind(), FailureKind::Read);
    assert!(cause_ref::<io::Error>(&*err).is_some());
    let records = attempts_of(&*err).unwrap();
    assert_eq!(records.last().unwrap().reason, Reason::NotRetrySafe);
}

#[tokio::test(start_paused = true)]
async fn without_the_body_rule_the_broken_200_is_the_callers() {
    for method in [Method::GET, Method::POST] {
        let (svc, calls) = upstream(vec![broken()]);
        let classifier = Classifier::new();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new().classifier(classifier.clone()))
            .layer(ClassifyBodyLayer::new(classifier))
            .service(svc);
        let res = svc.oneshot(request(method.clone())).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{method}");
        assert_eq!(*calls.lock().unwrap(), 1, "{method}");
        let err = res.into_body().collect().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_envelope_in_a_200_is_classified_from_the_body() {
    let classifier = with_body_rule(Classifier::new());
    let envelope = Answer {
        status: 200,
        header: None,
        // The envelope comes in two frames: the rule sees both.
        frames: vec![Ok("{\"err"), Ok("or\": \"busy\"}")],
    };
    let (svc, calls) = upstream(vec![envelope.clone(), envelope]);
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new().classifier(classifier.clone()))
        .layer(ClassifyBodyLayer::new(classifier.clone()))
        .service(svc);
    let res = svc.clone().oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(*calls.lock().unwrap(), 3);
    let attempts = res.extensions().get::<Attempts>().unwrap();
    assert!(
        attempts
            .iter()
            .take(2)
            .all(|r| r.verdict == Verdict::transient())
    );
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");

    // Three envelopes: the last one is the caller's, whole, with its verdict.
    let envelope = answer(
        200,
        "{\"error\": \"busy\", \"detail\": \"a long explanation\"}",
    );
    let (svc, _) = upstream(vec![envelope.clone(), envelope.clone(), envelope]);
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new().classifier(classifier.clone()))
        .layer(ClassifyBodyLayer::new(classifier.clone()))
        .service(svc);
    let res = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(classifier.classify(&res), Verdict::transient());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        "{\"error\": \"busy\", \"detail\": \"a long explanation\"}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_rule_reads_no_more_than_its_limit() {
    // A body longer than the limit, whose tail never comes: the head is answered once the
    // limit is read, and the rest streams.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let classifier = Classifier::new()
        .classify_body(4, {
            let seen = seen.clone();
            move |_head, prefix, verdict| {
                seen.lock().unwrap().push(prefix.to_vec());
                verdict
            }
        })
        .unwrap();
    let svc = ClassifyBodyLayer::new(classifier).layer(service_fn(|_req: Request<String>| async {
        let frames = VecDeque::from([
            Ok(Bytes::from_static(b"abcdef")),
            Err(io::ErrorKind::TimedOut),
        ]);
        Ok::<_, BoxError>(Response::new(Script(frames)))
    }));
    let res = svc.oneshot(request(Method::GET)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![b"abcd".to_vec()]);
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "abcdef");
    assert!(body.frame().await.unwrap().is_err());
}

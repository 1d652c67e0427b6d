//! A request body that fails on its own side (one that ends short of the length it announced,
//! or one whose source errs) is the caller's fault: it comes back at once, is not retried, and
//! counts nothing against the host, over either transport.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::FailureKind;
use courier::retry::{ReplayBody, RetryLayer};
use courier_faultserver::FaultServer;
use courier_testkit::body::ScriptedBody;
use http::Request;
use std::convert::Infallible;
use std::time::Duration;
use tower::ServiceExt;

#[tokio::test]
async fn a_body_shorter_than_its_size_hint_is_not_retried() {
    let server = FaultServer::start().await.unwrap();
    let client = CourierLayer::new()
        .retry(
            RetryLayer::new()
                .base(Duration::from_millis(1))
                .cap(Duration::from_millis(2))
                .seed(7),
        )
        .attempt_timeout(Duration::from_secs(1))
        .hyper::<ReplayBody<ScriptedBody<Infallible>>>();
    // Its exact size hint says more bytes than it yields.
    let body = ScriptedBody::new()
        .data(Bytes::from_static(
            b"only fifty bytes .................................",
        ))
        .exact_len(100);
    let req = Request::put(server.url_for("/s/short"))
        .body(ReplayBody::new(body))
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), client.oneshot(req))
        .await
        .expect("bounded")
        .expect_err("the body lied about its length");
    let err = courier::Error::from(err);
    // Local: not retried (a retry would send the same short body under the same length and
    // wait for an answer that never comes), and no mark against the host.
    assert_eq!(err.kind(), FailureKind::Local, "{err}");
    assert_eq!(server.hits("short").len(), 0, "nothing complete was sent");
}

#[tokio::test]
async fn a_body_whose_source_fails_is_local_over_either_transport() {
    let server = FaultServer::start().await.unwrap();
    // TimedOut too: reqwest calls any timed-out I/O in its chain a timeout, the body's included.
    let kinds = [
        std::io::ErrorKind::BrokenPipe,
        std::io::ErrorKind::UnexpectedEof,
        std::io::ErrorKind::TimedOut,
    ];
    let hyper = CourierLayer::new().hyper::<ReplayBody<ScriptedBody<std::io::Error>>>();
    let reqwest = CourierLayer::new().reqwest::<ReplayBody<ScriptedBody<std::io::Error>>>(
        courier::transport::reqwest_client_builder()
            .build()
            .expect("a plain-HTTP client"),
    );
    for kind in kinds {
        // A streaming body whose source fails after its first chunk.
        let failing = || {
            ReplayBody::new(
                ScriptedBody::new()
                    .data(Bytes::from_static(b"part"))
                    .error(std::io::Error::from(kind)),
            )
        };
        let req = Request::put(server.url_for("/s/failing"))
            .body(failing())
            .unwrap();
        let err = tokio::time::timeout(Duration::from_secs(10), hyper.clone().oneshot(req))
            .await
            .expect("bounded")
            .expect_err("the body failed");
        let err = courier::Error::from(err);
        assert_eq!(err.kind(), FailureKind::Local, "hyper, {kind:?}: {err}");

        let req = Request::put(server.url_for("/s/failing"))
            .body(failing())
            .unwrap();
        let err = tokio::time::timeout(Duration::from_secs(10), reqwest.clone().oneshot(req))
            .await
            .expect("bounded")
            .expect_err("the body failed");
        let err = courier::Error::from(err);
        assert_eq!(err.kind(), FailureKind::Local, "reqwest, {kind:?}: {err}");
    }
    assert!(
        server.hits("failing").is_empty(),
        "nothing complete was sent"
    );
}

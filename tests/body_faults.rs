//! A request body that fails on its own side (one that ends short of the length it announced,
//! or one whose source errs) is the caller's fault: it comes back at once, is not retried, and
//! counts nothing against the host, over either transport.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::FailureKind;
use courier::retry::{ReplayBody, RetryLayer};
use courier_faultserver::FaultServer;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::ServiceExt;

/// A request body whose exact size hint says more bytes than it yields.
#[derive(Clone)]
struct Short {
    said: u64,
    has: Bytes,
    done: bool,
}

impl Body for Short {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        self.done = true;
        Poll::Ready(Some(Ok(Frame::data(self.has.clone()))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.said)
    }
}

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
        .hyper::<ReplayBody<Short>>();
    let body = Short {
        said: 100,
        has: Bytes::from_static(b"only fifty bytes ................................."),
        done: false,
    };
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

/// A streaming request body whose source fails after its first chunk with `err`.
struct Failing {
    sent: bool,
    err: Option<std::io::Error>,
}

impl Body for Failing {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if !self.sent {
            self.sent = true;
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"part")))));
        }
        Poll::Ready(self.err.take().map(Err))
    }
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
    let hyper = CourierLayer::new().hyper::<ReplayBody<Failing>>();
    let reqwest = CourierLayer::new().reqwest::<ReplayBody<Failing>>(
        courier::transport::reqwest_client_builder()
            .build()
            .expect("a plain-HTTP client"),
    );
    for kind in kinds {
        let failing = || {
            ReplayBody::new(Failing {
                sent: false,
                err: Some(std::io::Error::from(kind)),
            })
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

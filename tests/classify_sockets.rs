//! Failure classification of real transport errors: hyper's, hyper-util's and (with the
//! `reqwest` feature) reqwest's, on loopback sockets, on connections that fail on cue, and
//! behind a connector that fails. `courier::transport::classify` knows them by type, and the
//! facade's transports hand them up marked with that kind, which courier-core (every layer)
//! reads as it is.

use bytes::Bytes;
use courier::core::FailureKind;
use courier::core::classify::classify_error as core_classify;
use courier::transport::classify;
use courier_testkit::body::ScriptedBody;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn classify_kind(err: &(dyn std::error::Error + 'static)) -> FailureKind {
    classify(err)
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http()
}

#[tokio::test]
async fn refused_connection_is_connect() {
    // Bind then drop: the port is closed and nothing listens on it.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let err = client()
        .get(format!("http://{addr}/").parse().unwrap())
        .await
        .unwrap_err();
    assert!(err.is_connect());
    assert_eq!(classify_kind(&err), FailureKind::Connect);
}

#[tokio::test]
async fn closed_before_answer_is_read() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        // Read the request head, then close without answering.
        let mut buf = [0u8; 1024];
        let _ = sock.read(&mut buf).await;
        drop(sock);
    });
    let err = client()
        .get(format!("http://{addr}/").parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(classify_kind(&err), FailureKind::Read, "{err:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn no_answer_in_time_is_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(sock);
    });
    let err = tokio::time::timeout(
        Duration::from_millis(50),
        client().get(format!("http://{addr}/").parse().unwrap()),
    )
    .await
    .unwrap_err();
    assert_eq!(classify_kind(&err), FailureKind::Timeout);
    server.abort();
}

#[tokio::test]
async fn an_answer_that_is_no_http_is_read() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = sock.read(&mut buf).await;
        let _ = sock.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
        // Keep the connection open: the failure is the answer, not a close.
        let _ = sock.read(&mut buf).await;
    });
    let err = client()
        .get(format!("http://{addr}/").parse().unwrap())
        .await
        .unwrap_err();
    let hyper_err = courier::core::cause_ref::<hyper::Error>(&err).expect("hyper's error");
    assert!(hyper_err.is_parse(), "{err:?}");
    assert_eq!(classify_kind(&err), FailureKind::Read, "{err:?}");
    server.abort();
}

/// hyper's errors for a connection that is gone: waiting for it to be ready finds its channel
/// closed, and a request handed to it is canceled. Both are read failures: the connection
/// broke, and a request may have gone out on it before.
#[tokio::test]
async fn a_connection_that_is_gone_is_read() {
    let (io, _peer) = tokio::io::duplex(1024);
    let (mut send, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(io))
            .await
            .unwrap();
    drop(conn);
    let closed = send.ready().await.unwrap_err();
    assert!(closed.is_closed(), "{closed:?}");
    assert_eq!(classify_kind(&closed), FailureKind::Read, "{closed:?}");
    let canceled = send
        .send_request(http::Request::get("/").body(Empty::new()).unwrap())
        .await
        .unwrap_err();
    assert!(canceled.is_canceled(), "{canceled:?}");
    assert_eq!(classify_kind(&canceled), FailureKind::Read, "{canceled:?}");
}

/// A connector that fails every connect with the error `make` builds, as a TLS connector
/// reports a failed handshake.
#[derive(Clone)]
struct FailingConnector {
    make: fn() -> courier::core::BoxError,
}

impl tower::Service<http::Uri> for FailingConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = courier::core::BoxError;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        std::future::ready(Err((self.make)()))
    }
}

/// A connect that fails in its TLS handshake is tls (never retried), not connect, whether the
/// connector marks it with `TlsError` or passes the TLS stack's error on inside an I/O error.
#[tokio::test]
async fn a_connect_that_fails_its_tls_handshake_is_tls() {
    use courier::core::classify::TlsError;
    let cases: [(fn() -> courier::core::BoxError, FailureKind); 4] = [
        (
            || Box::new(TlsError("unknown issuer".into())),
            FailureKind::Tls,
        ),
        (
            || {
                #[cfg(feature = "rustls")]
                let failure = courier::rustls::Error::InvalidCertificate(
                    courier::rustls::CertificateError::UnknownIssuer,
                );
                // Without rustls, the failure a connector marks itself.
                #[cfg(not(feature = "rustls"))]
                let failure = TlsError("unknown issuer".into());
                Box::new(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    failure,
                ))
            },
            FailureKind::Tls,
        ),
        (
            || Box::new(std::io::Error::other(TlsError("expired".into()))),
            FailureKind::Tls,
        ),
        (
            || Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            FailureKind::Connect,
        ),
    ];
    for (make, want) in cases {
        let client = Client::builder(TokioExecutor::new())
            .retry_canceled_requests(false)
            .build::<_, Empty<Bytes>>(FailingConnector { make });
        let err = client
            .get("http://example.test/".parse().unwrap())
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
        assert_eq!(classify_kind(&err), want, "{err:?}");
    }
}

/// A request body that sends one chunk, then fails with `err`.
type FailingBody = ScriptedBody<std::io::Error>;

fn failing_body(err: std::io::Error) -> FailingBody {
    ScriptedBody::chunks(["part"]).error(err)
}

/// A server on loopback that takes up to `connections` connections, reads whatever comes and
/// never answers.
async fn silent_server(connections: usize) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..connections {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = sock.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    (addr, server)
}

/// The request's own body failing while it is written is the caller's: `Local`, whatever the
/// body's error says (an `io::Error` from a file or an upstream socket, a timeout of its own).
/// hyper reports a body that errs as a user error, not as "body write aborted".
#[tokio::test]
async fn request_body_that_errs_is_local() {
    // One connection per request (hyper closes one whose body failed): the failure is the
    // body's alone.
    let (addr, server) = silent_server(8).await;
    let client = Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http::<FailingBody>();
    for kind in [
        std::io::ErrorKind::BrokenPipe,
        std::io::ErrorKind::ConnectionReset,
        std::io::ErrorKind::UnexpectedEof,
        std::io::ErrorKind::TimedOut,
    ] {
        let req = http::Request::put(format!("http://{addr}/"))
            .body(failing_body(std::io::Error::from(kind)))
            .unwrap();
        let err = tokio::time::timeout(Duration::from_secs(5), client.request(req))
            .await
            .expect("the client reports the body's failure")
            .unwrap_err();
        assert_eq!(classify_kind(&err), FailureKind::Local, "{kind:?}: {err:?}");
    }
    server.abort();
}

/// An established connection whose peer stops answering once the request is written: the
/// request goes out, then reading fails with `kind`, as Linux reports on such a socket once its
/// retransmissions go unanswered (host or network unreachable).
struct LostAfterWrite {
    kind: std::io::ErrorKind,
    written: bool,
    reader: Option<Waker>,
}

impl LostAfterWrite {
    fn new(kind: std::io::ErrorKind) -> Self {
        Self {
            kind,
            written: false,
            reader: None,
        }
    }
}

impl hyper::rt::Read for LostAfterWrite {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        _: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.written {
            return Poll::Ready(Err(self.kind.into()));
        }
        self.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl hyper::rt::Write for LostAfterWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.written = true;
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// hyper reports the I/O kinds of a failed connect ("host unreachable", "not connected") on a
/// connection that has already sent the request too: there they mean the request may have
/// run, and they are read failures, not connect failures.
#[tokio::test]
async fn unreachable_host_after_the_request_was_sent_is_read() {
    for kind in [
        std::io::ErrorKind::HostUnreachable,
        std::io::ErrorKind::NetworkUnreachable,
        std::io::ErrorKind::NotConnected,
    ] {
        let (mut send, conn) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(LostAfterWrite::new(kind))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let err = send
            .send_request(http::Request::get("/").body(Empty::new()).unwrap())
            .await
            .unwrap_err();
        // The same kind with no transport error around it is a connect failure.
        let bare = std::io::Error::from(kind);
        assert_eq!(classify_kind(&bare), FailureKind::Connect, "{kind:?}");
        assert_eq!(classify_kind(&err), FailureKind::Read, "{kind:?}: {err:?}");
        let _ = conn.await;
    }
}

#[cfg(feature = "reqwest")]
mod reqwest_errors {
    use super::*;

    #[tokio::test]
    async fn refused_connection_is_connect() {
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let err = reqwest::Client::new()
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
        assert_eq!(classify_kind(&err), FailureKind::Connect, "{err:?}");
    }

    /// A request reqwest cannot build is the caller's own: sending it again fails the same way.
    #[tokio::test]
    async fn a_request_that_cannot_be_built_is_local() {
        let err = reqwest::Client::new()
            .get("http://exa mple.test/")
            .send()
            .await
            .unwrap_err();
        assert!(err.is_builder(), "{err:?}");
        assert_eq!(classify_kind(&err), FailureKind::Local, "{err:?}");
    }

    /// reqwest's `is_timeout` looks down to the request body's own error: a body that fails
    /// with "timed out" is still the caller's failure, not the server's slowness.
    #[tokio::test]
    async fn request_body_that_errs_is_local() {
        let (addr, server) = super::silent_server(8).await;
        let client = reqwest::Client::new();
        for kind in [
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::ConnectionReset,
        ] {
            let body = reqwest::Body::wrap(failing_body(std::io::Error::from(kind)));
            let err = tokio::time::timeout(
                Duration::from_secs(5),
                client.put(format!("http://{addr}/")).body(body).send(),
            )
            .await
            .expect("the client reports the body's failure")
            .unwrap_err();
            assert_eq!(classify_kind(&err), FailureKind::Local, "{kind:?}: {err:?}");
        }
        server.abort();
    }
}

/// A server on loopback that reads each request head and closes without answering, up to
/// `connections` times.
async fn closing_server(connections: usize) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..connections {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = sock.read(&mut buf).await;
        }
    });
    (addr, server)
}

/// The facade's transports hand up each failure marked with its kind: courier-core alone,
/// with no transport's types, reads the kind the typed downcasts gave. Bare, a hyper error
/// about a closed connection says nothing courier-core knows.
#[tokio::test]
async fn the_transports_hand_up_failures_marked_with_their_kind() {
    use courier::transport::HyperService;
    use tower::ServiceExt;
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let (closing, server) = closing_server(4).await;
    let get = |addr| {
        http::Request::get(format!("http://{addr}/"))
            .body(http_body_util::Full::<Bytes>::default())
            .unwrap()
    };
    let hyper = HyperService::new(courier::transport::hyper_client());
    let err = hyper.clone().oneshot(get(closed)).await.unwrap_err();
    assert_eq!(err.kind(), FailureKind::Connect, "{err:?}");
    assert_eq!(core_classify(&err), FailureKind::Connect, "{err:?}");
    let err = hyper.clone().oneshot(get(closing)).await.unwrap_err();
    assert_eq!(core_classify(&err), FailureKind::Read, "{err:?}");
    let bare = err.into_inner();
    assert_eq!(classify(&*bare), FailureKind::Read, "{bare:?}");
    #[cfg(feature = "reqwest")]
    {
        let reqwest =
            courier::transport::ReqwestService::<http_body_util::Full<Bytes>>::with_defaults()
                .unwrap();
        let err = reqwest.clone().oneshot(get(closed)).await.unwrap_err();
        assert_eq!(core_classify(&*err), FailureKind::Connect, "{err:?}");
        let err = reqwest.clone().oneshot(get(closing)).await.unwrap_err();
        assert_eq!(core_classify(&*err), FailureKind::Read, "{err:?}");
    }
    server.abort();
}

//! Failure classification of real transport errors on loopback sockets.

use bytes::Bytes;
use courier_core::FailureKind;
use courier_core::classify::classify_error;
use courier_testkit::body::ScriptedBody;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

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
    assert_eq!(classify_error(&err), FailureKind::Connect);
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
    assert_eq!(classify_error(&err), FailureKind::Read, "{err:?}");
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
    assert_eq!(classify_error(&err), FailureKind::Timeout);
    server.abort();
}

/// A request body that sends one chunk, then fails with `err`.
type FailingBody = ScriptedBody<std::io::Error>;

fn failing_body(err: std::io::Error) -> FailingBody {
    ScriptedBody::chunks(["part"]).error(err)
}

/// The request's own body failing while it is written is the caller's: `Local`, whatever the
/// body's error says (an `io::Error` from a file or an upstream socket, a timeout of its own).
/// hyper reports a body that errs as a user error, not as "body write aborted".
#[tokio::test]
async fn request_body_that_errs_is_local() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        // One connection per request (hyper closes one whose body failed). Read whatever comes
        // and never answer: the failure is the body's alone. Bounded by the test's requests.
        for _ in 0..8 {
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
        assert_eq!(
            classify_error(&err),
            FailureKind::Local,
            "{kind:?}: {err:?}"
        );
    }
    server.abort();
}

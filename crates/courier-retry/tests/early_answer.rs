//! A streaming request body and a server that answers before it has read the body: a retry
//! goes out only once the attempt before it has let go of the body and the body was kept whole;
//! otherwise the caller gets the last answer. Paused time against a scripted upstream, then the
//! same over a real hyper client on 127.0.0.1.

mod common;

use bytes::Bytes;
use common::attempts;
use courier_core::extensions::{Decision, Reason};
use courier_core::{BoxError, CallContext};
use courier_retry::{Jitter, ReplayBody, RetryBudget, RetryLayer};
use courier_testkit::body::ScriptedBody;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const URL: &str = "http://api.example/v1/upload";
const KIB: usize = 1024;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One second before the first retry, exactly.
fn layer() -> RetryLayer {
    RetryLayer::new()
        .jitter(Jitter::None)
        .base(ms(1000))
        .overload_base(ms(1000))
}

/// A streaming request body (no size hint): `n` chunks of 1 KiB, chunk `i` made of byte `i`.
type Stream = ScriptedBody<Infallible>;

fn stream(n: usize) -> Stream {
    ScriptedBody::chunks((0..n).map(|i| vec![i as u8; KIB]))
}

/// The bytes of a whole `Stream` of `n` chunks.
fn whole(n: usize) -> Bytes {
    (0..n).flat_map(|i| vec![i as u8; KIB]).collect()
}

fn put(n: usize) -> Request<ReplayBody<Stream>> {
    Request::put(URL).body(ReplayBody::new(stream(n))).unwrap()
}

/// What the first attempt does with the request body.
#[derive(Clone, Copy, Debug)]
enum First {
    /// Reads it all, then answers 503 (the usual order).
    ReadThenAnswer,
    /// Answers 503 at once; `after` later, reads `chunks` chunks (all when `None`) and drops it.
    AnswerThenRead {
        after: Duration,
        chunks: Option<usize>,
    },
    /// Answers 503 at once; reads `chunks` chunks and then keeps the body forever, as a
    /// transport whose peer stopped reading would.
    AnswerThenKeep { chunks: usize },
}

/// What the upstream saw.
#[derive(Default)]
struct Seen {
    /// Requests in arrival order.
    requests: usize,
    /// What the first attempt read of its body.
    first: Option<Result<Bytes, String>>,
    /// What each later attempt read of its body.
    later: Vec<Result<Bytes, String>>,
    /// Bodies held forever.
    kept: Vec<ReplayBody<Stream>>,
}

type Fut = Pin<Box<dyn Future<Output = Result<Response<String>, BoxError>> + Send>>;

async fn read(body: &mut ReplayBody<Stream>, chunks: Option<usize>) -> Result<Bytes, BoxError> {
    let mut got = Vec::new();
    let mut n = 0;
    while chunks.is_none_or(|max| n < max) {
        match body.frame().await {
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    got.extend_from_slice(&data);
                }
                n += 1;
            }
            None => break,
        }
    }
    Ok(Bytes::from(got))
}

/// The first attempt behaves as `first` says; every later one reads its whole body before it
/// answers 200 (and fails if the body fails, as a transport would).
fn upstream(
    first: First,
    seen: Arc<Mutex<Seen>>,
) -> impl tower::Service<
    Request<ReplayBody<Stream>>,
    Response = Response<String>,
    Error = BoxError,
    Future = Fut,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |req: Request<ReplayBody<Stream>>| {
        let seen = seen.clone();
        let n = {
            let mut s = seen.lock().unwrap();
            s.requests += 1;
            s.requests
        };
        let mut body = req.into_body();
        let busy = || {
            Response::builder()
                .status(503)
                .body("busy: try again later".to_owned())
                .unwrap()
        };
        let fut: Fut = Box::pin(async move {
            if n > 1 {
                let got = read(&mut body, None).await;
                let err = got.as_ref().err().map(ToString::to_string);
                seen.lock()
                    .unwrap()
                    .later
                    .push(got.as_ref().map(Clone::clone).map_err(ToString::to_string));
                if let Some(e) = err {
                    return Err(e.into());
                }
                return Ok(Response::new("done".to_owned()));
            }
            match first {
                First::ReadThenAnswer => {
                    let got = read(&mut body, None).await.map_err(|e| e.to_string());
                    seen.lock().unwrap().first = Some(got);
                }
                First::AnswerThenRead { after, chunks } => {
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let got = read(&mut body, chunks).await.map_err(|e| e.to_string());
                        seen.lock().unwrap().first = Some(got);
                        drop(body);
                    });
                }
                First::AnswerThenKeep { chunks } => {
                    let got = read(&mut body, Some(chunks))
                        .await
                        .map_err(|e| e.to_string());
                    let mut s = seen.lock().unwrap();
                    s.first = Some(got);
                    s.kept.push(body);
                }
            }
            Ok(busy())
        });
        fut
    })
}

/// Sends `req` through the layer, bounded (in paused time) so that a hang fails the test.
async fn call(
    layer: &RetryLayer,
    first: First,
    seen: &Arc<Mutex<Seen>>,
    req: Request<ReplayBody<Stream>>,
) -> Result<Response<String>, BoxError> {
    let svc = layer.layer(upstream(first, seen.clone()));
    tokio::time::timeout(Duration::from_secs(600), svc.oneshot(req))
        .await
        .expect("the call ends: it never waits for a body the transport keeps")
}

async fn text(res: Response<String>) -> String {
    res.into_body()
}

#[track_caller]
fn assert_stopped_for_the_body(res: &Response<String>) {
    let records = attempts(res);
    assert_eq!(records.count(), 1, "{records:?}");
    let r = records.last().unwrap();
    assert_eq!(
        (r.decision, r.reason),
        (Decision::Stop, Reason::BodyNotReplayable)
    );
    assert_eq!((r.wait, r.wait_source), (Duration::ZERO, None));
}

// === the defect: a body that outgrows the cap after the answer ===

#[tokio::test(start_paused = true)]
async fn an_early_answer_then_a_body_past_the_cap_returns_the_answer() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let first = First::AnswerThenRead {
        after: ms(10),
        chunks: None,
    };
    let start = Instant::now();
    let res = call(&layer(), first, &seen, put(80))
        .await
        .expect("the server's answer, not ReplayCapExceeded");
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Known as soon as the body passed the cap: no need to wait out the second.
    assert_eq!(start.elapsed(), ms(10));
    assert_stopped_for_the_body(&res);
    assert_eq!(text(res).await, "busy: try again later", "kept whole");
    let s = seen.lock().unwrap();
    assert_eq!(s.requests, 1, "no second, truncated request");
    assert!(s.later.is_empty());
    assert_eq!(
        s.first.clone().unwrap().unwrap(),
        whole(80),
        "the first is whole"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_the_transport_keeps_ends_the_call_when_the_wait_is_over() {
    for chunks in [0, 3] {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut req = put(80);
        // The deadline is far: the wait before the retry bounds the wait for the body.
        CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::from_secs(30));
        let start = Instant::now();
        let res = call(&layer(), First::AnswerThenKeep { chunks }, &seen, req)
            .await
            .expect("the server's answer");
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(start.elapsed(), ms(1000), "{chunks} chunks read");
        assert_stopped_for_the_body(&res);
        assert_eq!(text(res).await, "busy: try again later");
        let s = seen.lock().unwrap();
        assert_eq!(s.requests, 1, "{chunks} chunks read");
        assert_eq!(s.first.clone().unwrap().unwrap(), whole(chunks));
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_kept_past_a_near_deadline_is_not_waited_for() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut req = put(8);
    // Half a second left: the one-second wait does not fit; the call stops at once, as it
    // always did.
    CallContext::get_or_insert(&mut req).shrink_deadline_after(ms(500));
    let start = Instant::now();
    let res = call(&layer(), First::AnswerThenKeep { chunks: 1 }, &seen, req)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::PastDeadline);
    assert_eq!(seen.lock().unwrap().requests, 1);
}

// === retries that stay allowed ===

#[tokio::test(start_paused = true)]
async fn a_body_read_before_the_answer_is_replayed_whole() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let start = Instant::now();
    let res = call(&layer(), First::ReadThenAnswer, &seen, put(40))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), ms(1000));
    let records = attempts(&res);
    assert_eq!(records.count(), 2);
    let r = &records.records()[0];
    assert_eq!(
        (r.decision, r.reason),
        (Decision::Retry, Reason::RetryableStatus)
    );
    assert_eq!(r.wait, ms(1000));
    let s = seen.lock().unwrap();
    assert_eq!(s.requests, 2);
    assert_eq!(s.first.clone().unwrap().unwrap(), whole(40));
    assert_eq!(s.later.len(), 1);
    assert_eq!(s.later[0].clone().unwrap(), whole(40));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_ends_under_the_cap_after_the_answer_is_replayed_whole() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let first = First::AnswerThenRead {
        after: ms(10),
        chunks: None,
    };
    let start = Instant::now();
    let res = call(&layer(), first, &seen, put(40)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // The retry keeps its planned time.
    assert_eq!(start.elapsed(), ms(1000));
    let records = attempts(&res);
    assert_eq!(records.count(), 2);
    assert_eq!(records.records()[0].decision, Decision::Retry);
    assert_eq!(records.records()[0].wait, ms(1000));
    let s = seen.lock().unwrap();
    assert_eq!(s.requests, 2);
    assert_eq!(s.first.clone().unwrap().unwrap(), whole(40));
    assert_eq!(s.later[0].clone().unwrap(), whole(40));
}

#[tokio::test(start_paused = true)]
async fn a_large_body_dropped_under_the_cap_is_replayed_whole() {
    // The first attempt read 10 KiB of 80 and let go (its connection closed): every byte it
    // sent was kept, so the retry sends them again and reads the rest from the original.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let first = First::AnswerThenRead {
        after: ms(10),
        chunks: Some(10),
    };
    let res = call(&layer(), first, &seen, put(80)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let s = seen.lock().unwrap();
    assert_eq!(s.requests, 2);
    assert_eq!(s.first.clone().unwrap().unwrap(), whole(10));
    assert_eq!(s.later[0].clone().unwrap(), whole(80));
}

#[tokio::test(start_paused = true)]
async fn a_retry_not_sent_for_its_body_goes_back_to_the_budget() {
    // A budget of exactly one retry: the call that stopped for its body must not spend it.
    let layer = layer().budget(RetryBudget::new().ratio(0.0).floor(1));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let first = First::AnswerThenKeep { chunks: 0 };
    let res = call(&layer, first, &seen, put(8)).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_stopped_for_the_body(&res);

    let seen = Arc::new(Mutex::new(Seen::default()));
    let res = call(&layer, First::ReadThenAnswer, &seen, put(8))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "the retry was still there");
    assert_eq!(seen.lock().unwrap().requests, 2);
}

// === over a real hyper client ===

mod loopback {
    use super::*;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A streaming body of `n` 1 KiB chunks, one every millisecond.
    fn slow(n: usize) -> ScriptedBody<Infallible> {
        ScriptedBody::chunks((0..n).map(|_| vec![b'x'; KIB])).gap(ms(1))
    }

    /// Answers every request head with a 503 as soon as it has read the head, then reads and
    /// discards whatever comes; counts the request heads.
    async fn early_server() -> (String, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/upload", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(0));
        let counted = heads.clone();
        tokio::spawn(async move {
            for _ in 0..8 {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let heads = counted.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * KIB];
                    let mut seen = Vec::new();
                    for _ in 0..10_000 {
                        let n = match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        seen.extend_from_slice(&buf[..n]);
                        // The body is all `x`s and chunk sizes: a request line is a new head.
                        while let Some(at) = find(&seen, b"PUT /upload") {
                            *heads.lock().unwrap() += 1;
                            seen.drain(..at + 11);
                            let answer =
                                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy";
                            if sock.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        let keep = seen.len().min(16);
                        seen.drain(..seen.len() - keep);
                    }
                });
            }
        });
        (url, heads)
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[tokio::test]
    async fn hyper_an_early_503_with_a_body_past_the_cap_is_sent_once() {
        let (url, heads) = early_server().await;
        let client: Client<HttpConnector, ReplayBody<ScriptedBody<Infallible>>> =
            Client::builder(TokioExecutor::new())
                .retry_canceled_requests(false)
                .build_http();
        // Long enough for the 80 ms body to pass the cap before a retry would go out.
        let svc = RetryLayer::new()
            .jitter(Jitter::None)
            .base(ms(500))
            .layer(client);
        let req = Request::put(url).body(ReplayBody::new(slow(80))).unwrap();
        let res = tokio::time::timeout(Duration::from_secs(10), svc.oneshot(req))
            .await
            .expect("bounded in time")
            .expect("the server's 503, not ReplayCapExceeded");
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            attempts(&res).last().unwrap().reason,
            Reason::BodyNotReplayable
        );
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "busy");
        assert_eq!(*heads.lock().unwrap(), 1, "one request reached the server");
    }
}

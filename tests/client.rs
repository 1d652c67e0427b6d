//! `courier::Client` over both transports against a server on loopback that echoes what it
//! received: bodies, queries and credentials arrive as sent; a stream is retried within its
//! cap and not beyond it; `error_for_status` keeps the body; attempts on success and failure.
//! Every test is bounded.

#![cfg(all(feature = "client", feature = "reqwest"))]

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::any;
use bytes::Bytes;
use courier::client::{Body, RedirectPolicy};
use courier::core::extensions::{AttemptOutcome, Decision, Reason};
use courier::core::{CacheStatus, FailureKind};
use courier::retry::RetryLayer;
use courier::{Client, CourierLayer, Error};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// === the server ===

/// How many requests each path has seen.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, u32>>>);

impl Seen {
    fn hit(&self, path: &str) -> u32 {
        let mut seen = self.0.lock().unwrap();
        let n = seen.entry(path.to_owned()).or_default();
        *n += 1;
        *n
    }

    fn count(&self, path: &str) -> u32 {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

fn echo_json(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Value {
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(body),
    })
}

/// `/echo`: the request as JSON. `/flaky/{n}/{name}`: 503 with `Retry-After: 0` to the first
/// `n` requests of `name`, then the echo. `/status/{code}`: that status, body `why {code}`.
/// `/slow`: the echo after 5 s.
async fn serve() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route(
            "/echo",
            any(
                |State(seen): State<Seen>,
                 method: Method,
                 uri: Uri,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    seen.hit("/echo");
                    axum::Json(echo_json(&method, &uri, &headers, &body))
                },
            ),
        )
        .route(
            "/flaky/{n}/{name}",
            any(
                |State(seen): State<Seen>,
                 Path((n, name)): Path<(u32, String)>,
                 method: Method,
                 uri: Uri,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    let hit = seen.hit(&name);
                    if hit <= n {
                        return axum::response::Response::builder()
                            .status(503)
                            .header("retry-after", "0")
                            .body(axum::body::Body::from("busy"))
                            .unwrap();
                    }
                    axum::response::IntoResponse::into_response(axum::Json(echo_json(
                        &method, &uri, &headers, &body,
                    )))
                },
            ),
        )
        .route(
            "/status/{code}",
            any(|Path(code): Path<u16>| async move {
                (StatusCode::from_u16(code).unwrap(), format!("why {code}"))
            }),
        )
        .route(
            "/slow",
            any(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

// === the clients ===

async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("the test finished within its bound")
}

/// The preset with a quick, seeded backoff, so that a retried call costs milliseconds.
fn quick() -> CourierLayer {
    CourierLayer::new().retry(
        RetryLayer::new()
            .base(Duration::from_millis(10))
            .cap(Duration::from_millis(50))
            .seed(7),
    )
}

/// The same client settings over hyper and over reqwest.
fn clients(builder: impl Fn() -> courier::ClientBuilder) -> [(&'static str, Client); 2] {
    let reqwest = courier::transport::reqwest_client_builder()
        .build()
        .expect("reqwest builds a plain-HTTP client");
    [
        ("hyper", builder().build().expect("a client")),
        (
            "reqwest",
            builder().reqwest(reqwest).build().expect("a client"),
        ),
    ]
}

fn header<'a>(echo: &'a Value, name: &str) -> Option<&'a str> {
    echo["headers"][name].as_str()
}

// === the tests ===

/// Checked when this file compiles: a client, its responses and its errors go into tasks and
/// threads, and so does the future of `send`.
const _: fn() = || {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Client>();
    send_sync::<courier::Response>();
    send_sync::<Error>();
    fn send_future<F: Future + Send>(_: F) {}
    send_future(Client::new().get("http://a.example/").send());
    send_future(async {
        Client::new()
            .get("/")
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
    });
};

#[derive(Serialize)]
struct Order {
    sku: &'static str,
    quantity: u32,
    note: &'static str,
}

const ORDER: Order = Order {
    sku: "a-1",
    quantity: 2,
    note: "fragile & heavy",
};

#[tokio::test]
async fn json_form_query_and_credentials_arrive_as_sent() {
    let (addr, _seen) = serve().await;
    let base = format!("http://{addr}/");
    for (name, client) in clients(|| Client::builder().layer(quick()).base_url(&base)) {
        bounded(async {
            // JSON, and a query added to the one in the URL.
            let echo: Value = client
                .post("echo?a=1")
                .query(&[("b", "two words"), ("c", "&")])
                .json(&ORDER)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(echo["method"], "POST", "{name}");
            assert_eq!(echo["query"], "a=1&b=two+words&c=%26", "{name}");
            assert_eq!(header(&echo, "content-type"), Some("application/json"));
            let sent: Value = serde_json::from_str(echo["body"].as_str().unwrap()).unwrap();
            assert_eq!(
                sent,
                json!({"sku": "a-1", "quantity": 2, "note": "fragile & heavy"}),
                "{name}"
            );

            // A form, with a bearer token.
            let echo: Value = client
                .put("/echo")
                .form(&ORDER)
                .bearer_auth("t0ken")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(echo["method"], "PUT", "{name}");
            assert_eq!(echo["body"], "sku=a-1&quantity=2&note=fragile+%26+heavy");
            assert_eq!(
                header(&echo, "content-type"),
                Some("application/x-www-form-urlencoded")
            );
            assert_eq!(header(&echo, "authorization"), Some("Bearer t0ken"));

            // Basic auth, with and without a password, and from the URL.
            for (req, expected) in [
                (
                    client
                        .get("echo")
                        .basic_auth("aladdin", Some("open sesame")),
                    "Basic YWxhZGRpbjpvcGVuIHNlc2FtZQ==",
                ),
                (
                    client.get("echo").basic_auth("aladdin", None::<&str>),
                    "Basic YWxhZGRpbjo=",
                ),
                (
                    client.get(format!("http://aladdin:open%20sesame@{addr}/echo")),
                    "Basic YWxhZGRpbjpvcGVuIHNlc2FtZQ==",
                ),
            ] {
                let echo: Value = req.send().await.unwrap().json().await.unwrap();
                assert_eq!(header(&echo, "authorization"), Some(expected), "{name}");
            }

            // A body of bytes, headers, and the idempotency key.
            let mut more = HeaderMap::new();
            more.insert("x-one", HeaderValue::from_static("1"));
            let resp = client
                .patch("echo")
                .header("x-one", "0")
                .headers(more)
                .header("x-two", "2")
                .idempotency_key("k-7")
                .body("raw bytes")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(resp.url().as_str(), format!("{base}echo"));
            let echo: Value = resp.json().await.unwrap();
            assert_eq!(echo["method"], "PATCH");
            assert_eq!(echo["body"], "raw bytes");
            assert_eq!(header(&echo, "x-one"), Some("1"), "headers() replaces");
            assert_eq!(header(&echo, "x-two"), Some("2"));
            assert_eq!(header(&echo, "idempotency-key"), Some("k-7"));
        })
        .await;
    }
}

#[tokio::test]
async fn default_headers_and_the_presets_user_agent_are_sent_unless_the_request_sets_its_own() {
    let (addr, _seen) = serve().await;
    let mut defaults = HeaderMap::new();
    defaults.insert("x-team", HeaderValue::from_static("payments"));
    defaults.insert("x-env", HeaderValue::from_static("test"));
    let layer = quick().user_agent(HeaderValue::from_static("orders/2.1"));
    for (name, client) in clients(|| {
        Client::builder()
            .layer(layer.clone())
            .default_headers(defaults.clone())
    }) {
        let echo: Value = bounded(async {
            client
                .get(format!("http://{addr}/echo"))
                .header("x-env", "prod")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
        .await;
        assert_eq!(header(&echo, "user-agent"), Some("orders/2.1"), "{name}");
        assert_eq!(header(&echo, "x-team"), Some("payments"), "{name}");
        assert_eq!(header(&echo, "x-env"), Some("prod"), "{name}");
    }
}

fn chunks(total: usize) -> Body {
    let chunk = Bytes::from(vec![b'x'; 100]);
    let stream = futures_util::stream::iter(
        std::iter::repeat_n(chunk, total / 100).map(Ok::<_, std::io::Error>),
    );
    Body::wrap_stream_with_cap(stream, 1000)
}

#[tokio::test]
async fn a_streamed_body_is_retried_within_its_cap_and_not_beyond_it() {
    let (addr, seen) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        bounded(async {
            // 1000 bytes, the cap: sent again after the 503, whole.
            let within = format!("within-{name}");
            let resp = client
                .put(format!("http://{addr}/flaky/1/{within}"))
                .body(chunks(1000))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{name}");
            assert_eq!(resp.attempts().count(), 2, "{name}");
            let echo: Value = resp.json().await.unwrap();
            assert_eq!(echo["body"].as_str().map(str::len), Some(1000), "{name}");
            assert_eq!(seen.count(&within), 2);

            // 1100 bytes: over the cap, sent once; the 503 is the answer.
            let beyond = format!("beyond-{name}");
            let resp = client
                .put(format!("http://{addr}/flaky/1/{beyond}"))
                .body(chunks(1100))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 503, "{name}");
            let last = resp.attempts().last().expect("one record");
            assert_eq!(resp.attempts().count(), 1, "{name}");
            assert_eq!(last.reason, Reason::BodyNotReplayable, "{name}");
            assert_eq!(seen.count(&beyond), 1);
        })
        .await;
    }
}

#[tokio::test]
async fn error_for_status_keeps_the_body() {
    let (addr, _seen) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        bounded(async {
            let ok = client
                .get(format!("http://{addr}/status/201"))
                .send()
                .await
                .unwrap()
                .error_for_status()
                .expect("a 201 is no error");
            assert_eq!(ok.text().await.unwrap(), "why 201");

            let err = client
                .get(format!("http://{addr}/status/404"))
                .send()
                .await
                .unwrap()
                .error_for_status()
                .unwrap_err();
            assert!(err.to_string().contains("404"), "{name}: {err}");
            assert_eq!(err.attempts().count(), 1);
            let Error::Status(status) = err else {
                panic!("{name}: a status error, got {err:?}")
            };
            assert_eq!(status.status(), StatusCode::NOT_FOUND);
            assert_eq!(status.into_response().text().await.unwrap(), "why 404");
        })
        .await;
    }
}

#[tokio::test]
async fn attempts_on_success_and_on_failure() {
    let (addr, _seen) = serve().await;
    // A port that was free a moment ago: nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        bounded(async {
            let resp = client
                .get(format!("http://{addr}/flaky/2/success-{name}"))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let records = resp.attempts().records();
            let seen: Vec<_> = records
                .iter()
                .map(|r| (r.attempt, r.outcome, r.decision))
                .collect();
            let s503 = AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                seen,
                [
                    (1, s503, Decision::Retry),
                    (2, s503, Decision::Retry),
                    (3, AttemptOutcome::Status(StatusCode::OK), Decision::Stop),
                ],
                "{name}"
            );
            assert_eq!(resp.cache_status(), Some(CacheStatus::Miss), "{name}");

            let err = client
                .get(format!("http://{closed}/nothing"))
                .send()
                .await
                .unwrap_err();
            assert_eq!(err.kind(), FailureKind::Connect, "{name}: {err}");
            assert!(err.nothing_sent());
            assert_eq!(err.attempts().count(), 3, "{name}: {err}");
            assert_eq!(
                err.attempts().last().map(|r| r.reason),
                Some(Reason::AttemptsExhausted)
            );
        })
        .await;
    }
}

#[tokio::test]
async fn bytes_stream_reads_the_body_as_it_comes() {
    let (addr, _seen) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        let read = bounded(async {
            let mut stream = client
                .post(format!("http://{addr}/echo"))
                .body(vec![b'y'; 10_000])
                .send()
                .await
                .unwrap()
                .bytes_stream();
            let mut read = Vec::new();
            while let Some(chunk) = stream.next().await {
                read.extend_from_slice(&chunk.unwrap());
            }
            read
        })
        .await;
        let echo: Value = serde_json::from_slice(&read).unwrap();
        assert_eq!(echo["body"].as_str().map(str::len), Some(10_000), "{name}");
    }
}

#[tokio::test]
async fn a_request_timeout_shortens_the_deadline() {
    let (addr, _seen) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        let err = bounded(
            client
                .get(format!("http://{addr}/slow"))
                .timeout(Duration::from_millis(200))
                .send(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::DeadlineExceeded(_)), "{name}: {err:?}");
    }
}

#[tokio::test]
async fn a_request_that_cannot_be_built_fails_at_send_and_sends_nothing() {
    let (addr, seen) = serve().await;
    let client = Client::builder()
        .layer(quick())
        .redirect(RedirectPolicy::none())
        .build()
        .unwrap();
    let echo = format!("http://{addr}/echo");
    let cases = [
        client.get(&echo).header("x-bad", "line\nbreak"),
        client.get(&echo).header("bad name", "v"),
        client.get("relative/without/base"),
        client.get("ftp://127.0.0.1/file"),
        client.get("http://[::1"),
        client
            .post(&echo)
            .json(&HashMap::from([(
                (1, 2),
                "a map keyed by pairs is no JSON",
            )]))
            .header("x-ok", "1"),
    ];
    for req in cases {
        let err = bounded(req.send()).await.unwrap_err();
        assert!(matches!(err, Error::Builder(_)), "{err:?}");
        assert!(err.nothing_sent() && err.attempts().count() == 0, "{err}");
        assert!(err.to_string().starts_with("request not built: "), "{err}");
    }
    assert_eq!(seen.count("/echo"), 0, "nothing was sent");
    let err = Client::builder()
        .base_url("mailto:x@a.example")
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Builder(_)), "{err:?}");
}

#[tokio::test]
async fn a_body_that_is_not_the_json_asked_for_is_a_decode_error_with_the_attempts() {
    let (addr, _seen) = serve().await;
    let client = Client::builder().layer(quick()).build().unwrap();
    let err = bounded(async {
        client
            .get(format!("http://{addr}/status/200"))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
    })
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Decode(_)), "{err:?}");
    assert_eq!(err.attempts().count(), 1);
}

#[tokio::test]
async fn clones_share_the_presets_state() {
    use courier::ratelimit::{Mode, Rate, TokenBucketRateLimitLayer};
    let (addr, _seen) = serve().await;
    // One call an hour, refused at once past it: the clone finds the bucket the first emptied.
    let limit = TokenBucketRateLimitLayer::new(
        Rate::per_second(1.0 / 3600.0).unwrap(),
        std::num::NonZeroU32::new(1).unwrap(),
    )
    .mode(Mode::Reject);
    let client = Client::builder()
        .layer(quick().rate_limit(limit))
        .build()
        .unwrap();
    let clone = client.clone();
    let url = format!("http://{addr}/status/200");
    let first = bounded(client.get(&url).send()).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let err = bounded(clone.get(&url).send()).await.unwrap_err();
    assert!(matches!(err, Error::RateLimited(_)), "{err:?}");
    assert!(err.nothing_sent());
}

//! Redirects followed by `courier::Client`, over both transports, against servers on
//! loopback: each status's rule, credentials kept from another origin, a loop stopped at the
//! limit, a keyed POST through a 307, the chain's one deadline, the attempts of every hop.
//! https to http is refused over a real TLS server (with a CA made in the test), on both
//! transports.

#![cfg(all(feature = "client", feature = "reqwest"))]

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::any;
use bytes::Bytes;
use courier::client::{Body, RedirectErrorKind, RedirectPolicy};
use courier::core::extensions::AttemptOutcome;
use courier::retry::RetryLayer;
use courier::{Client, CourierLayer, Error};
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a server received: each request's method, path, headers and body.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Value>>>);

impl Log {
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// `/to?status=S&location=L[&delay_ms=D]`: answers `S` with `Location: L` (after `D` ms).
/// `/loop?status=S[&delay_ms=D]`: answers `S` (after `D` ms) with itself as the `Location`.
/// `/echo`: 200. Each logs what it received.
async fn serve() -> (SocketAddr, Log) {
    let log = Log::default();
    let record = |log: &Log, method: &Method, path: &str, headers: &HeaderMap, body: &Bytes| {
        let headers: serde_json::Map<String, Value> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), json!(String::from_utf8_lossy(v.as_bytes()))))
            .collect();
        log.0.lock().unwrap().push(json!({
            "method": method.as_str(),
            "path": path,
            "headers": headers,
            "body": String::from_utf8_lossy(body),
        }));
    };
    let app =
        Router::new()
            .route(
                "/to",
                any(
                    move |State(log): State<Log>,
                          Query(q): Query<HashMap<String, String>>,
                          method: Method,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        record(&log, &method, "/to", &headers, &body);
                        if let Some(ms) = q.get("delay_ms") {
                            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                        }
                        let status: u16 = q["status"].parse().unwrap();
                        (
                            StatusCode::from_u16(status).unwrap(),
                            [("location", q["location"].clone())],
                            "moved",
                        )
                    },
                ),
            )
            .route(
                "/loop",
                any(
                    move |State(log): State<Log>,
                          Query(q): Query<HashMap<String, String>>,
                          uri: http::Uri,
                          method: Method,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        record(&log, &method, "/loop", &headers, &body);
                        if let Some(ms) = q.get("delay_ms") {
                            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                        }
                        let status: u16 = q["status"].parse().unwrap();
                        let itself = uri.path_and_query().unwrap().to_string();
                        (
                            StatusCode::from_u16(status).unwrap(),
                            [("location", itself)],
                            "again",
                        )
                    },
                ),
            )
            .route(
                "/echo",
                any(
                    move |State(log): State<Log>,
                          method: Method,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        record(&log, &method, "/echo", &headers, &body);
                        "here"
                    },
                ),
            )
            .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, log)
}

fn to(addr: SocketAddr, status: u16, location: &str) -> String {
    let location: String = url::form_urlencoded::byte_serialize(location.as_bytes()).collect();
    format!("http://{addr}/to?status={status}&location={location}")
}

async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("the test finished within its bound")
}

fn quick() -> CourierLayer {
    CourierLayer::new().retry(
        RetryLayer::new()
            .base(Duration::from_millis(10))
            .cap(Duration::from_millis(50))
            .seed(7),
    )
}

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

fn summary(entry: &Value) -> (String, String, String) {
    (
        entry["method"].as_str().unwrap().to_owned(),
        entry["path"].as_str().unwrap().to_owned(),
        entry["body"].as_str().unwrap().to_owned(),
    )
}

fn s(method: &str, path: &str, body: &str) -> (String, String, String) {
    (method.to_owned(), path.to_owned(), body.to_owned())
}

#[tokio::test]
async fn each_status_follows_its_rule() {
    let (addr, log) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        for status in [301, 302, 303, 307, 308] {
            log.clear();
            let resp = bounded(
                client
                    .post(to(addr, status, "/echo"))
                    .json(&json!({"a": 1}))
                    .idempotency_key("k-1")
                    .send(),
            )
            .await
            .unwrap();
            assert_eq!(resp.status(), 200, "{name} {status}");
            assert_eq!(resp.url().path(), "/echo");
            let records = resp.attempts().records();
            assert_eq!(records.len(), 2, "{name} {status}: one record per hop");
            assert_eq!(
                records[0].outcome,
                AttemptOutcome::Status(StatusCode::from_u16(status).unwrap())
            );
            assert_eq!(records[1].outcome, AttemptOutcome::Status(StatusCode::OK));
            assert_eq!(resp.text().await.unwrap(), "here");

            let seen = log.all();
            let body = r#"{"a":1}"#;
            let second = &seen[1];
            if status < 307 {
                assert_eq!(
                    seen.iter().map(summary).collect::<Vec<_>>(),
                    [s("POST", "/to", body), s("GET", "/echo", "")],
                    "{name} {status}"
                );
                assert!(second["headers"]["content-type"].is_null(), "{second}");
                assert!(second["headers"]["idempotency-key"].is_null(), "{second}");
            } else {
                assert_eq!(
                    seen.iter().map(summary).collect::<Vec<_>>(),
                    [s("POST", "/to", body), s("POST", "/echo", body)],
                    "{name} {status}"
                );
                assert_eq!(second["headers"]["content-type"], "application/json");
                assert_eq!(second["headers"]["idempotency-key"], "k-1", "the same key");
            }
        }

        // A HEAD stays a HEAD.
        log.clear();
        let resp = bounded(client.head(to(addr, 302, "/echo")).send())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let methods: Vec<_> = log.all().iter().map(|e| e["method"].clone()).collect();
        assert_eq!(methods, ["HEAD", "HEAD"], "{name}");

        // Other 3xx, and a redirect without Location, are answers.
        for status in [300, 304] {
            let resp = bounded(client.get(to(addr, status, "/echo")).send())
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), status, "{name}");
        }
    }
}

#[tokio::test]
async fn another_origin_sees_no_credentials_the_same_origin_does() {
    let (first, first_log) = serve().await;
    let (second, second_log) = serve().await;
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        first_log.clear();
        second_log.clear();
        let elsewhere = format!("http://{second}/echo");
        let resp = bounded(
            client
                .get(to(first, 307, &elsewhere))
                .bearer_auth("secret")
                .header("cookie", "session=1")
                .header("proxy-authorization", "Basic eA==")
                .header("x-kept", "yes")
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let sent = &first_log.all()[0]["headers"];
        assert_eq!(sent["authorization"], "Bearer secret", "{name}");
        let hop = &second_log.all()[0]["headers"];
        for dropped in ["authorization", "cookie", "proxy-authorization"] {
            assert!(hop[dropped].is_null(), "{name}: {dropped} in {hop}");
        }
        assert_eq!(hop["x-kept"], "yes", "{name}");

        // The same origin keeps them.
        first_log.clear();
        bounded(
            client
                .get(to(first, 302, "/echo"))
                .bearer_auth("secret")
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(
            first_log.all()[1]["headers"]["authorization"],
            "Bearer secret",
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_loop_is_stopped_at_the_limit_with_every_hops_attempts() {
    let (addr, log) = serve().await;
    let looping = format!("http://{addr}/loop?status=302");
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        log.clear();
        let err = bounded(client.get(&looping).send()).await.unwrap_err();
        let Error::Redirect(redirect) = &err else {
            panic!("{name}: a redirect error, got {err:?}")
        };
        assert_eq!(
            redirect.kind(),
            RedirectErrorKind::TooManyRedirects { limit: 10 }
        );
        assert_eq!(redirect.status(), StatusCode::FOUND);
        assert_eq!(redirect.location(), "/loop?status=302");
        assert_eq!(err.attempts().count(), 11, "{name}: every hop's record");
        assert_eq!(
            log.all().len(),
            11,
            "{name}: the 11th redirect not followed"
        );
        assert!(err.to_string().contains("more than 10 redirects"), "{err}");
    }

    // A chain of three redirects: ended by a limit of 2, followed to its end with 3.
    let chain = to(addr, 302, &to(addr, 307, &to(addr, 308, "/echo")));
    for (limit, answer) in [(2, None), (3, Some(StatusCode::OK))] {
        let client = Client::builder()
            .layer(quick())
            .redirect(RedirectPolicy::limited(limit))
            .build()
            .unwrap();
        log.clear();
        let sent = bounded(client.get(&chain).send()).await;
        assert_eq!(sent.as_ref().ok().map(|r| r.status()), answer, "{limit}");
        assert_eq!(log.all().len(), limit as usize + 1, "{limit}");
    }

    // With none, the first 302 is the answer.
    let client = Client::builder()
        .layer(quick())
        .redirect(RedirectPolicy::none())
        .build()
        .unwrap();
    let resp = bounded(client.get(&looping).send()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(resp.attempts().count(), 1);
}

#[tokio::test]
async fn a_streamed_body_goes_through_a_307_within_its_cap_and_not_beyond_it() {
    let (addr, log) = serve().await;
    let stream = |bytes: usize| {
        let chunks = std::iter::repeat_n(Bytes::from(vec![b'z'; 100]), bytes / 100);
        Body::wrap_stream_with_cap(
            futures_util::stream::iter(chunks.map(Ok::<_, std::io::Error>)),
            1000,
        )
    };
    for (name, client) in clients(|| Client::builder().layer(quick())) {
        log.clear();
        let resp = bounded(
            client
                .post(to(addr, 308, "/echo"))
                .idempotency_key("k-9")
                .body(stream(1000))
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let seen = log.all();
        assert_eq!(seen[1]["body"].as_str().map(str::len), Some(1000), "{name}");
        assert_eq!(seen[1]["headers"]["idempotency-key"], "k-9");

        log.clear();
        let err = bounded(
            client
                .post(to(addr, 307, "/echo"))
                .body(stream(1100))
                .send(),
        )
        .await
        .unwrap_err();
        let Error::Redirect(redirect) = &err else {
            panic!("{name}: a redirect error, got {err:?}")
        };
        assert_eq!(redirect.kind(), RedirectErrorKind::BodyNotReplayable);
        assert_eq!(err.attempts().count(), 1);
        assert_eq!(log.all().len(), 1, "{name}: the 307 was not followed");
    }
}

#[tokio::test]
async fn the_hops_share_the_first_ones_deadline() {
    let (addr, log) = serve().await;
    // Each hop takes 300 ms, the deadline is 1 s: ten hops would take 3 s.
    let slow = format!("http://{addr}/loop?status=307&delay_ms=300");
    let layer = || quick().deadline(Duration::from_secs(1));
    for (name, client) in clients(|| Client::builder().layer(layer())) {
        log.clear();
        let err = bounded(client.get(&slow).send()).await.unwrap_err();
        assert!(matches!(err, Error::DeadlineExceeded(_)), "{name}: {err:?}");
        let hops = log.all().len();
        assert!((3..=4).contains(&hops), "{name}: {hops} hops in 1 s");
        // Every hop answered but the last, cut off by the deadline.
        assert_eq!(err.attempts().count(), hops, "{name}: {err:?}");
    }
    // The request's own timeout is shared the same way.
    let client = Client::builder().layer(quick()).build().unwrap();
    log.clear();
    let err = bounded(client.get(&slow).timeout(Duration::from_millis(500)).send())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded(_)), "{err:?}");
    assert_eq!(log.all().len(), 2);
}

#[tokio::test]
async fn a_location_that_is_no_http_url_is_refused() {
    let (addr, _log) = serve().await;
    let client = Client::builder().layer(quick()).build().unwrap();
    let err = bounded(client.get(to(addr, 302, "ftp://127.0.0.1/file")).send())
        .await
        .unwrap_err();
    let Error::Redirect(redirect) = &err else {
        panic!("a redirect error, got {err:?}")
    };
    assert_eq!(redirect.kind(), RedirectErrorKind::InvalidLocation);
    assert_eq!(redirect.location(), "ftp://127.0.0.1/file");
}

#[tokio::test]
async fn https_to_http_is_refused_and_the_http_host_sees_nothing() {
    use courier::transport::tls;
    use courier_testkit::tls::{TestCa, TlsServer};
    let ca = TestCa::new();
    let server = TlsServer::start(ca.leaf(&["127.0.0.1"])).await.unwrap();
    let (plain, log) = serve().await;
    let config = || tls::client_config(Some(ca.der())).expect("trust anchors");
    let clients = [
        (
            "hyper",
            Client::builder()
                .layer(quick())
                .hyper(courier::transport::hyper_client_with_tls(config()))
                .build()
                .unwrap(),
        ),
        (
            "reqwest",
            Client::builder()
                .layer(quick())
                .reqwest(
                    courier::transport::reqwest_client_builder_with_tls(config())
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        ),
    ];
    for (name, client) in clients {
        // Followed over https first: the same server's answer to `/` is the agent.
        let to_https = server.url(&format!("/redirect?to={}", server.url("/")));
        let resp = bounded(client.get(&to_https).send()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{name}");
        let to_http = format!("http://{plain}/ok");
        let err = bounded(
            client
                .get(server.url(&format!("/redirect?to={to_http}")))
                .send(),
        )
        .await
        .unwrap_err();
        let Error::Redirect(redirect) = &err else {
            panic!("{name}: a redirect error, got {err:?}")
        };
        assert_eq!(
            redirect.kind(),
            RedirectErrorKind::InsecureRedirect,
            "{name}"
        );
        assert_eq!(redirect.location(), to_http, "{name}");
    }
    assert!(log.all().is_empty(), "the http host was never asked");
}

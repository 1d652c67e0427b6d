//! The cache against the fault server's `/conditional` on loopback, through a hyper-util client.

use bytes::Bytes;
use courier_cache::EtagCacheLayer;
use courier_core::CacheStatus;
use courier_faultserver::FaultServer;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Got {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    cache: CacheStatus,
}

async fn send<S, B>(svc: &mut S, method: Method, url: &str, body: &'static str) -> Got
where
    S: Service<Request<Full<Bytes>>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let response = svc.ready().await.unwrap().call(req).await.unwrap();
    let cache = response
        .extensions()
        .get::<CacheStatus>()
        .copied()
        .unwrap_or(CacheStatus::Bypass);
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(Into::into).unwrap().to_bytes();
    Got {
        status: parts.status,
        headers: parts.headers,
        body,
        cache,
    }
}

fn remaining(got: &Got) -> u32 {
    got.headers["x-ratelimit-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn bounded<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("the loopback test finishes in time")
}

#[tokio::test(flavor = "current_thread")]
async fn a_304_is_served_from_the_store_and_spends_no_quota() {
    bounded(async {
        let server = FaultServer::start().await.unwrap();
        let url = server.url_for("/conditional");
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut svc = EtagCacheLayer::new().layer(client.clone());

        let first = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(first.cache, CacheStatus::Miss);
        assert!(!first.body.is_empty());
        let quota = remaining(&first);

        let second = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(second.status, StatusCode::OK);
        assert_eq!(second.cache, CacheStatus::Revalidated);
        assert_eq!(
            second.body, first.body,
            "the 304 was answered with the first body"
        );
        assert_eq!(remaining(&second), quota, "a 304 spends no quota");
        assert_eq!(second.headers["etag"], first.headers["etag"]);

        let hits = server.hits("conditional");
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].header("if-none-match"), None);
        assert_eq!(
            hits[1].header("if-none-match"),
            first.headers["etag"].to_str().ok()
        );

        // POST /conditional changes it; through the cache it also invalidates the entry.
        let posted = send(&mut svc, Method::POST, &url, "{\"version\":\"new\"}").await;
        assert_eq!(posted.status, StatusCode::OK);
        assert_eq!(posted.cache, CacheStatus::Bypass);
        assert!(svc.store().expect("an active cache").is_empty());

        let third = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(third.status, StatusCode::OK);
        assert_eq!(third.cache, CacheStatus::Miss);
        assert_eq!(third.body, "{\"version\":\"new\"}");
        assert_eq!(remaining(&third), quota - 1);
        assert_eq!(
            server
                .hits("conditional")
                .last()
                .unwrap()
                .header("if-none-match"),
            None
        );

        // Changed behind the cache's back: the revalidation gets the new body in full.
        let mut plain = client.clone();
        let changed = send(&mut plain, Method::POST, &url, "changed elsewhere").await;
        assert_eq!(changed.status, StatusCode::OK);
        let fourth = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(fourth.cache, CacheStatus::Miss);
        assert_eq!(fourth.body, "changed elsewhere");
        assert!(
            server
                .hits("conditional")
                .last()
                .unwrap()
                .header("if-none-match")
                .is_some()
        );
        let fifth = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(fifth.cache, CacheStatus::Revalidated);
        assert_eq!(fifth.body, "changed elsewhere");

        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn revalidation_keeps_reading_after_the_quota_is_spent() {
    bounded(async {
        let server = FaultServer::start().await.unwrap();
        server.set_conditional_quota(1, Duration::from_secs(3600));
        let url = server.url_for("/conditional");
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut svc = EtagCacheLayer::new().layer(client.clone());

        let first = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(remaining(&first), 0);
        for _ in 0..5 {
            let again = send(&mut svc, Method::GET, &url, "").await;
            assert_eq!(
                (again.status, again.cache),
                (StatusCode::OK, CacheStatus::Revalidated)
            );
            assert_eq!(again.body, first.body);
        }
        // Without the cache the same read is refused.
        let mut plain = client;
        let refused = send(&mut plain, Method::GET, &url, "").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_fresh_entry_is_served_without_touching_the_server() {
    bounded(async {
        let server = FaultServer::start().await.unwrap();
        let url = server.url_for("/conditional?max_age=300");
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut svc = EtagCacheLayer::new().layer(client);
        let first = send(&mut svc, Method::GET, &url, "").await;
        let second = send(&mut svc, Method::GET, &url, "").await;
        assert_eq!(second.cache, CacheStatus::Hit);
        assert_eq!(second.body, first.body);
        assert_eq!(server.hits("conditional").len(), 1);
        server.shutdown().await;
    })
    .await;
}

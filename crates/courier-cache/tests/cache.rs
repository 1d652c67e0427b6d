//! The cache against a scripted upstream, on paused time.

mod common;

use bytes::Bytes;
use common::*;
use courier_cache::{CacheBody, EtagCache, EtagCacheLayer, MemoryStore};
use courier_core::{BoxError, CacheStatus};
use courier_testkit::body::{ChannelBody, ScriptedBody};
use courier_testkit::contract;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use std::time::Duration;
use tokio::time::advance;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/thing";

fn etag_200(etag: &str, body: &str) -> Result<Response<TestBody>, BoxError> {
    ok(
        &[
            ("etag", etag),
            ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ("x-ratelimit-remaining", "59"),
        ],
        body,
    )
}

#[tokio::test(start_paused = true)]
async fn second_get_is_revalidated_and_served_from_the_store() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(etag_200("\"v1\"", "hello"));
    let first = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(first.cache, CacheStatus::Miss);
    assert_eq!(first.body, "hello");
    assert!(mock.last().headers.get("if-none-match").is_none());

    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("x-ratelimit-remaining", "58"),
        ("content-length", "0"),
    ]));
    let second = send(&mut svc, get(URL)).await.unwrap();
    let seen = mock.last();
    assert_eq!(seen.headers["if-none-match"], "\"v1\"");
    assert_eq!(
        seen.headers["if-modified-since"],
        "Tue, 14 Nov 2023 22:00:00 GMT"
    );
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.cache, CacheStatus::Revalidated);
    assert_eq!(second.body, "hello");
    // RFC 9111 section 3.2: the 304's fields replace the stored ones, Content-Length excepted.
    assert_eq!(second.headers["x-ratelimit-remaining"], "58");
    assert_eq!(second.headers["content-length"], "5");

    // The entry was updated: the next revalidation carries the merged headers too.
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    let third = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(third.cache, CacheStatus::Revalidated);
    assert_eq!(third.headers["x-ratelimit-remaining"], "58");
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn fresh_by_max_age_is_served_without_a_request() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "fresh"));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );

    advance(Duration::from_secs(59)).await;
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert_eq!(hit.body, "fresh");
    assert_eq!(hit.headers["age"], "59");
    assert_eq!(mock.calls(), 1);

    advance(Duration::from_secs(2)).await;
    mock.push(ok(&[("cache-control", "max-age=60")], "again"));
    let miss = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        miss.cache,
        CacheStatus::Miss,
        "stale without validators: asked again"
    );
    assert_eq!(miss.body, "again");
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn fresh_by_expires_minus_date_counts_age() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let expires = date(t0() + Duration::from_secs(100));
    mock.push(ok(
        &[("expires", &expires), ("age", "30"), ("etag", "\"e\"")],
        "body",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    // Lifetime 100 s, already 30 s old: fresh for 70 s more.
    advance(Duration::from_secs(69)).await;
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert_eq!(hit.headers["age"], "99");
    assert_eq!(mock.calls(), 1);

    advance(Duration::from_secs(2)).await;
    mock.push(not_modified(&[("etag", "\"e\"")]));
    let revalidated = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(revalidated.cache, CacheStatus::Revalidated);
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn expires_is_read_on_the_servers_clock() {
    // The server's clock is an hour behind: Expires - Date is still 100 s of freshness... but
    // the apparent age makes the entry old at once, so the cache asks again.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let server_now = t0() - Duration::from_secs(3600);
    mock.push(Ok(Response::builder()
        .header("date", date(server_now))
        .header("expires", date(server_now + Duration::from_secs(100)))
        .header("etag", "\"s\"")
        .header("content-length", "1")
        .body(full("x"))
        .unwrap()));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "\"s\"")]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Revalidated
    );
}

#[tokio::test(start_paused = true)]
async fn always_revalidate_mode_asks_even_when_fresh() {
    let mock = Mock::new();
    let mut svc = layer().always_revalidate(true).layer(mock.service());
    mock.push(ok(
        &[("cache-control", "max-age=600"), ("etag", "\"a\"")],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "\"a\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn request_no_cache_revalidates_and_no_store_bypasses() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("cache-control", "max-age=600"), ("etag", "\"a\"")],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push(not_modified(&[("etag", "\"a\"")]));
    let got = send(
        &mut svc,
        req(Method::GET, URL, &[("cache-control", "no-cache")]),
    )
    .await
    .unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(mock.last().headers["if-none-match"], "\"a\"");

    mock.push(ok(
        &[("cache-control", "max-age=600"), ("etag", "\"b\"")],
        "not for the store",
    ));
    let got = send(
        &mut svc,
        req(Method::GET, URL, &[("cache-control", "no-store")]),
    )
    .await
    .unwrap();
    assert_eq!(got.cache, CacheStatus::Bypass);
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert_eq!(got.body, "not for the store");

    // The stored entry is untouched by the bypassed call.
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert_eq!(hit.body, "x");
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn response_no_store_is_not_stored_and_removes_the_entry() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "\"a\""), ("cache-control", "no-store")], "x"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(svc.store().expect("an active cache").is_empty());

    mock.push(etag_200("\"a\"", "x"));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(svc.store().expect("an active cache").len(), 1);
    // The server now says no-store: the entry goes.
    mock.push(ok(&[("etag", "\"b\""), ("cache-control", "no-store")], "y"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.body, "y");
    assert!(svc.store().expect("an active cache").is_empty());
    mock.push(etag_200("\"c\"", "z"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(mock.last().headers.get("if-none-match").is_none());
}

#[tokio::test(start_paused = true)]
async fn credentials_never_share_an_entry() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let fresh = || ok(&[("cache-control", "private, max-age=60")], "alice's");
    mock.push(fresh());
    let alice = || req(Method::GET, URL, &[("authorization", "Bearer alice")]);
    let bob = || req(Method::GET, URL, &[("authorization", "Bearer bob")]);
    assert_eq!(
        send(&mut svc, alice()).await.unwrap().cache,
        CacheStatus::Miss
    );
    let hit = send(&mut svc, alice()).await.unwrap();
    assert_eq!(
        hit.cache,
        CacheStatus::Hit,
        "private is stored by a private cache"
    );

    mock.push(ok(&[("cache-control", "private, max-age=60")], "bob's"));
    let got = send(&mut svc, bob()).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Miss);
    assert_eq!(got.body, "bob's");

    mock.push(ok(&[("cache-control", "max-age=60")], "anonymous"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.body, "anonymous");
    mock.push(ok(&[("cache-control", "max-age=60")], "cookie"));
    let got = send(&mut svc, req(Method::GET, URL, &[("cookie", "session=1")]))
        .await
        .unwrap();
    assert_eq!(got.body, "cookie");

    assert_eq!(send(&mut svc, alice()).await.unwrap().body, "alice's");
    assert_eq!(send(&mut svc, bob()).await.unwrap().body, "bob's");
    assert_eq!(send(&mut svc, get(URL)).await.unwrap().body, "anonymous");
    assert_eq!(mock.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn credential_headers_can_be_shared_on_purpose() {
    let mock = Mock::new();
    let mut svc = layer().credential_headers([]).layer(mock.service());
    // A shared cache stores an answer to a request with Authorization only when the response
    // allows it (RFC 9111 section 3.5): `public` does.
    mock.push(ok(&[("cache-control", "public, max-age=60")], "shared"));
    send(&mut svc, req(Method::GET, URL, &[("authorization", "a")]))
        .await
        .unwrap();
    let got = send(&mut svc, req(Method::GET, URL, &[("authorization", "b")]))
        .await
        .unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
}

#[tokio::test(start_paused = true)]
async fn vary_keeps_one_variant_per_request_field_combination() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let json = || req(Method::GET, URL, &[("accept", "application/json")]);
    let xml = || req(Method::GET, URL, &[("accept", "application/xml")]);
    let vary = |body: &str| ok(&[("cache-control", "max-age=60"), ("vary", "Accept")], body);

    mock.push(vary("{}"));
    assert_eq!(
        send(&mut svc, json()).await.unwrap().cache,
        CacheStatus::Miss
    );
    mock.push(vary("<x/>"));
    let got = send(&mut svc, xml()).await.unwrap();
    assert_eq!(
        got.cache,
        CacheStatus::Miss,
        "another Accept is another variant"
    );
    assert_eq!(got.body, "<x/>");

    let got = send(&mut svc, json()).await.unwrap();
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Hit, &b"{}"[..]));
    let got = send(&mut svc, xml()).await.unwrap();
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Hit, &b"<x/>"[..]));
    assert_eq!(mock.calls(), 2);

    // No Accept at all is a third combination.
    mock.push(vary("plain"));
    assert_eq!(send(&mut svc, get(URL)).await.unwrap().body, "plain");
    assert_eq!(
        svc.store()
            .expect("an active cache")
            .get(URL)
            .await
            .unwrap()
            .entries()
            .len(),
        3
    );
}

#[tokio::test(start_paused = true)]
async fn vary_star_is_never_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[
            ("cache-control", "max-age=60"),
            ("etag", "\"a\""),
            ("vary", "*"),
        ],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(svc.store().expect("an active cache").is_empty());
    mock.push(ok(&[("vary", "accept, *"), ("etag", "\"a\"")], "x"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(svc.store().expect("an active cache").is_empty());
    assert!(mock.last().headers.get("if-none-match").is_none());
}

#[tokio::test(start_paused = true)]
async fn weak_and_strong_validators_in_a_304() {
    // Stored weak, 304 strong with the same opaque tag: strong comparison fails (RFC 9111
    // section 4.3.4), nothing is updated, and the request is sent again without the
    // validators: its full answer is the caller's.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "W/\"1\""), ("x-v", "old")], "weak body"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "\"1\""), ("x-v", "new")]));
    mock.push(ok(&[("etag", "W/\"1\""), ("x-v", "old")], "weak body"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(mock.nth(1).headers["if-none-match"], "W/\"1\"");
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.cache, CacheStatus::Miss);
    assert_eq!(got.body, "weak body");

    // A weak 304 matches weakly: updated and served.
    mock.push(not_modified(&[("etag", "W/\"1\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(got.body, "weak body");
    assert_eq!(
        got.headers["x-v"], "old",
        "the mismatched 304 updated nothing"
    );

    // Stored strong, 304 weak with the same tag: weak comparison matches.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "\"2\"")], "strong body"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "W/\"2\"")]));
    assert_eq!(send(&mut svc, get(URL)).await.unwrap().body, "strong body");

    // A strong 304 naming another tag selects nothing: asked again.
    mock.push(not_modified(&[("etag", "\"3\"")]));
    mock.push(ok(&[("etag", "\"3\"")], "three"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status, got.cache, &got.body[..]),
        (StatusCode::OK, CacheStatus::Miss, &b"three"[..])
    );

    // Without an ETag, Last-Modified must be equal.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT")],
        "lm",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(mock.last().headers.get("if-modified-since").is_none());
    mock.push(not_modified(&[(
        "last-modified",
        "Tue, 14 Nov 2023 23:00:00 GMT",
    )]));
    mock.push(ok(
        &[("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT")],
        "lm",
    ));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );
    assert_eq!(
        mock.nth(1).headers["if-modified-since"],
        "Tue, 14 Nov 2023 22:00:00 GMT"
    );
    assert!(mock.last().headers.get("if-modified-since").is_none());
    mock.push(not_modified(&[(
        "last-modified",
        "Tue, 14 Nov 2023 22:00:00 GMT",
    )]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Revalidated
    );
}

#[tokio::test(start_paused = true)]
async fn a_304_without_an_entry_passes_through_untouched() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(not_modified(&[("etag", "\"z\""), ("x-mine", "1")]));
    let got = send(
        &mut svc,
        req(Method::GET, URL, &[("if-none-match", "\"z\"")]),
    )
    .await
    .unwrap();
    assert_eq!(got.status, StatusCode::NOT_MODIFIED);
    assert_eq!(got.cache, CacheStatus::Miss);
    assert_eq!(got.headers["x-mine"], "1");
    assert!(svc.store().expect("an active cache").is_empty());

    // With an entry, a caller's own conditional is left alone and its 304 is the caller's.
    mock.push(etag_200("\"a\"", "stored"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "\"old\"")]));
    let got = send(
        &mut svc,
        req(Method::GET, URL, &[("if-none-match", "\"old\"")]),
    )
    .await
    .unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "\"old\"");
    assert!(mock.last().headers.get("if-modified-since").is_none());
    assert_eq!(
        (got.status, got.cache),
        (StatusCode::NOT_MODIFIED, CacheStatus::Miss)
    );
    assert!(got.body.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_cap_streams_through_and_is_not_stored() {
    let mock = Mock::new();
    let mut svc = layer().max_entry_bytes(1024).layer(mock.service());
    let big = "x".repeat(2048);
    mock.push(ok(&[("etag", "\"big\"")], &big));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.body.len(), 2048);
    assert!(svc.store().expect("an active cache").is_empty());

    // Unknown length: streamed, not stored.
    let body = ScriptedBody::<BoxError>::chunks(["ab", "cd"]);
    mock.push(Ok(Response::builder()
        .header("etag", "\"u\"")
        .body(body.boxed())
        .unwrap()));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.body, "abcd");
    assert!(svc.store().expect("an active cache").is_empty());

    // Within the cap and of known length (size hint only): stored.
    let body = ScriptedBody::<BoxError>::chunks(["ab", "cd"]).exact_len(4);
    mock.push(Ok(Response::builder()
        .header("etag", "\"k\"")
        .body(body.boxed())
        .unwrap()));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(svc.store().expect("an active cache").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_fails_or_is_dropped_midway_is_never_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let failing = ScriptedBody::<BoxError>::chunks(["hello"]).error("connection reset".into());
    mock.push(Ok(Response::builder()
        .header("etag", "\"r\"")
        .header("content-length", "10")
        .body(failing.boxed())
        .unwrap()));
    let err = send(&mut svc, get(URL)).await.unwrap_err();
    assert!(err.to_string().contains("connection reset"));
    assert!(svc.store().expect("an active cache").is_empty());

    // Dropped after the first frame.
    let partial = ScriptedBody::<BoxError>::chunks(["hello", "world"]).exact_len(10);
    mock.push(Ok(Response::builder()
        .header("etag", "\"r\"")
        .body(partial.boxed())
        .unwrap()));
    let response = svc.ready().await.unwrap().call(get(URL)).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "hello");
    drop(body);
    assert!(svc.store().expect("an active cache").is_empty());

    // A consumer that keeps polling past the error still never gets it stored.
    let resumed = ScriptedBody::<BoxError>::chunks(["hello"])
        .error("reset".into())
        .data("world")
        .exact_len(10);
    mock.push(Ok(Response::builder()
        .header("etag", "\"r\"")
        .body(resumed.boxed())
        .unwrap()));
    let response = svc.ready().await.unwrap().call(get(URL)).await.unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().is_ok());
    assert!(body.frame().await.unwrap().is_err());
    assert!(body.frame().await.unwrap().is_ok());
    assert!(body.frame().await.is_none());
    assert!(svc.store().expect("an active cache").is_empty());

    mock.push(etag_200("\"r\"", "complete"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert_eq!(svc.store().expect("an active cache").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_body_streams_to_the_caller_while_it_is_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let (tx, body) = ChannelBody::<BoxError>::new();
    mock.push(Ok(Response::builder()
        .header("etag", "\"t\"")
        .body(body.exact_len(5).boxed())
        .unwrap()));
    tx.send(Ok(Bytes::from("hel"))).unwrap();
    // The response comes back before the body is complete: nothing is buffered up front.
    let response = svc.ready().await.unwrap().call(get(URL)).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "hel");
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "stored only once the body has ended"
    );
    tx.send(Ok(Bytes::from("lo"))).unwrap();
    drop(tx);
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "lo");
    let stored = svc
        .store()
        .expect("an active cache")
        .get(URL)
        .await
        .expect("stored at the end of the body");
    assert_eq!(stored.entries()[0].body(), "hello");
}

#[tokio::test(start_paused = true)]
async fn successful_unsafe_methods_invalidate_the_uri() {
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        mock.push(ok(&[("cache-control", "max-age=600")], "x"));
        send(&mut svc, get(URL)).await.unwrap();

        // A failed write leaves the entry.
        mock.push(respond(500, &[], "no"));
        let got = send(&mut svc, req(method.clone(), URL, &[])).await.unwrap();
        assert_eq!(got.cache, CacheStatus::Bypass);
        assert_eq!(
            send(&mut svc, get(URL)).await.unwrap().cache,
            CacheStatus::Hit
        );

        mock.push(respond(201, &[], "done"));
        send(&mut svc, req(method.clone(), URL, &[])).await.unwrap();
        assert!(
            svc.store().expect("an active cache").is_empty(),
            "{method} invalidated"
        );
        mock.push(ok(&[("cache-control", "max-age=600")], "new"));
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!((got.cache, &got.body[..]), (CacheStatus::Miss, &b"new"[..]));
    }
}

#[tokio::test(start_paused = true)]
async fn location_on_the_same_host_is_invalidated_too() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    for (url, body) in [
        ("http://api.example/things/1", "one"),
        ("http://api.example/things/2", "two"),
        ("http://other.example/things/1", "other"),
    ] {
        mock.push(ok(&[("cache-control", "max-age=600")], body));
        send(&mut svc, get(url)).await.unwrap();
    }
    mock.push(respond(
        201,
        &[
            ("location", "/things/1"),
            ("content-location", "http://other.example/things/1"),
        ],
        "",
    ));
    send(
        &mut svc,
        req(Method::POST, "http://api.example/things", &[]),
    )
    .await
    .unwrap();
    let store = svc.store().expect("an active cache");
    assert!(store.get("http://api.example/things/1").await.is_none());
    assert!(store.get("http://api.example/things/2").await.is_some());
    assert!(
        store.get("http://other.example/things/1").await.is_some(),
        "another host's entries are not ours to drop"
    );
}

#[tokio::test(start_paused = true)]
async fn stale_if_error_serves_the_entry_while_the_upstream_returns_503() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[
            ("cache-control", "max-age=10, stale-if-error=60"),
            ("etag", "\"s\""),
        ],
        "last good",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    advance(Duration::from_secs(30)).await;
    mock.push(respond(503, &[("retry-after", "5")], "down"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.cache, CacheStatus::Stale);
    assert_eq!(got.body, "last good");
    assert_eq!(got.headers["age"], "30");

    mock.push(Err("connect refused".into()));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Stale);

    // Past the window (10 s fresh + 60 s stale): the 503 comes back as it is.
    advance(Duration::from_secs(41)).await;
    mock.push(respond(503, &[], "down"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status, got.cache),
        (StatusCode::SERVICE_UNAVAILABLE, CacheStatus::Miss)
    );
    mock.push(Err("connect refused".into()));
    assert!(send(&mut svc, get(URL)).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_configured_stale_if_error_window_applies_without_the_directive() {
    let mock = Mock::new();
    let mut svc = layer()
        .stale_if_error(Some(Duration::from_secs(120)))
        .layer(mock.service());
    mock.push(ok(&[("etag", "\"s\"")], "last good"));
    send(&mut svc, get(URL)).await.unwrap();
    advance(Duration::from_secs(100)).await;
    mock.push(respond(502, &[], ""));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Stale
    );

    // must-revalidate forbids it.
    let mock = Mock::new();
    let mut svc = layer()
        .stale_if_error(Some(Duration::from_secs(120)))
        .layer(mock.service());
    mock.push(ok(
        &[("etag", "\"s\""), ("cache-control", "must-revalidate")],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(respond(502, &[], ""));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().status,
        StatusCode::BAD_GATEWAY
    );
}

#[tokio::test(start_paused = true)]
async fn head_is_answered_from_a_stored_get() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("cache-control", "max-age=10"), ("etag", "\"h\"")],
        "body!",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    let got = send(&mut svc, req(Method::HEAD, URL, &[])).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
    assert!(got.body.is_empty());
    assert_eq!(got.headers["content-length"], "5");
    assert_eq!(mock.calls(), 1);

    advance(Duration::from_secs(20)).await;
    mock.push(not_modified(&[("etag", "\"h\"")]));
    let got = send(&mut svc, req(Method::HEAD, URL, &[])).await.unwrap();
    assert_eq!(mock.last().method, Method::HEAD);
    assert_eq!(mock.last().headers["if-none-match"], "\"h\"");
    assert_eq!(
        (got.status, got.cache),
        (StatusCode::OK, CacheStatus::Revalidated)
    );
    assert!(got.body.is_empty());
}

#[tokio::test(start_paused = true)]
async fn only_200_is_stored_by_default() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    for status in [201, 203, 204, 404, 429] {
        mock.push(respond(
            status,
            &[("etag", "\"n\""), ("cache-control", "max-age=60")],
            "",
        ));
        send(&mut svc, get(URL)).await.unwrap();
        assert!(
            svc.store().expect("an active cache").is_empty(),
            "{status} was stored"
        );
    }
    let mock = Mock::new();
    let mut svc = layer()
        .statuses([StatusCode::OK, StatusCode::NOT_FOUND])
        .layer(mock.service());
    mock.push(respond(404, &[("cache-control", "max-age=60")], "gone"));
    send(&mut svc, get(URL)).await.unwrap();
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status, got.cache),
        (StatusCode::NOT_FOUND, CacheStatus::Hit)
    );
}

#[tokio::test(start_paused = true)]
async fn responses_without_validator_or_lifetime_are_not_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[], "plain"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(ok(&[("cache-control", "max-age=0")], "plain"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(svc.store().expect("an active cache").is_empty());
}

#[tokio::test(start_paused = true)]
async fn other_methods_and_ranges_bypass_the_cache() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "x"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(respond(206, &[], "x"));
    let got = send(&mut svc, req(Method::GET, URL, &[("range", "bytes=0-0")]))
        .await
        .unwrap();
    assert_eq!(got.cache, CacheStatus::Bypass);
    mock.push(respond(204, &[], ""));
    let got = send(&mut svc, req(Method::OPTIONS, URL, &[]))
        .await
        .unwrap();
    assert_eq!(got.cache, CacheStatus::Bypass);
    assert_eq!(svc.store().expect("an active cache").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_store() {
    let mock = Mock::new();
    let layer = layer();
    let mut a = layer.layer(mock.service());
    let mut b = a.clone();
    let mut c = layer.layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "x"));
    send(&mut a, get(URL)).await.unwrap();
    assert_eq!(
        send(&mut b, get(URL)).await.unwrap().cache,
        CacheStatus::Hit
    );
    assert_eq!(
        send(&mut c, get(URL)).await.unwrap().cache,
        CacheStatus::Hit
    );
    assert_eq!(layer.store_ref().len(), 1);
}

/// Memory: 10 000 distinct URLs of 10 KiB each never hold more than the cap, with one shard
/// (1 MiB) and with several (16 MiB).
#[tokio::test(start_paused = true)]
async fn ten_thousand_urls_never_exceed_the_cap() {
    for cap in [1024 * 1024, 16 * 1024 * 1024] {
        let mock = Mock::new();
        let layer = layer().capacity(cap);
        let mut svc = layer.layer(mock.service());
        let body = Bytes::from(vec![b'x'; 10 * 1024]);
        let mut max_weight = 0;
        for i in 0..10_000 {
            mock.push(Ok(Response::builder()
                .header("etag", format!("\"{i}\""))
                .header("content-length", body.len())
                .body(full(body.clone()))
                .unwrap()));
            let got = send(&mut svc, get(&format!("http://api.example/items/{i}")))
                .await
                .unwrap();
            assert_eq!(got.body.len(), 10 * 1024);
            let weight = svc.store().expect("an active cache").weight();
            assert!(
                weight <= cap,
                "weight {weight} over the cap {cap} after {i} inserts"
            );
            max_weight = max_weight.max(weight);
        }
        // The store was used, not merely refused everything.
        assert!(max_weight > cap / 2, "max weight {max_weight} of {cap}");
        // Weight counts the bodies: each entry weighs at least its 10 KiB.
        let kept = svc.store().expect("an active cache").len() as u64;
        assert!(kept >= cap / (20 * 1024), "{kept} entries kept of {cap}");
        assert!(svc.store().expect("an active cache").weight() >= kept * 10 * 1024);
    }
}

/// Contract: the inner instance that was made ready is the one called, for the requests the
/// cache looks up (GET) and those it passes by (POST) alike.
#[tokio::test(start_paused = true)]
async fn contract_calls_the_instance_made_ready() {
    let upstream =
        tower::service_fn(|_req: Request<()>| std::future::ready(ok(&[("etag", "\"c\"")], "ok")));
    let mut n = 0;
    let checked = contract::check(
        upstream,
        |inner| layer().layer(inner),
        || {
            n += 1;
            if n % 2 == 1 {
                get(URL)
            } else {
                req(Method::POST, URL, &[])
            }
        },
    )
    .await;
    // No body is read before the last answer, so nothing is stored; a GET made while the
    // previous GET's answer is unread sends its own request, as no one waited when that answer
    // came (see the crate's **Concurrency**).
    assert_eq!(checked.calls, contract::CALLS);
    for (n, response) in checked.responses.into_iter().enumerate() {
        let got = read(response).await.unwrap();
        if n % 2 == 0 {
            assert_eq!(got.body, "ok");
        } else {
            assert_eq!(got.cache, CacheStatus::Bypass);
        }
    }
}

/// A pass-through cache stores nothing and adds nothing: the same GET with an ETag and a
/// `max-age` goes up every time.
#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    courier_testkit::pass_through::check(EtagCache::pass_through).await;
    let off = EtagCache::pass_through(());
    assert!(off.is_pass_through() && off.store().is_none());
    let on = layer().layer(());
    assert!(!on.is_pass_through() && on.store().is_some());
}

#[test]
fn types_are_send_sync_static() {
    fn check<T: Send + Sync + 'static>() {}
    type Inner = tower::util::BoxCloneSyncService<Request<()>, Response<TestBody>, BoxError>;
    check::<EtagCacheLayer>();
    check::<EtagCache<Inner>>();
    type ReadySvc = tower::util::ServiceFn<
        fn(Request<()>) -> std::future::Ready<Result<Response<TestBody>, BoxError>>,
    >;
    check::<courier_cache::future::ResponseFuture<ReadySvc, ()>>();
    check::<CacheBody<TestBody>>();
    check::<MemoryStore>();
    fn check_send<T: Send + 'static>() {}
    check_send::<<EtagCache<Inner> as Service<Request<()>>>::Future>();
}

#[tokio::test(start_paused = true)]
async fn direct_constructor_uses_the_defaults() {
    let mock = Mock::new();
    let mut svc = EtagCache::new(mock.service(), EtagCacheLayer::new());
    // No Date: the system clock is not consulted for the age.
    mock.push(Ok(Response::builder()
        .header("cache-control", "max-age=60")
        .header("content-length", "1")
        .body(full("x"))
        .unwrap()));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Hit
    );
    let _ = svc.get_ref();
    let _ = svc.get_mut();
    let _ = svc.into_inner();
}

#[tokio::test(start_paused = true)]
async fn a_custom_store_is_used() {
    let store = TextStore::default();
    let mock = Mock::new();
    let mut svc = layer().store(store.clone()).layer(mock.service());
    mock.push(etag_200("\"m\"", "mapped"));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(courier_cache::CacheStore::len(&store), 1);
    mock.push(not_modified(&[("etag", "\"m\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"mapped"[..])
    );
    assert!(courier_cache::CacheStore::weight(&store) > 6);
}

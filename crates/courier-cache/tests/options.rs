//! A call's own `CallOptions::no_cache` through the cache, on paused time.

mod common;

use common::*;
use courier_core::{CacheStatus, CallOptions};
use http::{Method, Request};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/thing";

fn no_cache(mut req: Request<()>) -> Request<()> {
    CallOptions::new().no_cache().apply(&mut req);
    req
}

#[tokio::test(start_paused = true)]
async fn no_cache_bypasses_a_fresh_entry_and_leaves_it_as_it_was() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("cache-control", "max-age=60"), ("etag", "\"v1\"")],
        "stored",
    ));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );

    // Fresh, yet asked upstream as it is: no validators added.
    mock.push(ok(
        &[("cache-control", "max-age=60"), ("etag", "\"v2\"")],
        "upstream",
    ));
    let bypassed = send(&mut svc, no_cache(get(URL))).await.unwrap();
    assert_eq!(bypassed.cache, CacheStatus::Bypass);
    assert_eq!(bypassed.body, "upstream");
    assert_eq!(mock.calls(), 2);
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert!(mock.last().headers.get("if-modified-since").is_none());

    // Its answer was not stored: the entry is the one before, still fresh.
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert_eq!(hit.body, "stored");
    assert_eq!(mock.calls(), 2);

    // A HEAD too.
    mock.push(ok(&[], ""));
    let head = send(&mut svc, no_cache(req(Method::HEAD, URL, &[])))
        .await
        .unwrap();
    assert_eq!(head.cache, CacheStatus::Bypass);
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn no_cache_neither_waits_for_another_calls_request_nor_makes_others_wait() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    // A miss under way; a call with no_cache that comes meanwhile sends its own request.
    mock.push_delayed(Duration::from_secs(1), ok(&[("etag", "\"a\"")], "first"));
    mock.push(ok(&[("etag", "\"b\"")], "own"));
    let first = svc.ready().await.unwrap().call(get(URL));
    let second = svc.ready().await.unwrap().call(no_cache(get(URL)));
    let (first, second) =
        tokio::join!(async { read(first.await.unwrap()).await.unwrap() }, async {
            read(second.await.unwrap()).await.unwrap()
        },);
    assert_eq!(
        (first.cache, &first.body[..]),
        (CacheStatus::Miss, &b"first"[..])
    );
    assert_eq!(
        (second.cache, &second.body[..]),
        (CacheStatus::Bypass, &b"own"[..])
    );
    assert_eq!(mock.calls(), 2);

    // The other way round: a plain GET behind a call with no_cache leads a flight of its own.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push_delayed(Duration::from_secs(1), ok(&[("etag", "\"a\"")], "bypassed"));
    mock.push(ok(&[("etag", "\"b\"")], "plain"));
    let first = svc.ready().await.unwrap().call(no_cache(get(URL)));
    let second = svc.ready().await.unwrap().call(get(URL));
    let (first, second) =
        tokio::join!(async { read(first.await.unwrap()).await.unwrap() }, async {
            read(second.await.unwrap()).await.unwrap()
        },);
    assert_eq!(first.cache, CacheStatus::Bypass);
    assert_eq!(
        (second.cache, &second.body[..]),
        (CacheStatus::Miss, &b"plain"[..])
    );
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unsafe_method_with_no_cache_still_removes_the_entries_it_changed() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "stored"));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push(ok(&[], "changed"));
    let post = send(&mut svc, no_cache(req(Method::POST, URL, &[])))
        .await
        .unwrap();
    assert_eq!(post.cache, CacheStatus::Bypass);

    mock.push(ok(&[("cache-control", "max-age=60")], "new"));
    let after = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (after.cache, &after.body[..]),
        (CacheStatus::Miss, &b"new"[..])
    );
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn other_options_leave_the_cache_as_it_is() {
    let mock = Mock::new();
    let svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "stored"));
    send(&mut svc.clone(), get(URL)).await.unwrap();
    let mut req = get(URL);
    CallOptions::new()
        .attempts(1)
        .unwrap()
        .retry_safe(false)
        .apply(&mut req);
    let got = read(svc.oneshot(req).await.unwrap()).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
    assert_eq!(mock.calls(), 1);
}

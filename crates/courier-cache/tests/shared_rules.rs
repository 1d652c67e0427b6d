//! A cache shared between callers (no credential fingerprint, or an `Authorization` that is not
//! fingerprinted): what a 304 to one caller may leave for the others, HEAD included, the
//! directives meant for shared caches (`s-maxage`, `proxy-revalidate`), and what the store's
//! bound promises.

mod common;

use common::*;
use courier_cache::{EtagCacheLayer, MemoryStore};
use courier_core::CacheStatus;
use http::Method;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/thing";

/// A HEAD with an unfingerprinted `Authorization` whose 304 says `private` must not make the
/// shared entry private for the next caller (a GET already removed it).
#[tokio::test(start_paused = true)]
async fn a_private_304_to_a_head_with_authorization_is_not_stored() {
    for method in [Method::HEAD, Method::GET] {
        let mock = Mock::new();
        let mut svc = layer()
            .credential_headers([http::header::COOKIE])
            .layer(mock.service());
        mock.push(ok(
            &[("cache-control", "public, max-age=0"), ("etag", "\"a\"")],
            "shared",
        ));
        send(&mut svc, get(URL)).await.unwrap();
        mock.push(not_modified(&[
            ("etag", "\"a\""),
            ("cache-control", "private, max-age=600"),
            ("x-user", "bob"),
        ]));
        let bob = req(method.clone(), URL, &[("authorization", "Bearer bob")]);
        assert_eq!(
            send(&mut svc, bob).await.unwrap().cache,
            CacheStatus::Revalidated
        );
        assert!(
            svc.store().expect("an active cache").is_empty(),
            "{method}: the private update is not kept"
        );
    }
}

/// A 304 without `Cache-Control` to a request with an unfingerprinted `Authorization` does not
/// update an entry that is not `public`: its fields would reach other callers.
#[tokio::test(start_paused = true)]
async fn a_304_to_an_authorized_request_does_not_update_a_non_public_entry() {
    let mock = Mock::new();
    let mut svc = layer()
        .credential_headers([http::header::COOKIE])
        .layer(mock.service());
    mock.push(ok(&[("etag", "\"a\"")], "anon"));
    send(&mut svc, get(URL)).await.unwrap();

    let expires = date(t0() + Duration::from_secs(600));
    mock.push(not_modified(&[
        ("etag", "\"a\""),
        ("expires", &expires),
        ("x-user", "bob"),
    ]));
    let bob = req(Method::GET, URL, &[("authorization", "Bearer bob")]);
    let got = send(&mut svc, bob).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(got.headers["x-user"], "bob", "bob gets his own answer");

    mock.push(ok(&[("etag", "\"a\"")], "anon"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert!(
        got.headers.get("x-user").is_none(),
        "an anonymous caller got bob's 304 fields ({:?})",
        got.cache
    );
}

/// A caller waiting on another's revalidation is not answered with that caller's `private`
/// 304: it asks on its own.
#[tokio::test(start_paused = true)]
async fn a_follower_is_not_answered_with_a_private_304() {
    let mock = Mock::new();
    let mut svc = layer().credential_headers([]).layer(mock.service());
    mock.push(ok(
        &[("cache-control", "public, max-age=0"), ("etag", "\"v\"")],
        "stored",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push_delayed(
        Duration::from_secs(1),
        not_modified(&[
            ("etag", "\"v\""),
            ("cache-control", "private"),
            ("x-user", "leader"),
        ]),
    );
    mock.push(ok(&[("cache-control", "public, max-age=0")], "own"));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let (leader, follower) = tokio::join!(
        async { read(leader.await.unwrap()).await.unwrap() },
        async { read(follower.await.unwrap()).await.unwrap() }
    );
    assert_eq!(leader.headers["x-user"], "leader");
    assert!(
        follower.headers.get("x-user").is_none(),
        "the follower got the leader's private 304 ({:?})",
        follower.cache
    );
    assert_eq!(follower.body, "own");
    assert_eq!(mock.calls(), 3, "the follower asked on its own");
}

/// "A store holding at most `capacity` bytes", whatever the split into shards.
#[test]
fn a_memory_store_holds_at_most_its_capacity() {
    for asked in [(128 << 20) + 1, (64 << 20) + 15, 1 << 20, 1] {
        let store = MemoryStore::new(asked);
        assert!(store.capacity() <= asked, "{asked}: {}", store.capacity());
        assert!(
            store.capacity() + 16 > asked,
            "{asked}: rounded by less than the shards"
        );
    }
}

/// "Eight variants per URI at most; the oldest goes first": a variant too many for the store
/// drops the oldest, not every variant of the URI.
#[tokio::test(start_paused = true)]
async fn a_variant_too_many_for_the_store_drops_only_the_oldest() {
    let mock = Mock::new();
    let mut svc = layer().capacity(1 << 20).layer(mock.service());
    let big = "x".repeat(400_000);
    for lang in ["a", "b", "c"] {
        mock.push(ok(
            &[
                ("cache-control", "max-age=600"),
                ("vary", "accept-language"),
            ],
            &big,
        ));
        let got = send(
            &mut svc,
            req(Method::GET, URL, &[("accept-language", lang)]),
        )
        .await
        .unwrap();
        assert_eq!(got.cache, CacheStatus::Miss);
    }
    let got = send(&mut svc, req(Method::GET, URL, &[("accept-language", "c")]))
        .await
        .unwrap();
    assert_eq!(got.cache, CacheStatus::Hit, "the newest variant stays");
    assert_eq!(got.body.len(), 400_000);
    mock.push(ok(&[("cache-control", "max-age=600")], "refetched"));
    let got = send(&mut svc, req(Method::GET, URL, &[("accept-language", "a")]))
        .await
        .unwrap();
    assert_eq!(got.cache, CacheStatus::Miss, "the oldest went");
}

/// Whether the second GET of `url` is answered from the store without a request: the first is
/// answered with `headers`, the second with a 304 (or a body) if it goes upstream.
async fn served_without_asking(
    layer: courier_cache::EtagCacheLayer,
    headers: &[(&str, &str)],
) -> bool {
    let mock = Mock::new();
    let mut svc = layer.layer(mock.service());
    mock.push(ok(headers, "stored"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(ok(&[], "upstream"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache == CacheStatus::Hit, mock.calls() == 1);
    got.cache == CacheStatus::Hit
}

/// RFC 9111 section 5.2.2.10: a shared cache takes its freshness from `s-maxage`, over
/// `max-age` and `Expires`; a private cache ignores it.
#[tokio::test(start_paused = true)]
async fn a_shared_cache_takes_freshness_from_s_maxage() {
    let expires = date(t0() + Duration::from_secs(600));
    for (headers, shared_hit, private_hit) in [
        (
            vec![
                ("cache-control", "max-age=600, s-maxage=0"),
                ("etag", "\"a\""),
            ],
            false,
            true,
        ),
        (
            vec![("cache-control", "s-maxage=0"), ("expires", &expires)],
            false,
            true,
        ),
        (
            vec![
                ("cache-control", "max-age=0, s-maxage=600"),
                ("etag", "\"a\""),
            ],
            true,
            false,
        ),
        (
            vec![
                ("cache-control", "max-age=600, s-maxage=60"),
                ("age", "120"),
            ],
            false,
            true,
        ),
        // A lifetime from s-maxage alone makes a response storable, in a shared cache only.
        (vec![("cache-control", "s-maxage=600")], true, false),
        (vec![("cache-control", "max-age=600")], true, true),
    ] {
        let shared = served_without_asking(layer().credential_headers([]), &headers).await;
        assert_eq!(shared, shared_hit, "shared: {headers:?}");
        let private = served_without_asking(layer(), &headers).await;
        assert_eq!(private, private_hit, "private: {headers:?}");
    }
}

/// A request with an `Authorization` that is not fingerprinted is answered as by a shared
/// cache: `s-maxage` decides; without `Authorization` the same cache reads `max-age`.
#[tokio::test(start_paused = true)]
async fn s_maxage_decides_for_an_unfingerprinted_authorization() {
    let mock = Mock::new();
    let mut svc = layer()
        .credential_headers([http::header::COOKIE])
        .layer(mock.service());
    let bob = || req(Method::GET, URL, &[("authorization", "Bearer bob")]);
    mock.push(ok(
        &[
            ("cache-control", "public, max-age=600, s-maxage=0"),
            ("etag", "\"a\""),
        ],
        "stored",
    ));
    send(&mut svc, bob()).await.unwrap();
    mock.push(not_modified(&[("etag", "\"a\"")]));
    let got = send(&mut svc, bob()).await.unwrap();
    assert_eq!(
        (got.cache, mock.calls()),
        (CacheStatus::Revalidated, 2),
        "s-maxage=0 was not honoured for a shared answer"
    );
    assert_eq!(mock.last().headers["if-none-match"], "\"a\"");
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!((got.cache, mock.calls()), (CacheStatus::Hit, 2));
}

/// Stores an answer with `cache_control`, then asks again two minutes later while the upstream
/// answers 503: what the caller gets.
async fn after_an_outage(layer: EtagCacheLayer, cache_control: &str) -> Got {
    let mock = Mock::new();
    let mut svc = layer.layer(mock.service());
    mock.push(ok(
        &[("cache-control", cache_control), ("etag", "\"a\"")],
        "stored",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    tokio::time::advance(Duration::from_secs(120)).await;
    mock.push(respond(503, &[], "down"));
    send(&mut svc, get(URL)).await.unwrap()
}

/// RFC 9111 sections 5.2.2.8 and 5.2.2.10: `proxy-revalidate` and `s-maxage` forbid a shared
/// cache to serve the response stale (the configured `stale_if_error` window included); a
/// private cache ignores both.
#[tokio::test(start_paused = true)]
async fn proxy_revalidate_and_s_maxage_forbid_stale_answers_in_a_shared_cache() {
    for cache_control in [
        "max-age=60, proxy-revalidate",
        "max-age=60, Proxy-Revalidate",
        "s-maxage=60, max-age=60",
    ] {
        for (shared, want) in [(true, CacheStatus::Miss), (false, CacheStatus::Stale)] {
            let layer = layer().stale_if_error(Some(Duration::from_secs(600)));
            let layer = if shared {
                layer.credential_headers([])
            } else {
                layer
            };
            let got = after_an_outage(layer, cache_control).await;
            assert_eq!(got.cache, want, "{cache_control}, shared: {shared}");
            if !shared {
                assert_eq!(got.body, "stored");
            }
        }
    }
    // Only the directive itself counts: not an extension's quoted value naming it.
    let layer = layer()
        .stale_if_error(Some(Duration::from_secs(600)))
        .credential_headers([]);
    assert_eq!(
        after_an_outage(layer, "max-age=60, ext=\"a, proxy-revalidate\"")
            .await
            .cache,
        CacheStatus::Stale
    );
}

/// `must-revalidate`, `no-cache` and, where the cache is shared, `proxy-revalidate` and
/// `s-maxage` forbid a stale answer even when the response says `stale-if-error` itself
/// (RFC 9111 section 4.2.4).
#[tokio::test(start_paused = true)]
async fn an_own_stale_if_error_does_not_lift_a_prohibition() {
    let cases = [
        ("max-age=60, proxy-revalidate, stale-if-error=600", true),
        ("s-maxage=60, stale-if-error=600", true),
        ("max-age=60, must-revalidate, stale-if-error=600", false),
        ("max-age=60, must-revalidate, stale-if-error=600", true),
        ("max-age=60, no-cache, stale-if-error=600", false),
    ];
    for (cache_control, shared) in cases {
        let layer = if shared {
            layer().credential_headers([])
        } else {
            layer()
        };
        let got = after_an_outage(layer, cache_control).await;
        assert_eq!(
            (got.status.as_u16(), got.cache),
            (503, CacheStatus::Miss),
            "{cache_control} (shared: {shared}): served stale"
        );
    }
    // Without a prohibition, the response's own window still holds.
    let got = after_an_outage(layer(), "max-age=60, stale-if-error=600").await;
    assert_eq!((got.status.as_u16(), got.cache), (200, CacheStatus::Stale));
}

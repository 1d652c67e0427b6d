//! Revalidation: how a 304 updates the stored entry it selects (RFC 9111 sections 3.2 and
//! 4.3.4), on paused time.

mod common;

use common::*;
use courier_core::CacheStatus;
use http::{Method, StatusCode};
use tower::Layer;

const URL: &str = "http://api.example/thing";

#[tokio::test(start_paused = true)]
async fn a_304_replaces_each_named_field_except_content_length_and_hop_by_hop_ones() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[
            ("etag", "\"v1\""),
            ("cache-control", "no-cache"),
            ("x-one", "1"),
            ("x-multi", "a"),
            ("x-multi", "b"),
            ("x-kept", "k"),
        ],
        "hello",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("cache-control", "no-cache"),
        ("x-one", "2"),
        ("x-multi", "c"),
        ("x-new", "n1"),
        ("x-new", "n2"),
        ("content-length", "0"),
        ("transfer-encoding", "chunked"),
        ("keep-alive", "timeout=5"),
        ("upgrade", "h2c"),
    ]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(got.body, "hello");
    let values = |name: &str| -> Vec<String> {
        got.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(values("x-one"), ["2"]);
    assert_eq!(values("x-multi"), ["c"], "every stored value is replaced");
    assert_eq!(values("x-new"), ["n1", "n2"]);
    assert_eq!(values("x-kept"), ["k"]);
    assert_eq!(values("content-length"), ["5"]);
    assert_eq!(values("etag"), ["\"v1\""]);
    assert_eq!(values("cache-control"), ["no-cache"]);
    for hop in ["transfer-encoding", "keep-alive", "upgrade"] {
        assert!(got.headers.get(hop).is_none(), "{hop} is not stored");
    }

    // The stored entry holds the update: the next answer is built from it.
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    let again = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(again.cache, CacheStatus::Revalidated);
    assert_eq!(again.headers, got.headers);
}

#[tokio::test(start_paused = true)]
async fn a_304_that_changes_cache_control_changes_freshness() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "no-cache")],
        "a",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    // The same directives: still revalidated every time.
    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("cache-control", "no-cache"),
    ]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Revalidated
    );
    // No Cache-Control in the 304: the stored one stays.
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Revalidated
    );
    assert_eq!(mock.calls(), 3);

    // New directives: the entry is fresh for a minute.
    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("cache-control", "max-age=60"),
    ]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Revalidated
    );
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit);
    assert_eq!(hit.headers["cache-control"], "max-age=60");
    assert_eq!(mock.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_304_with_no_store_serves_the_body_once_and_drops_the_entry() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "no-cache")],
        "a",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("cache-control", "no-store"),
    ]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"a"[..])
    );

    mock.push(ok(&[("etag", "\"v2\"")], "b"));
    let next = send(&mut svc, get(URL)).await.unwrap();
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert_eq!((next.cache, &next.body[..]), (CacheStatus::Miss, &b"b"[..]));
}

#[tokio::test(start_paused = true)]
async fn an_unparsable_entity_tag_is_no_validator_but_last_modified_still_is() {
    const LM: &str = "Tue, 14 Nov 2023 22:00:00 GMT";
    // A list: no one tag to send back.
    const GARBAGE: &str = "\"a\", \"b\"";
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[
            ("etag", GARBAGE),
            ("last-modified", LM),
            ("cache-control", "no-cache"),
        ],
        "a",
    ));
    send(&mut svc, get(URL)).await.unwrap();

    // The same unparsable tag: Last-Modified decides.
    mock.push(not_modified(&[("etag", GARBAGE), ("last-modified", LM)]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    let seen = mock.last();
    assert!(seen.headers.get("if-none-match").is_none());
    assert_eq!(seen.headers["if-modified-since"], LM);
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(got.headers["etag"], GARBAGE);

    // Another date selects nothing: the request is sent again, its full answer the caller's.
    let stored = || {
        ok(
            &[
                ("etag", GARBAGE),
                ("last-modified", LM),
                ("cache-control", "no-cache"),
            ],
            "a",
        )
    };
    mock.push(not_modified(&[
        ("etag", GARBAGE),
        ("last-modified", "Tue, 14 Nov 2023 23:00:00 GMT"),
    ]));
    mock.push(stored());
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status, got.cache, &got.body[..]),
        (StatusCode::OK, CacheStatus::Miss, &b"a"[..])
    );
    assert_eq!(mock.calls(), 4);

    // A valid tag never matches a stored entry without one.
    mock.push(not_modified(&[("etag", "\"x\""), ("last-modified", LM)]));
    mock.push(stored());
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(mock.nth(4).headers["if-modified-since"], LM);
    assert_eq!(
        (got.status, got.cache, mock.calls()),
        (StatusCode::OK, CacheStatus::Miss, 6)
    );
}

#[tokio::test(start_paused = true)]
async fn a_304_with_a_new_tag_for_the_same_representation_updates_the_validator() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "no-cache")],
        "a",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    // Weakly equal: selected, and the stored field becomes the weak one.
    mock.push(not_modified(&[("etag", "W/\"v1\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(got.headers["etag"], "W/\"v1\"");
    mock.push(not_modified(&[("etag", "W/\"v1\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "W/\"v1\"");
    assert_eq!(got.cache, CacheStatus::Revalidated);
    // Now stored weak: a strong 304 for the same tag no longer selects it (the request is
    // sent again without the validator, and its full answer is the caller's).
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    mock.push(ok(&[("etag", "\"v1\"")], "b"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status, got.cache, &got.body[..]),
        (StatusCode::OK, CacheStatus::Miss, &b"b"[..])
    );
}

#[tokio::test(start_paused = true)]
async fn vary_reads_the_request_as_sent_with_the_conditionals_the_cache_added() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let accept = |v: &str| req(Method::GET, URL, &[("accept", v)]);
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "no-cache")],
        "a",
    ));
    send(&mut svc, accept("text/plain")).await.unwrap();

    // The revalidation gets a full answer varying on the caller's field: stored for it.
    mock.push(ok(&[("etag", "\"v2\""), ("vary", "accept")], "b"));
    let got = send(&mut svc, accept("text/plain")).await.unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "\"v1\"");
    assert_eq!(got.cache, CacheStatus::Miss);
    mock.push(not_modified(&[("etag", "\"v2\"")]));
    let got = send(&mut svc, accept("text/plain")).await.unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "\"v2\"");
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"b"[..])
    );

    // A full answer varying on the conditional the cache added: stored for that value, which
    // a caller's request without it does not select.
    mock.push(ok(&[("etag", "\"v3\""), ("vary", "if-none-match")], "c"));
    let got = send(&mut svc, accept("text/plain")).await.unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "\"v2\"");
    assert_eq!(got.cache, CacheStatus::Miss);
    mock.push(ok(&[("etag", "\"v4\"")], "d"));
    let got = send(&mut svc, accept("text/plain")).await.unwrap();
    assert!(mock.last().headers.get("if-none-match").is_none());
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Miss, &b"d"[..]));
}

/// An upstream as httpbin's `/etag/{etag}` behaves: `ETag: abc`, unquoted, and a 304 (with the
/// same field) when `If-None-Match` names it; it records each `If-None-Match` it sees.
fn bare_tag_server(
    seen: std::sync::Arc<std::sync::Mutex<Vec<Option<http::HeaderValue>>>>,
) -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<TestBody>,
    Error = courier_core::BoxError,
    Future = impl Future<Output = Answer> + Send,
> + Clone
+ Send {
    tower::service_fn(move |req: http::Request<()>| {
        let if_none_match = req.headers().get("if-none-match").cloned();
        seen.lock().unwrap().push(if_none_match.clone());
        async move {
            match if_none_match {
                Some(v)
                    if v.as_bytes()
                        .split(|&b| b == b',')
                        .any(|t| t.trim_ascii() == b"abc") =>
                {
                    not_modified(&[("etag", "abc")])
                }
                _ => ok(&[("etag", "abc")], "hello"),
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn an_unquoted_entity_tag_is_sent_back_verbatim_and_its_304_serves_the_stored_body() {
    let seen = std::sync::Arc::default();
    let mut svc = layer().layer(bare_tag_server(std::sync::Arc::clone(&seen)));
    let first = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (first.cache, &first.body[..]),
        (CacheStatus::Miss, &b"hello"[..])
    );

    for _ in 0..2 {
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!(
            (got.status, got.cache, &got.body[..]),
            (StatusCode::OK, CacheStatus::Revalidated, &b"hello"[..])
        );
        assert_eq!(got.headers["etag"], "abc");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(seen[0].is_none());
    for sent in &seen[1..] {
        assert_eq!(sent.as_ref().unwrap(), "abc", "sent back as it came");
    }
}

#[tokio::test(start_paused = true)]
async fn a_304_selects_an_unquoted_tag_only_by_the_same_unquoted_tag_or_by_none() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "abc"), ("cache-control", "no-cache")], "a"));
    send(&mut svc, get(URL)).await.unwrap();

    // Without any validator: the entry the request nominated.
    mock.push(not_modified(&[]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(mock.last().headers["if-none-match"], "abc");
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"a"[..])
    );

    // Quoted, weak, with `W/` or another tag: another representation. The request is sent
    // again without the validator, and its full answer is the caller's.
    for other in ["\"abc\"", "W/\"abc\"", "W/abc", "abd"] {
        let calls = mock.calls();
        mock.push(not_modified(&[("etag", other)]));
        mock.push(ok(&[("etag", "abc"), ("cache-control", "no-cache")], "b"));
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!(mock.nth(calls).headers["if-none-match"], "abc", "{other}");
        assert!(
            mock.last().headers.get("if-none-match").is_none(),
            "{other}"
        );
        assert_eq!(
            (got.status, got.cache, &got.body[..]),
            (StatusCode::OK, CacheStatus::Miss, &b"b"[..]),
            "{other}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_entity_tag_that_is_no_tag_even_unquoted_is_never_sent() {
    for garbage in ["", "*", "a b", "a, b", "\"abc", "abc\"", "a\"b", "W/\"abc"] {
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        mock.push(ok(&[("etag", garbage), ("cache-control", "no-cache")], "a"));
        send(&mut svc, get(URL)).await.unwrap();
        mock.push(ok(&[("etag", garbage), ("cache-control", "no-cache")], "b"));
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert!(
            mock.last().headers.get("if-none-match").is_none(),
            "{garbage:?}"
        );
        assert_eq!(
            (got.cache, &got.body[..]),
            (CacheStatus::Miss, &b"b"[..]),
            "{garbage:?}"
        );
    }
}

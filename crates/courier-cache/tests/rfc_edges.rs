//! RFC 9110 / 9111 edge cases: obs-text in fields, unknown unsafe methods, short bodies, huge
//! lengths, non-UTF-8 `Vary` values, late 304s and overflowing ages.

mod common;

use bytes::Bytes;
use common::*;
use courier_core::{BoxError, CacheStatus};
use courier_testkit::body::ScriptedBody;
use http::{HeaderValue, Method, Request, Response};
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::time::Duration;
use tower::Layer;

const URL: &str = "http://api.example/thing";

#[tokio::test(start_paused = true)]
async fn no_store_next_to_obs_text_is_still_no_store() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let mut response = ok(&[("etag", "\"a\"")], "secret").unwrap();
    response.headers_mut().insert(
        "cache-control",
        HeaderValue::from_bytes(b"no-store, ext=\"caf\xe9\"").unwrap(),
    );
    mock.push(Ok(response));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "a no-store response was stored because its Cache-Control is not visible ASCII"
    );
}

#[tokio::test(start_paused = true)]
async fn request_no_cache_next_to_obs_text_still_revalidates() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("cache-control", "max-age=600"), ("etag", "\"a\"")],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    let mut request = get(URL);
    request.headers_mut().insert(
        "cache-control",
        HeaderValue::from_bytes(b"no-cache, ext=\"\xe9\"").unwrap(),
    );
    mock.push(not_modified(&[("etag", "\"a\"")]));
    let got = send(&mut svc, request).await.unwrap();
    assert_eq!(
        got.cache,
        CacheStatus::Revalidated,
        "request no-cache ignored"
    );
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn unsafe_extension_methods_invalidate_the_uri() {
    for method in ["PROPPATCH", "MOVE", "PURGE"] {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        mock.push(ok(&[("cache-control", "max-age=600")], "old"));
        send(&mut svc, get(URL)).await.unwrap();
        mock.push(respond(200, &[], "changed"));
        send(&mut svc, req(method.clone(), URL, &[])).await.unwrap();
        mock.push(ok(&[("cache-control", "max-age=600")], "new"));
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!(
            (got.cache, &got.body[..]),
            (CacheStatus::Miss, &b"new"[..]),
            "{method} left the old entry in place"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_shorter_than_its_content_length_is_not_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let short = ScriptedBody::<BoxError>::chunks(["hello"]);
    mock.push(Ok(Response::builder()
        .header("cache-control", "max-age=600")
        .header("content-length", "10")
        .body(short.boxed())
        .unwrap()));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(ok(&[("cache-control", "max-age=600")], "helloworld"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.headers["content-length"], "10");
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Miss, &b"helloworld"[..]),
        "a truncated body was stored and served as a hit"
    );
}

#[tokio::test(start_paused = true)]
async fn huge_content_length_with_an_uncapped_entry_size_does_not_panic() {
    let mock = Mock::new();
    let mut svc = layer().max_entry_bytes(usize::MAX).layer(mock.service());
    let body = ScriptedBody::<BoxError>::chunks(["hello"]);
    mock.push(Ok(Response::builder()
        .header("etag", "\"a\"")
        .header("content-length", "18446744073709551615")
        .body(body.boxed())
        .unwrap()));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.body, "hello");
}

#[tokio::test(start_paused = true)]
async fn vary_does_not_confuse_distinct_non_utf8_values() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let who = |name: &[u8]| {
        let mut r: Request<()> = get(URL);
        r.headers_mut()
            .insert("x-user", HeaderValue::from_bytes(name).unwrap());
        r
    };
    let vary = |body: &str| {
        ok(
            &[("cache-control", "max-age=600"), ("vary", "x-user")],
            body,
        )
    };
    mock.push(vary("for M\u{fc}ller"));
    send(&mut svc, who(b"M\xfcller")).await.unwrap();
    mock.push(vary("for M\u{e4}ller"));
    let got = send(&mut svc, who(b"M\xe4ller")).await.unwrap();
    assert_eq!(
        (got.cache, std::str::from_utf8(&got.body).unwrap()),
        (CacheStatus::Miss, "for M\u{e4}ller"),
        "another caller's variant was served"
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_304_does_not_resurrect_an_invalidated_entry() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "max-age=600")],
        "before",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    tokio::time::advance(Duration::from_secs(601)).await;
    mock.push_delayed(Duration::from_secs(10), not_modified(&[("etag", "\"v1\"")]));
    let mut other = svc.clone();
    let revalidation = tokio::spawn(async move { send(&mut other, get(URL)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(mock.calls(), 2, "the revalidation is in flight");
    mock.push(respond(201, &[], "created"));
    send(&mut svc, req(Method::POST, URL, &[])).await.unwrap();
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "the POST invalidated the URI"
    );
    let late = revalidation.await.unwrap();
    assert_eq!(late.body, "before");
    mock.push(ok(
        &[("etag", "\"v2\""), ("cache-control", "max-age=600")],
        "after",
    ));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Miss, &b"after"[..]),
        "the pre-POST body is served as fresh after the invalidation"
    );
}

#[tokio::test(start_paused = true)]
async fn an_obs_text_etag_is_still_used_for_revalidation() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let mut response = ok(&[], "x").unwrap();
    response
        .headers_mut()
        .insert("etag", HeaderValue::from_bytes(b"\"caf\xe9\"").unwrap());
    mock.push(Ok(response));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        svc.store().expect("an active cache").len(),
        1,
        "stored for its validator"
    );
    let mut again = not_modified(&[]).unwrap();
    again
        .headers_mut()
        .insert("etag", HeaderValue::from_bytes(b"\"caf\xe9\"").unwrap());
    mock.push(Ok(again));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        mock.last()
            .headers
            .get("if-none-match")
            .map(|v| v.as_bytes().to_vec()),
        Some(b"\"caf\xe9\"".to_vec()),
        "the stored validator was not sent"
    );
    assert_eq!(got.cache, CacheStatus::Revalidated);
}

#[tokio::test(start_paused = true)]
async fn an_overflowing_age_is_infinitely_old_not_zero() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(
        &[
            ("cache-control", "max-age=600"),
            ("age", "99999999999999999999"),
        ],
        "old",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(ok(&[("cache-control", "max-age=600")], "new"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Miss, &b"new"[..]),
        "a response older than 2^31 s was served as fresh"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_shorter_than_its_exact_size_hint_is_not_stored() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let short = ScriptedBody::<BoxError>::chunks(["hello"]).exact_len(10);
    mock.push(Ok(Response::builder()
        .header("cache-control", "max-age=600")
        .body(short.boxed())
        .unwrap()));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "a truncated body was stored"
    );
}

#[tokio::test(start_paused = true)]
async fn a_304_naming_another_obs_text_tag_does_not_answer_with_the_stored_body() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    let mut response = ok(&[], "x").unwrap();
    response
        .headers_mut()
        .insert("etag", HeaderValue::from_bytes(b"\"caf\xe9\"").unwrap());
    mock.push(Ok(response));
    send(&mut svc, get(URL)).await.unwrap();
    // The same text once both are read lossily, other bytes.
    let mut other = not_modified(&[]).unwrap();
    other
        .headers_mut()
        .insert("etag", HeaderValue::from_bytes(b"\"caf\xe8\"").unwrap());
    mock.push(Ok(other));
    // It selects nothing: the request is sent again, and its answer is the caller's.
    mock.push(ok(&[], "y"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.status.as_u16(), got.cache, &got.body[..]),
        (200, CacheStatus::Miss, &b"y"[..])
    );
}

#[tokio::test(start_paused = true)]
async fn a_cache_shared_by_fingerprinting_nothing_stores_no_private_response() {
    let mock = Mock::new();
    let shared = layer().credential_headers([]);
    let mut svc = shared.layer(mock.service());
    mock.push(ok(&[("cache-control", "private, max-age=600")], "mine"));
    send(&mut svc, get(URL)).await.unwrap();
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "a shared cache stored a private response"
    );

    // A private cache (the default) stores it.
    let mut own = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "private, max-age=600")], "mine"));
    send(&mut own, get(URL)).await.unwrap();
    assert_eq!(own.store().expect("an active cache").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_shared_cache_stores_answers_to_authorized_requests_only_when_allowed() {
    let authorized = || req(Method::GET, URL, &[("authorization", "Bearer a")]);
    for (cache_control, stored) in [
        ("max-age=600", false),
        ("private, max-age=600, must-revalidate", false),
        ("public, max-age=600", true),
        ("s-maxage=600, max-age=600", true),
        ("must-revalidate, max-age=600", true),
    ] {
        let mock = Mock::new();
        let mut svc = layer().credential_headers([]).layer(mock.service());
        mock.push(ok(&[("cache-control", cache_control)], "x"));
        send(&mut svc, authorized()).await.unwrap();
        assert_eq!(
            svc.store().expect("an active cache").len(),
            usize::from(stored),
            "{cache_control}"
        );
    }
    // Fingerprinting only Cookie leaves Authorization unseparated: the same rules apply.
    let mock = Mock::new();
    let mut svc = layer()
        .credential_headers([http::header::COOKIE])
        .layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=600")], "x"));
    send(&mut svc, authorized()).await.unwrap();
    assert!(svc.store().expect("an active cache").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_304_making_an_entry_private_removes_it_from_a_shared_cache() {
    let mock = Mock::new();
    let mut svc = layer().credential_headers([]).layer(mock.service());
    mock.push(ok(&[("etag", "\"a\"")], "x"));
    send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(svc.store().expect("an active cache").len(), 1);
    mock.push(not_modified(&[
        ("etag", "\"a\""),
        ("cache-control", "private"),
    ]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"x"[..])
    );
    assert!(
        svc.store().expect("an active cache").is_empty(),
        "a shared cache kept a private response"
    );
}

#[tokio::test(start_paused = true)]
async fn a_304_without_date_is_aged_from_when_it_arrived() {
    let mock = Mock::new();
    let clock = courier_core::ManualClock::new(t0());
    let mut svc = courier_cache::EtagCacheLayer::new()
        .wall_clock(clock.clone())
        .layer(mock.service());
    mock.push(ok(
        &[("etag", "\"a\""), ("cache-control", "max-age=60")],
        "x",
    ));
    send(&mut svc, get(URL)).await.unwrap();
    let later = Duration::from_secs(120);
    tokio::time::advance(later).await;
    clock.advance(later);
    let undated = Response::builder()
        .status(304)
        .header("etag", "\"a\"")
        .body(full(""))
        .unwrap();
    mock.push(Ok(undated));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    // Fresh again for 60 s from the 304, not aged by the first response's Date.
    tokio::time::advance(Duration::from_secs(10)).await;
    clock.advance(Duration::from_secs(10));
    mock.push(not_modified(&[("etag", "\"a\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!((got.cache, mock.calls()), (CacheStatus::Hit, 2));
}

/// RFC 9110 section 4.2.3: a URI with its scheme's default port written out (or an empty port)
/// names the same resource as one without, in every store; and an unsafe method on one spelling
/// invalidates the entry stored under the other (RFC 9111 section 4.4).
#[tokio::test(start_paused = true)]
async fn an_explicit_default_port_names_the_same_resource() {
    let stores: [(&str, courier_cache::EtagCacheLayer); 2] = [
        ("memory store", layer()),
        ("text store", layer().store(TextStore::default())),
    ];
    for (name, layer) in stores {
        for (stored, same) in [
            ("http://api.example/x?q=1", "http://api.example:80/x?q=1"),
            ("http://api.example:80/x", "http://API.example/x"),
            ("https://api.example/x", "https://api.example:443/x"),
            ("https://[::1]:443/x", "https://[::1]/x"),
            ("http://api.example/x", "http://api.example:/x"),
            ("http://api.example/x", "http://api.example:0080/x"),
        ] {
            let mock = Mock::new();
            let mut svc = layer.clone().layer(mock.service());
            mock.push(ok(&[("cache-control", "max-age=600")], "stored"));
            send(&mut svc, get(stored)).await.unwrap();
            // Answers the GET if it goes upstream, else the POST below.
            mock.push(ok(&[], "upstream"));
            let got = send(&mut svc, get(same)).await.unwrap();
            assert_eq!(
                (got.cache, &got.body[..]),
                (CacheStatus::Hit, &b"stored"[..]),
                "{name}: {same} is {stored}"
            );
            assert_eq!(mock.calls(), 1, "{name}: {same}");

            // A POST to the other spelling invalidates the stored entry.
            send(&mut svc, req(Method::POST, same, &[])).await.unwrap();
            assert!(
                svc.store().expect("an active cache").is_empty(),
                "{name}: POST {same} left {stored}"
            );
        }
        // Another port, or the default port of the other scheme, is another resource.
        for (stored, other) in [
            ("http://api.example/x", "http://api.example:443/x"),
            ("https://api.example/x", "https://api.example:80/x"),
            ("http://api.example/x", "http://api.example:8080/x"),
            ("http://api.example/x", "http://api.example:800/x"),
        ] {
            let mock = Mock::new();
            let mut svc = layer.clone().layer(mock.service());
            mock.push(ok(&[("cache-control", "max-age=600")], "stored"));
            send(&mut svc, get(stored)).await.unwrap();
            mock.push(ok(&[], "other"));
            let got = send(&mut svc, get(other)).await.unwrap();
            assert_eq!(
                got.cache,
                CacheStatus::Miss,
                "{name}: {other} is not {stored}"
            );
        }
    }
}

/// RFC 9111 sections 4.3.3 and 4.3.4: a 304 that selects no stored response cannot answer a
/// caller who asked no conditional question. The cache sends the request once more, without
/// the validators it added, and answers with that; never a bodiless 304, and never a loop.
#[tokio::test(start_paused = true)]
async fn a_304_selecting_nothing_is_not_the_answer_to_an_unconditional_request() {
    for method in [Method::GET, Method::HEAD] {
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        mock.push(ok(
            &[
                ("etag", "\"a\""),
                ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ],
            "old",
        ));
        send(&mut svc, get(URL)).await.unwrap();
        mock.push(not_modified(&[("etag", "\"b\"")]));
        // (The upstream sends no body for a HEAD.)
        let body = if method == Method::GET { "new" } else { "" };
        mock.push(ok(&[("etag", "\"b\""), ("x-from", "again")], body));
        let got = send(&mut svc, req(method.clone(), URL, &[("x-mine", "1")]))
            .await
            .unwrap();
        assert_eq!(
            (got.status.as_u16(), got.cache),
            (200, CacheStatus::Miss),
            "{method}: the caller got the unselecting 304"
        );
        assert_eq!(got.headers["x-from"], "again", "{method}");
        assert_eq!(got.body, body, "{method}");
        assert_eq!(mock.calls(), 3, "{method}: sent once more");
        let again = mock.last();
        assert_eq!(again.method, method);
        assert_eq!(
            again.headers["x-mine"], "1",
            "{method}: the caller's fields"
        );
        assert!(
            again.headers.get("if-none-match").is_none()
                && again.headers.get("if-modified-since").is_none(),
            "{method}: the validators the cache added were sent again"
        );
        if method == Method::GET {
            // The full answer replaced the entry: the next revalidation names it.
            mock.push(not_modified(&[("etag", "\"b\"")]));
            let got = send(&mut svc, get(URL)).await.unwrap();
            assert_eq!(mock.last().headers["if-none-match"], "\"b\"");
            assert_eq!(
                (got.cache, &got.body[..]),
                (CacheStatus::Revalidated, &b"new"[..])
            );
        }
    }

    // Bounded: an upstream that answers the request sent again with a 304 too is asked no more.
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "\"a\"")], "old"));
    send(&mut svc, get(URL)).await.unwrap();
    mock.push(not_modified(&[("etag", "\"b\"")]));
    mock.push(not_modified(&[("etag", "\"c\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(mock.calls(), 3, "one more request, not a loop");
    assert_eq!((got.status.as_u16(), got.cache), (304, CacheStatus::Miss));
    assert!(mock.last().headers.get("if-none-match").is_none());
}

/// The request sent again carries the caller's extensions, its `CallContext` among them, so the
/// layers below end it by the deadline as they end the first one.
#[tokio::test(start_paused = true)]
async fn the_request_sent_again_is_bounded_by_the_callers_deadline() {
    use courier_core::{BoxError, CallContext};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Service, ServiceExt};

    let mock = Mock::new();
    let with_deadline = Arc::new(AtomicUsize::new(0));
    let seen = with_deadline.clone();
    let upstream = mock.service();
    // An attempt timeout: the deadline the request carries ends it.
    let bounded = tower::service_fn(move |req: Request<()>| {
        let deadline = courier_core::CallContext::deadline_in(req.extensions());
        seen.fetch_add(usize::from(deadline.is_some()), Ordering::SeqCst);
        let mut upstream = upstream.clone();
        async move {
            let call = upstream.ready().await?.call(req);
            match deadline {
                Some(d) => tokio::time::timeout_at(d, call)
                    .await
                    .map_err(|_| BoxError::from("deadline exceeded"))?,
                None => call.await,
            }
        }
    });
    let mut svc = layer().layer(bounded);
    mock.push(ok(&[("etag", "\"a\"")], "old"));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push_delayed(Duration::from_secs(1), not_modified(&[("etag", "\"b\"")]));
    mock.push_delayed(Duration::from_secs(60), ok(&[("etag", "\"b\"")], "late"));
    let mut request = get(URL);
    CallContext::get_or_insert(&mut request).shrink_deadline_after(Duration::from_secs(3));
    let start = tokio::time::Instant::now();
    let got = send(&mut svc, request).await;
    assert!(got.is_err(), "the deadline ended the request sent again");
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(mock.calls(), 3);
    assert_eq!(
        with_deadline.load(Ordering::SeqCst),
        2,
        "both carried the deadline"
    );
}

/// A revalidation whose 304 selects nothing lets the callers waiting on it go on their own
/// while it asks again: nobody gets the 304, nobody waits for the single-flight bound.
#[tokio::test(start_paused = true)]
async fn waiters_on_a_304_that_selects_nothing_are_not_stranded() {
    use tower::{Service, ServiceExt};

    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("etag", "\"a\"")], "old"));
    send(&mut svc, get(URL)).await.unwrap();

    mock.push_delayed(Duration::from_secs(1), not_modified(&[("etag", "\"b\"")]));
    mock.push(ok(&[("etag", "\"b\"")], "new"));
    mock.push(ok(&[("etag", "\"b\"")], "new"));
    let start = tokio::time::Instant::now();
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let (leader, follower) = tokio::join!(
        async { read(leader.await.unwrap()).await.unwrap() },
        async { read(follower.await.unwrap()).await.unwrap() }
    );
    for got in [&leader, &follower] {
        assert_eq!((got.status.as_u16(), &got.body[..]), (200, &b"new"[..]));
    }
    assert_eq!(
        mock.calls(),
        4,
        "the first, the leader's two, the follower's own"
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "nobody waited for the bound"
    );
}

/// The request sent again carries a copy of the caller's (empty) body. A request with content
/// is never made conditional: a stale entry is refreshed by sending it as it is.
#[tokio::test(start_paused = true)]
async fn the_request_sent_again_carries_its_body_or_is_never_made_conditional() {
    use courier_retry::ReplayBody;
    use http_body_util::Full;
    use std::sync::{Arc, Mutex};

    type Sent = Arc<Mutex<Vec<(bool, Bytes)>>>;
    let upstream = |sent: Sent, answers: Arc<Mutex<VecDeque<common::Answer>>>| {
        tower::service_fn(move |req: Request<ReplayBody<Full<Bytes>>>| {
            let (sent, answers) = (sent.clone(), answers.clone());
            async move {
                let conditional = req.headers().contains_key("if-none-match");
                let body = req.into_body().collect().await?.to_bytes();
                sent.lock().unwrap().push((conditional, body));
                answers.lock().unwrap().pop_front().expect("scripted")
            }
        })
    };
    let get_with = |content: &'static [u8]| {
        Request::get(URL)
            .body(ReplayBody::new(Full::new(Bytes::from_static(content))))
            .unwrap()
    };

    // Without content: made conditional, and the request sent again carries the empty body.
    let sent = Sent::default();
    let answers = Arc::new(Mutex::new(VecDeque::from([
        ok(&[("etag", "\"a\"")], "old"),
        not_modified(&[("etag", "\"b\"")]),
        ok(&[("etag", "\"b\"")], "new"),
    ])));
    let mut svc = layer().layer(upstream(sent.clone(), answers));
    let mut got = Vec::new();
    for _ in 0..2 {
        let response = tower::ServiceExt::oneshot(&mut svc, get_with(b""))
            .await
            .unwrap();
        got.push(read(response).await.unwrap());
    }
    let empty = Bytes::new();
    assert_eq!(
        *sent.lock().unwrap(),
        [
            (false, empty.clone()),
            (true, empty.clone()),
            (false, empty)
        ]
    );
    assert_eq!(
        (got[1].cache, &got[1].body[..]),
        (CacheStatus::Miss, &b"new"[..])
    );

    // With content: never conditional, a full answer.
    let sent = Sent::default();
    let answers = Arc::new(Mutex::new(VecDeque::from([
        ok(&[("etag", "\"a\"")], "old"),
        ok(&[("etag", "\"a\"")], "again"),
    ])));
    let mut svc = layer().layer(upstream(sent.clone(), answers));
    let mut got = Vec::new();
    for _ in 0..2 {
        let response = tower::ServiceExt::oneshot(&mut svc, get_with(b"query"))
            .await
            .unwrap();
        got.push(read(response).await.unwrap());
    }
    let query = Bytes::from_static(b"query");
    assert_eq!(
        *sent.lock().unwrap(),
        [(false, query.clone()), (false, query)],
        "a request with content was made conditional"
    );
    assert_eq!(
        (got[1].cache, &got[1].body[..]),
        (CacheStatus::Miss, &b"again"[..])
    );
}

/// A retry below the cache replays the body of a revalidation the cache made: the copy the
/// cache keeps aside to send the request again does not hold the replay back.
#[tokio::test(start_paused = true)]
async fn a_retry_below_the_cache_replays_a_revalidation() {
    use courier_retry::{ReplayBody, RetryLayer};
    use http_body_util::Full;
    use std::sync::{Arc, Mutex};

    for content in [&b""[..], &b"query"[..]] {
        let answers = Arc::new(Mutex::new(VecDeque::from([
            ok(&[("etag", "\"a\"")], "old"),
            respond(503, &[], "down"),
            ok(&[("etag", "\"b\"")], "new"),
        ])));
        let calls = Arc::new(Mutex::new(0usize));
        let upstream = {
            let (answers, calls) = (answers.clone(), calls.clone());
            tower::service_fn(move |req: Request<ReplayBody<Full<Bytes>>>| {
                let (answers, calls) = (answers.clone(), calls.clone());
                async move {
                    req.into_body().collect().await?;
                    *calls.lock().unwrap() += 1;
                    answers.lock().unwrap().pop_front().expect("scripted")
                }
            })
        };
        let retry = RetryLayer::new().attempts(3).without_budget().seed(1);
        let mut svc = layer().layer(retry.layer(upstream));
        let get_with = || {
            Request::get(URL)
                .body(ReplayBody::new(Full::new(Bytes::from_static(content))))
                .unwrap()
        };
        let first = tower::ServiceExt::oneshot(&mut svc, get_with())
            .await
            .unwrap();
        read(first).await.unwrap();
        // The entry is stale at once (no freshness): a revalidation, answered 503 then 200.
        let second = tower::ServiceExt::oneshot(&mut svc, get_with())
            .await
            .unwrap();
        let got = read(second).await.unwrap();
        assert_eq!(
            (got.status.as_u16(), &got.body[..], *calls.lock().unwrap()),
            (200, &b"new"[..], 3),
            "content {content:?}: the retry below the cache gave up"
        );
    }
}

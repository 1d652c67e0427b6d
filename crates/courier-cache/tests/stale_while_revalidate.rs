//! `stale-while-revalidate` (RFC 5861): within the window a stale entry answers at once and is
//! revalidated in the background, once at a time, bounded, its failure changing nothing. On
//! paused time.

mod common;

use common::*;
use courier_cache::BACKGROUND_REVALIDATION_TIMEOUT;
use courier_core::{Attempts, BoxError, CacheStatus, CallContext};
use http::{Request, Response};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/feed";
const SWR: &[(&str, &str)] = &[
    ("cache-control", "max-age=1, stale-while-revalidate=30"),
    ("etag", "\"v1\""),
];
const UPSTREAM: Duration = Duration::from_millis(300);

/// Lets the background task run until it waits (on paused time, nothing advances).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn stored<S, B>(svc: &mut S, mock: &Mock)
where
    S: Service<Request<()>, Response = Response<courier_cache::CacheBody<B>>, Error = BoxError>,
    B: http_body::Body<Data = bytes::Bytes, Error = BoxError>,
{
    mock.push(ok(SWR, "old"));
    assert_eq!(send(svc, get(URL)).await.unwrap().cache, CacheStatus::Miss);
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_entry_answers_at_once_and_is_refreshed_in_the_background() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    stored(&mut svc, &mock).await;

    mock.push_delayed(
        UPSTREAM,
        ok(
            &[("cache-control", "max-age=60"), ("etag", "\"v2\"")],
            "new",
        ),
    );
    let before = Instant::now();
    let response = svc.ready().await.unwrap().call(get(URL)).await.unwrap();
    assert_eq!(
        Instant::now(),
        before,
        "answered without waiting for the upstream"
    );
    assert_eq!(
        response.extensions().get::<Attempts>().map(Attempts::count),
        Some(0),
        "this call sent nothing"
    );
    let got = read(response).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Stale);
    assert_eq!(got.body, "old");
    assert_eq!(got.headers["age"], "2");

    settle().await;
    assert_eq!(mock.calls(), 2, "one revalidation");
    assert_eq!(mock.last().headers["if-none-match"], "\"v1\"");
    tokio::time::sleep(UPSTREAM).await;
    settle().await;

    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Hit, &b"new"[..]));
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_304_in_the_background_freshens_the_entry() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    stored(&mut svc, &mock).await;

    mock.push_delayed(
        UPSTREAM,
        not_modified(&[
            ("etag", "\"v1\""),
            ("cache-control", "max-age=60"),
            ("x-seen", "2"),
        ]),
    );
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Stale
    );
    tokio::time::sleep(UPSTREAM).await;
    settle().await;
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
    assert_eq!(got.body, "old");
    assert_eq!(got.headers["x-seen"], "2");
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_background_revalidation_at_a_time() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    stored(&mut svc, &mock).await;

    mock.push_delayed(UPSTREAM, not_modified(&[("etag", "\"v1\"")]));
    for _ in 0..5 {
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!(
            (got.cache, &got.body[..]),
            (CacheStatus::Stale, &b"old"[..])
        );
        settle().await;
    }
    assert_eq!(mock.calls(), 2, "the others found it under way");
}

#[tokio::test(start_paused = true)]
async fn a_failed_background_revalidation_leaves_the_entry_as_it_was() {
    for failure in [
        Err::<Response<TestBody>, BoxError>("connection refused".into()),
        respond(503, &[], "down"),
    ] {
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        stored(&mut svc, &mock).await;

        mock.push_delayed(UPSTREAM, failure);
        assert_eq!(
            send(&mut svc, get(URL)).await.unwrap().cache,
            CacheStatus::Stale
        );
        tokio::time::sleep(UPSTREAM).await;
        settle().await;
        assert_eq!(mock.calls(), 2);

        // Still the same stale entry: answered again, and revalidated again.
        mock.push_delayed(UPSTREAM, not_modified(&[("etag", "\"v1\"")]));
        let got = send(&mut svc, get(URL)).await.unwrap();
        assert_eq!(
            (got.cache, &got.body[..]),
            (CacheStatus::Stale, &b"old"[..])
        );
        assert_eq!(got.headers["etag"], "\"v1\"");
        settle().await;
        assert_eq!(mock.calls(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn the_background_request_has_a_deadline_and_a_bound_of_its_own() {
    let deadlines = Arc::new(Mutex::new(Vec::new()));
    let mock = Mock::new();
    let inner = {
        let deadlines = deadlines.clone();
        let mock = mock.service();
        tower::service_fn(move |req: Request<()>| {
            deadlines
                .lock()
                .unwrap()
                .push(courier_core::CallContext::deadline_in(req.extensions()));
            mock.clone().oneshot(req)
        })
    };
    let mut svc = layer().layer(inner);
    stored(&mut svc, &mock).await;

    // The first background revalidation hangs.
    mock.push_delayed(
        Duration::from_secs(3600),
        not_modified(&[("etag", "\"v1\"")]),
    );
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::from_millis(5));
    let sent = Instant::now();
    assert_eq!(send(&mut svc, req).await.unwrap().cache, CacheStatus::Stale);
    settle().await;
    assert_eq!(
        deadlines.lock().unwrap().last().copied().flatten(),
        Some(sent + BACKGROUND_REVALIDATION_TIMEOUT),
        "its own deadline, not the caller's"
    );

    tokio::time::sleep(BACKGROUND_REVALIDATION_TIMEOUT - Duration::from_secs(1)).await;
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Stale
    );
    settle().await;
    assert_eq!(mock.calls(), 2, "still under way");

    // Past its bound it is dropped, and the next call starts another one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    settle().await;
    mock.push(not_modified(&[
        ("etag", "\"v1\""),
        ("cache-control", "max-age=60"),
    ]));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Stale
    );
    settle().await;
    assert_eq!(mock.calls(), 3);
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Hit
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_window_or_where_forbidden_the_caller_waits_for_the_revalidation() {
    type Fields = &'static [(&'static str, &'static str)];
    let cases: [(Fields, Fields, u64); 4] = [
        // Past the window.
        (SWR, &[], 40),
        (
            &[
                (
                    "cache-control",
                    "max-age=1, stale-while-revalidate=30, must-revalidate",
                ),
                ("etag", "\"v1\""),
            ],
            &[],
            2,
        ),
        (
            &[
                (
                    "cache-control",
                    "max-age=1, stale-while-revalidate=30, no-cache",
                ),
                ("etag", "\"v1\""),
            ],
            &[],
            2,
        ),
        // The caller asks for a validated answer.
        (SWR, &[("cache-control", "no-cache")], 2),
    ];
    for (stored, request, after) in cases {
        let mock = Mock::new();
        let mut svc = layer().layer(mock.service());
        mock.push(ok(stored, "old"));
        send(&mut svc, get(URL)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(after)).await;

        mock.push_delayed(UPSTREAM, not_modified(&[("etag", "\"v1\"")]));
        let before = Instant::now();
        let got = send(&mut svc, req(http::Method::GET, URL, request))
            .await
            .unwrap();
        assert_eq!(
            got.cache,
            CacheStatus::Revalidated,
            "{stored:?} {request:?}"
        );
        assert_eq!(Instant::now() - before, UPSTREAM);
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_waits_serves_stale_while_revalidating_too() {
    let mock = Mock::new();
    let store = SlowStore {
        inner: TextStore::default(),
        delay: Duration::from_millis(5),
    };
    let mut svc = layer().store(store).layer(mock.service());
    mock.push(ok(SWR, "old"));
    send(&mut svc, get(URL)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    mock.push_delayed(
        UPSTREAM,
        ok(
            &[("cache-control", "max-age=60"), ("etag", "\"v2\"")],
            "new",
        ),
    );
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Stale, &b"old"[..])
    );
    tokio::time::sleep(UPSTREAM * 2).await;
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Hit, &b"new"[..]));
    assert_eq!(mock.calls(), 2);
}

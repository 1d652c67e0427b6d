//! Concurrent revalidations of one entry collapse into one upstream request, and a leader that
//! fails, is dropped or hangs never strands the others.

mod common;

use common::*;
use courier_core::{BoxError, CacheStatus, CallContext};
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/shared";

async fn store_entry<S, B>(svc: &mut S, mock: &Mock)
where
    S: Service<
            http::Request<()>,
            Response = http::Response<courier_cache::CacheBody<B>>,
            Error = BoxError,
        >,
    B: http_body::Body<Data = bytes::Bytes, Error = BoxError>,
{
    mock.push(ok(&[("etag", "\"v\""), ("x-n", "1")], "stored"));
    let got = send(svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Miss);
}

/// Polls `f` once; true when it is still pending.
async fn pending_once<F: Future + Unpin>(f: &mut F) -> bool {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx).is_pending())).await
}

#[tokio::test(start_paused = true)]
async fn concurrent_revalidations_send_one_request() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    store_entry(&mut svc, &mock).await;

    mock.push_delayed(
        Duration::from_secs(1),
        not_modified(&[("etag", "\"v\""), ("x-n", "2")]),
    );
    let leader = svc.ready().await.unwrap().call(get(URL));
    let mut followers = Vec::new();
    for _ in 0..3 {
        followers.push(svc.ready().await.unwrap().call(get(URL)));
    }
    let (leader, followers) = tokio::join!(
        async { read(leader.await.unwrap()).await.unwrap() },
        futures_join(followers)
    );
    assert_eq!(mock.calls(), 2, "one revalidation went upstream");
    for got in std::iter::once(leader).chain(followers) {
        assert_eq!(got.cache, CacheStatus::Revalidated);
        assert_eq!(got.body, "stored");
        assert_eq!(got.headers["x-n"], "2");
    }
}

async fn futures_join<F>(futures: Vec<F>) -> Vec<Got>
where
    F: Future<Output = Result<http::Response<courier_cache::CacheBody<TestBody>>, BoxError>>,
{
    let mut out = Vec::new();
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    // Poll them all, then finish them in order: every one is already waiting on the leader.
    for f in &mut futures {
        let _ = pending_once(f).await;
    }
    for f in futures {
        out.push(read(f.await.unwrap()).await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_failed_leader_lets_the_followers_go_themselves() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    store_entry(&mut svc, &mock).await;

    mock.push_delayed(Duration::from_secs(1), Err("connection refused".into()));
    mock.push(not_modified(&[("etag", "\"v\"")]));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let (leader, follower) = tokio::join!(leader, async { read(follower.await?).await });
    assert!(leader.is_err(), "the leader's own error is its own");
    let follower = follower.unwrap();
    assert_eq!(follower.cache, CacheStatus::Revalidated);
    assert_eq!(mock.calls(), 3, "the follower sent its own revalidation");
}

#[tokio::test(start_paused = true)]
async fn a_leader_with_a_new_body_lets_the_followers_go_themselves() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    store_entry(&mut svc, &mock).await;

    mock.push_delayed(Duration::from_secs(1), ok(&[("etag", "\"w\"")], "changed"));
    mock.push(ok(&[("etag", "\"w\"")], "changed"));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let (leader, follower) = tokio::join!(async { read(leader.await?).await }, async {
        read(follower.await?).await
    });
    assert_eq!(leader.unwrap().body, "changed");
    assert_eq!(follower.unwrap().body, "changed");
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_leader_never_strands_its_followers() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    store_entry(&mut svc, &mock).await;

    // The leader is in flight (its request sent, the answer an hour away) when it is dropped.
    mock.push_delayed(
        Duration::from_secs(3600),
        not_modified(&[("etag", "\"v\"")]),
    );
    mock.push(not_modified(&[("etag", "\"v\"")]));
    let mut leader = Box::pin(svc.ready().await.unwrap().call(get(URL)));
    let mut follower = Box::pin(svc.ready().await.unwrap().call(get(URL)));
    assert!(pending_once(&mut leader).await);
    assert!(pending_once(&mut follower).await);
    assert_eq!(mock.calls(), 2);
    drop(leader);

    let start = Instant::now();
    let got = read(follower.await.unwrap()).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "released at once, not by the timeout"
    );
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_leader_is_waited_for_at_most_the_bound() {
    let mock = Mock::new();
    let mut svc = layer()
        .single_flight(Some(Duration::from_secs(5)))
        .layer(mock.service());
    store_entry(&mut svc, &mock).await;

    mock.push_delayed(
        Duration::from_secs(3600),
        not_modified(&[("etag", "\"v\"")]),
    );
    mock.push(not_modified(&[("etag", "\"v\"")]));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let hanging = tokio::spawn(leader);
    tokio::task::yield_now().await;

    let start = Instant::now();
    let got = read(follower.await.unwrap()).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    hanging.abort();
}

#[tokio::test(start_paused = true)]
async fn a_follower_waits_no_longer_than_its_deadline() {
    let mock = Mock::new();
    let mut svc = layer()
        .single_flight(Some(Duration::from_secs(5)))
        .layer(mock.service());
    store_entry(&mut svc, &mock).await;

    mock.push_delayed(
        Duration::from_secs(3600),
        not_modified(&[("etag", "\"v\"")]),
    );
    mock.push(not_modified(&[("etag", "\"v\"")]));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::from_secs(1));
    let follower = svc.ready().await.unwrap().call(req);
    let hanging = tokio::spawn(leader);
    tokio::task::yield_now().await;

    let start = Instant::now();
    let got = read(follower.await.unwrap()).await.unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "the follower asks on its own at its deadline, not after the 5 s bound"
    );
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(mock.calls(), 3);
    hanging.abort();
}

#[tokio::test(start_paused = true)]
async fn single_flight_can_be_switched_off() {
    let mock = Mock::new();
    let mut svc = layer().single_flight(None).layer(mock.service());
    store_entry(&mut svc, &mock).await;
    mock.push_delayed(Duration::from_secs(1), not_modified(&[("etag", "\"v\"")]));
    mock.push_delayed(Duration::from_secs(1), not_modified(&[("etag", "\"v\"")]));
    let a = svc.ready().await.unwrap().call(get(URL));
    let b = svc.ready().await.unwrap().call(get(URL));
    let (a, b) = tokio::join!(a, b);
    assert_eq!(
        a.unwrap().extensions().get::<CacheStatus>(),
        Some(&CacheStatus::Revalidated)
    );
    assert!(b.is_ok());
    assert_eq!(mock.calls(), 3);
}

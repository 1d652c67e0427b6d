//! The layer's behaviour on paused time; every timing is exact.

use courier_core::{BoxError, CacheStatus, CallContext, RateLimited};
use courier_ratelimit::{
    InMemoryStore, Mode, Rate, RateLimitStore, TokenBucketRateLimit, TokenBucketRateLimitLayer,
};
use courier_testkit::contract;
use http::{Request, Response, StatusCode};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::num::NonZeroU32;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, advance, sleep};
use tower::{Layer, Service, ServiceExt};

// === test upstream ===

/// One scripted answer.
#[derive(Clone, Default)]
struct Step {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    cache: Option<CacheStatus>,
}

fn step(status: u16, headers: &[(&'static str, &'static str)]) -> Step {
    Step {
        status,
        headers: headers.to_vec(),
        cache: None,
    }
}

/// An upstream that records when each request reached it, per host, and answers by a plan.
#[derive(Clone)]
struct Upstream {
    origin: Instant,
    hits: Arc<Mutex<Vec<(String, Duration)>>>,
    plan: Arc<Mutex<HashMap<String, VecDeque<Step>>>>,
}

impl Upstream {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            hits: Arc::default(),
            plan: Arc::default(),
        }
    }

    fn plan(&self, host: &str, steps: Vec<Step>) {
        self.plan
            .lock()
            .unwrap()
            .insert(host.to_owned(), steps.into());
    }

    /// Start times of the hits on `host`, in seconds (f64 for readable asserts), sorted.
    fn starts(&self, host: &str) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .hits
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, t)| t.as_secs_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn count(&self) -> usize {
        self.hits.lock().unwrap().len()
    }
}

impl Service<Request<()>> for Upstream {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        let host = req.uri().host().unwrap_or("-").to_owned();
        self.hits
            .lock()
            .unwrap()
            .push((host.clone(), self.origin.elapsed()));
        let step = self
            .plan
            .lock()
            .unwrap()
            .get_mut(&host)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| step(200, &[]));
        let mut resp = Response::new(());
        *resp.status_mut() = StatusCode::from_u16(step.status).unwrap();
        for (k, v) in step.headers {
            resp.headers_mut().insert(k, v.parse().unwrap());
        }
        if let Some(c) = step.cache {
            resp.extensions_mut().insert(c);
        }
        std::future::ready(Ok(resp))
    }
}

fn get(host: &str) -> Request<()> {
    Request::get(format!("http://{host}/x")).body(()).unwrap()
}

fn burst(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn layer(rps: f64, b: u32) -> TokenBucketRateLimitLayer {
    TokenBucketRateLimitLayer::new(Rate::per_second(rps).unwrap(), burst(b))
}

type Limited = TokenBucketRateLimit<Upstream>;

async fn send<S>(svc: S, req: Request<()>) -> Result<Response<()>, BoxError>
where
    S: Service<Request<()>, Response = Response<()>, Error = BoxError>,
{
    svc.oneshot(req).await
}

/// Sends `n` requests to `host` at once (concurrently), waits for all.
async fn concurrently(svc: &Limited, host: &str, n: usize) -> Vec<Result<u16, BoxError>> {
    let mut set = JoinSet::new();
    for _ in 0..n {
        set.spawn(send(svc.clone(), get(host)));
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.expect("task does not panic").map(|r| r.status().as_u16()));
    }
    out
}

fn rate_limited(err: &BoxError) -> RateLimited {
    *err.downcast_ref::<RateLimited>()
        .unwrap_or_else(|| panic!("expected RateLimited, got {err}"))
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

// === pacing ===

#[tokio::test(start_paused = true)]
async fn burst_two_rate_one_starts_at_0_0_1_2_3() {
    let up = Upstream::new();
    let svc = layer(1.0, 2).layer(up.clone());
    let results = concurrently(&svc, "a", 5).await;
    assert!(results.iter().all(|r| matches!(r, Ok(200))));
    assert_eq!(up.starts("a"), [0.0, 0.0, 1.0, 2.0, 3.0]);
}

#[tokio::test(start_paused = true)]
async fn idle_refills_to_the_burst_and_no_more() {
    let up = Upstream::new();
    let svc = layer(1.0, 2).layer(up.clone());
    concurrently(&svc, "a", 5).await;
    assert_eq!(up.origin.elapsed(), secs(3.0));
    sleep(secs(100.0)).await;
    concurrently(&svc, "a", 3).await;
    assert_eq!(up.starts("a")[5..], [103.0, 103.0, 104.0]);
}

#[tokio::test(start_paused = true)]
async fn half_a_token_after_one_second_at_rate_half() {
    let up = Upstream::new();
    let svc = layer(0.5, 1).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    sleep(secs(1.0)).await;
    // Half a token is there; the next one waits for the other half, the one after a whole one.
    concurrently(&svc, "a", 2).await;
    assert_eq!(up.starts("a"), [0.0, 2.0, 4.0]);
}

#[tokio::test(start_paused = true)]
async fn every_clone_and_every_service_share_the_buckets() {
    let up = Upstream::new();
    let l = layer(1.0, 1);
    let (s1, s2) = (l.layer(up.clone()), l.clone().layer(up.clone()));
    let mut set = JoinSet::new();
    set.spawn(send(s1.clone(), get("a")));
    set.spawn(send(s2, get("a")));
    set.spawn(send(s1, get("a")));
    set.join_all().await;
    assert_eq!(up.starts("a"), [0.0, 1.0, 2.0]);
}

#[tokio::test(start_paused = true)]
async fn retries_are_paced_503_503_200_at_0_4_8() {
    let up = Upstream::new();
    up.plan("a", vec![step(503, &[]), step(503, &[])]);
    let mut svc = layer(0.25, 1).layer(up.clone());
    // A minimal retry loop: asks again at once on 503; the limiter is what spaces the attempts.
    let mut attempts = 0;
    let status = loop {
        attempts += 1;
        let resp = svc.ready().await.unwrap().call(get("a")).await.unwrap();
        if resp.status() != StatusCode::SERVICE_UNAVAILABLE || attempts == 3 {
            break resp.status();
        }
    };
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.starts("a"), [0.0, 4.0, 8.0]);
}

#[tokio::test(start_paused = true)]
async fn global_bucket_spans_hosts_and_key_by_splits_by_header() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).global().layer(up.clone());
    let mut set = JoinSet::new();
    set.spawn(send(svc.clone(), get("a")));
    set.spawn(send(svc.clone(), get("b")));
    set.join_all().await;
    let mut all = [up.starts("a"), up.starts("b")].concat();
    all.sort_by(f64::total_cmp);
    assert_eq!(all, [0.0, 1.0]);

    let up = Upstream::new();
    let svc = layer(1.0, 1)
        .key_by(|head: &courier_core::RequestHead<'_>| head.headers().get("x-tenant").cloned())
        .layer(up.clone());
    let tenant = |t: &'static str| {
        let mut r = get("a");
        r.headers_mut().insert("x-tenant", t.parse().unwrap());
        r
    };
    let mut set = JoinSet::new();
    set.spawn(send(svc.clone(), tenant("1")));
    set.spawn(send(svc.clone(), tenant("2")));
    set.spawn(send(svc.clone(), tenant("1")));
    set.join_all().await;
    assert_eq!(up.starts("a"), [0.0, 0.0, 1.0]);
}

// === modes, max_wait, deadline ===

#[tokio::test(start_paused = true)]
async fn reject_mode_fails_fast_and_takes_no_slot() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).mode(Mode::Reject).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    let err = send(svc.clone(), get("a")).await.unwrap_err();
    assert_eq!(rate_limited(&err).retry_in(), secs(1.0));
    assert_eq!(up.origin.elapsed(), Duration::ZERO, "failed at once");
    sleep(secs(1.0)).await;
    send(svc.clone(), get("a")).await.unwrap();
    assert_eq!(up.starts("a"), [0.0, 1.0], "the refusal took no slot");
    // Other hosts have their own bucket.
    send(svc, get("b")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wait_longer_than_max_wait_fails_fast_and_takes_no_slot() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).max_wait(secs(1.5)).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    let waiter = tokio::spawn(send(svc.clone(), get("a"))); // slot at 1 s
    tokio::task::yield_now().await;
    let err = send(svc.clone(), get("a")).await.unwrap_err(); // slot would be at 2 s
    assert_eq!(rate_limited(&err).retry_in(), secs(2.0));
    assert_eq!(up.origin.elapsed(), Duration::ZERO);
    waiter.await.unwrap().unwrap();
    send(svc, get("a")).await.unwrap();
    assert_eq!(
        up.starts("a"),
        [0.0, 1.0, 2.0],
        "the refused one took no slot"
    );
}

#[tokio::test(start_paused = true)]
async fn wait_past_the_deadline_fails_fast() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    let mut req = get("a");
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(0.5));
    let err = send(svc.clone(), req).await.unwrap_err();
    assert_eq!(rate_limited(&err).retry_in(), secs(1.0));
    assert_eq!(up.origin.elapsed(), Duration::ZERO);
    let mut req = get("a");
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(1.0));
    send(svc, req).await.unwrap();
    assert_eq!(
        up.starts("a"),
        [0.0, 1.0],
        "a wait ending on the deadline is fine"
    );
}

// === server feedback ===

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_parks_one_host_only() {
    let up = Upstream::new();
    up.plan("a", vec![step(429, &[("retry-after", "5")])]);
    let svc = layer(100.0, 10).layer(up.clone());
    assert_eq!(send(svc.clone(), get("a")).await.unwrap().status(), 429);
    assert_eq!(
        svc.store()
            .expect("an active limiter")
            .parked_until(&courier_core::HostKey::from_request(&get("a"))),
        Some(up.origin + secs(5.0))
    );
    let (a, b) = (
        tokio::spawn(send(svc.clone(), get("a"))),
        tokio::spawn(send(svc.clone(), get("b"))),
    );
    b.await.unwrap().unwrap();
    assert_eq!(up.starts("b"), [0.0], "another host proceeds at once");
    a.await.unwrap().unwrap();
    assert_eq!(up.starts("a"), [0.0, 5.0]);
}

#[tokio::test(start_paused = true)]
async fn quota_fields_park_even_on_a_200() {
    let up = Upstream::new();
    up.plan(
        "gh",
        vec![step(
            200,
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "3")],
        )],
    );
    up.plan(
        "ietf",
        vec![step(200, &[("ratelimit", "\"default\";r=0;t=7")])],
    );
    up.plan("moved", vec![step(301, &[("retry-after", "9")])]);
    up.plan("busy", vec![step(503, &[("retry-after", "2")])]);
    // A Retry-After that is no quota does not hide the quota fields beside it.
    up.plan(
        "accepted",
        vec![step(
            202,
            &[
                ("retry-after", "1"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "4"),
            ],
        )],
    );
    let hosts = ["gh", "ietf", "moved", "busy", "accepted"];
    let svc = layer(100.0, 10).layer(up.clone());
    for h in hosts {
        send(svc.clone(), get(h)).await.unwrap();
    }
    let mut set = JoinSet::new();
    for h in hosts {
        set.spawn(send(svc.clone(), get(h)));
    }
    set.join_all().await;
    assert_eq!(up.starts("accepted"), [0.0, 4.0]);
    assert_eq!(up.starts("gh"), [0.0, 3.0]);
    assert_eq!(up.starts("ietf"), [0.0, 7.0]);
    assert_eq!(up.starts("busy"), [0.0, 2.0]);
    assert_eq!(
        up.starts("moved"),
        [0.0, 0.0],
        "Retry-After on a 301 is no quota"
    );
}

#[tokio::test(start_paused = true)]
async fn every_quota_field_form_parks_its_host_among_other_headers() {
    let up = Upstream::new();
    type Form = (
        &'static str,
        u16,
        &'static [(&'static str, &'static str)],
        f64,
    );
    let forms: [Form; 5] = [
        ("retry-after", 429, &[("retry-after", "4")], 4.0),
        ("list", 200, &[("ratelimit", "\"default\";r=0;t=5")], 5.0),
        (
            "dict",
            200,
            &[("ratelimit", "limit=10, remaining=0, reset=6")],
            6.0,
        ),
        (
            "draft",
            200,
            &[("ratelimit-remaining", "0"), ("ratelimit-reset", "7")],
            7.0,
        ),
        (
            "github",
            200,
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "8")],
            8.0,
        ),
    ];
    let noise = [
        ("content-type", "application/json"),
        ("server", "upstream"),
        ("x-request-id", "42"),
    ];
    for (host, status, fields, _) in forms {
        // The quota fields first, last, and alone.
        let mut first: Vec<_> = fields.to_vec();
        first.extend(noise);
        let mut last: Vec<_> = noise.to_vec();
        last.extend(fields);
        for (i, headers) in [first, last, fields.to_vec()].into_iter().enumerate() {
            up.plan(&format!("{host}{i}"), vec![step(status, &headers)]);
        }
    }
    up.plan("plain", vec![step(200, &noise)]);
    let svc = layer(100.0, 10).layer(up.clone());
    let parked = |host: &str| {
        svc.store()
            .expect("an active limiter")
            .parked_until(&courier_core::HostKey::from_request(&get(host)))
    };
    for (host, _, _, wait) in forms {
        for i in 0..3 {
            let host = format!("{host}{i}");
            send(svc.clone(), get(&host)).await.unwrap();
            assert_eq!(parked(&host), Some(up.origin + secs(wait)), "{host}");
        }
    }
    send(svc.clone(), get("plain")).await.unwrap();
    assert_eq!(parked("plain"), None);
}

#[tokio::test(start_paused = true)]
async fn a_park_longer_than_max_wait_fails_fast_and_reject_mode_obeys_parks() {
    let up = Upstream::new();
    up.plan("a", vec![step(429, &[("retry-after", "120")])]);
    let svc = layer(100.0, 10).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    let err = send(svc.clone(), get("a")).await.unwrap_err();
    assert_eq!(rate_limited(&err).retry_in(), secs(120.0));
    assert_eq!(up.origin.elapsed(), Duration::ZERO);
    assert_eq!(up.count(), 1);

    let up = Upstream::new();
    up.plan("a", vec![step(429, &[("retry-after", "3")])]);
    let svc = layer(100.0, 10).mode(Mode::Reject).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    let err = send(svc.clone(), get("a")).await.unwrap_err();
    assert_eq!(rate_limited(&err).retry_in(), secs(3.0));
    sleep(secs(3.0)).await;
    send(svc, get("a")).await.unwrap();
    assert_eq!(up.starts("a"), [0.0, 3.0]);
}

#[tokio::test(start_paused = true)]
async fn hints_on_responses_from_the_cache_are_ignored() {
    let up = Upstream::new();
    let cached = |c| Step {
        cache: Some(c),
        ..step(429, &[("retry-after", "5")])
    };
    up.plan("hit", vec![cached(CacheStatus::Hit)]);
    up.plan("stale", vec![cached(CacheStatus::Stale)]);
    up.plan("miss", vec![cached(CacheStatus::Miss)]);
    let svc = layer(100.0, 10).layer(up.clone());
    for h in ["hit", "stale", "miss"] {
        send(svc.clone(), get(h)).await.unwrap();
    }
    let mut set = JoinSet::new();
    for h in ["hit", "stale", "miss"] {
        set.spawn(send(svc.clone(), get(h)));
    }
    set.join_all().await;
    assert_eq!(up.starts("hit"), [0.0, 0.0]);
    assert_eq!(up.starts("stale"), [0.0, 0.0]);
    assert_eq!(
        up.starts("miss"),
        [0.0, 5.0],
        "a fresh answer's hint is obeyed"
    );
}

#[tokio::test(start_paused = true)]
async fn hints_can_be_switched_off() {
    let up = Upstream::new();
    up.plan("a", vec![step(429, &[("retry-after", "5")])]);
    let svc = layer(100.0, 10).obey_server_hints(false).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap();
    send(svc, get("a")).await.unwrap();
    assert_eq!(up.starts("a"), [0.0, 0.0]);
}

// === cancellation ===

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_gives_its_slot_back_when_nothing_is_stacked_on_it() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap(); // slot 0
    let b = tokio::spawn(send(svc.clone(), get("a"))); // reserves slot 1
    advance(secs(0.5)).await;
    b.abort();
    assert!(b.await.unwrap_err().is_cancelled());
    send(svc, get("a")).await.unwrap();
    assert_eq!(
        up.starts("a"),
        [0.0, 1.0],
        "the next caller got the freed slot"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_never_stalls_the_ones_behind_it() {
    let up = Upstream::new();
    let svc = layer(1.0, 1).layer(up.clone());
    send(svc.clone(), get("a")).await.unwrap(); // slot 0
    let b = tokio::spawn(send(svc.clone(), get("a"))); // slot 1
    tokio::task::yield_now().await;
    let c = tokio::spawn(send(svc.clone(), get("a"))); // slot 2
    tokio::task::yield_now().await;
    b.abort();
    c.await.unwrap().unwrap();
    send(svc, get("a")).await.unwrap();
    // c keeps its slot; b's is spent (c was stacked on it), so the next one starts at 3 s.
    assert_eq!(up.starts("a"), [0.0, 2.0, 3.0]);
}

// === eviction ===

#[tokio::test(start_paused = true)]
async fn idle_keys_are_evicted_under_the_maximum() {
    let up = Upstream::new();
    let svc = layer(1000.0, 1)
        .max_keys(NonZeroUsize::new(8).unwrap())
        .layer(up.clone());
    let mut most = 0;
    for i in 0..300 {
        let host: &'static str = Box::leak(format!("h{i}").into_boxed_str());
        send(svc.clone(), get(host)).await.unwrap();
        most = most.max(svc.store().expect("an active limiter").len());
        advance(secs(0.002)).await; // each bucket is full again before the next host comes
    }
    assert!(most <= 8, "held {most} keys");
    assert_eq!(up.count(), 300);
}

#[tokio::test(start_paused = true)]
async fn eviction_never_lets_a_busy_or_parked_host_burst() {
    let up = Upstream::new();
    up.plan("parked", vec![step(429, &[("retry-after", "10")])]);
    let svc = layer(1.0, 1)
        .max_keys(NonZeroUsize::new(4).unwrap())
        .layer(up.clone());
    send(svc.clone(), get("busy")).await.unwrap(); // refilling until 1 s
    send(svc.clone(), get("parked")).await.unwrap(); // parked until 10 s
    for i in 0..50 {
        let host: &'static str = Box::leak(format!("h{i}").into_boxed_str());
        send(svc.clone(), get(host)).await.unwrap();
    }
    let (busy, parked) = (
        tokio::spawn(send(svc.clone(), get("busy"))),
        tokio::spawn(send(svc.clone(), get("parked"))),
    );
    busy.await.unwrap().unwrap();
    assert_eq!(up.starts("busy"), [0.0, 1.0]);
    // Now every h* bucket is full: new hosts sweep them, never the parked one.
    for i in 50..60 {
        let host: &'static str = Box::leak(format!("h{i}").into_boxed_str());
        send(svc.clone(), get(host)).await.unwrap();
    }
    assert!(
        svc.store().expect("an active limiter").len() < 50,
        "idle keys were swept"
    );
    parked.await.unwrap().unwrap();
    assert_eq!(up.starts("parked"), [0.0, 10.0]);
}

// === the previous request's bucket ===

#[tokio::test(start_paused = true)]
async fn a_host_differing_in_case_shares_its_bucket_and_a_host_header_makes_its_key() {
    let up = Upstream::new();
    let mut svc = layer(1.0, 1).layer(up.clone());
    // No scheme in the URI: a key of its own (scheme-less), made from the Host header.
    let by_header = || {
        Request::get("/x")
            .header(http::header::HOST, "api.example")
            .body(())
            .unwrap()
    };
    // One service instance, so each request meets the previous request's bucket first.
    let reqs = [
        get("api.example"),
        get("API.Example"),
        by_header(),
        by_header(),
        get("api.example"),
        get("other"),
        get("api.example"),
    ];
    for req in reqs {
        svc.ready().await.unwrap().call(req).await.unwrap();
    }
    assert_eq!(up.starts("api.example"), [0.0, 2.0, 3.0]);
    assert_eq!(up.starts("API.Example"), [1.0]);
    assert_eq!(up.starts("-"), [1.0, 2.0]);
    assert_eq!(up.starts("other"), [2.0], "another host has its own bucket");
    assert_eq!(svc.store().expect("an active limiter").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_bucket_evicted_under_a_service_is_made_afresh() {
    let up = Upstream::new();
    let mut a = layer(1000.0, 1)
        .max_keys(NonZeroUsize::new(4).unwrap())
        .layer(up.clone());
    a.ready().await.unwrap().call(get("a")).await.unwrap();
    // Another instance fills the map: `a`'s bucket, full again, is evicted.
    let mut others = a.clone();
    for i in 0..12 {
        advance(secs(0.002)).await;
        let host: &'static str = Box::leak(format!("h{i}").into_boxed_str());
        others.ready().await.unwrap().call(get(host)).await.unwrap();
    }
    let key = courier_core::HostKey::from_request(&get("a"));
    assert!(svc_store_misses(&a, &key), "the bucket of a was evicted");
    // The first instance still holds the evicted bucket: it must find the map's new one, and
    // a park set on that one must hold it.
    a.ready().await.unwrap().call(get("a")).await.unwrap();
    assert!(!svc_store_misses(&a, &key), "a fresh bucket is in the map");
    up.plan("a", vec![step(429, &[("retry-after", "2")])]);
    others.ready().await.unwrap().call(get("a")).await.unwrap();
    a.ready().await.unwrap().call(get("a")).await.unwrap();
    let starts = up.starts("a");
    assert_eq!(starts.len(), 4);
    assert!((starts[3] - starts[2] - 2.0).abs() < 1e-9, "{starts:?}");
}

/// Whether the store holds no bucket for `key` (parked_until is `None` for a live bucket that is
/// not parked too, so park and look).
fn svc_store_misses(svc: &Limited, key: &courier_core::HostKey) -> bool {
    let store = svc.store().expect("an active limiter");
    let before = store.len();
    store.park(key, Duration::from_nanos(1));
    let after = store.len();
    after > before
}

#[tokio::test(start_paused = true)]
async fn a_free_slot_calls_at_once_and_a_waiter_dropped_unpolled_gives_its_slot_back() {
    let up = Upstream::new();
    let mut svc = layer(1.0, 1).layer(up.clone());
    let now = svc.ready().await.unwrap().call(get("a"));
    assert_eq!(up.count(), 1, "a free slot calls the inner service in call");
    now.await.unwrap();
    let later = svc.ready().await.unwrap().call(get("a"));
    assert_eq!(up.count(), 1, "a request that must wait has not started");
    drop(later);
    advance(secs(1.0)).await;
    svc.ready().await.unwrap().call(get("a")).await.unwrap();
    svc.ready().await.unwrap().call(get("a")).await.unwrap();
    assert_eq!(
        up.starts("a"),
        [0.0, 1.0, 2.0],
        "the dropped slot was given back"
    );
}

// === tower contract ===

#[tokio::test(start_paused = true)]
async fn calls_the_instance_that_was_made_ready() {
    let upstream = tower::service_fn(|_: Request<()>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(())))
    });
    let checked = contract::check(upstream, |inner| layer(1.0, 1).layer(inner), || get("a")).await;
    assert_eq!(checked.calls, contract::CALLS);
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    // No token is taken and no quota header read: the 503 and 429 with Retry-After park nothing.
    courier_testkit::pass_through::check(TokenBucketRateLimit::<_>::pass_through).await;
    let off = TokenBucketRateLimit::<()>::pass_through(());
    assert!(off.is_pass_through() && off.store().is_none());
    let on = layer(1.0, 1).layer(());
    assert!(!on.is_pass_through() && on.store().is_some());
}

#[test]
fn services_and_futures_are_send_sync_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync_static::<TokenBucketRateLimitLayer>();
    send_sync_static::<Limited>();
    send_static::<<Limited as Service<Request<()>>>::Future>();
    send_sync_static::<InMemoryStore<courier_core::HostKey>>();
    fn store<T: RateLimitStore<courier_core::HostKey>>() {}
    store::<InMemoryStore<courier_core::HostKey>>();
}

#[test]
fn the_refusal_says_what_to_do() {
    let text = RateLimited::new(secs(2.0)).to_string();
    assert!(text.starts_with("rate limited"), "{text}");
}

// === tracing ===

mod capture {
    use std::fmt::Write;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::{Event, Metadata, Subscriber, span};

    /// The test binary's one global subscriber: it records each event as `name=value` text into
    /// the sink of the thread that emitted it. Global rather than `set_default` per test, so
    /// tracing's per-callsite interest cache cannot go stale while other tests come and go.
    struct Capture;

    thread_local! {
        static SINK: std::cell::RefCell<Option<Arc<Mutex<Vec<String>>>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Stops capturing on this thread when dropped.
    pub(super) struct Guard(());

    impl Drop for Guard {
        fn drop(&mut self) {
            SINK.with(|sink| *sink.borrow_mut() = None);
        }
    }

    /// Captures this thread's events into `events` while the guard lives.
    pub(super) fn capture(events: Arc<Mutex<Vec<String>>>) -> Guard {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(Capture)
                .expect("this test binary installs no other global subscriber");
        });
        SINK.with(|sink| *sink.borrow_mut() = Some(events));
        Guard(())
    }

    struct Text(String);

    impl Visit for Text {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={:?} ", field.name(), value);
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
            span::Id::from_u64(1)
        }
        fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
        fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
        fn event(&self, event: &Event<'_>) {
            SINK.with(|sink| {
                if let Some(events) = &*sink.borrow() {
                    let mut text = Text(String::new());
                    event.record(&mut text);
                    events.lock().unwrap().push(text.0);
                }
            });
        }
        fn enter(&self, _: &span::Id) {}
        fn exit(&self, _: &span::Id) {}
    }
}

#[tokio::test(start_paused = true)]
async fn long_waits_and_parks_are_logged_with_host_until_and_why() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let _guard = capture::capture(events.clone());
    let up = Upstream::new();
    up.plan("p", vec![step(429, &[("retry-after", "5")])]);
    let svc = layer(1.0, 1).log_waits_over(secs(0.5)).layer(up.clone());
    concurrently(&svc, "a", 2).await;
    send(svc.clone(), get("p")).await.unwrap();
    let events = events.lock().unwrap().clone();
    let waits: Vec<_> = events
        .iter()
        .filter(|e| e.contains("waiting for a slot"))
        .collect();
    assert_eq!(waits.len(), 1, "{events:?}");
    assert!(waits[0].contains("wait_ms=1000"), "{}", waits[0]);
    assert!(waits[0].contains("http://a"), "{}", waits[0]);
    let parks: Vec<_> = events
        .iter()
        .filter(|e| e.contains("parked by the server"))
        .collect();
    assert_eq!(parks.len(), 1, "{events:?}");
    for field in [
        "host=HostKey(http://p)",
        "until=",
        "GMT",
        "why=\"retry_after\"",
        "wait_ms=5000",
        "status=429",
    ] {
        assert!(parks[0].contains(field), "{field} missing in {}", parks[0]);
    }
}

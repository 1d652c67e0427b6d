//! Concurrent requests for one missing key go upstream once: the others wait for the answer it
//! stores, ask on their own at once when it cannot be stored (and later requests for the key
//! wait for no one for a minute), and one of them takes over when the first is cancelled. On
//! paused time.

mod common;

use common::*;
use courier_cache::{CacheBody, CacheStore, MemoryStore, StoreFuture, Variants};
use courier_core::{BoxError, CacheStatus, CallContext};
use courier_testkit::body::ScriptedBody;
use http::{Request, Response};
use http_body_util::BodyExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/config";
const ROUND_TRIP: Duration = Duration::from_millis(300);
const CROWD: usize = 100;

/// An upstream that answers every request after [`ROUND_TRIP`] with `headers` and a body
/// naming the request's `accept` field (if any), and records when each request came.
#[derive(Clone)]
struct Origin {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    headers: &'static [(&'static str, &'static str)],
}

impl Origin {
    fn new(headers: &'static [(&'static str, &'static str)]) -> Self {
        Self {
            arrivals: Arc::default(),
            headers,
        }
    }

    fn calls(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }

    fn service(
        &self,
    ) -> impl Service<
        Request<()>,
        Response = Response<TestBody>,
        Error = BoxError,
        Future = impl Future<Output = Result<Response<TestBody>, BoxError>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        let origin = self.clone();
        tower::service_fn(move |req: Request<()>| {
            let origin = origin.clone();
            async move {
                origin.arrivals.lock().unwrap().push(Instant::now());
                let body = match req.headers().get("accept") {
                    Some(accept) => format!("config for {}", accept.to_str().unwrap()),
                    None => "config".to_owned(),
                };
                tokio::time::sleep(ROUND_TRIP).await;
                ok(origin.headers, &body)
            }
        })
    }
}

const CACHEABLE: &[(&str, &str)] = &[("cache-control", "max-age=60"), ("etag", "\"c1\"")];

fn cache(
    origin: &Origin,
    layer: courier_cache::EtagCacheLayer,
) -> impl Service<Request<()>, Response = Response<CacheBody<TestBody>>, Error = BoxError, Future: Send>
+ Clone
+ Send
+ 'static {
    layer.layer(origin.service())
}

/// One call in a task of its own, read to the end, with when it ended.
///
/// Generic over the service: an async block that names a concrete stack (one with a boxed
/// service inside) would have the compiler prove `'static` bounds on erased lifetimes, and fail.
fn spawn_call<S>(svc: &S, req: Request<()>) -> JoinHandle<(Got, Instant)>
where
    S: Service<Request<()>, Response = Response<CacheBody<TestBody>>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let svc = svc.clone();
    tokio::spawn(async move {
        let response: Response<CacheBody<TestBody>> = svc.oneshot(req).await.unwrap();
        let got = read(response).await.unwrap();
        (got, Instant::now())
    })
}

/// Lets every spawned task run until it waits (on paused time, nothing advances).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_crowd_on_one_cold_key_sends_one_request() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer());
    let start = Instant::now();
    let tasks: Vec<_> = (0..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in tasks {
        let (got, ended) = task.await.unwrap();
        assert_eq!(got.body, "config");
        assert_eq!(got.cache, CacheStatus::Miss);
        assert_eq!(
            ended - start,
            ROUND_TRIP,
            "served as the first answer was stored"
        );
    }
    assert_eq!(origin.calls(), 1, "one request at the server");

    let (got, _) = spawn_call(&svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn when_the_first_is_cancelled_one_follower_asks_for_all() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer());
    let leader = spawn_call(&svc, get(URL));
    settle().await;
    assert_eq!(origin.calls(), 1);
    let followers: Vec<_> = (1..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    settle().await;

    tokio::time::sleep(ROUND_TRIP / 2).await;
    leader.abort();
    assert!(leader.await.unwrap_err().is_cancelled());
    for task in followers {
        let (got, _) = task.await.unwrap();
        assert_eq!(got.body, "config");
    }
    assert_eq!(
        origin.calls(),
        2,
        "the first, and one follower in its place"
    );
}

#[tokio::test(start_paused = true)]
async fn when_the_first_drops_its_body_the_others_read_it_to_the_end() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer());
    // The answer comes, and its body is dropped unread.
    let leader = tokio::spawn(svc.clone().oneshot(get(URL)));
    settle().await;
    let followers: Vec<_> = (1..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    drop(leader.await.unwrap().unwrap());
    for task in followers {
        let (got, _) = task.await.unwrap();
        assert_eq!(got.body, "config");
    }
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_others_are_served_while_the_first_holds_its_body_unread() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer());
    let start = Instant::now();
    let leader = {
        let svc = svc.clone();
        tokio::spawn(async move {
            let response = svc.oneshot(get(URL)).await.unwrap();
            // Busy elsewhere for a while before it reads the body.
            tokio::time::sleep(Duration::from_secs(600)).await;
            read(response).await.unwrap()
        })
    };
    settle().await;
    let followers: Vec<_> = (1..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in followers {
        let (got, ended) = task.await.unwrap();
        assert_eq!((&got.body[..], ended - start), (&b"config"[..], ROUND_TRIP));
    }
    assert_eq!(
        leader.await.unwrap().body,
        "config",
        "every frame, read by others first"
    );
    assert_eq!(origin.calls(), 1);
}

/// Polls `f` once.
async fn poll_once<F: Future + Unpin>(f: &mut F) {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut *f).poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn answers_gathered_before_any_body_is_read_still_go_upstream_once() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer());
    let start = Instant::now();
    // As a `join_all` does in one task: every call started, every answer gathered, and only
    // then the bodies read.
    let mut calls: Vec<_> = (0..CROWD)
        .map(|_| Box::pin(svc.clone().oneshot(get(URL))))
        .collect();
    for call in &mut calls {
        poll_once(call).await;
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    assert_eq!(Instant::now() - start, ROUND_TRIP);
    for answer in answers {
        assert_eq!(read(answer).await.unwrap().body, "config");
    }
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_fails_sends_the_others_on_and_its_caller_gets_the_error() {
    let mock = Mock::new();
    let svc = layer().layer(mock.service());
    let failing = ScriptedBody::<BoxError>::chunks(["con"])
        .gap(Duration::from_millis(10))
        .error("connection reset".into())
        .exact_len(6);
    mock.push(Ok(Response::builder()
        .header("cache-control", "max-age=60")
        .body(failing.boxed())
        .unwrap()));
    for _ in 1..5 {
        mock.push(ok(CACHEABLE, "config"));
    }
    // The first call is made (its flight open) before the others come, and answered after.
    let mut first = svc.clone();
    let leader = first.ready().await.unwrap().call(get(URL));
    let followers: Vec<_> = (1..5).map(|_| spawn_call(&svc, get(URL))).collect();
    tokio::task::yield_now().await;
    let leader = leader.await.unwrap();
    for task in followers {
        assert_eq!(task.await.unwrap().0.body, "config");
    }
    assert_eq!(
        mock.calls(),
        5,
        "each asked on its own once the first failed"
    );
    // The others read the first frames and the error; its caller gets them all the same.
    let mut body = leader.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "con");
    assert!(body.frame().await.unwrap().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_cannot_be_stored_sends_every_follower_on_at_once() {
    let origin = Origin::new(&[("cache-control", "no-store"), ("etag", "\"c1\"")]);
    let svc = cache(&origin, layer());
    let start = Instant::now();
    let tasks: Vec<_> = (0..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in tasks {
        let (got, ended) = task.await.unwrap();
        assert_eq!(got.body, "config");
        assert_eq!(got.cache, CacheStatus::Miss);
        assert!(ended - start <= 2 * ROUND_TRIP, "{:?}", ended - start);
    }
    assert_eq!(origin.calls(), CROWD);
    for arrival in origin.arrivals() {
        assert!(
            arrival - start <= ROUND_TRIP,
            "no follower waits longer than one round trip"
        );
    }
}

/// When each of a crowd's calls ended, counted from `start`: how many ended after one round
/// trip, and how many after two (they waited for another's answer first).
async fn crowd_ends(
    svc: &(
         impl Service<
        Request<()>,
        Response = Response<CacheBody<TestBody>>,
        Error = BoxError,
        Future: Send,
    > + Clone
         + Send
         + 'static
     ),
) -> (usize, usize) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CROWD).map(|_| spawn_call(svc, get(URL))).collect();
    let (mut one, mut two) = (0, 0);
    for task in tasks {
        let (got, ended) = task.await.unwrap();
        assert_eq!(
            (&got.body[..], got.cache),
            (&b"config"[..], CacheStatus::Miss)
        );
        match ended - start {
            d if d == ROUND_TRIP => one += 1,
            d if d == 2 * ROUND_TRIP => two += 1,
            d => panic!("ended after {d:?}"),
        }
    }
    (one, two)
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_answer_is_not_stored_sends_its_requests_on_their_own_for_a_minute() {
    let origin = Origin::new(&[("cache-control", "no-store")]);
    let svc = cache(&origin, layer());
    // The first crowd waits for the first answer, which cannot serve it.
    assert_eq!(crowd_ends(&svc).await, (1, CROWD - 1));
    // The key is remembered: the next crowd goes upstream at once, no one waiting for another.
    assert_eq!(crowd_ends(&svc).await, (CROWD, 0));
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(crowd_ends(&svc).await, (CROWD, 0));
    // A minute after the answer that was not stored, a crowd waits for one request again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(crowd_ends(&svc).await, (1, CROWD - 1));
    assert_eq!(origin.calls(), 4 * CROWD);
}

/// A store the cache does not know to be in memory: looked up through its futures, with the
/// passes kept apart from it.
#[derive(Debug)]
struct Elsewhere(MemoryStore);

impl CacheStore for Elsewhere {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Arc<Variants>>> {
        CacheStore::get(&self.0, key)
    }

    fn insert(&self, key: String, variants: Arc<Variants>) -> StoreFuture<'_, ()> {
        CacheStore::insert(&self.0, key, variants)
    }

    fn remove<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool> {
        CacheStore::remove(&self.0, key)
    }

    fn weight(&self) -> u64 {
        self.0.weight()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

#[tokio::test(start_paused = true)]
async fn beside_a_store_not_in_memory_a_key_not_stored_is_a_pass_too() {
    let origin = Origin::new(&[("cache-control", "no-store")]);
    let svc = cache(&origin, layer().store(Elsewhere(MemoryStore::new(1 << 20))));
    assert_eq!(crowd_ends(&svc).await, (1, CROWD - 1));
    assert_eq!(crowd_ends(&svc).await, (CROWD, 0));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(crowd_ends(&svc).await, (1, CROWD - 1));
    assert_eq!(origin.calls(), 3 * CROWD);
}

#[tokio::test(start_paused = true)]
async fn an_answer_with_no_field_the_cache_acts_on_is_passed_on_and_remembered() {
    // Fields, but no validator, no lifetime and no `no-store`: nothing to store or remove.
    let origin = Origin::new(&[
        ("content-type", "application/json"),
        ("date", "Sun, 06 Dec 2026 08:00:00 GMT"),
        ("vary", "accept"),
    ]);
    let svc = cache(&origin, layer());
    assert_eq!(crowd_ends(&svc).await, (1, CROWD - 1));
    // Not stored, and the key is a pass: the next crowd goes upstream at once.
    assert_eq!(crowd_ends(&svc).await, (CROWD, 0));
    assert_eq!(origin.calls(), 2 * CROWD);
}

#[tokio::test(start_paused = true)]
async fn a_key_passed_on_is_still_stored_when_an_answer_may_be() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "no-store")], "config"));
    mock.push(ok(CACHEABLE, "config"));
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );
    let hit = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (&hit.body[..], hit.cache),
        (&b"config"[..], CacheStatus::Hit)
    );
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_server_error_says_nothing_of_the_key_and_the_next_crowd_waits_for_one() {
    let mock = Mock::new();
    let svc = layer().layer(mock.service());
    mock.push(respond(503, &[], "busy"));
    for _ in 0..CROWD {
        mock.push_delayed(ROUND_TRIP, ok(CACHEABLE, "config"));
    }
    let got = send(&mut svc.clone(), get(URL)).await.unwrap();
    assert_eq!(got.status, 503);
    let tasks: Vec<_> = (0..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().0.body, "config");
    }
    assert_eq!(mock.calls(), 2, "the crowd went upstream once");
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_request_sends_every_follower_on_at_once() {
    let mock = Mock::new();
    let svc = layer().layer(mock.service());
    mock.push_delayed(ROUND_TRIP, Err("connection reset".into()));
    for _ in 1..5 {
        mock.push_delayed(ROUND_TRIP, ok(CACHEABLE, "config"));
    }
    let start = Instant::now();
    let mut leader = svc.clone();
    let leader = tokio::spawn(async move { leader.ready().await?.call(get(URL)).await });
    settle().await;
    let followers: Vec<_> = (1..5)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move {
                let got = read(svc.ready().await?.call(get(URL)).await?).await?;
                Ok::<_, BoxError>((got, Instant::now()))
            })
        })
        .collect();
    assert!(
        leader.await.unwrap().is_err(),
        "the first one's error is its own"
    );
    for task in followers {
        let (got, ended) = task.await.unwrap().unwrap();
        assert_eq!(got.body, "config");
        assert_eq!(ended - start, 2 * ROUND_TRIP);
    }
    assert_eq!(mock.calls(), 5);
}

#[tokio::test(start_paused = true)]
async fn credentials_stay_apart() {
    let origin = Origin::new(&[("cache-control", "private, max-age=60")]);
    let svc = cache(&origin, layer());
    let start = Instant::now();
    let with = |token: &str| req(http::Method::GET, URL, &[("authorization", token)]);
    let tasks = vec![
        spawn_call(&svc, with("Bearer a")),
        spawn_call(&svc, with("Bearer b")),
        spawn_call(&svc, get(URL)),
        spawn_call(&svc, with("Bearer a")),
    ];
    for task in tasks {
        let (_, ended) = task.await.unwrap();
        assert_eq!(
            ended - start,
            ROUND_TRIP,
            "nobody waits for another's answer"
        );
    }
    assert_eq!(origin.calls(), 3, "one request per set of credentials");
}

#[tokio::test(start_paused = true)]
async fn a_follower_the_stored_variant_does_not_serve_asks_on_its_own() {
    let origin = Origin::new(&[("cache-control", "max-age=60"), ("vary", "accept")]);
    let svc = cache(&origin, layer());
    let accept = |value: &str| req(http::Method::GET, URL, &[("accept", value)]);
    let start = Instant::now();
    let first = spawn_call(&svc, accept("text/a"));
    settle().await;
    let same = spawn_call(&svc, accept("text/a"));
    let other = spawn_call(&svc, accept("text/b"));

    let (got, _) = first.await.unwrap();
    assert_eq!(got.body, "config for text/a");
    let (got, ended) = same.await.unwrap();
    assert_eq!(
        (&got.body[..], ended - start),
        (&b"config for text/a"[..], ROUND_TRIP)
    );
    let (got, ended) = other.await.unwrap();
    assert_eq!(got.body, "config for text/b");
    assert_eq!(
        ended - start,
        2 * ROUND_TRIP,
        "asked once the first was stored"
    );
    assert_eq!(origin.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_follower_waits_no_longer_than_its_deadline_or_the_bound() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(
        &origin,
        layer().single_flight(Some(Duration::from_millis(200))),
    );
    let start = Instant::now();
    let first = spawn_call(&svc, get(URL));
    settle().await;
    let mut hurried = get(URL);
    CallContext::get_or_insert(&mut hurried).shrink_deadline_after(Duration::from_millis(50));
    let hurried = spawn_call(&svc, hurried);
    let patient = spawn_call(&svc, get(URL));

    first.await.unwrap();
    let (_, ended) = hurried.await.unwrap();
    assert_eq!(ended - start, Duration::from_millis(50) + ROUND_TRIP);
    let (_, ended) = patient.await.unwrap();
    assert_eq!(ended - start, Duration::from_millis(200) + ROUND_TRIP);
    let arrivals: Vec<_> = origin.arrivals().iter().map(|a| *a - start).collect();
    assert_eq!(
        arrivals,
        [
            Duration::ZERO,
            Duration::from_millis(50),
            Duration::from_millis(200)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn without_single_flight_every_miss_goes_upstream() {
    let origin = Origin::new(CACHEABLE);
    let svc = cache(&origin, layer().single_flight(None));
    let tasks: Vec<_> = (0..10).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(origin.calls(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_waits_coalesces_too() {
    let origin = Origin::new(CACHEABLE);
    let store = SlowStore {
        inner: TextStore::default(),
        delay: Duration::from_millis(5),
    };
    let svc = cache(&origin, layer().store(store));
    let tasks: Vec<_> = (0..CROWD).map(|_| spawn_call(&svc, get(URL))).collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().0.body, "config");
    }
    assert_eq!(origin.calls(), 1);
    // The write waits too: once it is done, the entry is found.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (got, _) = spawn_call(&svc, get(URL)).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Hit);
    assert_eq!(origin.calls(), 1);
}

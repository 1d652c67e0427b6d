//! A slot reserved for a request that is never sent goes back to the bucket: when the request
//! is refused after its wait, when its caller drops it, and when a store's answer comes too
//! late to be used. Exactly once, and never for a request that was sent.

use courier_core::{BoxError, CallContext, HostKey, RateLimited};
use courier_ratelimit::{
    Decision, Grant, InMemoryStore, Quota, Rate, RateLimitStore, TokenBucketRateLimitLayer,
};
use http::{Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio::time::{Instant, advance, sleep, sleep_until};
use tower::{Layer, Service, ServiceExt, service_fn};

/// When each request reached the upstream, from the test's start.
#[derive(Clone)]
struct Sent {
    origin: Instant,
    at: Arc<Mutex<Vec<Duration>>>,
}

impl Sent {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            at: Arc::default(),
        }
    }

    fn upstream(
        &self,
    ) -> impl Service<
        Request<()>,
        Response = Response<()>,
        Error = Infallible,
        Future = std::future::Ready<Result<Response<()>, Infallible>>,
    > + Clone
    + use<> {
        let sent = self.clone();
        service_fn(move |_req: Request<()>| {
            sent.at.lock().unwrap().push(sent.origin.elapsed());
            std::future::ready(Ok::<_, Infallible>(Response::new(())))
        })
    }

    fn times(&self) -> Vec<Duration> {
        self.at.lock().unwrap().clone()
    }

    fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
}

fn get() -> Request<()> {
    Request::get("http://a/x").body(()).unwrap()
}

fn with_deadline(after: Duration) -> Request<()> {
    let mut req = get();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(after);
    req
}

fn key() -> HostKey {
    HostKey::from_request(&get())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn micros(n: u64) -> Duration {
    Duration::from_micros(n)
}

fn rate_limited(err: &BoxError) -> RateLimited {
    *err.downcast_ref::<RateLimited>()
        .unwrap_or_else(|| panic!("expected RateLimited, got {err}"))
}

/// Polls `fut` once, without waiting.
async fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    let mut fut = fut;
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
}

// === refused after its wait ===

#[tokio::test(start_paused = true)]
async fn a_waiter_refused_one_tick_past_its_deadline_gives_its_slot_back() {
    // 3 per second: slots 333.333 ms apart. The second request's slot is at 333.333 ms, its
    // deadline at 333.9 ms; tokio's timer wakes it at 334 ms, past the deadline: refused.
    let sent = Sent::new();
    let rate = Rate::new(NonZeroU32::new(3).unwrap(), Duration::from_secs(1)).unwrap();
    let svc = TokenBucketRateLimitLayer::new(rate, NonZeroU32::MIN).layer(sent.upstream());
    svc.clone().oneshot(get()).await.unwrap();
    let err = svc
        .clone()
        .oneshot(with_deadline(micros(333_900)))
        .await
        .expect_err("woke past its deadline");
    assert_eq!(
        rate_limited(&err).retry_in(),
        Duration::ZERO,
        "its slot is free now"
    );
    assert_eq!(sent.elapsed(), ms(334));
    // Its slot is free again: the next request starts at once, not at 666.667 ms.
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(sent.times(), [ms(0), ms(334)]);
    // And only one slot came back: the one after it waits a whole interval.
    svc.clone().oneshot(get()).await.unwrap();
    let third = sent.times()[2];
    assert!(
        third >= ms(334) + Duration::from_nanos(333_333_334) && third <= ms(668),
        "{third:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_refused_by_a_park_that_came_meanwhile_gives_its_slot_back() {
    // One every 10 s, waits of at most 5 s. The first request starts at 0; the second, sent
    // at 6 s, reserves the slot at 10 s. At 7 s the server parks the host until 16 s: at 10 s
    // the second would have to wait 6 s more, longer than it accepts, and is refused.
    let sent = Sent::new();
    let svc = TokenBucketRateLimitLayer::new(
        Rate::every(Duration::from_secs(10)).unwrap(),
        NonZeroU32::MIN,
    )
    .max_wait(Duration::from_secs(5))
    .layer(sent.upstream());
    svc.clone().oneshot(get()).await.unwrap();
    sleep(Duration::from_secs(6)).await;
    let waiter = tokio::spawn(svc.clone().oneshot(get()));
    sleep(Duration::from_secs(1)).await;
    svc.store()
        .expect("an active limiter")
        .park(&key(), Duration::from_secs(9));
    let err = waiter
        .await
        .unwrap()
        .expect_err("parked past what it accepts");
    assert_eq!(sent.elapsed(), Duration::from_secs(10));
    assert_eq!(rate_limited(&err).retry_in(), Duration::from_secs(6));
    // When the park ends, its slot (10 s .. 20 s) is there to be taken: a request starts at
    // 16 s, not at 20 s.
    sleep_until(sent.origin + Duration::from_secs(16)).await;
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        sent.times(),
        [Duration::ZERO, Duration::from_secs(16)],
        "the refused waiter's slot was given back"
    );
}

// === dropped by its caller ===

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_after_its_slot_came_but_before_it_ran_gives_the_slot_back() {
    let sent = Sent::new();
    let mut svc = TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN)
        .layer(sent.upstream());
    svc.ready().await.unwrap().call(get()).await.unwrap(); // slot 0
    // Polled once: it sleeps until its slot at 1 s.
    let mut polled = Box::pin(svc.ready().await.unwrap().call(get()));
    assert!(poll_once(polled.as_mut()).await.is_pending());
    // The slot comes, but the future is not polled again before its caller drops it.
    advance(Duration::from_secs(1)).await;
    drop(polled);
    assert_eq!(sent.times().len(), 1, "never sent");
    svc.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(
        sent.times(),
        [Duration::ZERO, Duration::from_secs(1)],
        "the dropped waiter's slot was given back"
    );

    // The same for a future never polled at all.
    let unpolled = svc.ready().await.unwrap().call(get()); // slot at 2 s
    advance(Duration::from_secs(1)).await;
    drop(unpolled);
    svc.ready().await.unwrap().call(get()).await.unwrap();
    assert_eq!(sent.times()[2], Duration::from_secs(2));
    assert_eq!(sent.times().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_was_sent_never_gives_its_slot_back() {
    let sent = Sent::new();
    let svc = TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN)
        .layer(sent.upstream());
    svc.clone().oneshot(get()).await.unwrap(); // slot 0
    svc.clone().oneshot(get()).await.unwrap(); // waited for slot 1 s, sent, dropped after
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(
        sent.times(),
        [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(2)
        ]
    );
}

// === a store that answers late ===

/// An in-memory store behind a network: it decides at once, but its answer arrives `delay`
/// later, with the slot laid on the clock of the moment it arrives (as a store that is told
/// "wait this long" does). Counts what was given back.
#[derive(Clone)]
struct Late {
    inner: InMemoryStore<HostKey>,
    delay: Duration,
    given_back: Arc<Mutex<Vec<Grant>>>,
}

impl RateLimitStore<HostKey> for Late {
    type Acquire = Pin<Box<dyn Future<Output = Result<Decision, BoxError>> + Send>>;

    fn acquire(&self, key: &HostKey, quota: Quota, max_wait: Duration) -> Self::Acquire {
        let decision = self.inner.decide(key, quota, max_wait);
        let delay = self.delay;
        Box::pin(async move {
            sleep(delay).await;
            Ok(match decision {
                Decision::Admit(g) => Decision::Admit(Grant::new(g.at() + delay, g.ticket())),
                deny => deny,
            })
        })
    }

    fn park(&self, key: &HostKey, wait: Duration) {
        self.inner.park(key, wait);
    }

    fn cancel(&self, key: &HostKey, quota: Quota, grant: &Grant) {
        self.given_back.lock().unwrap().push(*grant);
        self.inner.cancel(key, quota, grant);
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_slot_past_the_deadline_is_given_back_and_refused_at_once() {
    let sent = Sent::new();
    let store = Late {
        inner: InMemoryStore::new(),
        delay: ms(300),
        given_back: Arc::default(),
    };
    let svc = TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN)
        .store_in(store.clone())
        .layer(sent.upstream());
    svc.clone().oneshot(get()).await.unwrap(); // decided at 0, sent at 0.3 s
    assert_eq!(sent.times(), [ms(300)]);
    // Decided at 0.3 s: the slot at 1 s, within the deadline (1.2 s); the answer comes at
    // 0.6 s and names 1.3 s, past it.
    let err = svc
        .clone()
        .oneshot(with_deadline(ms(900)))
        .await
        .expect_err("its slot is past its deadline");
    assert_eq!(sent.elapsed(), ms(600), "refused at once, not after a wait");
    assert_eq!(rate_limited(&err).retry_in(), ms(700));
    assert_eq!(store.given_back.lock().unwrap().len(), 1, "given back once");
    // The slot at 1 s is free again for the next request (laid at 1.3 s by the late answer),
    // instead of the one at 2 s.
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(sent.times(), [ms(300), ms(1300)]);
    assert_eq!(store.given_back.lock().unwrap().len(), 1, "never twice");
}

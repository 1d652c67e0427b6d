use super::*;
use crate::backend::fake::{Fake, Mode};
use crate::script::Reply;
use courier_core::{BoxError, CallContext, HostKey, RateLimited};
use courier_ratelimit::TokenBucketRateLimitLayer;
use std::sync::Mutex;
use std::sync::atomic::Ordering::SeqCst;
use tower::{ServiceBuilder, ServiceExt, service_fn};

const MS: Duration = Duration::from_millis(1);

fn host() -> HostKey {
    HostKey::from_request(&http::Request::get("https://api.example/").body(()).unwrap())
}

fn quota(rps: f64, burst: u32) -> Quota {
    Quota::new(
        Rate::per_second(rps).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

const ADMIT_NOW: Reply = Reply {
    admitted: true,
    wait_us: 0,
    parked: false,
    ticket: 77,
};

fn store(fake: &Arc<Fake>, policy: FailurePolicy) -> RedisStore<HostKey> {
    RedisStore::builder("redis://unused")
        .policy(policy)
        .build(Arc::clone(fake) as DynBackend)
}

/// Collects what `tracing` prints, for counting events.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Sends this thread's events here while the guard lives. The subscriber is global (one
    /// per test binary) and hands each line to the emitting thread's sink, so tracing's
    /// per-callsite interest cache cannot go stale while tests on other threads come and go.
    fn install(&self) -> LogsGuard {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .with_writer(|| ThreadSink)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("this test binary installs no other global subscriber");
        });
        SINK.with(|sink| *sink.borrow_mut() = Some(self.clone()));
        LogsGuard(())
    }

    fn count(&self, needle: &str) -> usize {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().filter(|l| l.contains(needle)).count()
    }
}

thread_local! {
    static SINK: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Stops collecting this thread's events when dropped.
struct LogsGuard(());

impl Drop for LogsGuard {
    fn drop(&mut self) {
        SINK.with(|sink| *sink.borrow_mut() = None);
    }
}

/// The global subscriber's writer: appends to the emitting thread's [`Logs`], if any.
struct ThreadSink;

impl std::io::Write for ThreadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        SINK.with(|sink| {
            if let Some(logs) = &*sink.borrow() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn decide(s: &RedisStore<HostKey>, q: Quota, max_wait: Duration) -> Decision {
    s.acquire(&host(), q, max_wait)
        .await
        .expect("never an error")
}

#[tokio::test(start_paused = true)]
async fn a_decision_is_one_call_with_the_keys_and_the_reply() {
    let fake = Fake::new(Mode::Answer(Reply {
        wait_us: 300_000,
        ..ADMIT_NOW
    }));
    let s = store(&fake, FailurePolicy::FailOpen);
    let now = Instant::now();
    let Decision::Admit(grant) = decide(&s, quota(10.0, 5), Duration::from_secs(60)).await else {
        panic!("admitted")
    };
    assert_eq!(grant.at(), now + 300 * MS);
    let calls = fake.decides.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tat_key, "courier:rl:{https://api.example}:tat");
    assert_eq!(calls[0].park_key, "courier:rl:{https://api.example}:park");
    assert_eq!(calls[0].args, [100_000, 400_000, 60_000_000, 0]);
    assert!(!s.is_degraded());
}

/// Fail-open: the first failure warns once and falls back; later decisions skip Redis
/// entirely (no call, no wait) until the probe finds it again; then one info event and
/// decisions are shared again.
#[tokio::test(start_paused = true)]
async fn fail_open_falls_back_warns_once_and_recovers() {
    let logs = Logs::default();
    let _guard = logs.install();
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(1.0, 2);
    let start = Instant::now();
    let mut starts = Vec::new();
    for _ in 0..4 {
        match decide(&s, q, Duration::from_secs(60)).await {
            Decision::Admit(g) => starts.push(g.at() - start),
            other => panic!("fail-open admits: {other:?}"),
        }
    }
    // The in-process bucket paces them: burst 2, then one a second.
    assert_eq!(
        starts,
        [Duration::ZERO, Duration::ZERO, 1000 * MS, 2000 * MS]
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "nobody waited on redis");
    assert_eq!(
        fake.decides(),
        1,
        "redis is skipped after the first failure"
    );
    assert!(s.is_degraded());
    assert_eq!(s.outages(), 1);
    assert_eq!(logs.count("WARN"), 1);

    // Still down at the first probe: still skipped, no second warning.
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
    assert_eq!(fake.probes.load(SeqCst), 1);
    assert!(s.is_degraded());
    decide(&s, q, Duration::from_secs(60)).await;
    assert_eq!(fake.decides(), 1);
    assert_eq!(logs.count("WARN"), 1);

    // Redis is back: the next probe finds it.
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF).await;
    assert_eq!(fake.probes.load(SeqCst), 2);
    assert!(!s.is_degraded());
    assert_eq!(logs.count("INFO"), 1);
    assert_eq!(
        logs.count("decided_without_redis=5"),
        1,
        "4 + 1 decided in process"
    );
    let Decision::Admit(grant) = decide(&s, q, Duration::from_secs(60)).await else {
        panic!("admitted")
    };
    assert_eq!(grant.ticket(), 77 | REDIS_TICKET, "decided by redis");
    assert_eq!(fake.decides(), 2);
    assert_eq!(s.outages(), 1);
}

/// A stopped server: the caller waits exactly the command timeout, once; then Redis is
/// skipped and nobody waits at all.
#[tokio::test(start_paused = true)]
async fn a_hanging_redis_costs_one_command_timeout() {
    let fake = Fake::new(Mode::Hang);
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(10.0, 5);
    let start = Instant::now();
    let d = decide(&s, q, Duration::from_secs(60)).await;
    assert!(matches!(d, Decision::Admit(_)), "{d:?}");
    assert_eq!(start.elapsed(), DEFAULT_COMMAND_TIMEOUT);
    let start = Instant::now();
    for _ in 0..10 {
        decide(&s, q, Duration::from_secs(60)).await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(fake.decides(), 1);
}

/// A connection stuck on a dead path is dropped and made anew after repeated probe
/// timeouts.
#[tokio::test(start_paused = true)]
async fn repeated_probe_timeouts_reset_the_connection() {
    let fake = Fake::new(Mode::Hang);
    let s = store(&fake, FailurePolicy::FailOpen);
    decide(&s, quota(10.0, 5), Duration::ZERO).await;
    let per_probe = DEFAULT_RETRY_BACKOFF + DEFAULT_COMMAND_TIMEOUT;
    tokio::time::sleep(per_probe * (RESET_AFTER_TIMEOUTS - 1)).await;
    assert_eq!(fake.resets.load(SeqCst), 0);
    tokio::time::sleep(per_probe + MS).await;
    assert_eq!(fake.probes.load(SeqCst), RESET_AFTER_TIMEOUTS as usize);
    assert_eq!(fake.resets.load(SeqCst), 1);
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(per_probe).await;
    assert!(!s.is_degraded());
}

/// Fail-closed: refused with the backoff as `retry_in`, through the layer as
/// `RateLimited`; no call to Redis while it is skipped.
#[tokio::test(start_paused = true)]
async fn fail_closed_refuses() {
    let logs = Logs::default();
    let _guard = logs.install();
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailClosed);
    let layer = TokenBucketRateLimitLayer::with_quota(quota(10.0, 5)).store_in(s.clone());
    let svc =
        ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(|_req: http::Request<()>| async {
                Ok::<_, BoxError>(http::Response::new(()))
            }));
    for _ in 0..3 {
        let req = http::Request::get("https://api.example/").body(()).unwrap();
        let err = svc.clone().oneshot(req).await.unwrap_err();
        let limited = err.downcast_ref::<RateLimited>().expect("RateLimited");
        assert_eq!(limited.retry_in(), DEFAULT_RETRY_BACKOFF);
    }
    assert_eq!(fake.decides(), 1);
    assert_eq!(logs.count("WARN"), 1);
    assert_eq!(logs.count("refused"), 1);
}

/// A park is recorded in process at once (and sent with the next decision), and written
/// to Redis in the background.
#[tokio::test(start_paused = true)]
async fn park_is_local_at_once_and_shared_in_the_background() {
    let fake = Fake::new(Mode::Answer(ADMIT_NOW));
    let s = store(&fake, FailurePolicy::FailOpen);
    let now = Instant::now();
    s.park(&host(), Duration::from_secs(3));
    assert_eq!(s.fallback().parked_until(&host()), Some(now + 3000 * MS));
    tokio::task::yield_now().await;
    assert_eq!(
        *fake.parks.lock().unwrap(),
        [(
            "courier:rl:{https://api.example}:park".to_owned(),
            3_000_000
        )]
    );
    tokio::time::sleep(1000 * MS).await;
    decide(&s, quota(10.0, 5), Duration::from_secs(60)).await;
    assert_eq!(fake.decides.lock().unwrap()[0].args[3], 2_000_000);
}

/// A failed background park starts an outage like a failed decision.
#[tokio::test(start_paused = true)]
async fn a_failed_park_starts_an_outage() {
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailOpen);
    s.park(&host(), Duration::from_secs(3));
    tokio::task::yield_now().await;
    assert!(s.is_degraded());
    // The fallback obeys the park.
    let Decision::Deny(d) = decide(&s, quota(10.0, 5), Duration::from_secs(1)).await else {
        panic!("parked")
    };
    assert!(d.is_parked());
    assert_eq!(d.retry_in(), Duration::from_secs(3));
}

/// A slot reserved in Redis goes back to Redis; one from the fallback to the fallback.
#[tokio::test(start_paused = true)]
async fn cancel_returns_the_slot_where_it_came_from() {
    let fake = Fake::new(Mode::Answer(Reply {
        wait_us: 500_000,
        ..ADMIT_NOW
    }));
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(10.0, 1);
    let Decision::Admit(grant) = decide(&s, q, Duration::from_secs(60)).await else {
        panic!("admitted")
    };
    s.cancel(&host(), q, &grant);
    tokio::task::yield_now().await;
    assert_eq!(
        *fake.give_backs.lock().unwrap(),
        [(
            "courier:rl:{https://api.example}:tat".to_owned(),
            77,
            100_000
        )]
    );

    // Fallback: two reservations, the second given back, then a third takes its slot.
    fake.set(Mode::Fail);
    decide(&s, q, Duration::from_secs(60)).await;
    let Decision::Admit(second) = decide(&s, q, Duration::from_secs(60)).await else {
        panic!("admitted")
    };
    assert_eq!(second.ticket() & REDIS_TICKET, 0);
    s.cancel(&host(), q, &second);
    let Decision::Admit(third) = decide(&s, q, Duration::from_secs(60)).await else {
        panic!("admitted")
    };
    assert_eq!(third.at(), second.at());
    assert_eq!(fake.give_backs.lock().unwrap().len(), 1);
}

/// A reset forgets the bucket in process at once, and in Redis in the background (with the
/// ticket of this replica's last reservation, which the script checks); the park stays. A
/// replica that reserved nothing since its last reset sends nothing.
#[tokio::test(start_paused = true)]
async fn reset_forgets_the_bucket_here_and_in_redis_but_not_the_park() {
    let fake = Fake::new(Mode::Answer(ADMIT_NOW));
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(10.0, 1);
    let now = Instant::now();
    s.reset(&host());
    tokio::task::yield_now().await;
    assert!(
        fake.forgotten.lock().unwrap().is_empty(),
        "nothing reserved"
    );

    decide(&s, q, Duration::ZERO).await;
    assert!(matches!(
        s.fallback().decide(&host(), q, Duration::ZERO),
        Decision::Admit(_)
    ));
    s.park(&host(), 50 * MS);
    s.reset(&host());
    assert_eq!(s.fallback().parked_until(&host()), Some(now + 50 * MS));
    tokio::task::yield_now().await;
    assert_eq!(
        *fake.forgotten.lock().unwrap(),
        [("courier:rl:{https://api.example}:tat".to_owned(), 77)]
    );
    assert_eq!(fake.parks.lock().unwrap().len(), 1, "the park was sent");
    // In process: the slot the fallback booked is forgotten (only the park holds the key).
    tokio::time::sleep(50 * MS).await;
    assert!(matches!(
        s.fallback().decide(&host(), q, Duration::ZERO),
        Decision::Admit(_)
    ));
    // Once per reservation: a second reset has nothing of this replica's to forget.
    s.reset(&host());
    tokio::task::yield_now().await;
    assert_eq!(fake.forgotten.lock().unwrap().len(), 1);
    assert!(!s.is_degraded());
}

/// During an outage a reset forgets the in-process bucket that decides (fail-open) and sends
/// nothing, then or later; a reset whose script fails starts an outage.
#[tokio::test(start_paused = true)]
async fn reset_during_an_outage_is_in_process_only() {
    let fake = Fake::new(Mode::Answer(ADMIT_NOW));
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(10.0, 1);
    decide(&s, q, Duration::ZERO).await;
    fake.set(Mode::Fail);
    s.reset(&host());
    tokio::task::yield_now().await;
    assert!(s.is_degraded(), "the failed script started an outage");
    assert_eq!(fake.forgotten.lock().unwrap().len(), 1);
    assert!(matches!(
        decide(&s, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    assert!(matches!(
        decide(&s, q, Duration::ZERO).await,
        Decision::Deny(_)
    ));
    s.reset(&host());
    assert!(
        matches!(decide(&s, q, Duration::ZERO).await, Decision::Admit(_)),
        "a full bucket again"
    );
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF * 2).await;
    assert!(!s.is_degraded());
    assert_eq!(
        fake.forgotten.lock().unwrap().len(),
        1,
        "the reset heard during the outage is not sent later"
    );
}

/// Fail-closed: a reset during an outage sends nothing and changes nothing of the refusals.
#[tokio::test(start_paused = true)]
async fn reset_under_fail_closed_still_refuses_during_an_outage() {
    let fake = Fake::new(Mode::Answer(ADMIT_NOW));
    let s = store(&fake, FailurePolicy::FailClosed);
    let q = quota(10.0, 5);
    decide(&s, q, Duration::ZERO).await;
    fake.set(Mode::Fail);
    assert!(matches!(
        decide(&s, q, Duration::ZERO).await,
        Decision::Deny(_)
    ));
    assert!(s.is_degraded());
    s.reset(&host());
    tokio::task::yield_now().await;
    let Decision::Deny(d) = decide(&s, q, Duration::ZERO).await else {
        panic!("refused until redis answers")
    };
    assert_eq!(d.retry_in(), DEFAULT_RETRY_BACKOFF);
    assert!(fake.forgotten.lock().unwrap().is_empty());
}

/// With the fallback divided between replicas, each one's in-process bucket gets its
/// share of the quota.
#[tokio::test(start_paused = true)]
async fn fallback_replicas_divide_the_quota() {
    let fake = Fake::new(Mode::Fail);
    let s: RedisStore<HostKey> = RedisStore::builder("redis://unused")
        .fallback_replicas(NonZeroU32::new(4).unwrap())
        .build(Arc::clone(&fake) as DynBackend);
    let start = Instant::now();
    let mut starts = Vec::new();
    for _ in 0..3 {
        if let Decision::Admit(g) = decide(&s, quota(10.0, 5), Duration::from_secs(60)).await {
            starts.push(g.at() - start);
        }
    }
    // 10/s and burst 5 over 4 replicas: 2.5/s, burst 1.
    assert_eq!(starts, [Duration::ZERO, 400 * MS, 800 * MS]);
}

/// When the upstream was called, if it was.
type Called = Arc<Mutex<Option<Instant>>>;

/// The layer over `store`, with an upstream that records when it was called.
fn recording(
    store: RedisStore<HostKey>,
) -> (
    impl tower::Service<http::Request<()>, Response = http::Response<()>, Error = BoxError>,
    Called,
) {
    recording_in(store, courier_ratelimit::Mode::Wait)
}

/// [`recording`] in `mode`.
fn recording_in(
    store: RedisStore<HostKey>,
    mode: courier_ratelimit::Mode,
) -> (
    impl tower::Service<http::Request<()>, Response = http::Response<()>, Error = BoxError>,
    Called,
) {
    let called = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&called);
    let layer = TokenBucketRateLimitLayer::with_quota(quota(10.0, 5))
        .mode(mode)
        .store_in(store);
    let svc =
        ServiceBuilder::new()
            .layer(layer)
            .service(service_fn(move |_req: http::Request<()>| {
                *seen.lock().unwrap() = Some(Instant::now());
                async { Ok::<_, BoxError>(http::Response::new(())) }
            }));
    (svc, called)
}

fn with_deadline(after: Duration) -> http::Request<()> {
    let mut req = http::Request::get("https://api.example/").body(()).unwrap();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(after);
    req
}

/// A request with 10 ms left is refused at its deadline while Redis hangs: never sent after
/// it (the fallback, 50 ms later, would have admitted it).
#[tokio::test(start_paused = true)]
async fn a_hanging_redis_never_sends_past_the_deadline() {
    // In wait and in reject mode alike.
    for mode in [
        courier_ratelimit::Mode::Reject,
        courier_ratelimit::Mode::Wait,
    ] {
        let fake = Fake::new(Mode::Hang);
        let s = store(&fake, FailurePolicy::FailOpen);
        let (svc, called) = recording_in(s.clone(), mode);
        let start = Instant::now();
        let err = svc.oneshot(with_deadline(10 * MS)).await.unwrap_err();
        assert!(err.is::<RateLimited>(), "{mode:?}: {err}");
        assert_eq!(
            start.elapsed(),
            10 * MS,
            "{mode:?}: refused at the deadline"
        );
        assert_eq!(*called.lock().unwrap(), None, "{mode:?}: never sent");
        assert!(!s.is_degraded(), "{mode:?}: a wait that ended is no outage");
    }
    let fake = Fake::new(Mode::Hang);
    let s = store(&fake, FailurePolicy::FailOpen);
    // Without a deadline the command timeout still starts an outage.
    let d = decide(&s, quota(10.0, 5), Duration::from_secs(60)).await;
    assert!(matches!(d, Decision::Admit(_)), "{d:?}");
    assert!(s.is_degraded());
}

/// A slot free at once, answered after 10 ms: reject mode (`max_wait` zero) takes it, and a
/// caller that accepts a short wait (5 ms, configured or what its deadline leaves) takes it
/// too: accepting a wait never turns a free slot into a refusal.
#[tokio::test(start_paused = true)]
async fn a_short_accepted_wait_still_takes_a_free_slot_on_a_slow_redis() {
    struct SlowFree;
    impl crate::backend::Backend for SlowFree {
        fn decide(&self, _: GcraCall) -> crate::backend::BoxFut<Reply> {
            Box::pin(async move {
                tokio::time::sleep(10 * MS).await;
                Ok(ADMIT_NOW)
            })
        }
        fn park(&self, _: String, _: u64) -> crate::backend::BoxFut<()> {
            Box::pin(async { Ok(()) })
        }
        fn give_back(&self, _: String, _: u64, _: u64) -> crate::backend::BoxFut<()> {
            Box::pin(async { Ok(()) })
        }
        fn forget_bucket(&self, _: String, _: u64) -> crate::backend::BoxFut<()> {
            Box::pin(async { Ok(()) })
        }
        fn probe(&self, _: GcraCall) -> crate::backend::BoxFut<()> {
            Box::pin(async { Ok(()) })
        }
        fn reset(&self) {}
        fn describe(&self) -> String {
            "slow-free:0".to_owned()
        }
    }
    let s = RedisStore::builder("redis://unused").build(Arc::new(SlowFree) as DynBackend);
    let d = decide(&s, quota(10.0, 5), Duration::ZERO).await;
    assert!(matches!(d, Decision::Admit(_)), "reject mode: {d:?}");
    let d = decide(&s, quota(10.0, 5), 5 * MS).await;
    assert!(matches!(d, Decision::Admit(_)), "5 ms accepted: {d:?}");
}

/// After waiting on Redis for the command timeout, the fallback only admits a slot within
/// what is left of the longest wait: the time spent on Redis counts.
#[tokio::test(start_paused = true)]
async fn the_fallback_counts_the_time_spent_on_redis() {
    let fake = Fake::new(Mode::Hang);
    let s = store(&fake, FailurePolicy::FailOpen);
    let q = quota(10.0, 1);
    let start = Instant::now();
    // The fallback's next slot is 100 ms away.
    assert!(matches!(
        s.fallback().decide(&host(), q, Duration::ZERO),
        Decision::Admit(_)
    ));
    // 80 ms accepted, 50 spent on Redis: 30 left, the slot is 50 away.
    let Decision::Deny(d) = decide(&s, q, 80 * MS).await else {
        panic!("the slot at 100 ms is past the 80 ms accepted")
    };
    assert_eq!(d.retry_in(), 50 * MS);
    assert_eq!(start.elapsed(), DEFAULT_COMMAND_TIMEOUT);
    // Degraded now: a decision is at once, with the whole wait.
    let Decision::Admit(g) = decide(&s, q, 80 * MS).await else {
        panic!("admitted")
    };
    assert_eq!(g.at(), start + 100 * MS);
}

/// Answers every decision after `delay`, admitting at the longest wait it was given, and
/// records the slots given back.
struct Slow {
    delay: Duration,
    give_backs: Mutex<Vec<u64>>,
}

impl crate::backend::Backend for Slow {
    fn decide(&self, call: GcraCall) -> crate::backend::BoxFut<Reply> {
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(Reply {
                wait_us: call.args[2],
                ..ADMIT_NOW
            })
        })
    }
    fn park(&self, _: String, _: u64) -> crate::backend::BoxFut<()> {
        Box::pin(async { Ok(()) })
    }
    fn give_back(&self, _: String, ticket: u64, _: u64) -> crate::backend::BoxFut<()> {
        self.give_backs.lock().unwrap().push(ticket);
        Box::pin(async { Ok(()) })
    }
    fn forget_bucket(&self, _: String, _: u64) -> crate::backend::BoxFut<()> {
        Box::pin(async { Ok(()) })
    }
    fn probe(&self, _: GcraCall) -> crate::backend::BoxFut<()> {
        Box::pin(async { Ok(()) })
    }
    fn reset(&self) {}
    fn describe(&self) -> String {
        "slow:0".to_owned()
    }
}

fn slow(delay: Duration) -> (Arc<Slow>, RedisStore<HostKey>) {
    let backend = Arc::new(Slow {
        delay,
        give_backs: Mutex::default(),
    });
    let s = RedisStore::builder("redis://unused").build(Arc::clone(&backend) as DynBackend);
    (backend, s)
}

/// Redis grants a wait within the longest wait on its own clock; laid on ours from the
/// reply's arrival (30 ms later) it would end past the deadline: refused, given back.
#[tokio::test(start_paused = true)]
async fn a_slow_reply_never_puts_the_slot_past_the_deadline() {
    let (backend, s) = slow(30 * MS);
    let (svc, called) = recording(s.clone());
    let err = svc.oneshot(with_deadline(200 * MS)).await.unwrap_err();
    assert!(err.is::<RateLimited>(), "{err}");
    assert_eq!(*called.lock().unwrap(), None, "never sent");
    tokio::task::yield_now().await;
    assert_eq!(
        *backend.give_backs.lock().unwrap(),
        [77],
        "the slot went back"
    );

    // The store alone: the same, measured against the longest wait.
    let start = Instant::now();
    let Decision::Deny(d) = decide(&s, quota(10.0, 5), 200 * MS).await else {
        panic!("the slot is 230 ms after the ask, 200 accepted")
    };
    assert_eq!(d.retry_in(), 200 * MS);
    assert_eq!(start.elapsed(), 30 * MS);
    tokio::task::yield_now().await;
    assert_eq!(backend.give_backs.lock().unwrap().len(), 2);
    assert!(!s.is_degraded());
}

/// A slot free at once is taken at once, however long the answer took (the round trip is
/// bounded by the command timeout): reject mode keeps working on a slow Redis.
#[tokio::test(start_paused = true)]
async fn a_slow_reply_for_a_free_slot_is_admitted() {
    let (backend, s) = slow(30 * MS);
    let start = Instant::now();
    let Decision::Admit(g) = decide(&s, quota(10.0, 5), Duration::ZERO).await else {
        panic!("a free slot")
    };
    assert_eq!(g.at(), start + 30 * MS);
    assert!(backend.give_backs.lock().unwrap().is_empty());
}

/// A park heard while Redis is skipped (or whose background write failed) is written to
/// Redis when the probe finds it again, with the time it has left, before decisions are
/// shared again.
#[tokio::test(start_paused = true)]
async fn a_park_heard_during_an_outage_is_sent_when_redis_answers() {
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailOpen);
    decide(&s, quota(10.0, 5), Duration::ZERO).await;
    assert!(s.is_degraded());
    let other = HostKey::from_request(
        &http::Request::get("https://other.example/")
            .body(())
            .unwrap(),
    );
    s.park(&host(), Duration::from_secs(30));
    s.park(&other, 100 * MS);
    assert!(fake.parks.lock().unwrap().is_empty(), "redis is skipped");
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
    assert!(!s.is_degraded());
    assert_eq!(
        *fake.parks.lock().unwrap(),
        [(
            "courier:rl:{https://api.example}:park".to_owned(),
            29_500_000
        )],
        "the live park, with what it has left; the ended one is dropped"
    );

    // A background write that fails is sent again too.
    fake.set(Mode::Fail);
    s.park(&host(), Duration::from_secs(60));
    tokio::task::yield_now().await;
    assert!(s.is_degraded());
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
    assert!(!s.is_degraded());
    let parks = fake.parks.lock().unwrap().clone();
    assert_eq!(parks.len(), 3, "{parks:?}");
    assert_eq!(parks[2].1, 59_500_000);
}

/// The probe runs the decision script itself (on keys of its own), so a Redis that answers
/// but refuses the script's writes is still down. After a failed decision it probes beside
/// that key (the same hash tag: the same Redis Cluster slot, whose node is the one that
/// failed); after a failed background command, on a key of its own.
#[tokio::test(start_paused = true)]
async fn the_probe_runs_the_script_on_its_own_keys() {
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailOpen);
    decide(&s, quota(10.0, 5), Duration::ZERO).await;
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
    assert!(!s.is_degraded());
    let probes = fake.probe_calls.lock().unwrap().clone();
    assert_eq!(probes.len(), 1);
    assert_eq!(
        probes[0].tat_key,
        "courier:rl:{https://api.example}:probe:tat"
    );
    assert_eq!(
        probes[0].park_key,
        "courier:rl:{https://api.example}:probe:park"
    );
    assert_eq!(probes[0].args, [1, 0, crate::script::CAP_US, 0]);

    fake.set(Mode::Fail);
    s.park(&host(), Duration::from_secs(1));
    tokio::task::yield_now().await;
    assert!(s.is_degraded());
    fake.set(Mode::Answer(ADMIT_NOW));
    tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
    assert!(!s.is_degraded());
    let probes = fake.probe_calls.lock().unwrap().clone();
    assert_eq!(probes.len(), 2);
    assert_eq!(probes[1].tat_key, "courier:rl:{courier-probe}:tat");
    assert_eq!(probes[1].park_key, "courier:rl:{courier-probe}:park");
}

/// Fail-closed: a host parked longer than the backoff is refused until the park ends.
#[tokio::test(start_paused = true)]
async fn fail_closed_refuses_a_parked_host_until_its_park_ends() {
    let fake = Fake::new(Mode::Fail);
    let s = store(&fake, FailurePolicy::FailClosed);
    s.park(&host(), Duration::from_secs(3));
    tokio::task::yield_now().await;
    assert!(s.is_degraded());
    assert_eq!(
        decide(&s, quota(10.0, 5), Duration::from_secs(60)).await,
        Decision::Deny(Denial::new(Duration::from_secs(3)).parked(true))
    );
    // A short park: the backoff is the longer wait.
    let other = HostKey::from_request(
        &http::Request::get("https://other.example/")
            .body(())
            .unwrap(),
    );
    s.park(&other, 100 * MS);
    assert_eq!(
        s.acquire(&other, quota(10.0, 5), Duration::from_secs(60))
            .await
            .unwrap(),
        Decision::Deny(Denial::new(DEFAULT_RETRY_BACKOFF))
    );
}

#[tokio::test]
async fn builder_errors() {
    let err = RedisStore::builder("not a url")
        .connect_lazy::<HostKey>()
        .unwrap_err();
    assert!(err.is_invalid_url(), "{err}");
    // Nothing listens on port 1: connect fails within its timeout.
    let err = RedisStore::builder("redis://127.0.0.1:1")
        .connect_timeout(Duration::from_millis(200))
        .connect::<HostKey>()
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn building_needs_a_runtime() {
    let err = RedisStore::builder("redis://127.0.0.1:6379")
        .connect_lazy::<HostKey>()
        .unwrap_err();
    assert!(err.is_no_runtime(), "{err}");
}

#[test]
fn builder_debug_hides_the_url() {
    let b = RedisStore::builder("redis://:hunter2@127.0.0.1/");
    assert!(!format!("{b:?}").contains("hunter2"));
}

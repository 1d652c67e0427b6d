//! [`RedisStore`]: the token buckets in Redis, one decision per round trip, with an in-process
//! fallback for when Redis is slow or down.

use crate::backend::{DynBackend, RedisBackend};
use crate::error::{CommandTimedOut, ConnectError};
use crate::future::AcquireFuture;
use crate::key::{RedisKey, key_names};
use crate::script::{CAP_US, GcraCall, REDIS_TICKET, micros_ceil};
use courier_ratelimit::{
    Decision, Denial, Grant, InMemoryStore, MAX_INTERVAL, Quota, Rate, RateLimitStore,
};
use redis::aio::ConnectionManagerConfig;
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// The default key prefix: `courier:rl:`.
pub const DEFAULT_PREFIX: &str = "courier:rl:";

/// The default bound on one command: 50 ms.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_millis(50);

/// The default bound on connecting: 1 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The default time Redis is left alone after a failure before it is tried again: 500 ms.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// After this many probes in a row that timed out, the connection is dropped and made anew.
const RESET_AFTER_TIMEOUTS: u32 = 10;

/// At most this many parks wait to be sent to Redis after an outage (one per key; a park
/// beyond it is still obeyed by this replica).
const MAX_UNSENT_PARKS: usize = 10_000;

/// What a decision comes to while Redis is slow or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Decide in process, with an [`InMemoryStore`] under the same quota (divided by
    /// [`RedisStoreBuilder::fallback_replicas`]): requests keep flowing, each replica paces
    /// itself alone. The default.
    #[default]
    FailOpen,
    /// Refuse: the layer fails the request with
    /// [`RateLimited`](courier_core::RateLimited), `retry_in` the time until Redis is tried
    /// again (or until the host's park ends, when this replica knows of a longer one). Nothing
    /// is sent that the shared limit did not allow.
    FailClosed,
}

/// A [`RateLimitStore`] in Redis: every replica that points at the same Redis and prefix
/// shares each bucket, and each server's park.
///
/// See the [crate docs](crate) for the design. Build one with [`RedisStore::builder`].
///
/// # Clone
///
/// Cloning is cheap and shares everything (the connection, the fallback buckets, the outage
/// state): all behind `Arc`s.
pub struct RedisStore<K> {
    shared: Arc<Shared>,
    fallback: InMemoryStore<K>,
}

/// What the store's clones share, whatever the key type.
pub(crate) struct Shared {
    backend: DynBackend,
    addr: String,
    prefix: Box<str>,
    command_timeout: Duration,
    retry_backoff: Duration,
    policy: FailurePolicy,
    fallback_replicas: NonZeroU32,
    /// Set while Redis is skipped: from the first failure until a probe gets an answer.
    down: AtomicBool,
    outages: AtomicU64,
    /// Decisions taken without Redis during the current outage (for the recovery log).
    local_decisions: AtomicU64,
    /// The probe's decision, on a key of its own.
    probe_call: GcraCall,
    /// Parks Redis has not got (heard during an outage, or whose write failed): park key and
    /// end. The probe sends them before decisions are shared again. `down` changes only under
    /// this lock while the probe drains it.
    unsent_parks: Mutex<Vec<(String, Instant)>>,
}

/// Builds a [`RedisStore`]; made by [`RedisStore::builder`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    retry_backoff: Duration,
    policy: FailurePolicy,
    fallback_replicas: NonZeroU32,
    fallback_max_keys: usize,
}

// === impl RedisStoreBuilder ===

impl RedisStoreBuilder {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            policy: FailurePolicy::FailOpen,
            fallback_replicas: NonZeroU32::MIN,
            fallback_max_keys: courier_ratelimit::store::DEFAULT_MAX_KEYS,
        }
    }

    /// The prefix of every key the store writes. Replicas share a bucket when they use the
    /// same Redis, the same prefix and the same key. Defaults to `courier:rl:`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one decision waits for Redis before the failure policy decides instead; a
    /// caller never waits on Redis longer. Set it above the round trip to Redis with room for
    /// its slow moments. Defaults to 50 ms.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long connecting may take (each attempt of the connection manager, and the check
    /// made by [`connect`](Self::connect)). Defaults to 1 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// After a failure, how long Redis is left alone before a background probe tries it again
    /// (and again, this far apart, until it answers). Meanwhile every decision is taken by the
    /// failure policy at once, without waiting on Redis. Defaults to 500 ms.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// What decides while Redis is slow or down. Defaults to [`FailurePolicy::FailOpen`].
    pub fn policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How many replicas share the limit: while Redis is down, each one's in-process bucket
    /// gets `rate / n` and `burst / n` (at least 1), so that together they stay near the shared
    /// limit. Defaults to 1 (each replica keeps the whole quota: up to `n` times the limit in
    /// all during an outage).
    pub fn fallback_replicas(mut self, replicas: NonZeroU32) -> Self {
        self.fallback_replicas = replicas;
        self
    }

    /// How many keys the in-process fallback keeps before it evicts idle ones. Defaults to
    /// 10 000.
    pub fn fallback_max_keys(mut self, max_keys: usize) -> Self {
        self.fallback_max_keys = max_keys;
        self
    }

    /// Builds the store and waits (at most the connect timeout) until Redis answers: it runs
    /// the script once, on a key of its own, which loads it into Redis's cache and checks that
    /// Redis takes its writes (a read-only replica does not).
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the URL is invalid, when called outside a tokio runtime, or when
    /// Redis did not answer in time.
    pub async fn connect<K>(self) -> Result<RedisStore<K>, ConnectError>
    where
        K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
    {
        let connect_timeout = self.connect_timeout;
        let store = self.connect_lazy::<K>()?;
        let probe = store.shared.backend.probe(store.shared.probe_call.clone());
        match tokio::time::timeout(connect_timeout, probe).await {
            Ok(Ok(())) => Ok(store),
            Ok(Err(err)) => Err(ConnectError::unreachable(Some(err))),
            Err(_) => Err(ConnectError::unreachable(Some(Box::new(CommandTimedOut)))),
        }
    }

    /// Builds the store without waiting for Redis: the first decision connects. While Redis is
    /// not there, the failure policy decides, as during any outage.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the URL is invalid or when called outside a tokio runtime (the
    /// connection's helper task needs one).
    pub fn connect_lazy<K>(self) -> Result<RedisStore<K>, ConnectError>
    where
        K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
    {
        let client = redis::Client::open(self.url.as_str()).map_err(ConnectError::invalid_url)?;
        if Handle::try_current().is_err() {
            return Err(ConnectError::no_runtime());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout.max(self.command_timeout)))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(self.retry_backoff.max(Duration::from_millis(20)));
        let backend = RedisBackend::new(client, config).map_err(ConnectError::invalid_url)?;
        Ok(self.build(Arc::new(backend)))
    }

    pub(crate) fn build<K>(self, backend: DynBackend) -> RedisStore<K>
    where
        K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
    {
        RedisStore {
            shared: Arc::new(Shared {
                probe_call: GcraCall::probe(&self.prefix),
                unsent_parks: Mutex::default(),
                addr: backend.describe(),
                backend,
                prefix: self.prefix.into_boxed_str(),
                command_timeout: self.command_timeout,
                retry_backoff: self.retry_backoff,
                policy: self.policy,
                fallback_replicas: self.fallback_replicas,
                down: AtomicBool::new(false),
                outages: AtomicU64::new(0),
                local_decisions: AtomicU64::new(0),
            }),
            fallback: InMemoryStore::with_max_keys(self.fallback_max_keys),
        }
    }
}

impl fmt::Debug for RedisStoreBuilder {
    // The URL may hold a password: it is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("prefix", &self.prefix)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_backoff", &self.retry_backoff)
            .field("policy", &self.policy)
            .field("fallback_replicas", &self.fallback_replicas)
            .field("fallback_max_keys", &self.fallback_max_keys)
            .finish_non_exhaustive()
    }
}

// === impl RedisStore ===

impl RedisStore<()> {
    /// A builder for a store at `url` (`redis://[user:password@]host[:port][/db]`, or
    /// `rediss://` when the `redis` crate's TLS is enabled).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url)
    }
}

impl<K> RedisStore<K>
where
    K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
{
    /// Whether Redis is being skipped now, after a failure, until a probe gets an answer.
    pub fn is_degraded(&self) -> bool {
        self.shared.down.load(Ordering::Acquire)
    }

    /// How many outages began since the store was built.
    pub fn outages(&self) -> u64 {
        self.shared.outages.load(Ordering::Relaxed)
    }

    /// The failure policy.
    pub fn policy(&self) -> FailurePolicy {
        self.shared.policy
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The in-process store that decides during an outage (fail-open) and that holds this
    /// process's own record of every park.
    pub fn fallback(&self) -> &InMemoryStore<K> {
        &self.fallback
    }

    /// The names of the Redis keys of `key`'s bucket: its TAT and its park.
    pub fn key_names(&self, key: &K) -> (String, String) {
        key_names(&self.shared.prefix, key)
    }

    /// The quota of one replica's in-process bucket during an outage.
    fn fallback_quota(&self, quota: Quota) -> Quota {
        let n = self.shared.fallback_replicas.get();
        if n == 1 {
            return quota;
        }
        let interval = quota.rate().interval().saturating_mul(n).min(MAX_INTERVAL);
        let rate = Rate::every(interval).unwrap_or(quota.rate());
        let burst = NonZeroU32::new(quota.burst().get() / n).unwrap_or(NonZeroU32::MIN);
        Quota::new(rate, burst)
    }

    /// The decision without Redis, by the failure policy.
    pub(crate) fn decide_without_redis(
        &self,
        key: &K,
        quota: Quota,
        max_wait: Duration,
    ) -> Decision {
        match self.shared.policy {
            FailurePolicy::FailOpen => {
                self.shared.local_decisions.fetch_add(1, Ordering::Relaxed);
                self.fallback
                    .decide(key, self.fallback_quota(quota), max_wait)
            }
            FailurePolicy::FailClosed => {
                // Refused until Redis is tried again, or until the host's park ends if later.
                let backoff = self.shared.retry_backoff;
                let park = self
                    .fallback
                    .parked_until(key)
                    .map(|until| until.saturating_duration_since(Instant::now()));
                match park {
                    Some(left) if left > backoff => Decision::Deny(Denial::new(left).parked(true)),
                    _ => Decision::Deny(Denial::new(backoff)),
                }
            }
        }
    }

    /// Redis failed to decide: note the outage, then decide without it.
    pub(crate) fn on_failure(
        &self,
        err: &(dyn fmt::Display + '_),
        key: &K,
        quota: Quota,
        max_wait: Duration,
    ) -> Decision {
        self.shared.failed(err);
        self.decide_without_redis(key, quota, max_wait)
    }
}

impl<K> Clone for RedisStore<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            fallback: self.fallback.clone(),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for RedisStore<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("addr", &self.shared.addr)
            .field("prefix", &self.shared.prefix)
            .field("policy", &self.shared.policy)
            .field("command_timeout", &self.shared.command_timeout)
            .field("degraded", &self.shared.down.load(Ordering::Relaxed))
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl<K> RateLimitStore<K> for RedisStore<K>
where
    K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
{
    type Acquire = AcquireFuture<K>;

    /// One round trip: the script checks the park and the bucket and reserves the slot, on
    /// Redis's clock. Bounded by the command timeout; during an outage Redis is not asked at
    /// all and the failure policy answers at once.
    fn acquire(&self, key: &K, quota: Quota, max_wait: Duration) -> AcquireFuture<K> {
        if self.is_degraded() {
            return AcquireFuture::ready(self.decide_without_redis(key, quota, max_wait));
        }
        let asked = Instant::now();
        // A park this process heard of is obeyed at once, even before Redis has it.
        let local_park = self
            .fallback
            .parked_until(key)
            .map(|until| until.saturating_duration_since(asked))
            .unwrap_or_default();
        let call = GcraCall::new(self.key_names(key), quota, max_wait, local_park);
        // Bounded by the command timeout only: `max_wait` is how long the caller accepts to wait
        // for a slot, not how long Redis may take to say so (a slot free at once is taken at
        // once, however slow the reply). The rate limiter layer races this against the
        // request's deadline.
        let fut = tokio::time::timeout(
            self.shared.command_timeout,
            self.shared.backend.decide(call),
        );
        AcquireFuture::remote(fut, self.clone(), key.clone(), quota, asked, max_wait)
    }

    /// The parks this replica heard of (kept in process as well as in Redis).
    fn parked_until(&self, key: &K) -> Option<Instant> {
        self.fallback.parked_until(key)
    }

    /// Records the park in process at once (this replica obeys it on its next request), and
    /// sends it to Redis in a spawned task (every replica obeys it from its next decision).
    /// During an outage, or when the write fails, the park is kept and sent when Redis answers
    /// again (with the time it has left then).
    fn park(&self, key: &K, wait: Duration) {
        self.fallback.park(key, wait);
        let (_, park_key) = self.key_names(key);
        let now = Instant::now();
        let until = now
            .checked_add(wait.min(Duration::from_micros(CAP_US)))
            .unwrap_or(now);
        let park_key = if self.is_degraded() {
            match self.shared.keep_park(park_key, until, false) {
                Some(park_key) => park_key, // the outage ended meanwhile
                None => return,
            }
        } else {
            park_key
        };
        let fut = self
            .shared
            .backend
            .park(park_key.clone(), micros_ceil(wait));
        self.shared.spawn_command(fut, Some((park_key, until)));
    }

    /// A slot reserved in Redis is given back (in a spawned task) when no later reservation
    /// was stacked on it, before or after its moment (a request refused on waking, or dropped
    /// after its slot came, was never sent); one from the fallback goes back to the fallback.
    fn cancel(&self, key: &K, quota: Quota, grant: &Grant) {
        if grant.ticket() & REDIS_TICKET == 0 {
            self.fallback.cancel(key, self.fallback_quota(quota), grant);
            return;
        }
        if self.is_degraded() {
            return;
        }
        let call = GcraCall::new(self.key_names(key), quota, Duration::ZERO, Duration::ZERO);
        let interval_us = call.interval_us();
        let fut = self.shared.backend.give_back(
            call.tat_key,
            grant.ticket() & !REDIS_TICKET,
            interval_us,
        );
        self.shared.spawn_command(fut, None);
    }
}

// === impl Shared ===

impl Shared {
    /// Notes a failure. The first one of an outage logs a warning and starts the probe; the
    /// rest are silent. Without a runtime no probe could run, so Redis is then not skipped.
    fn failed(self: &Arc<Self>, err: &(dyn fmt::Display + '_)) {
        let Ok(handle) = Handle::try_current() else {
            return;
        };
        if self.down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.outages.fetch_add(1, Ordering::Relaxed);
        self.local_decisions.store(0, Ordering::Relaxed);
        let retry_ms = self.retry_backoff.as_millis() as u64;
        match self.policy {
            FailurePolicy::FailOpen => tracing::warn!(
                redis = %self.addr,
                error = %err,
                retry_ms,
                "redis rate limit store unavailable: limits are decided in process, per replica, \
                 until redis answers again"
            ),
            FailurePolicy::FailClosed => tracing::warn!(
                redis = %self.addr,
                error = %err,
                retry_ms,
                "redis rate limit store unavailable: rate-limited requests are refused until \
                 redis answers again"
            ),
        }
        handle.spawn(probe(Arc::downgrade(self)));
    }

    /// Runs a background command (park, give back) under the command timeout. A park that
    /// fails (`unsent`) is kept for the probe to send.
    fn spawn_command(
        self: &Arc<Self>,
        fut: crate::backend::BoxFut<()>,
        unsent: Option<(String, Instant)>,
    ) {
        let Ok(handle) = Handle::try_current() else {
            return;
        };
        let shared = Arc::clone(self);
        handle.spawn(async move {
            let err: Box<dyn fmt::Display + Send> =
                match tokio::time::timeout(shared.command_timeout, fut).await {
                    Ok(Ok(())) => return,
                    Ok(Err(err)) => Box::new(err),
                    Err(_) => Box::new(CommandTimedOut),
                };
            if let Some((park_key, until)) = unsent {
                shared.keep_park(park_key, until, true);
            }
            shared.failed(&*err);
        });
    }

    /// Keeps a park for the probe to send. Unless `always`, only while Redis is skipped: else
    /// hands the park key back, for the caller to send.
    fn keep_park(&self, park_key: String, until: Instant, always: bool) -> Option<String> {
        let mut unsent = self
            .unsent_parks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !always && !self.down.load(Ordering::Acquire) {
            return Some(park_key);
        }
        let now = Instant::now();
        unsent.retain(|(_, end)| *end > now);
        if let Some((_, end)) = unsent.iter_mut().find(|(k, _)| *k == park_key) {
            *end = (*end).max(until);
        } else if unsent.len() < MAX_UNSENT_PARKS {
            unsent.push((park_key, until));
        }
        None
    }

    /// Sends the kept parks (those not over yet), then lets decisions go to Redis again.
    /// Returns `false`, keeping the parks not sent, when Redis fails one.
    async fn send_parks_and_share(&self) -> bool {
        loop {
            let batch = {
                let mut unsent = self
                    .unsent_parks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if unsent.is_empty() {
                    self.down.store(false, Ordering::Release);
                    return true;
                }
                std::mem::take(&mut *unsent)
            };
            let mut rest = batch.into_iter();
            while let Some((park_key, until)) = rest.next() {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    continue;
                }
                let fut = self.backend.park(park_key.clone(), micros_ceil(left));
                if !matches!(
                    tokio::time::timeout(self.command_timeout, fut).await,
                    Ok(Ok(()))
                ) {
                    self.keep_park(park_key, until, true);
                    for (park_key, until) in rest {
                        self.keep_park(park_key, until, true);
                    }
                    return false;
                }
            }
        }
    }
}

/// Tries Redis every `retry_backoff` until it answers, then lets decisions go to it again.
/// Ends early when the store is dropped.
async fn probe(weak: Weak<Shared>) {
    let since = Instant::now();
    let mut timeouts = 0u32;
    loop {
        let Some(backoff) = weak.upgrade().map(|s| s.retry_backoff) else {
            return;
        };
        tokio::time::sleep(backoff).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let probe = shared.backend.probe(shared.probe_call.clone());
        match tokio::time::timeout(shared.command_timeout, probe).await {
            Ok(Ok(())) => {
                if !shared.send_parks_and_share().await {
                    timeouts = 0;
                    continue;
                }
                tracing::info!(
                    redis = %shared.addr,
                    outage_ms = since.elapsed().as_millis() as u64,
                    decided_without_redis = shared.local_decisions.load(Ordering::Relaxed),
                    "redis rate limit store answers again: limits are shared again"
                );
                return;
            }
            Ok(Err(_)) => timeouts = 0,
            Err(_) => {
                timeouts += 1;
                if timeouts >= RESET_AFTER_TIMEOUTS {
                    timeouts = 0;
                    shared.backend.reset();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{Fake, Mode};
    use crate::script::Reply;
    use courier_core::{BoxError, Deadline, HostKey, RateLimited};
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
        let Decision::Admit(grant) = decide(&s, quota(10.0, 5), Duration::from_secs(60)).await
        else {
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
        let svc = ServiceBuilder::new().layer(layer).service(service_fn(
            |_req: http::Request<()>| async { Ok::<_, BoxError>(http::Response::new(())) },
        ));
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
        let svc = ServiceBuilder::new().layer(layer).service(service_fn(
            move |_req: http::Request<()>| {
                *seen.lock().unwrap() = Some(Instant::now());
                async { Ok::<_, BoxError>(http::Response::new(())) }
            },
        ));
        (svc, called)
    }

    fn with_deadline(deadline: Deadline) -> http::Request<()> {
        let mut req = http::Request::get("https://api.example/").body(()).unwrap();
        req.extensions_mut().insert(deadline);
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
            let err = svc
                .oneshot(with_deadline(Deadline::after(10 * MS)))
                .await
                .unwrap_err();
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
        let err = svc
            .oneshot(with_deadline(Deadline::after(200 * MS)))
            .await
            .unwrap_err();
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

    /// The probe runs the decision script itself (on a key of its own), so a Redis that
    /// answers but refuses the script's writes is still down.
    #[tokio::test(start_paused = true)]
    async fn the_probe_runs_the_script_on_its_own_key() {
        let fake = Fake::new(Mode::Fail);
        let s = store(&fake, FailurePolicy::FailOpen);
        decide(&s, quota(10.0, 5), Duration::ZERO).await;
        fake.set(Mode::Answer(ADMIT_NOW));
        tokio::time::sleep(DEFAULT_RETRY_BACKOFF + MS).await;
        assert!(!s.is_degraded());
        let probes = fake.probe_calls.lock().unwrap().clone();
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].tat_key, "courier:rl:{courier-probe}:tat");
        assert_eq!(probes[0].park_key, "courier:rl:{courier-probe}:park");
        assert_eq!(probes[0].args, [1, 0, crate::script::CAP_US, 0]);
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
}

//! [`RedisStore`]: the token buckets in Redis, one decision per round trip, with an in-process
//! fallback for when Redis is slow or down.

mod builder;
#[cfg(test)]
mod tests;

pub use builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_RETRY_BACKOFF,
    RedisStoreBuilder,
};

use crate::backend::DynBackend;
use crate::error::CommandTimedOut;
use crate::future::AcquireFuture;
use crate::key::{RedisKey, key_names};
use crate::script::{CAP_US, GcraCall, REDIS_TICKET, micros_ceil};
use courier_ratelimit::{
    Decision, Denial, Grant, InMemoryStore, MAX_INTERVAL, Quota, Rate, RateLimitStore,
};
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;

/// After this many probes in a row that timed out, the connection is dropped and made anew.
const RESET_AFTER_TIMEOUTS: u32 = 10;

/// At most this many parks wait to be sent to Redis after an outage (one per key; a park
/// beyond it is still obeyed by this replica).
const MAX_UNSENT_PARKS: usize = 10_000;

/// At most this many keys keep the ticket of this replica's last reservation (for
/// [`RateLimitStore::reset`]); past it they are all dropped, and a reset of one of them then
/// leaves the bucket in Redis as it is.
const MAX_BOOKED: usize = 10_000;

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
    /// The ticket of this replica's last reservation in Redis, per key.
    booked: Arc<Mutex<HashMap<K, u64>>>,
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
    /// The probe of the outage under way: on the slot of the key whose decision failed (a Redis
    /// Cluster answers per slot), or `probe_call` when a background command failed.
    outage_probe: Mutex<Option<GcraCall>>,
    /// Parks Redis has not got (heard during an outage, or whose write failed): park key and
    /// end. The probe sends them before decisions are shared again. `down` changes only under
    /// this lock while the probe drains it.
    unsent_parks: Mutex<Vec<(String, Instant)>>,
}

// === impl RedisStore ===

impl RedisStore<()> {
    /// A builder for a store at `url` (`redis://[user:password@]host[:port][/db]`, or
    /// `rediss://` when the `redis` crate's TLS is enabled).
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url)
    }

    /// A builder for a store over a Redis Cluster found from `seeds` (each a `redis://` URL of
    /// one node; one that answers is enough). The `redis` crate's cluster connection follows
    /// `MOVED` and `ASK` redirections and refreshes its slot map after a failover; a key's two
    /// entries share a hash tag, so each script runs on one node.
    pub fn cluster_builder<I, U>(seeds: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        RedisStoreBuilder::cluster(seeds.into_iter().map(Into::into).collect())
    }

    /// A builder for a store over the master that the sentinels at `sentinels` (each a
    /// `redis://` URL) name for `master`. After a failed command the sentinels are asked again,
    /// so a failover is followed once they have promoted a replica; until then the outage
    /// policy decides. A master that asks for a password takes it from
    /// [`RedisStoreBuilder::master_credentials`].
    pub fn sentinel_builder<I, U>(master: impl Into<String>, sentinels: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = U>,
        U: Into<String>,
    {
        RedisStoreBuilder::sentinel(
            master.into(),
            sentinels.into_iter().map(Into::into).collect(),
        )
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

    /// Notes the ticket of a reservation Redis made for this replica: the last one for `key`.
    pub(crate) fn booked(&self, key: &K, ticket: u64) {
        let mut booked = self.booked.lock().unwrap_or_else(PoisonError::into_inner);
        if booked.len() >= MAX_BOOKED && !booked.contains_key(key) {
            booked.clear();
        }
        booked.insert(key.clone(), ticket & !REDIS_TICKET);
    }

    /// Redis failed to decide: note the outage, then decide without it.
    pub(crate) fn on_failure(
        &self,
        err: &(dyn fmt::Display + '_),
        key: &K,
        quota: Quota,
        max_wait: Duration,
    ) -> Decision {
        if !self.shared.down.load(Ordering::Acquire) {
            let probe = GcraCall::probe_beside(self.key_names(key));
            *self
                .shared
                .outage_probe
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(probe);
        }
        self.shared.failed(err);
        self.decide_without_redis(key, quota, max_wait)
    }
}

impl<K> Clone for RedisStore<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            fallback: self.fallback.clone(),
            booked: Arc::clone(&self.booked),
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

    /// Forgets the bucket in process at once, and in Redis in a spawned task (a script, under
    /// the command timeout) if the last reservation there is still this replica's: the
    /// bucket's TAT is deleted, so that the next decision for `key` starts from a full bucket
    /// once the script has run (a decision already on its way may still see the old one). A
    /// bucket another replica reserved in since is left as it is: that replica's slots are
    /// current, not the leftovers of a stretch of pacing that ended, and replicas that start
    /// pacing together must not each clear the slots the others just took. The key's park
    /// stays, in process and in Redis: it is the server's word, not the bucket's.
    ///
    /// During an outage only the in-process bucket is forgotten (the one that decides then,
    /// under [`FailurePolicy::FailOpen`]), and nothing is sent later: by the time Redis
    /// answers again the slots it would have freed are at most the longest wait ahead. A
    /// failed script starts an outage, as any failed command does.
    fn reset(&self, key: &K) {
        let ticket = self
            .booked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        let park = self.fallback.parked_until(key);
        self.fallback.reset(key);
        if let Some(until) = park {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                self.fallback.park(key, left);
            }
        }
        let Some(ticket) = ticket else {
            return;
        };
        if self.is_degraded() {
            return;
        }
        let (tat_key, _) = self.key_names(key);
        let fut = self.shared.backend.forget_bucket(tat_key, ticket);
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

    /// Runs a background command (park, give back, reset) under the command timeout. A park that
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
                    *self
                        .outage_probe
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = None;
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
        let call = shared
            .outage_probe
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| shared.probe_call.clone());
        let probe = shared.backend.probe(call);
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

//! [`RedisStoreBuilder`]: the store's settings, and connecting.

use super::{FailurePolicy, RedisStore, Shared};
use crate::backend::{DynBackend, RedisBackend};
use crate::error::{CommandTimedOut, ConnectError};
use crate::key::RedisKey;
use crate::script::GcraCall;
use courier_ratelimit::InMemoryStore;
use redis::aio::ConnectionManagerConfig;
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Handle;

/// The default key prefix: `courier:rl:`.
pub const DEFAULT_PREFIX: &str = "courier:rl:";

/// The default bound on one command: 50 ms.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_millis(50);

/// The default bound on connecting: 1 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The default time Redis is left alone after a failure before it is tried again: 500 ms.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(500);

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
    pub(super) fn new(url: impl Into<String>) -> Self {
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

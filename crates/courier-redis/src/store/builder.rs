//! [`RedisStoreBuilder`]: the store's settings, and connecting.

use super::{FailurePolicy, RedisStore, Shared};
use crate::backend::{Connect, DynBackend, LazyBackend, RedisBackend};
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

/// Where the store's Redis is.
#[derive(Clone)]
enum Target {
    /// One node.
    Node(String),
    /// A Redis Cluster, found from these seed nodes.
    Cluster(Vec<String>),
    /// The master the sentinels at these addresses name for `master`.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

/// Builds a [`RedisStore`]; made by [`RedisStore::builder`] (one node),
/// [`RedisStore::cluster_builder`] (a Redis Cluster) or [`RedisStore::sentinel_builder`] (a
/// master watched by Sentinel).
#[derive(Clone)]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    retry_backoff: Duration,
    policy: FailurePolicy,
    fallback_replicas: NonZeroU32,
    fallback_max_keys: usize,
    /// `AUTH` for the master the sentinels name (and its replicas): username, password.
    master_credentials: Option<(Option<String>, String)>,
}

// === impl RedisStoreBuilder ===

impl RedisStoreBuilder {
    pub(super) fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Node(url.into()))
    }

    pub(super) fn cluster(seeds: Vec<String>) -> Self {
        Self::with_target(Target::Cluster(seeds))
    }

    pub(super) fn sentinel(master: String, sentinels: Vec<String>) -> Self {
        Self::with_target(Target::Sentinel { master, sentinels })
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            prefix: DEFAULT_PREFIX.to_owned(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            policy: FailurePolicy::FailOpen,
            fallback_replicas: NonZeroU32::MIN,
            fallback_max_keys: courier_ratelimit::store::DEFAULT_MAX_KEYS,
            master_credentials: None,
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

    /// The credentials of the master the sentinels name (and of the replica they promote in
    /// its place), for a store made by [`RedisStore::sentinel_builder`]: every connection to it
    /// sends `AUTH [username] password` first (the ACL user when `username` is given, else the
    /// `requirepass` password). The sentinels' own password, when they have one, goes in their
    /// URLs (`redis://[user]:password@host:port`). The other builders take the credentials in
    /// their URLs: there, this setting makes [`connect`](Self::connect) and
    /// [`connect_lazy`](Self::connect_lazy) fail.
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.master_credentials = Some((username.map(str::to_owned), password.to_owned()));
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
        if self.master_credentials.is_some() && !matches!(self.target, Target::Sentinel { .. }) {
            return Err(ConnectError::invalid_url(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "master credentials are for a store over Sentinel: put them in the URL",
            ))));
        }
        let backend: DynBackend = match &self.target {
            Target::Node(url) => {
                let client =
                    redis::Client::open(url.as_str()).map_err(ConnectError::invalid_url)?;
                if Handle::try_current().is_err() {
                    return Err(ConnectError::no_runtime());
                }
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    .set_response_timeout(Some(self.connect_timeout.max(self.command_timeout)))
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(self.retry_backoff.max(Duration::from_millis(20)));
                Arc::new(RedisBackend::new(client, config).map_err(ConnectError::invalid_url)?)
            }
            Target::Cluster(seeds) => self.cluster_backend(seeds)?,
            Target::Sentinel { master, sentinels } => self.sentinel_backend(master, sentinels)?,
        };
        if Handle::try_current().is_err() {
            return Err(ConnectError::no_runtime());
        }
        Ok(self.build(backend))
    }

    /// How long a command may take on the wire: the caller is bounded by the command timeout
    /// anyway; the connection's own bound lets it notice a dead node.
    fn response_timeout(&self) -> Duration {
        self.connect_timeout.max(self.command_timeout)
    }

    fn cluster_backend(&self, seeds: &[String]) -> Result<DynBackend, ConnectError> {
        if seeds.is_empty() {
            return Err(ConnectError::invalid_url(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a Redis Cluster needs at least one seed node",
            ))));
        }
        let client = redis::cluster::ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout())
            .retries(2)
            .build()
            .map_err(ConnectError::invalid_url)?;
        let describe = format!("cluster {}", addrs(seeds)?);
        let connect: Connect<redis::cluster_async::ClusterConnection> = Arc::new(move || {
            let client = client.clone();
            Box::pin(async move { Ok(client.get_async_connection().await?) })
        });
        Ok(Arc::new(LazyBackend::new(connect, describe)))
    }

    fn sentinel_backend(
        &self,
        master: &str,
        sentinels: &[String],
    ) -> Result<DynBackend, ConnectError> {
        use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
        if sentinels.is_empty() {
            return Err(ConnectError::invalid_url(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "Sentinel needs at least one sentinel address",
            ))));
        }
        let node = self
            .master_credentials
            .as_ref()
            .map(|(username, password)| {
                let mut info = redis::RedisConnectionInfo::default().set_password(password);
                if let Some(username) = username {
                    info = info.set_username(username);
                }
                SentinelNodeConnectionInfo::default().set_redis_connection_info(info)
            });
        let client = SentinelClient::build(
            sentinels.iter().map(String::as_str).collect(),
            master.to_owned(),
            node,
            SentinelServerType::Master,
        )
        .map_err(ConnectError::invalid_url)?;
        let client = Arc::new(tokio::sync::Mutex::new(client));
        let describe = format!("sentinel master {master} via {}", addrs(sentinels)?);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout()));
        let connect: Connect<redis::aio::MultiplexedConnection> = Arc::new(move || {
            let client = Arc::clone(&client);
            let config = config.clone();
            Box::pin(async move {
                // Asks the sentinels which node is the master now, then connects to it.
                let master = client.lock().await.async_get_client().await?;
                Ok(master
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?)
            })
        });
        Ok(Arc::new(LazyBackend::new(connect, describe)))
    }

    pub(crate) fn build<K>(self, backend: DynBackend) -> RedisStore<K>
    where
        K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
    {
        RedisStore {
            shared: Arc::new(Shared {
                probe_call: GcraCall::probe(&self.prefix),
                outage_probe: Mutex::default(),
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
            booked: Arc::default(),
        }
    }
}

/// The addresses of `urls`, without credentials, for logs.
fn addrs(urls: &[String]) -> Result<String, ConnectError> {
    use redis::IntoConnectionInfo;
    let mut out = Vec::with_capacity(urls.len());
    for url in urls {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(ConnectError::invalid_url)?;
        out.push(info.addr().to_string());
    }
    Ok(out.join(","))
}

impl fmt::Debug for RedisStoreBuilder {
    // The URL may hold a password: it is left out, as are the master's credentials.
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

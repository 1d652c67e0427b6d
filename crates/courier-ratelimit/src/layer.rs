use crate::config::{Mode, Quota, Rate};
use crate::service::TokenBucketRateLimit;
use crate::store::{InMemoryStore, RateLimitStore};
use courier_core::{Global, HintConfig, HostKey, KeyBy, KeyFn, PerHost, RequestHead};
use std::any::Any;
use std::fmt;
use std::hash::Hash;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// The default `max_wait`: 60 s.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

/// The default threshold above which a wait is logged: 1 s.
pub const DEFAULT_LOG_WAITS_OVER: Duration = Duration::from_secs(1);

/// Paces requests with a token bucket per host (or per key of your own, or one for all), and
/// parks a host when the server asks for quiet.
///
/// See the [crate docs](crate) for the behaviour and an example.
///
/// # Clone
///
/// The buckets are shared state owned by the layer, behind an `Arc`: every service the layer
/// makes, and every clone of those services, draws from the same buckets. Cloning never forks a
/// limit, and no `Buffer` is needed.
///
/// # Setters
///
/// A layer is a value: each setter returns a layer with buckets of its own (a fresh
/// [`InMemoryStore`] with the same room). The services it makes share them with each other,
/// never with services made by the layer before the setter, which keep their settings and
/// their buckets. The [`store`](Self::store) of a layer holds the buckets of the services that
/// layer makes, so read it after the last setter. A store handed in with
/// [`store_in`](Self::store_in) is yours and is kept by every later setter: sharing it (between
/// layers, or between processes) is what it is for.
pub struct TokenBucketRateLimitLayer<KF = PerHost, St = InMemoryStore<HostKey>> {
    pub(crate) shared: Arc<Shared<KF, St>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) quota: Quota,
    pub(crate) mode: Mode,
    pub(crate) max_wait: Duration,
    /// `None` when server hints are ignored.
    pub(crate) hints: Option<HintConfig>,
    pub(crate) log_waits_over: Duration,
}

/// What every service and clone made by one layer share.
#[derive(Clone)]
pub(crate) struct Shared<KF, St> {
    pub(crate) config: Config,
    pub(crate) key_fn: KF,
    pub(crate) store: St,
    /// Whether the layer made the store (an [`InMemoryStore`]) rather than being handed it
    /// with `store_in`: a setter replaces a store the layer made with a fresh one.
    own_store: bool,
}

// === impl TokenBucketRateLimitLayer ===

impl TokenBucketRateLimitLayer {
    /// A bucket per host (scheme + authority) of `burst` tokens, refilled at `rate`, in Wait
    /// mode, kept in an [`InMemoryStore`].
    pub fn new(rate: Rate, burst: NonZeroU32) -> Self {
        Self::with_quota(Quota::new(rate, burst))
    }

    /// A bucket per host with this quota (see [`TokenBucketRateLimitLayer::new`]).
    pub fn with_quota(quota: Quota) -> Self {
        Self::from_parts(
            Config {
                quota,
                mode: Mode::Wait,
                max_wait: DEFAULT_MAX_WAIT,
                hints: Some(HintConfig::new()),
                log_waits_over: DEFAULT_LOG_WAITS_OVER,
            },
            PerHost,
            InMemoryStore::new(),
            true,
        )
    }
}

impl<KF, St> TokenBucketRateLimitLayer<KF, St> {
    fn from_parts(config: Config, key_fn: KF, store: St, own_store: bool) -> Self {
        Self {
            shared: Arc::new(Shared {
                config,
                key_fn,
                store,
                own_store,
            }),
        }
    }

    /// The store holding the buckets.
    pub fn store(&self) -> &St {
        &self.shared.store
    }

    /// How buckets are keyed: [`PerHost`](courier_core::PerHost), [`Global`](courier_core::Global) or [`KeyBy`](courier_core::KeyBy).
    pub fn key_fn(&self) -> &KF {
        &self.shared.key_fn
    }

    /// The quota every bucket follows.
    pub fn quota(&self) -> Quota {
        self.shared.config.quota
    }
}

impl<KF: KeyFn + Clone, St: Clone + 'static> TokenBucketRateLimitLayer<KF, St> {
    fn into_shared(self) -> Shared<KF, St> {
        Arc::try_unwrap(self.shared).unwrap_or_else(|shared| (*shared).clone())
    }

    fn map_config(self, f: impl FnOnce(&mut Config)) -> Self {
        let mut shared = self.into_shared();
        f(&mut shared.config);
        if shared.own_store
            && let Some(fresh) = fresh_store::<KF::Key, St>(&shared.store)
        {
            shared.store = fresh;
        }
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The same buckets under a new quota, each kept at its level: a bucket lacking 8 of 10
    /// tokens still lacks 8 and refills at the new rate from now on, so a cut takes effect
    /// within one token of the new rate, with no refill burst. Unlike the setters, the layer
    /// returned shares this layer's buckets: it is for applying a new configuration to a
    /// running client. Requests already waiting keep the slot they reserved. Buckets in a
    /// store outside the process (Redis) keep their state as stored and follow the new quota
    /// from their next request.
    pub fn requota(&self, quota: Quota) -> Self
    where
        St: RateLimitStore<KF::Key>,
    {
        let old = self.shared.config.quota;
        if let Some(store) = self.shared.store.in_process() {
            store.rescale(old, quota);
        }
        let mut shared = (*self.shared).clone();
        shared.config.quota = quota;
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Wait for a slot or reject at once. Defaults to [`Mode::Wait`].
    pub fn mode(self, mode: Mode) -> Self {
        self.map_config(|c| c.mode = mode)
    }

    /// The longest a request waits for its slot (or for a server's park to end) in Wait mode;
    /// a longer wait fails at once with `RateLimited`. Defaults to 60 s.
    pub fn max_wait(self, max_wait: Duration) -> Self {
        self.map_config(|c| c.max_wait = max_wait)
    }

    /// How server hints are read (reset format, wall clock). Defaults to [`HintConfig::new`].
    pub fn hint_config(self, hints: HintConfig) -> Self {
        self.map_config(|c| c.hints = Some(hints))
    }

    /// Whether a response's `Retry-After` (on 429, 503 or 403), `x-ratelimit-*` or `RateLimit`
    /// fields park its host. Defaults to `true`.
    pub fn obey_server_hints(self, obey: bool) -> Self {
        self.map_config(|c| match (obey, c.hints.is_some()) {
            (true, false) => c.hints = Some(HintConfig::new()),
            (false, _) => c.hints = None,
            (true, true) => {}
        })
    }

    /// A request that waits longer than this emits an `info` event. Defaults to 1 s.
    pub fn log_waits_over(self, threshold: Duration) -> Self {
        self.map_config(|c| c.log_waits_over = threshold)
    }

    /// Keeps the buckets in `store` instead (e.g. a store shared between processes).
    pub fn store_in<St2>(self, store: St2) -> TokenBucketRateLimitLayer<KF, St2>
    where
        St2: RateLimitStore<KF::Key>,
    {
        let shared = self.into_shared();
        TokenBucketRateLimitLayer::from_parts(shared.config, shared.key_fn, store, false)
    }

    /// Keys buckets by `key_fn`, kept in a fresh [`InMemoryStore`] (call `max_keys` or
    /// `store_in` after the key setter).
    fn keyed<KF2: KeyFn + Clone>(
        self,
        key_fn: KF2,
    ) -> TokenBucketRateLimitLayer<KF2, InMemoryStore<KF2::Key>> {
        let shared = self.into_shared();
        TokenBucketRateLimitLayer::from_parts(shared.config, key_fn, InMemoryStore::new(), true)
    }

    /// One bucket per host: scheme and authority ([`HostKey`](courier_core::HostKey)), in a fresh [`InMemoryStore`]
    /// (call `max_keys` or `store_in` after this one).
    ///
    /// Defaults to one bucket per host.
    pub fn per_host(self) -> TokenBucketRateLimitLayer<PerHost, InMemoryStore<HostKey>> {
        self.keyed(PerHost)
    }

    /// One bucket for every request, in a fresh [`InMemoryStore`] (call `max_keys` or
    /// `store_in` after this one).
    ///
    /// Defaults to one bucket per host.
    pub fn global(self) -> TokenBucketRateLimitLayer<Global, InMemoryStore<()>> {
        self.keyed(Global)
    }

    /// A bucket per key `f` returns for the request's head (method, URI, headers, extensions),
    /// in a fresh [`InMemoryStore`] (call `max_keys` or `store_in` after this one).
    ///
    /// Defaults to one bucket per host.
    pub fn key_by<F, K>(self, f: F) -> TokenBucketRateLimitLayer<KeyBy<F>, InMemoryStore<K>>
    where
        F: Fn(&RequestHead<'_>) -> K + Clone + Send + Sync + 'static,
        K: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static,
    {
        self.keyed(KeyBy(f))
    }
}

impl<KF: KeyFn + Clone> TokenBucketRateLimitLayer<KF, InMemoryStore<KF::Key>> {
    /// How many keys the in-process store keeps before it evicts idle ones (a fresh store
    /// replaces the current one). Defaults to 10 000.
    pub fn max_keys(self, max_keys: NonZeroUsize) -> Self {
        let shared = self.into_shared();
        let store = InMemoryStore::with_max_keys(max_keys.get());
        Self::from_parts(shared.config, shared.key_fn, store, true)
    }
}

/// An empty store like `store` (same room) when `store` is an [`InMemoryStore`].
fn fresh_store<K, St>(store: &St) -> Option<St>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    St: 'static,
{
    let memory = (store as &dyn Any).downcast_ref::<InMemoryStore<K>>()?;
    let fresh: Box<dyn Any> = Box::new(InMemoryStore::<K>::with_max_keys(memory.max_keys()));
    fresh.downcast::<St>().ok().map(|store| *store)
}

impl<KF, St> Clone for TokenBucketRateLimitLayer<KF, St> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<KF, St> fmt::Debug for TokenBucketRateLimitLayer<KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucketRateLimitLayer")
            .field("config", &self.shared.config)
            .field("key_fn", &std::any::type_name::<KF>())
            .field("store", &std::any::type_name::<St>())
            .finish()
    }
}

impl<S, KF: KeyFn, St> Layer<S> for TokenBucketRateLimitLayer<KF, St> {
    type Service = TokenBucketRateLimit<S, KF, St>;

    fn layer(&self, inner: S) -> Self::Service {
        TokenBucketRateLimit::new(inner, self.clone())
    }
}

use super::estimate::{Estimate, Rules};
use super::service::AdaptivePacing;
use crate::config::Rate;
use crate::layer::DEFAULT_MAX_WAIT;
use crate::store::{InMemoryStore, RateLimitStore};
use courier_core::InvalidConfig;
use courier_core::{Classifier, Global, HostKey, KeyBy, KeyFn, PerHost, RequestHead};
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tower_layer::Layer;

/// The default share of overload signals among a second's answers that paces a host: half.
pub const DEFAULT_OVERLOAD_SHARE: f64 = 0.5;
/// The default least number of answers in the last second before a host is paced: 10.
pub const DEFAULT_MIN_ANSWERS: u32 = 10;
/// The default lowest pacing rate: 1 request per second.
pub const DEFAULT_MIN_RATE: f64 = 1.0;
/// The default highest pacing rate: past 10 000 per second a host is not paced.
pub const DEFAULT_MAX_RATE: f64 = 10_000.0;
/// The default [`hold`](AdaptivePacingLayer::hold): 2 s.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(2);
/// The default [`ramp`](AdaptivePacingLayer::ramp): 1 s.
pub const DEFAULT_RAMP: Duration = Duration::from_secs(1);
/// The default recovery: unpaced 10 s after the last signal.
pub const DEFAULT_RECOVER_AFTER: Duration = Duration::from_secs(10);
/// The default number of keys kept: 10 000.
pub const DEFAULT_MAX_HOSTS: usize = 10_000;

/// Learns each host's capacity from its overload signals and paces every request to it; see
/// the [module docs](super).
///
/// # Clone
///
/// The estimates and the slots are shared state behind an `Arc`: every service the layer makes,
/// and every clone of those, learns and paces together.
///
/// # Setters
///
/// Each setter returns a layer with estimates of its own (and a fresh [`InMemoryStore`] for
/// the slots, unless one was handed in with [`store_in`](Self::store_in)).
pub struct AdaptivePacingLayer<KF: KeyFn = PerHost, St = InMemoryStore<HostKey>> {
    pub(crate) shared: Arc<Shared<KF, St>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) rules: Rules,
    pub(crate) max_wait: Duration,
    pub(crate) max_hosts: usize,
    pub(crate) classifier: Classifier,
}

/// What every service and clone made by one layer share.
pub(crate) struct Shared<KF: KeyFn, St> {
    pub(crate) config: Config,
    pub(crate) key_fn: KF,
    pub(crate) store: St,
    own_store: bool,
    hosts: papaya::HashMap<KF::Key, Arc<Host<KF::Key>>, foldhash::fast::RandomState>,
    /// Hashes request paths, to tell one path's refusals from the host's.
    paths: foldhash::fast::RandomState,
    sweeping: AtomicBool,
    /// No sweep below this many keys: set after a sweep that freed little.
    sweep_floor: AtomicUsize,
    base: Instant,
}

/// One key's estimate, shared by the map and the services that used it last.
#[derive(Debug)]
pub(crate) struct Host<K> {
    pub(crate) key: K,
    pub(crate) estimate: Estimate,
}

impl<KF: KeyFn, St> Shared<KF, St> {
    fn new(config: Config, key_fn: KF, store: St, own_store: bool) -> Self {
        Self {
            config,
            key_fn,
            store,
            own_store,
            hosts: papaya::HashMap::builder()
                .hasher(foldhash::fast::RandomState::default())
                .resize_mode(papaya::ResizeMode::Blocking)
                .build(),
            paths: foldhash::fast::RandomState::default(),
            sweeping: AtomicBool::new(false),
            sweep_floor: AtomicUsize::new(0),
            base: Instant::now(),
        }
    }

    /// The path's hash, never 0 (which means the whole host).
    #[inline]
    pub(crate) fn path_of(&self, path: &str) -> u64 {
        use std::hash::BuildHasher;
        self.paths.hash_one(path) | 1
    }

    /// Nanoseconds since the layer was made (at least 1, so 0 can mean "never").
    pub(crate) fn now_ns(&self) -> u64 {
        let ns = Instant::now()
            .saturating_duration_since(self.base)
            .as_nanos();
        (ns.min(u128::from(u64::MAX)) as u64).max(1)
    }

    /// The estimate of `key`, made when missing.
    #[cold]
    pub(crate) fn host(&self, key: KF::Key) -> Arc<Host<KF::Key>> {
        let map = self.hosts.pin();
        if let Some(host) = map.get(&key) {
            return Arc::clone(host);
        }
        if map.len()
            >= self
                .config
                .max_hosts
                .max(self.sweep_floor.load(Ordering::Relaxed))
        {
            self.sweep();
        }
        let host = Arc::new(Host {
            key: key.clone(),
            estimate: Estimate::new(),
        });
        Arc::clone(map.get_or_insert(key, host))
    }

    fn get(&self, key: &KF::Key) -> Option<Arc<Host<KF::Key>>> {
        self.hosts.pin().get(key).cloned()
    }

    /// Forgets the keys that lose nothing by it (unpaced, nothing accepted in the last second).
    /// One sweep at a time; a service holding a forgotten estimate keeps using it until its
    /// next request to another key.
    fn sweep(&self) {
        if self.sweeping.swap(true, Ordering::Acquire) {
            return;
        }
        let now = self.now_ns();
        self.hosts
            .pin()
            .retain(|_, host| !host.estimate.is_idle(now, &self.config.rules));
        // A sweep that freed little lets the map grow by an eighth of the maximum before the
        // next one, so that a map of busy keys is not rescanned on every new one.
        let len = self.hosts.len();
        let floor = if len * 8 >= self.config.max_hosts * 7 {
            len + self.config.max_hosts / 8
        } else {
            0
        };
        self.sweep_floor.store(floor, Ordering::Relaxed);
        self.sweeping.store(false, Ordering::Release);
    }
}

// === impl AdaptivePacingLayer ===

impl AdaptivePacingLayer {
    /// An estimate per host (scheme and authority), with the defaults: paced once half of at
    /// least 10 answers in a second are overload signals (only the path when they all come
    /// from one), from 1 to 10 000 requests per second, a hold of 2 s and a ramp of 1 s
    /// ([the ramp](super#the-ramp)), unpaced 10 s after the last signal, at most 60 s of
    /// waiting, 10 000 hosts; slots in an [`InMemoryStore`].
    pub fn new() -> Self {
        Self::from_parts(
            Config {
                rules: Rules {
                    overload_share: DEFAULT_OVERLOAD_SHARE,
                    min_answers: u64::from(DEFAULT_MIN_ANSWERS),
                    min_rate: DEFAULT_MIN_RATE,
                    max_rate: DEFAULT_MAX_RATE,
                    hold_ns: nanos(DEFAULT_HOLD),
                    ramp_ns: nanos(DEFAULT_RAMP),
                    recover_ns: nanos(DEFAULT_RECOVER_AFTER),
                },
                max_wait: DEFAULT_MAX_WAIT,
                max_hosts: DEFAULT_MAX_HOSTS,
                classifier: Classifier::new(),
            },
            PerHost,
            InMemoryStore::new(),
            true,
        )
    }
}

impl Default for AdaptivePacingLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<KF: KeyFn, St> AdaptivePacingLayer<KF, St> {
    fn from_parts(config: Config, key_fn: KF, store: St, own_store: bool) -> Self {
        Self {
            shared: Arc::new(Shared::new(config, key_fn, store, own_store)),
        }
    }

    /// The rate `key` is paced at now, per second; `None` while it is not paced.
    pub fn learned_rate(&self, key: &KF::Key) -> Option<f64> {
        let now = self.shared.now_ns();
        let host = self.shared.get(key)?;
        host.estimate.rate(now, &self.shared.config.rules)
    }

    /// How many keys have an estimate now.
    pub fn len(&self) -> usize {
        self.shared.hosts.len()
    }

    /// Whether no key has an estimate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The store holding the slots.
    pub fn store(&self) -> &St {
        &self.shared.store
    }

    /// How estimates are keyed: [`PerHost`](courier_core::PerHost), [`Global`](courier_core::Global) or [`KeyBy`](courier_core::KeyBy).
    pub fn key_fn(&self) -> &KF {
        &self.shared.key_fn
    }
}

impl<KF, St> AdaptivePacingLayer<KF, St>
where
    KF: KeyFn + Clone,
    St: Clone + 'static,
{
    fn map_config(self, f: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.shared.config.clone();
        f(&mut config);
        let store = match (self.shared.own_store, fresh::<KF::Key, St>()) {
            (true, Some(fresh)) => fresh,
            _ => self.shared.store.clone(),
        };
        Self::from_parts(
            config,
            self.shared.key_fn.clone(),
            store,
            self.shared.own_store,
        )
    }

    /// The lowest rate a host is paced at, however little it accepts. Defaults to 1 per
    /// second.
    ///
    /// # Errors
    ///
    /// When `rate` is above [`max_rate`](Self::max_rate).
    pub fn min_rate(self, rate: Rate) -> Result<Self, InvalidConfig> {
        let min = rate.as_per_second();
        if min >= self.shared.config.rules.max_rate {
            return Err(InvalidConfig::new(
                "the lowest pacing rate (min_rate) must be below the highest (max_rate)",
                format_args!("{min}/s"),
                "a lower rate, or raise max_rate first",
            ));
        }
        Ok(self.map_config(|c| c.rules.min_rate = min))
    }

    /// Past this rate a host is no longer paced. Defaults to 10 000 per second.
    ///
    /// # Errors
    ///
    /// When `rate` is not above [`min_rate`](Self::min_rate).
    pub fn max_rate(self, rate: Rate) -> Result<Self, InvalidConfig> {
        let max = rate.as_per_second();
        if max <= self.shared.config.rules.min_rate {
            return Err(InvalidConfig::new(
                "the highest pacing rate (max_rate) must be above the lowest (min_rate)",
                format_args!("{max}/s"),
                "a higher rate, or lower min_rate first",
            ));
        }
        Ok(self.map_config(|c| c.rules.max_rate = max))
    }

    /// The least share of overload signals among the host's answers over the last second that
    /// paces it: below it, a few refusals among many answers (one path that answers 503 for
    /// reasons of its own) pace nothing. Defaults to 0.5: a host refusing as many as it serves is
    /// overloaded (the client-side throttling of Google's SRE book draws the same line).
    ///
    /// # Errors
    ///
    /// Unless `share` is in `[0, 1]`.
    pub fn overload_share(self, share: f64) -> Result<Self, InvalidConfig> {
        if !(0.0..=1.0).contains(&share) {
            return Err(InvalidConfig::new(
                "an overload share must be in [0, 1]",
                share,
                "0.5 to pace a host once half of its answers are refusals",
            ));
        }
        Ok(self.map_config(|c| c.rules.overload_share = share))
    }

    /// The fewest answers (accepts and overload signals together) the host must have given
    /// over the last second before its signals can pace it: three 503s in a quiet second are
    /// no evidence of overload. Defaults to 10: a crowd that overloads a host sends many more
    /// (50 callers against a host serving 5 a second give 50 answers in its first second),
    /// while one caller retrying one failing path gives a few.
    pub fn min_answers(self, n: u32) -> Self {
        self.map_config(|c| c.rules.min_answers = u64::from(n))
    }

    /// How long the learned rate holds after the last signal before it grows ([the
    /// ramp](super#the-ramp)): requests queued by a crowd's first refusals are paced at what
    /// the host showed it serves, not above it. Defaults to 2 s.
    pub fn hold(self, hold: Duration) -> Self {
        self.map_config(|c| c.rules.hold_ns = nanos(hold))
    }

    /// The time scale of the growth after the hold: one `ramp` after it the rate is twice the
    /// learned one, and [the ramp](super#the-ramp) has the whole curve. Defaults to 1 s; at
    /// least 1 ms.
    pub fn ramp(self, ramp: Duration) -> Self {
        self.map_config(|c| c.rules.ramp_ns = nanos(ramp).max(1_000_000))
    }

    /// How long after its last signal a host is no longer paced. Defaults to 10 s.
    pub fn recover_after(self, after: Duration) -> Self {
        self.map_config(|c| c.rules.recover_ns = nanos(after).max(1))
    }

    /// The longest a request waits for its slot; past it (or past the request's deadline) it
    /// fails at once with [`RateLimited`](courier_core::RateLimited). Defaults to 60 s.
    pub fn max_wait(self, max_wait: Duration) -> Self {
        self.map_config(|c| c.max_wait = max_wait)
    }

    /// How many keys are kept before idle ones are forgotten. Defaults to 10 000.
    pub fn max_keys(self, n: NonZeroUsize) -> Self {
        self.map_config(|c| c.max_hosts = n.get())
    }

    /// The one place that decides what an answer means ([`courier_core::classifier`]): which
    /// answers are overload signals, which are accepts and which teach nothing is read from
    /// its verdict, as the [module docs](super) say. Defaults to [`Classifier::new`]; the
    /// preset gives its own (`CourierLayer::classifier`), so that retry, the breaker and
    /// pacing judge every answer alike.
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.map_config(|c| c.classifier = classifier)
    }

    /// Takes the slots from `store` (e.g. a store shared between processes, so that every
    /// replica keeps to the pace together).
    ///
    /// Only the slots are shared, not what each replica learns: each one paces the shared
    /// slots at the rate it learned from its own answers, which is its share of the host's.
    /// Ten replicas sharing one store through Redis against a host serving 50 a second were
    /// paced, all together, at about one replica's share (courier-redis's `learning` test:
    /// two calls in three refused after a minute's wait, where replicas pacing in process
    /// served every call). Share the slots only where one estimate serves every replica.
    pub fn store_in<St2>(self, store: St2) -> AdaptivePacingLayer<KF, St2>
    where
        St2: RateLimitStore<KF::Key>,
    {
        AdaptivePacingLayer::from_parts(
            self.shared.config.clone(),
            self.shared.key_fn.clone(),
            store,
            false,
        )
    }

    fn keyed<KF2: KeyFn + Clone>(
        self,
        key_fn: KF2,
    ) -> AdaptivePacingLayer<KF2, InMemoryStore<KF2::Key>> {
        AdaptivePacingLayer::from_parts(
            self.shared.config.clone(),
            key_fn,
            InMemoryStore::new(),
            true,
        )
    }

    /// One estimate per host: scheme and authority ([`HostKey`](courier_core::HostKey)).
    ///
    /// Defaults to one estimate per host.
    pub fn per_host(self) -> AdaptivePacingLayer<PerHost, InMemoryStore<HostKey>> {
        self.keyed(PerHost)
    }

    /// One estimate for every request.
    ///
    /// Defaults to one estimate per host.
    pub fn global(self) -> AdaptivePacingLayer<Global, InMemoryStore<()>> {
        self.keyed(Global)
    }

    /// An estimate per key `f` returns for the request's head (a route, a tenant).
    ///
    /// Defaults to one estimate per host.
    pub fn key_by<F, K>(self, f: F) -> AdaptivePacingLayer<KeyBy<F>, InMemoryStore<K>>
    where
        F: Fn(&RequestHead<'_>) -> K + Clone + Send + Sync + 'static,
        K: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static,
    {
        self.keyed(KeyBy(f))
    }
}

/// A fresh [`InMemoryStore`] when `St` is one.
fn fresh<K, St>() -> Option<St>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    St: 'static,
{
    let fresh: Box<dyn std::any::Any> = Box::new(InMemoryStore::<K>::new());
    fresh.downcast::<St>().ok().map(|store| *store)
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

impl<KF: KeyFn, St> Clone for AdaptivePacingLayer<KF, St> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<KF: KeyFn, St> fmt::Debug for AdaptivePacingLayer<KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptivePacingLayer")
            .field("config", &self.shared.config)
            .field("hosts", &self.shared.hosts.len())
            .field("key_fn", &std::any::type_name::<KF>())
            .field("store", &std::any::type_name::<St>())
            .finish()
    }
}

impl<S, KF: KeyFn, St> Layer<S> for AdaptivePacingLayer<KF, St> {
    type Service = AdaptivePacing<S, KF, St>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptivePacing::new(inner, self.clone())
    }
}

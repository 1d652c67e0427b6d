//! Where the buckets live: the [`RateLimitStore`] seam and the in-process [`InMemoryStore`].
//!
//! The layer asks its store one question per request, "may a request for this key start, and
//! when?", as one future ([`RateLimitStore::acquire`]); it tells the store when the server parks
//! a key ([`RateLimitStore::park`]); and it gives a reserved slot back when the request it was
//! reserved for is never sent ([`RateLimitStore::cancel`]). Nothing else crosses the seam, so a
//! store shared between processes fits behind it unchanged:
//!
//! - **one decision, one round trip**: `acquire` returns the store's own future type. The
//!   in-process store answers with [`std::future::Ready`] (no allocation, no boxing, no lock);
//!   a networked store runs its whole update (GCRA and park check together, e.g. one server-side
//!   script using the server's clock) in the one future it returns. A decision is relative to
//!   the store's clock: the [`Grant`] carries a local [`Instant`] the store computed from the
//!   wait it decided, so clocks of different machines never need to agree.
//! - **shared parking**: `park` records "nobody starts a request for this key until `wait` from
//!   now". The store decides how widely that is seen: the in-process store sees it in every
//!   clone of the layer; a shared store makes every process see it. `park` is synchronous and
//!   must not block: a networked store records the park locally at once (so this process obeys
//!   it on the very next request) and sends it on in the background.
//! - **failure policy**: `acquire` may fail with an error, which the layer returns to the caller
//!   as the request's error. Whether a networked store falls back to an in-process bucket
//!   (fail-open) or refuses with a [`Decision::Deny`] (fail-closed) when its backend is slow or
//!   down is the store's own policy, behind its own timeout, invisible to the layer.
//!
//! The store is part of the layer's shared state: the layer keeps it behind an `Arc`, so every
//! service the layer makes and every clone of those services ask the same store.

use crate::config::Quota;
use crate::gcra::{Cell, Evict, Outcome};
use courier_core::BoxError;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How many keys an [`InMemoryStore`] keeps before it evicts idle ones: 10 000.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// The state behind the rate limit layer's keys.
///
/// See the [module docs](self) for the contract. `K` is the key type of the layer's key
/// function ([`HostKey`](courier_core::HostKey) by default).
pub trait RateLimitStore<K>: Send + Sync + 'static {
    /// The future of one decision. It owns what it needs: it outlives the borrow of `self` and
    /// `key`.
    type Acquire: Future<Output = Result<Decision, BoxError>> + Send + 'static;

    /// Decides whether a request for `key` may start, under `quota`, waiting at most `max_wait`
    /// (zero when the layer rejects instead of waiting).
    ///
    /// On [`Decision::Admit`] the slot is taken (the request starts at [`Grant::at`]); on
    /// [`Decision::Deny`] nothing is taken.
    fn acquire(&self, key: &K, quota: Quota, max_wait: Duration) -> Self::Acquire;

    /// The server asked that no request for `key` start before `wait` from now. A park never
    /// shortens an earlier, longer one.
    fn park(&self, key: &K, wait: Duration);

    /// The request that held `grant` will never be sent: its caller dropped it before it
    /// started, or it was refused after its wait (it woke past its deadline, a park came
    /// meanwhile, or the grant named a moment past its deadline). Its slot's moment may have
    /// come already. The layer calls this at most once per grant, and never for a request it
    /// sent. A store may give the slot back; the default keeps it spent, which is also correct:
    /// it only lowers the rate.
    fn cancel(&self, key: &K, quota: Quota, grant: &Grant) {
        let _ = (key, quota, grant);
    }

    /// Forgets `key`'s bucket: the next request for it starts from a full one. Adaptive pacing
    /// calls it when a new stretch of pacing begins, so that the new stretch does not queue
    /// behind slots the last one booked. Defaults to doing nothing (the bucket stays).
    fn reset(&self, key: &K) {
        let _ = key;
    }

    /// Until when `key` is parked, if it is parked now: a request that waited for its slot
    /// checks it before it starts, so a park that came meanwhile (a 429 to a request ahead of
    /// it) holds it too. Defaults to `None`: such a request starts at its slot.
    fn parked_until(&self, key: &K) -> Option<Instant> {
        let _ = key;
        None
    }

    /// The in-process store this store decides with, when it answers at once from one (as
    /// [`InMemoryStore`] does). The layer then decides in `call` itself, on the bucket the
    /// service used for the previous request when the key is the same (no hashing, no map), and
    /// a request with a free slot calls the inner service at once. Defaults to `None`: every
    /// decision goes through [`RateLimitStore::acquire`].
    #[doc(hidden)]
    #[inline]
    fn in_process(&self) -> Option<&InMemoryStore<K>> {
        None
    }
}

/// A store's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A slot was reserved.
    Admit(Grant),
    /// No slot within the wait the request accepts; nothing was taken.
    Deny(Denial),
}

/// A reserved slot: when the request may start, and the store's receipt for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    at: Instant,
    ticket: u64,
}

impl Grant {
    /// A slot starting at `at`; `ticket` is whatever the store needs to give it back (see
    /// [`RateLimitStore::cancel`]).
    pub const fn new(at: Instant, ticket: u64) -> Self {
        Self { at, ticket }
    }

    /// When the request may start.
    pub const fn at(&self) -> Instant {
        self.at
    }

    /// The store's receipt.
    pub const fn ticket(&self) -> u64 {
        self.ticket
    }
}

/// A refusal: when a slot would have been free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denial {
    retry_in: Duration,
    parked: bool,
}

impl Denial {
    /// The first free slot is `retry_in` away.
    pub const fn new(retry_in: Duration) -> Self {
        Self {
            retry_in,
            parked: false,
        }
    }

    /// Marks the refusal as caused by a server's park rather than by the bucket.
    pub const fn parked(mut self, parked: bool) -> Self {
        self.parked = parked;
        self
    }

    /// How long until a slot is free.
    pub const fn retry_in(&self) -> Duration {
        self.retry_in
    }

    /// Whether the server's park is what holds the key.
    pub const fn is_parked(&self) -> bool {
        self.parked
    }
}

/// The in-process store: a lock-free map of GCRA buckets, one `AtomicU64` each.
///
/// A decision on a known key is one map lookup and one compare-and-swap: no lock, no
/// allocation. The layer skips the lookup too while a service sends to the key it sent to last. Time is counted in nanoseconds from a base [`Instant`] taken when the store is
/// made (so paused tokio time drives it in tests: make the store inside the runtime).
///
/// # Eviction
///
/// When a new key would bring the map to `max_keys`, idle keys are evicted first. A key is idle
/// only when its bucket is full again and it is not parked: a fresh bucket for it would hold
/// exactly what the evicted one held, so eviction never lets a host burst beyond its burst.
/// Keys still refilling are kept even past the maximum (their number is bounded by traffic:
/// each was used within the last `burst / rate`); to keep sweeps cheap, a sweep that frees
/// little lets the map grow by an eighth of the maximum before the next one.
///
/// # Clone
///
/// Cloning is cheap and shares the buckets: the map is behind an `Arc`.
pub struct InMemoryStore<K> {
    inner: Arc<Inner<K>>,
}

/// foldhash, with a random seed per map: a `HostKey` hashes byte by byte (to fold ASCII case),
/// which costs SipHash about twice as much (measured in the bench); foldhash gathers small
/// writes before it mixes.
type Hasher = foldhash::fast::RandomState;

type MapRef<'m, K> = papaya::HashMapRef<'m, K, Arc<Entry<K>>, Hasher, papaya::LocalGuard<'m>>;

/// One key's bucket, shared by the map and the services that used it last (each service keeps
/// the entry of its previous request, so a run of requests to one key skips the map). An
/// evicted entry's cell is a tombstone for good: a service holding one looks the key up again.
#[derive(Debug)]
pub(crate) struct Entry<K> {
    pub(crate) key: K,
    pub(crate) cell: Cell,
}

impl<K> Entry<K> {
    fn new(key: K) -> Arc<Self> {
        Arc::new(Self {
            key,
            cell: Cell::new(),
        })
    }
}

struct Inner<K> {
    map: papaya::HashMap<K, Arc<Entry<K>>, Hasher>,
    base: Instant,
    max_keys: usize,
    sweeping: AtomicBool,
    /// No sweep below this many keys (beyond `max_keys`): set after a sweep that freed little.
    sweep_floor: AtomicUsize,
}

// === impl InMemoryStore ===

impl<K: Hash + Eq + Clone + Send + Sync + 'static> InMemoryStore<K> {
    /// An empty store keeping up to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new() -> Self {
        Self::with_max_keys(DEFAULT_MAX_KEYS)
    }

    /// An empty store keeping up to `max_keys` keys (at least 1) before it evicts idle ones.
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                // Blocking resizes: a table grown incrementally (by `get_or_insert_with`) was
                // measured to leave every later lookup several times slower until the copy
                // finished; a blocking resize finishes the copy at once, on the (rare, cold)
                // insert that grows the table. Lookups stay lock-free either way.
                map: papaya::HashMap::builder()
                    .hasher(Hasher::default())
                    .resize_mode(papaya::ResizeMode::Blocking)
                    .build(),
                base: Instant::now(),
                max_keys: max_keys.max(1),
                sweeping: AtomicBool::new(false),
                sweep_floor: AtomicUsize::new(0),
            }),
        }
    }

    /// How many keys are held now.
    pub fn len(&self) -> usize {
        self.inner.map.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The maximum number of idle keys kept.
    pub fn max_keys(&self) -> usize {
        self.inner.max_keys
    }

    /// The decision [`RateLimitStore::acquire`] returns, without the future around it.
    #[doc(hidden)]
    #[inline]
    pub fn decide(&self, key: &K, quota: Quota, max_wait: Duration) -> Decision {
        let now = self.now_ns();
        let max_wait = saturating_nanos(max_wait);
        let (t, tau) = (quota.interval_nanos(), quota.tolerance_nanos());
        let map = self.inner.map.pin();
        loop {
            let entry = match map.get(key) {
                Some(entry) => entry,
                None => self.insert(&map, key, now),
            };
            match self.decision(entry.cell.reserve(now, t, tau, max_wait)) {
                Some(decision) => return decision,
                None => {
                    let _ = map.remove_if(key, |_, e| e.cell.is_evicted());
                }
            }
        }
    }

    /// Keeps every bucket's level as the quota changes from `old` to `new`: each bucket lacks
    /// as many tokens as before and refills at the new rate from now on, so a cut rate takes
    /// effect at once and a raised one grants no burst the old level did not hold.
    pub(crate) fn rescale(&self, old: Quota, new: Quota) {
        let now = self.now_ns();
        let (t_old, t_new) = (old.interval_nanos(), new.interval_nanos());
        for (_, entry) in self.inner.map.pin().iter() {
            entry.cell.rescale(now, t_old, t_new);
        }
    }

    /// Until when `key` is parked, if it is parked now.
    pub fn parked_until(&self, key: &K) -> Option<Instant> {
        let now = self.now_ns();
        let until = self.inner.map.pin().get(key)?.cell.parked_until();
        (until > now).then(|| self.instant(until))
    }

    /// When a request for `key` could start now, as a refusal naming that wait; nothing is
    /// reserved.
    pub(crate) fn next_slot(&self, key: &K, quota: Quota) -> Denial {
        let now = self.now_ns();
        let next = self
            .inner
            .map
            .pin()
            .get(key)
            .and_then(|entry| entry.cell.next_start(now, quota.tolerance_nanos()));
        match next {
            Some((wait, parked)) => Denial::new(Duration::from_nanos(wait)).parked(parked),
            None => Denial::new(Duration::ZERO), // a fresh bucket starts full
        }
    }

    /// Now, in nanoseconds from the store's base instant.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        saturating_nanos(Instant::now().saturating_duration_since(self.inner.base))
    }

    /// The decision a cell's outcome means; `None` when the cell was evicted.
    #[inline]
    pub(crate) fn decision(&self, outcome: Outcome) -> Option<Decision> {
        match outcome {
            Outcome::Admit { start, ticket } => {
                Some(Decision::Admit(Grant::new(self.instant(start), ticket)))
            }
            Outcome::Deny { retry_in, parked } => Some(Decision::Deny(
                Denial::new(Duration::from_nanos(retry_in)).parked(parked),
            )),
            Outcome::Evicted => None,
        }
    }

    /// The entry of `key` at `now` (nanoseconds), made when missing.
    pub(crate) fn entry(&self, key: &K, now: u64) -> Arc<Entry<K>> {
        let map = self.inner.map.pin();
        match map.get(key) {
            Some(entry) => Arc::clone(entry),
            None => Arc::clone(self.insert(&map, key, now)),
        }
    }

    /// Drops `entry` from the map if it was evicted, so that the key's next lookup makes a
    /// fresh one.
    pub(crate) fn forget(&self, entry: &Entry<K>) {
        let _ = self
            .inner
            .map
            .pin()
            .remove_if(&entry.key, |_, e| e.cell.is_evicted());
    }

    fn instant(&self, ns: u64) -> Instant {
        self.inner.base + Duration::from_nanos(ns)
    }

    #[cold]
    fn insert<'g>(&self, map: &'g MapRef<'_, K>, key: &K, now: u64) -> &'g Arc<Entry<K>> {
        // Sweep before inserting, so the new (full, hence idle) bucket is not swept at once.
        self.maybe_sweep(map, now);
        map.get_or_insert_with(key.clone(), || Entry::new(key.clone()))
    }

    fn maybe_sweep(&self, map: &MapRef<'_, K>, now: u64) {
        let max = self.inner.max_keys;
        let len = map.len();
        if len < max || len < self.inner.sweep_floor.load(Ordering::Relaxed) {
            return;
        }
        if self.inner.sweeping.swap(true, Ordering::Acquire) {
            return; // another caller is sweeping
        }
        let mut reparks = Vec::new();
        map.retain(|key, entry| match entry.cell.try_evict(now) {
            Evict::Keep => true,
            Evict::Remove => false,
            Evict::RemoveParked(until) => {
                reparks.push((key.clone(), until));
                false
            }
        });
        let after = map.len();
        let slack = (max / 8).max(1);
        let floor = if after + slack > max {
            after + slack
        } else {
            0
        };
        self.inner.sweep_floor.store(floor, Ordering::Relaxed);
        self.inner.sweeping.store(false, Ordering::Release);
        for (key, until) in reparks {
            self.park_ns(map, key, until);
        }
    }

    fn park_ns(&self, map: &MapRef<'_, K>, key: K, until: u64) {
        loop {
            let entry = match map.get(&key) {
                Some(entry) => entry,
                None => map.get_or_insert_with(key.clone(), || Entry::new(key.clone())),
            };
            if entry.cell.park(until) {
                return;
            }
            let _ = map.remove_if(&key, |_, e| e.cell.is_evicted());
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Default for InMemoryStore<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Clone for InMemoryStore<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for InMemoryStore<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryStore")
            .field("keys", &self.inner.map.len())
            .field("max_keys", &self.inner.max_keys)
            .finish()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> RateLimitStore<K> for InMemoryStore<K> {
    fn parked_until(&self, key: &K) -> Option<Instant> {
        InMemoryStore::parked_until(self, key)
    }

    type Acquire = Ready<Result<Decision, BoxError>>;

    #[inline]
    fn acquire(&self, key: &K, quota: Quota, max_wait: Duration) -> Self::Acquire {
        ready(Ok(self.decide(key, quota, max_wait)))
    }

    fn reset(&self, key: &K) {
        let _ = self.inner.map.pin().remove(key);
    }

    fn park(&self, key: &K, wait: Duration) {
        let until = self.now_ns().saturating_add(saturating_nanos(wait));
        let map = self.inner.map.pin();
        if map.get(key).is_none() {
            self.maybe_sweep(&map, self.now_ns());
        }
        self.park_ns(&map, key.clone(), until);
    }

    /// Gives the slot back when no later reservation was stacked on it, whether or not its
    /// start has come (the request was not sent); otherwise it stays spent. Either way, nobody
    /// else waits longer because of it.
    fn cancel(&self, key: &K, quota: Quota, grant: &Grant) {
        if let Some(entry) = self.inner.map.pin().get(key) {
            entry.cell.give_back(grant.ticket(), quota.interval_nanos());
        }
    }

    #[inline]
    fn in_process(&self) -> Option<&InMemoryStore<K>> {
        Some(self)
    }
}

pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

//! The retry budget: retries may add at most a share of the requests, plus a floor.
//!
//! Every request deposits `ratio` of a retry; every retry withdraws a whole one. A retry is
//! allowed while `floor + ratio * requests - retries >= 1`, all counted over a sliding window.
//! In an outage where every request fails, the server therefore sees at most
//! `requests * (1 + ratio) + floor` attempts per window, instead of `requests * attempts`.
//!
//! The arithmetic is exact: amounts are integers in millionths of a retry, so 10 % is a deposit
//! of 100 000 against a withdrawal of 1 000 000, with no float truncation (the ratio bug of tower
//! issue 857, where a deposit of 1 against a truncated withdrawal lets through more than the
//! ratio, cannot happen). The window is kept in ten slots; an entry leaves it between 0.9 and
//! 1.0 window after it was made.
//!
//! Budgets are per host by default, keyed by [`HostKey`] as the breaker and the rate limiter
//! are, in a map bounded by [`RetryBudget::max_keys`]; a key with nothing left in its window
//! holds no information and is evicted first. The same three choices as every keyed layer pick
//! the key: [`per_host`](RetryBudget::per_host), [`global`](RetryBudget::global) or
//! [`key_by`](RetryBudget::key_by) a function of the request head. Per host, the budget hashes
//! the host's text in place, without building a key, because it runs on every request.
//!
//! # Clone
//!
//! The budget lives behind an `Arc` in the [`RetryLayer`](crate::RetryLayer): every service the
//! layer makes, and every clone of those, draws on the same budget.

use courier_core::{HostKey, KeyBy, KeyFn, RequestHead};
use host::{is_host, with_view};
use http::request::Parts;
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// One whole retry, in budget units.
const UNIT: u64 = 1_000_000;
/// Slots per window.
const SLOTS: usize = 10;

/// How many retries the layer may add, per host or in all.
///
/// ```
/// use courier_retry::RetryBudget;
/// use std::time::Duration;
///
/// // At most 20 % extra load over 30 s, with 5 retries per window always allowed.
/// let budget = RetryBudget::new()
///     .ratio(0.2)
///     .window(Duration::from_secs(30))
///     .floor(5);
/// # let _ = budget;
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    ratio: f64,
    window: Duration,
    floor: u32,
    keying: Keying,
    max_hosts: usize,
}

/// Which budget a request draws on.
#[derive(Clone)]
enum Keying {
    /// [`HostKey`], hashed in place.
    PerHost,
    /// One budget for everything.
    Global,
    /// A key function of the caller's, behind a type-erased handle.
    By(Arc<dyn ErasedKeyFn>),
}

impl fmt::Debug for Keying {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PerHost => "PerHost",
            Self::Global => "Global",
            Self::By(_) => "KeyBy(..)",
        })
    }
}

/// A [`KeyFn`] whose key type is erased: the key, boxed, with its hash.
trait ErasedKeyFn: Send + Sync + 'static {
    fn key(&self, head: &RequestHead<'_>) -> (u64, Box<dyn AnyKey>);
}

impl<K: KeyFn> ErasedKeyFn for K {
    fn key(&self, head: &RequestHead<'_>) -> (u64, Box<dyn AnyKey>) {
        let key = KeyFn::key(self, head);
        // A fixed hasher: the map is bounded and the keys are the caller's own.
        let hash = BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(&key);
        (hash, Box::new(key))
    }
}

/// A key of any type, compared with keys of the same type.
trait AnyKey: Any + Send + Sync + fmt::Debug {
    fn same(&self, other: &dyn AnyKey) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<K: Hash + Eq + fmt::Debug + Send + Sync + 'static> AnyKey for K {
    fn same(&self, other: &dyn AnyKey) -> bool {
        other.as_any().downcast_ref::<K>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryBudget {
    /// 10 % over 10 s with a floor of 10 retries per window, per host, at most 1024 hosts.
    pub const fn new() -> Self {
        Self {
            ratio: 0.1,
            window: Duration::from_secs(10),
            floor: 10,
            keying: Keying::PerHost,
            max_hosts: 1024,
        }
    }

    /// The share of requests that may be retried: 0.1 lets 10 requests earn one retry.
    /// Negative or NaN values count as 0, values above 1000 as 1000. Defaults to 0.1.
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1000.0)
        };
        self
    }

    /// How long deposits and withdrawals count. At least 10 ms. Defaults to 10 s.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window.max(Duration::from_millis(10));
        self
    }

    /// Retries allowed per window on top of the ratio, so that a host with little traffic can
    /// still retry. Defaults to 10.
    pub fn floor(mut self, retries: u32) -> Self {
        self.floor = retries;
        self
    }

    /// One budget per host: scheme and authority ([`HostKey`]).
    ///
    /// Defaults to one per host.
    pub fn per_host(mut self) -> Self {
        self.keying = Keying::PerHost;
        self
    }

    /// One budget for every request, whatever its host.
    ///
    /// Defaults to one per host.
    pub fn global(mut self) -> Self {
        self.keying = Keying::Global;
        self
    }

    /// A budget per key `f` returns for the request's head (method, URI, headers,
    /// extensions), e.g. per host and tenant: the same key functions as the breaker's and the
    /// rate limiter's [`key_by`](courier_core::KeyBy).
    ///
    /// Defaults to one per host.
    pub fn key_by<F, Key>(mut self, f: F) -> Self
    where
        F: Fn(&RequestHead<'_>) -> Key + Send + Sync + 'static,
        Key: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static,
    {
        self.keying = Keying::By(Arc::new(KeyBy(f)));
        self
    }

    /// How many keys (hosts, unless [`key_by`](Self::key_by) says otherwise) are tracked at
    /// most; past it, idle keys and then the least recently used are evicted. Not used by a
    /// [`global`](Self::global) budget. Defaults to 1024.
    pub fn max_keys(mut self, max_keys: NonZeroUsize) -> Self {
        self.max_hosts = max_keys.get();
        self
    }

    pub(crate) fn build(self) -> Arc<BudgetState> {
        let window_nanos = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
        Arc::new(BudgetState {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            deposit: (self.ratio * UNIT as f64).round() as u64,
            floor: u64::from(self.floor) * UNIT,
            slot_nanos: (window_nanos / SLOTS as u64).max(1),
            config: self,
            origin: Instant::now(),
            global: Arc::new(Cell::new(CellKey::Global)),
            hosts: Mutex::new(Hosts {
                map: HashMap::default(),
                len: 0,
            }),
            generation: AtomicU64::new(0),
            #[cfg(test)]
            lookups: AtomicU64::new(0),
        })
    }
}

/// Numbers budgets for the per-thread cache; 0 is never given out.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The last budget cell this thread deposited into, with the budget's number and the eviction
/// generation it was found in: a run of requests to one host, through any service or clone,
/// deposits without the map, its lock or the host's hash.
struct Last {
    budget: u64,
    generation: u64,
    cell: Arc<Cell>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// The shared, mutable side of a [`RetryBudget`].
pub(crate) struct BudgetState {
    config: RetryBudget,
    /// Tells budgets apart in the per-thread cache.
    id: u64,
    deposit: u64,
    floor: u64,
    slot_nanos: u64,
    origin: Instant,
    /// The one budget when not per host.
    global: Arc<Cell>,
    hosts: Mutex<Hosts>,
    /// Bumped whenever an eviction ran: a cell found while it is unchanged is still the map's.
    generation: AtomicU64,
    /// Lookups in the map, for the tests of the per-thread shortcut.
    #[cfg(test)]
    lookups: AtomicU64,
}

struct Hosts {
    /// Host hash to the hosts with that hash (almost always one).
    map: HashMap<u64, Vec<Arc<Cell>>, nohash_hasher::BuildNoHashHasher<u64>>,
    /// How many hosts in all.
    len: usize,
}

/// One budget's counters: ten slots, each tagged with the epoch it counts.
///
/// A deposit into the current slot is one relaxed add and takes no lock. Moving a slot to a
/// new epoch, withdrawals and refunds take the cell's lock, so a withdrawal's check and take
/// are one step. A deposit that races the move of its slot to a later epoch may be counted in
/// that epoch: it stays in the window less than one window longer.
struct Cell {
    key: CellKey,
    slots: [Slot; SLOTS],
    lock: Mutex<()>,
}

/// Whose budget a cell is.
#[derive(Debug)]
enum CellKey {
    /// The one budget of a global `RetryBudget`.
    Global,
    Host(HostKey),
    /// A key made by a [`RetryBudget::key_by`] function.
    By(Box<dyn AnyKey>),
}

impl CellKey {
    fn host(&self) -> Option<&HostKey> {
        match self {
            Self::Host(key) => Some(key),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Slot {
    /// The epoch counted; zero counts are the same for any epoch, so a fresh slot says 0.
    epoch: AtomicU64,
    deposits: AtomicU64,
    withdrawals: AtomicU64,
}

// === impl Cell ===

impl Cell {
    fn new(key: CellKey) -> Self {
        Self {
            key,
            slots: Default::default(),
            lock: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // Counters only; a panic elsewhere leaves them usable.
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, epoch: u64) -> &Slot {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// Makes `slot` count `epoch`, emptying what it counted before; with the lock held. False
    /// when it counts a later epoch already: `epoch` has left the window.
    fn roll(slot: &Slot, epoch: u64) -> bool {
        let current = slot.epoch.load(Ordering::Acquire);
        if current >= epoch {
            return current == epoch;
        }
        slot.deposits.store(0, Ordering::Relaxed);
        slot.withdrawals.store(0, Ordering::Relaxed);
        slot.epoch.store(epoch, Ordering::Release);
        true
    }

    #[inline]
    fn deposit(&self, epoch: u64, amount: u64) {
        let slot = self.slot(epoch);
        if slot.epoch.load(Ordering::Acquire) != epoch {
            let _guard = self.lock();
            if !Self::roll(slot, epoch) {
                return;
            }
        }
        slot.deposits.fetch_add(amount, Ordering::Relaxed);
    }

    /// Deposits and withdrawals over the window that ends at `epoch`.
    fn totals(&self, epoch: u64) -> (u128, u128) {
        let (mut deposits, mut withdrawals) = (0u128, 0u128);
        for slot in &self.slots {
            let at = slot.epoch.load(Ordering::Acquire);
            if at <= epoch && epoch - at < SLOTS as u64 {
                deposits += u128::from(slot.deposits.load(Ordering::Relaxed));
                withdrawals += u128::from(slot.withdrawals.load(Ordering::Relaxed));
            }
        }
        (deposits, withdrawals)
    }

    /// Takes one retry if `floor` plus the window's deposits cover it.
    fn withdraw(&self, epoch: u64, floor: u64) -> bool {
        let _guard = self.lock();
        let (have, owe) = self.totals(epoch);
        if u128::from(floor) + have < owe + u128::from(UNIT) {
            return false;
        }
        let slot = self.slot(epoch);
        if !Self::roll(slot, epoch) {
            return false;
        }
        slot.withdrawals.fetch_add(UNIT, Ordering::Relaxed);
        true
    }

    /// Gives back a retry taken at `epoch`, if its slot still counts it.
    fn refund(&self, epoch: u64) {
        let _guard = self.lock();
        let slot = self.slot(epoch);
        if slot.epoch.load(Ordering::Acquire) == epoch
            && slot.withdrawals.load(Ordering::Relaxed) >= UNIT
        {
            slot.withdrawals.fetch_sub(UNIT, Ordering::Relaxed);
        }
    }

    /// The latest epoch counted.
    fn last_epoch(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.epoch.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Nothing left in the window: the same as a fresh cell.
    fn is_idle(&self, now: u64) -> bool {
        now.saturating_sub(self.last_epoch()) >= SLOTS as u64
    }
}

// === impl BudgetState ===

impl BudgetState {
    /// A fresh budget with the same settings: nothing deposited, nothing withdrawn.
    pub(crate) fn renewed(&self) -> Arc<Self> {
        self.config.clone().build()
    }

    fn epoch(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        nanos / self.slot_nanos
    }

    /// The cell of the request's key, made if needed.
    fn cell(&self, parts: &Parts, now: u64) -> Arc<Cell> {
        let (uri, headers) = (&parts.uri, &parts.headers);
        match &self.config.keying {
            Keying::Global => self.global.clone(),
            Keying::PerHost => with_view(uri, headers, |view| {
                self.find_or_insert(
                    view.hash(),
                    view,
                    |cell, view| cell.host().is_some_and(|k| view.matches(k)),
                    |_| CellKey::Host(HostKey::from_parts(uri, headers)),
                    now,
                )
            }),
            Keying::By(key_fn) => {
                let (hash, key) = key_fn.key(&RequestHead::from_parts(parts));
                self.find_or_insert(
                    hash,
                    key,
                    |cell, key| matches!(cell, CellKey::By(k) if k.same(&**key)),
                    CellKey::By,
                    now,
                )
            }
        }
    }

    /// The cell among those with `hash` whose key `is_key` says is `probe`'s, or a new one
    /// keyed `make(probe)`.
    fn find_or_insert<P>(
        &self,
        hash: u64,
        probe: P,
        is_key: impl Fn(&CellKey, &P) -> bool,
        make: impl FnOnce(P) -> CellKey,
        now: u64,
    ) -> Arc<Cell> {
        #[cfg(test)]
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = hosts.map.get(&hash)
            && let Some(cell) = list.iter().find(|c| is_key(&c.key, &probe))
        {
            return cell.clone();
        }
        if hosts.len >= self.config.max_hosts {
            hosts.evict(now, self.config.max_hosts);
            // Under the map's lock: a lookup that found an evicted cell read the generation
            // before this.
            self.generation.fetch_add(1, Ordering::Release);
        }
        hosts.len += 1;
        let cell = Arc::new(Cell::new(make(probe)));
        hosts.map.entry(hash).or_default().push(cell.clone());
        cell
    }

    /// Records one request.
    pub(crate) fn deposit(&self, parts: &Parts, now: Instant) {
        let epoch = self.epoch(now);
        let amount = self.deposit;
        match self.config.keying {
            Keying::PerHost => {}
            Keying::Global => return self.global.deposit(epoch, amount),
            Keying::By(_) => return self.cell(parts, epoch).deposit(epoch, amount),
        }
        let (uri, headers) = (&parts.uri, &parts.headers);
        // Read before the lookup: an eviction that removes what the lookup finds bumps it after.
        let generation = self.generation.load(Ordering::Acquire);
        let cached = LAST.try_with(|last| match &*last.borrow() {
            Some(l)
                if l.budget == self.id
                    && l.generation == generation
                    && l.cell.key.host().is_some_and(|k| is_host(uri, headers, k)) =>
            {
                l.cell.deposit(epoch, amount);
                true
            }
            _ => false,
        });
        if cached == Ok(true) {
            return;
        }
        let cell = self.cell(parts, epoch);
        cell.deposit(epoch, amount);
        // A thread being torn down keeps no cache.
        let _ = LAST.try_with(|last| {
            last.replace(Some(Last {
                budget: self.id,
                generation,
                cell,
            }))
        });
    }

    /// Takes one retry if the budget allows it; dropping the returned guard without
    /// [`Withdrawal::commit`] gives it back.
    pub(crate) fn withdraw(&self, parts: &Parts, now: Instant) -> Option<Withdrawal> {
        let epoch = self.epoch(now);
        let cell = self.cell(parts, epoch);
        // Not `then_some`: a guard made for nothing would refund on drop.
        if !cell.withdraw(epoch, self.floor) {
            return None;
        }
        Some(Withdrawal {
            cell,
            epoch,
            committed: false,
        })
    }

    /// How many hosts are tracked.
    #[cfg(test)]
    fn hosts(&self) -> usize {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).len
    }
}

// === impl Hosts ===

impl Hosts {
    /// Makes room for one more host: idle hosts first, then the least recently used.
    fn evict(&mut self, now: u64, max: usize) {
        // An idle host's cell is the same as a fresh one: dropping it loses nothing.
        self.map.retain(|_, list| {
            list.retain(|c| !c.is_idle(now));
            !list.is_empty()
        });
        self.len = self.map.values().map(Vec::len).sum();
        if self.len >= max {
            let oldest = self
                .map
                .iter()
                .flat_map(|(h, list)| {
                    list.iter()
                        .enumerate()
                        .map(move |(i, c)| (c.last_epoch(), *h, i))
                })
                .min();
            if let Some((_, hash, i)) = oldest {
                if let Some(list) = self.map.get_mut(&hash) {
                    list.swap_remove(i);
                    if list.is_empty() {
                        self.map.remove(&hash);
                    }
                }
                self.len -= 1;
            }
        }
    }
}

impl fmt::Debug for BudgetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A retry taken from the budget; given back on drop unless it was committed (the retry went
/// on its way), or by [`Withdrawal::give_back`] when a layer below refused it.
pub(crate) struct Withdrawal {
    cell: Arc<Cell>,
    epoch: u64,
    committed: bool,
}

impl Withdrawal {
    /// The retry is on its way: keep it spent, even if the call is dropped from now on.
    pub(crate) fn commit(&mut self) {
        self.committed = true;
    }

    /// The retry was refused below before anything was sent: give it back.
    pub(crate) fn give_back(mut self) {
        self.committed = false;
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.committed {
            self.cell.refund(self.epoch);
        }
    }
}

impl fmt::Debug for Withdrawal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Withdrawal")
            .field("key", &self.cell.key)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

mod host;
#[cfg(test)]
mod tests;

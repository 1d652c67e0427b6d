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
//! Budgets are per host by default ([`HostKey`]), in a map bounded by
//! [`RetryBudget::max_hosts`]; a host with nothing left in its window holds no information and
//! is evicted first.
//!
//! # Clone
//!
//! The budget lives behind an `Arc` in the [`RetryLayer`](crate::RetryLayer): every service the
//! layer makes, and every clone of those, draws on the same budget.

use courier_core::HostKey;
use std::collections::HashMap;
use std::fmt;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    ratio: f64,
    window: Duration,
    floor: u32,
    per_host: bool,
    max_hosts: usize,
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
            per_host: true,
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

    /// Whether each host ([`HostKey`]) has its own budget, or all share one. Defaults to `true`.
    pub fn per_host(mut self, per_host: bool) -> Self {
        self.per_host = per_host;
        self
    }

    /// How many hosts are tracked at most; past it, idle hosts and then the least recently
    /// used are evicted. At least 1. Defaults to 1024.
    pub fn max_hosts(mut self, max_hosts: usize) -> Self {
        self.max_hosts = max_hosts.max(1);
        self
    }

    pub(crate) fn build(self) -> Arc<BudgetState> {
        let window_nanos = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
        Arc::new(BudgetState {
            config: self,
            deposit: (self.ratio * UNIT as f64).round() as u64,
            floor: u64::from(self.floor) * UNIT,
            slot_nanos: (window_nanos / SLOTS as u64).max(1),
            origin: Instant::now(),
            inner: Mutex::new(Buckets {
                hosts: HashMap::new(),
                global: Bucket::default(),
            }),
        })
    }
}

/// The shared, mutable side of a [`RetryBudget`].
pub(crate) struct BudgetState {
    config: RetryBudget,
    deposit: u64,
    floor: u64,
    slot_nanos: u64,
    origin: Instant,
    inner: Mutex<Buckets>,
}

struct Buckets {
    hosts: HashMap<HostKey, Bucket>,
    global: Bucket,
}

#[derive(Default, Clone, Copy)]
struct Slot {
    deposits: u64,
    withdrawals: u64,
}

#[derive(Default)]
struct Bucket {
    slots: [Slot; SLOTS],
    deposits: u64,
    withdrawals: u64,
    /// The latest slot epoch this bucket was moved to.
    head: u64,
}

// === impl Bucket ===

impl Bucket {
    /// Expires the slots that left the window by `now`.
    fn advance(&mut self, now: u64) {
        if now <= self.head {
            return;
        }
        if now - self.head >= SLOTS as u64 {
            *self = Self {
                head: now,
                ..Self::default()
            };
            return;
        }
        for epoch in self.head + 1..=now {
            let slot = &mut self.slots[(epoch % SLOTS as u64) as usize];
            self.deposits -= slot.deposits;
            self.withdrawals -= slot.withdrawals;
            *slot = Slot::default();
        }
        self.head = now;
    }

    fn slot(&mut self, epoch: u64) -> &mut Slot {
        &mut self.slots[(epoch % SLOTS as u64) as usize]
    }

    fn is_idle(&self, now: u64) -> bool {
        now.saturating_sub(self.head) >= SLOTS as u64
    }
}

// === impl BudgetState ===

impl BudgetState {
    fn epoch(&self, now: Instant) -> u64 {
        let nanos = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(nanos / u128::from(self.slot_nanos)).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        // Counters only; a panic elsewhere leaves them usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_bucket<R>(&self, host: &HostKey, now: u64, f: impl FnOnce(&mut Bucket) -> R) -> R {
        let mut guard = self.lock();
        let buckets = &mut *guard;
        if !self.config.per_host {
            buckets.global.advance(now);
            return f(&mut buckets.global);
        }
        if let Some(bucket) = buckets.hosts.get_mut(host) {
            bucket.advance(now);
            return f(bucket);
        }
        if buckets.hosts.len() >= self.config.max_hosts {
            // An idle host's bucket is the same as a fresh one: dropping it loses nothing.
            buckets.hosts.retain(|_, b| !b.is_idle(now));
            if buckets.hosts.len() >= self.config.max_hosts {
                let oldest = buckets
                    .hosts
                    .iter()
                    .min_by_key(|(_, b)| b.head)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    buckets.hosts.remove(&k);
                }
            }
        }
        let bucket = buckets.hosts.entry(host.clone()).or_default();
        bucket.advance(now);
        f(bucket)
    }

    /// Records one request.
    pub(crate) fn deposit(&self, host: &HostKey, now: Instant) {
        let epoch = self.epoch(now);
        let amount = self.deposit;
        self.with_bucket(host, epoch, |b| {
            b.deposits = b.deposits.saturating_add(amount);
            let slot = b.slot(epoch);
            slot.deposits = slot.deposits.saturating_add(amount);
        });
    }

    /// Takes one retry if the budget allows it; dropping the returned guard without
    /// [`Withdrawal::commit`] gives it back.
    pub(crate) fn withdraw(self: &Arc<Self>, host: &HostKey, now: Instant) -> Option<Withdrawal> {
        let epoch = self.epoch(now);
        let floor = self.floor;
        let ok = self.with_bucket(host, epoch, |b| {
            let have = u128::from(floor) + u128::from(b.deposits);
            let owe = u128::from(b.withdrawals) + u128::from(UNIT);
            if have >= owe {
                b.withdrawals += UNIT;
                b.slot(epoch).withdrawals += UNIT;
                true
            } else {
                false
            }
        });
        ok.then(|| Withdrawal {
            budget: self.clone(),
            host: host.clone(),
            epoch,
            committed: false,
        })
    }

    fn refund(&self, host: &HostKey, epoch: u64) {
        let now = self.epoch(Instant::now());
        let mut guard = self.lock();
        let buckets = &mut *guard;
        let bucket = if self.config.per_host {
            match buckets.hosts.get_mut(host) {
                Some(b) => b,
                None => return,
            }
        } else {
            &mut buckets.global
        };
        bucket.advance(now);
        if now.saturating_sub(epoch) < SLOTS as u64 {
            let slot = bucket.slot(epoch);
            if slot.withdrawals >= UNIT {
                slot.withdrawals -= UNIT;
                bucket.withdrawals -= UNIT;
            }
        }
    }

    /// How many hosts are tracked.
    #[cfg(test)]
    fn hosts(&self) -> usize {
        self.lock().hosts.len()
    }
}

impl fmt::Debug for BudgetState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A retry taken from the budget; given back on drop unless the retry was sent.
pub(crate) struct Withdrawal {
    budget: Arc<BudgetState>,
    host: HostKey,
    epoch: u64,
    committed: bool,
}

impl Withdrawal {
    /// The retry was sent: keep it spent.
    pub(crate) fn commit(mut self) {
        self.committed = true;
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        if !self.committed {
            self.budget.refund(&self.host, self.epoch);
        }
    }
}

impl fmt::Debug for Withdrawal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Withdrawal")
            .field("host", &self.host)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn host(name: &str) -> HostKey {
        HostKey::from_parts(
            &format!("http://{name}/").parse().unwrap(),
            &Default::default(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn ten_percent_no_floor_is_exact() {
        let b = RetryBudget::new().ratio(0.1).floor(0).build();
        let h = host("a");
        let now = Instant::now();
        for _ in 0..9 {
            b.deposit(&h, now);
        }
        assert!(b.withdraw(&h, now).is_none(), "9 requests earn 0.9 retry");
        b.deposit(&h, now);
        b.withdraw(&h, now).expect("10 requests earn one").commit();
        assert!(b.withdraw(&h, now).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn floor_and_window() {
        let b = RetryBudget::new().ratio(0.0).floor(2).build();
        let h = host("a");
        b.withdraw(&h, Instant::now()).unwrap().commit();
        b.withdraw(&h, Instant::now()).unwrap().commit();
        assert!(b.withdraw(&h, Instant::now()).is_none());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            b.withdraw(&h, Instant::now()).is_some(),
            "spent floor comes back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_withdrawal_is_refunded() {
        let b = RetryBudget::new().ratio(0.0).floor(1).build();
        let h = host("a");
        let w = b.withdraw(&h, Instant::now()).unwrap();
        assert!(b.withdraw(&h, Instant::now()).is_none());
        drop(w);
        assert!(b.withdraw(&h, Instant::now()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn hosts_are_separate_and_bounded() {
        let b = RetryBudget::new().ratio(0.0).floor(1).max_hosts(2).build();
        b.withdraw(&host("a"), Instant::now()).unwrap().commit();
        assert!(b.withdraw(&host("a"), Instant::now()).is_none());
        b.withdraw(&host("b"), Instant::now()).unwrap().commit();
        b.withdraw(&host("c"), Instant::now()).unwrap().commit();
        assert!(b.hosts() <= 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        for name in ["d", "e", "f"] {
            b.deposit(&host(name), Instant::now());
        }
        assert!(b.hosts() <= 2);
        let g = RetryBudget::new()
            .ratio(0.0)
            .floor(1)
            .per_host(false)
            .build();
        g.withdraw(&host("a"), Instant::now()).unwrap().commit();
        assert!(
            g.withdraw(&host("b"), Instant::now()).is_none(),
            "one shared budget"
        );
    }

    proptest! {
        /// Whatever the timing, retries in any window never exceed ratio * requests + floor.
        #[test]
        fn never_more_than_the_share(
            steps in proptest::collection::vec((0u64..3000, any::<bool>()), 1..400),
            percent in 0u32..50,
            floor in 0u32..5,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let b = RetryBudget::new().ratio(f64::from(percent) / 100.0).floor(floor).build();
                let h = host("a");
                let start = Instant::now();
                let mut events: Vec<(Duration, bool)> = Vec::new();
                for (gap_ms, is_request) in steps {
                    tokio::time::advance(Duration::from_millis(gap_ms)).await;
                    let now = Instant::now();
                    if is_request {
                        b.deposit(&h, now);
                        events.push((now - start, true));
                    } else if let Some(w) = b.withdraw(&h, now) {
                        w.commit();
                        events.push((now - start, false));
                    }
                }
                // The window of ten 1 s slots always covers the last 9 s of withdrawals and
                // never more than the last 10 s of deposits.
                for (s, is_request) in &events {
                    if *is_request {
                        continue;
                    }
                    let ret = events.iter().filter(|(t, r)| !*r && *t <= *s && *t + Duration::from_secs(9) > *s).count() as u64;
                    let req = events.iter().filter(|(t, r)| *r && *t <= *s && *t + Duration::from_secs(10) > *s).count() as u64;
                    prop_assert!(
                        ret * 100 <= req * u64::from(percent) + u64::from(floor) * 100,
                        "{ret} retries against {req} requests at {s:?}"
                    );
                }
                Ok(())
            })?;
        }
    }
}

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
use http::uri::Authority;
use http::{HeaderMap, Uri};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
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
                hosts: HashMap::default(),
                len: 0,
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
    /// Host hash to the hosts with that hash (almost always one).
    hosts: HashMap<u64, Vec<(HostKey, Bucket)>, BuildHasherDefault<PassHasher>>,
    /// How many hosts in all.
    len: usize,
    global: Bucket,
}

/// A multiply-rotate hash (as in rustc's FxHash) over the host's text, a word at a time: host
/// keys come from our own requests and the map is bounded, so flooding is not a concern, and
/// SipHash over `HostKey` byte by byte was a large share of the no-retry path.
#[derive(Default)]
struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The map's keys are hashes already.
#[derive(Default)]
struct PassHasher(u64);

impl Hasher for PassHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }

    fn finish(&self) -> u64 {
        self.0
    }
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
        let since = now.saturating_duration_since(self.origin);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        nanos / self.slot_nanos
    }

    fn lock(&self) -> MutexGuard<'_, Buckets> {
        // Counters only; a panic elsewhere leaves them usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the bucket of the request's host, creating it if needed. Returns the host's
    /// hash too (0 for the shared budget).
    fn with_bucket<R>(
        &self,
        uri: &Uri,
        headers: &HeaderMap,
        now: u64,
        f: impl FnOnce(&mut Bucket) -> R,
    ) -> (u64, R) {
        let mut guard = self.lock();
        let buckets = &mut *guard;
        if !self.config.per_host {
            buckets.global.advance(now);
            return (0, f(&mut buckets.global));
        }
        with_view(uri, headers, |view| {
            let hash = view.hash();
            if let Some(list) = buckets.hosts.get_mut(&hash)
                && let Some((_, bucket)) = list.iter_mut().find(|(k, _)| view.matches(k))
            {
                bucket.advance(now);
                return (hash, f(bucket));
            }
            if buckets.len >= self.config.max_hosts {
                buckets.evict(now, self.config.max_hosts);
            }
            buckets.len += 1;
            let list = buckets.hosts.entry(hash).or_default();
            list.push((HostKey::from_parts(uri, headers), Bucket::default()));
            let bucket = &mut list.last_mut().expect("pushed above").1;
            bucket.advance(now);
            (hash, f(bucket))
        })
    }

    /// Records one request.
    pub(crate) fn deposit(&self, uri: &Uri, headers: &HeaderMap, now: Instant) {
        let epoch = self.epoch(now);
        let amount = self.deposit;
        self.with_bucket(uri, headers, epoch, |b| {
            b.deposits = b.deposits.saturating_add(amount);
            let slot = b.slot(epoch);
            slot.deposits = slot.deposits.saturating_add(amount);
        });
    }

    /// Takes one retry if the budget allows it; dropping the returned guard without
    /// [`Withdrawal::commit`] gives it back.
    pub(crate) fn withdraw(
        self: &Arc<Self>,
        uri: &Uri,
        headers: &HeaderMap,
        now: Instant,
    ) -> Option<Withdrawal> {
        let epoch = self.epoch(now);
        let floor = self.floor;
        let (hash, ok) = self.with_bucket(uri, headers, epoch, |b| {
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
            hash,
            host: HostKey::from_parts(uri, headers),
            epoch,
            committed: false,
        })
    }

    fn refund(&self, hash: u64, host: &HostKey, epoch: u64) {
        let now = self.epoch(Instant::now());
        let mut guard = self.lock();
        let buckets = &mut *guard;
        let bucket = if self.config.per_host {
            let found = buckets
                .hosts
                .get_mut(&hash)
                .and_then(|list| list.iter_mut().find(|(k, _)| k == host));
            match found {
                Some((_, b)) => b,
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
        self.lock().len
    }
}

// === impl Buckets ===

impl Buckets {
    /// Makes room for one more host: idle hosts first, then the least recently used.
    fn evict(&mut self, now: u64, max: usize) {
        // An idle host's bucket is the same as a fresh one: dropping it loses nothing.
        self.hosts.retain(|_, list| {
            list.retain(|(_, b)| !b.is_idle(now));
            !list.is_empty()
        });
        self.len = self.hosts.values().map(Vec::len).sum();
        if self.len >= max {
            let oldest = self
                .hosts
                .iter()
                .flat_map(|(h, list)| {
                    list.iter()
                        .enumerate()
                        .map(move |(i, (_, b))| (b.head, *h, i))
                })
                .min();
            if let Some((_, hash, i)) = oldest {
                if let Some(list) = self.hosts.get_mut(&hash) {
                    list.swap_remove(i);
                    if list.is_empty() {
                        self.hosts.remove(&hash);
                    }
                }
                self.len -= 1;
            }
        }
    }
}

/// Lowercases the ASCII letters of eight bytes at once.
fn ascii_lowercase(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = word & LOW7;
    // High bit set where the byte is >= 'A' (0x41), and where it is > 'Z' (0x5a).
    let ge_a = low + 0x3f3f_3f3f_3f3f_3f3f;
    let gt_z = low + 0x2525_2525_2525_2525;
    let upper = (ge_a ^ gt_z) & !word & HIGH;
    word | (upper >> 2)
}

/// A request's host as borrowed text: what [`HostKey::from_parts`] keys on, without copying.
struct HostView<'a> {
    scheme: Option<&'a str>,
    authority: &'a str,
}

fn with_view<R>(uri: &Uri, headers: &HeaderMap, f: impl FnOnce(HostView<'_>) -> R) -> R {
    let scheme = uri.scheme_str();
    if let Some(a) = uri.authority() {
        return f(HostView {
            scheme,
            authority: a.as_str(),
        });
    }
    let fallback = headers
        .get(http::header::HOST)
        .and_then(|h| Authority::try_from(h.as_bytes()).ok());
    f(HostView {
        scheme,
        authority: fallback.as_ref().map_or("", Authority::as_str),
    })
}

impl HostView<'_> {
    /// A hash that ignores ASCII case, as [`HostKey`]'s equality does.
    fn hash(&self) -> u64 {
        let mut h = FastHasher::default();
        let scheme = self.scheme.unwrap_or("");
        h.add(scheme.len() as u64 | u64::from(self.scheme.is_some()) << 32);
        for part in [scheme, self.authority] {
            let mut chunks = part.as_bytes().chunks_exact(8);
            for chunk in &mut chunks {
                let word = u64::from_le_bytes(chunk.try_into().expect("chunks of eight"));
                h.add(ascii_lowercase(word));
            }
            // The last bytes, zero-padded, little-endian; shifted in rather than copied.
            let tail = chunks
                .remainder()
                .iter()
                .rev()
                .fold(0u64, |acc, &b| acc << 8 | u64::from(b));
            h.add(ascii_lowercase(tail));
        }
        // Spread the bits: the map uses the top ones too.
        let mut x = h.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }

    fn matches(&self, key: &HostKey) -> bool {
        let authority = key.authority().map_or("", Authority::as_str);
        let same = |a: &str, b: &str| a == b || a.eq_ignore_ascii_case(b);
        let scheme = match (key.scheme(), self.scheme) {
            (Some(a), Some(b)) => same(a.as_str(), b),
            (None, None) => true,
            _ => false,
        };
        scheme && same(authority, self.authority)
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
    hash: u64,
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
            self.budget.refund(self.hash, &self.host, self.epoch);
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

    fn host(name: &str) -> Uri {
        format!("http://{name}/").parse().unwrap()
    }

    trait Short {
        fn deposit_(&self, uri: &Uri, now: Instant);
        fn withdraw_(&self, uri: &Uri, now: Instant) -> Option<Withdrawal>;
    }

    impl Short for Arc<BudgetState> {
        fn deposit_(&self, uri: &Uri, now: Instant) {
            self.deposit(uri, &HeaderMap::new(), now)
        }
        fn withdraw_(&self, uri: &Uri, now: Instant) -> Option<Withdrawal> {
            self.withdraw(uri, &HeaderMap::new(), now)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ten_percent_no_floor_is_exact() {
        let b = RetryBudget::new().ratio(0.1).floor(0).build();
        let h = host("a");
        let now = Instant::now();
        for _ in 0..9 {
            b.deposit_(&h, now);
        }
        assert!(b.withdraw_(&h, now).is_none(), "9 requests earn 0.9 retry");
        b.deposit_(&h, now);
        b.withdraw_(&h, now).expect("10 requests earn one").commit();
        assert!(b.withdraw_(&h, now).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn floor_and_window() {
        let b = RetryBudget::new().ratio(0.0).floor(2).build();
        let h = host("a");
        b.withdraw_(&h, Instant::now()).unwrap().commit();
        b.withdraw_(&h, Instant::now()).unwrap().commit();
        assert!(b.withdraw_(&h, Instant::now()).is_none());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            b.withdraw_(&h, Instant::now()).is_some(),
            "spent floor comes back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropped_withdrawal_is_refunded() {
        let b = RetryBudget::new().ratio(0.0).floor(1).build();
        let h = host("a");
        let w = b.withdraw_(&h, Instant::now()).unwrap();
        assert!(b.withdraw_(&h, Instant::now()).is_none());
        drop(w);
        assert!(b.withdraw_(&h, Instant::now()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn hosts_are_separate_and_bounded() {
        let b = RetryBudget::new().ratio(0.0).floor(1).max_hosts(2).build();
        b.withdraw_(&host("a"), Instant::now()).unwrap().commit();
        assert!(b.withdraw_(&host("a"), Instant::now()).is_none());
        b.withdraw_(&host("b"), Instant::now()).unwrap().commit();
        b.withdraw_(&host("c"), Instant::now()).unwrap().commit();
        assert!(b.hosts() <= 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        for name in ["d", "e", "f"] {
            b.deposit_(&host(name), Instant::now());
        }
        assert!(b.hosts() <= 2);
        let g = RetryBudget::new()
            .ratio(0.0)
            .floor(1)
            .per_host(false)
            .build();
        g.withdraw_(&host("a"), Instant::now()).unwrap().commit();
        assert!(
            g.withdraw_(&host("b"), Instant::now()).is_none(),
            "one shared budget"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn host_matching_ignores_case_and_reads_the_host_header() {
        let b = RetryBudget::new().ratio(0.0).floor(1).build();
        let now = Instant::now();
        b.withdraw_(&host("API.example"), now).unwrap().commit();
        assert!(
            b.withdraw_(&host("api.EXAMPLE"), now).is_none(),
            "same host"
        );
        let mut headers = HeaderMap::new();
        headers.insert("host", "svc:8080".parse().unwrap());
        let origin_form: Uri = "/a?b=c".parse().unwrap();
        b.withdraw(&origin_form, &headers, now).unwrap().commit();
        assert!(b.withdraw(&origin_form, &headers, now).is_none());
        assert_eq!(b.hosts(), 2);
        // The shared budget for requests without any host.
        b.withdraw(&origin_form, &HeaderMap::new(), now)
            .unwrap()
            .commit();
        assert_eq!(b.hosts(), 3);
    }

    proptest! {
        #[test]
        fn word_lowercase_matches_bytewise(bytes in any::<[u8; 8]>()) {
            let want = u64::from_le_bytes(bytes.map(|b| b.to_ascii_lowercase()));
            prop_assert_eq!(ascii_lowercase(u64::from_le_bytes(bytes)), want);
        }
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
                        b.deposit_(&h, now);
                        events.push((now - start, true));
                    } else if let Some(w) = b.withdraw_(&h, now) {
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

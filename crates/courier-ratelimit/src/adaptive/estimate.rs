//! One host's learned capacity: what it accepted lately, and the rate to pace it at.
//!
//! Everything is atomics, and this module reads no clock: callers pass `now` in nanoseconds
//! since the layer's base instant, so the rules are tested (and property-tested) on plain
//! numbers.
//!
//! - **Accepts** are counted in four buckets of a quarter second each: a packed word of the
//!   bucket's index (24 bits) and its count (40 bits). The accepted rate at `now` is the sum of
//!   the buckets less than one second old.
//! - **The estimate** is `base` (requests per second, as `f64` bits) and `since` (when the last
//!   overload signal that paced came; 0 while unpaced). The pacing rate at `now` is [the
//!   ramp](super#the-ramp) of `base`, `now - since` after the signal.
//!
//! - **Evidence**: a signal paces only when the last second holds at least `min_answers`
//!   answers, and only the path it came from (`scope`, a hash of the path) while every signal
//!   of the last second came from that one path; a signal from a second path widens the
//!   pacing to the whole host.
//!
//! Positive `f64`s order as their bits do, so `fetch_max` on the bits raises `base` without a
//! compare-and-swap loop.

use std::sync::atomic::{AtomicU64, Ordering};

/// Full buckets the rates are counted over, besides the current one.
const BUCKETS: u64 = 4;
/// Slots in the ring: the full buckets and the current one.
const SLOTS: u64 = BUCKETS + 1;
const BUCKET_NS: u64 = 250_000_000;
/// Paced at the minimum rate, the rate doubles this often: 250 ms ([the ramp](super#the-ramp)).
const SLOW_START_NS: u64 = 250_000_000;
/// The rates are counted over this long, plus the current bucket's part: one second.
pub(crate) const WINDOW_NS: u64 = BUCKETS * BUCKET_NS;
const IDX_BITS: u32 = 24;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
const COUNT_MAX: u64 = (1 << (64 - IDX_BITS)) - 1;

/// The settings the rules read, in the units they use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rules {
    /// The least share of overload signals among the answers of the last second that paces.
    pub(crate) overload_share: f64,
    /// The fewest answers (accepts and signals) in the last second before a signal paces.
    pub(crate) min_answers: u64,
    /// The lowest pacing rate, per second.
    pub(crate) min_rate: f64,
    /// The highest pacing rate, per second: at it, or after `recover_ns`, pacing ends.
    pub(crate) max_rate: f64,
    /// How long the rate holds at `base` after a signal, in nanoseconds.
    pub(crate) hold_ns: u64,
    /// The time scale of the ramp after the hold, in nanoseconds.
    pub(crate) ramp_ns: u64,
    /// Pacing ends this long after the last signal, in nanoseconds.
    pub(crate) recover_ns: u64,
}

impl Rules {
    /// The pacing rate `elapsed_ns` after a signal that set `base`, as [the
    /// ramp](super#the-ramp) says; `None` once pacing ends.
    pub(crate) fn rate(&self, base: f64, elapsed_ns: u64) -> Option<f64> {
        if elapsed_ns >= self.recover_ns {
            return None;
        }
        let rate = if base <= self.min_rate {
            let doublings = (elapsed_ns as f64 / SLOW_START_NS as f64).min(1_000.0);
            self.min_rate * doublings.exp2()
        } else {
            let x = elapsed_ns.saturating_sub(self.hold_ns) as f64 / self.ramp_ns as f64;
            base * (1.0 + x * x * x)
        };
        (rate < self.max_rate).then_some(rate)
    }
}

/// Events per second over the last second, in four buckets of a packed word each.
#[derive(Debug)]
struct Counter([AtomicU64; SLOTS as usize]);

impl Counter {
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; SLOTS as usize])
    }

    #[inline]
    fn add(&self, now: u64) {
        let idx = now / BUCKET_NS;
        let slot = &self.0[(idx % SLOTS) as usize];
        let idx = idx & IDX_MASK;
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let count = if cur & IDX_MASK == idx {
                cur >> IDX_BITS
            } else {
                0
            };
            let new = idx | ((count + 1).min(COUNT_MAX) << IDX_BITS);
            match slot.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Events over the last four whole buckets and the current one's part.
    fn count(&self, now: u64) -> u64 {
        let cur = (now / BUCKET_NS) & IDX_MASK;
        self.0
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|w| cur.wrapping_sub(w & IDX_MASK) & IDX_MASK < SLOTS)
            .map(|w| w >> IDX_BITS)
            .sum()
    }

    /// Events per second over the last four whole buckets and the current one's part: a
    /// second and up to a quarter more, divided by the time it covers.
    fn rate(&self, now: u64) -> f64 {
        // The current bucket's part, in whole milliseconds.
        let span = WINDOW_NS + (now % BUCKET_NS) / 1_000_000 * 1_000_000;
        self.count(now) as f64 * 1e9 / span as f64
    }
}

/// One key's estimate. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Estimate {
    accepts: Counter,
    signals: Counter,
    /// `f64` bits, requests per second.
    base: AtomicU64,
    /// Nanoseconds since the base instant of the last overload signal (at least 1); 0 while
    /// unpaced.
    since: AtomicU64,
    /// When the current stretch of pacing began; 0 while unpaced.
    started: AtomicU64,
    /// The base it began with (`f64` bits).
    start_base: AtomicU64,
    /// Signals before this moment are counted but change nothing: pacing was found not to help.
    ignore_until: AtomicU64,
    /// While paced: the one path paced (its hash), or [`WHOLE_HOST`].
    scope: AtomicU64,
    /// The path of the last signal.
    signal_path: AtomicU64,
    /// When a signal last came from another path than the one before it.
    mixed_at: AtomicU64,
}

/// The scope of a host paced whole: its signals came from more than one path.
pub(crate) const WHOLE_HOST: u64 = 0;

/// What an overload signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// Too few among the answers, or pacing was found not to help lately: nothing changed.
    Ignored,
    /// The host is paced at what it accepted.
    Paced,
    /// What the host accepted fell with the pace: pacing does not help, and stopped.
    Unhelped,
}

impl Estimate {
    pub(crate) fn new() -> Self {
        Self {
            accepts: Counter::new(),
            signals: Counter::new(),
            base: AtomicU64::new(0),
            since: AtomicU64::new(0),
            started: AtomicU64::new(0),
            start_base: AtomicU64::new(0),
            ignore_until: AtomicU64::new(0),
            scope: AtomicU64::new(WHOLE_HOST),
            signal_path: AtomicU64::new(WHOLE_HOST),
            mixed_at: AtomicU64::new(0),
        }
    }

    /// Whether pacing, while on, applies to a request for `path` (a path hash, never
    /// [`WHOLE_HOST`]).
    #[inline]
    pub(crate) fn paces(&self, path: u64) -> bool {
        let scope = self.scope.load(Ordering::Relaxed);
        scope == WHOLE_HOST || scope == path
    }

    /// Whether the host is paced: one load, the healthy path's only cost besides counting.
    #[inline]
    pub(crate) fn is_paced(&self) -> bool {
        self.since.load(Ordering::Relaxed) != 0
    }

    /// The host answered (anything but an overload signal) at `now`; `unpaced` when the
    /// request was sent without pacing.
    #[inline]
    pub(crate) fn accepted(&self, now: u64, unpaced: bool, rules: &Rules) {
        self.accepts.add(now);
        // Just after a signal, what the host demonstrably serves raises the estimate: the
        // answers to requests sent before pacing began are still arriving. Paced requests'
        // answers do not: the pace is what they show.
        if !unpaced {
            return;
        }
        let since = self.since.load(Ordering::Relaxed);
        if since != 0 && now.saturating_sub(since) < WINDOW_NS {
            self.raise(self.accepted_rate(now).min(rules.max_rate));
        }
    }

    /// The host signalled overload at `now`, to a request for `path` (its hash). When the
    /// last second holds at least `min_answers` answers and signals are at least
    /// `overload_share` of them, pace it at what it accepted over that second (at least the
    /// minimum), the ramp starting again from here: only `path` while every signal of that
    /// second came from it, else the whole host. A few refusals among many answers (one path
    /// that answers 503), or in a quiet second, pace nothing.
    pub(crate) fn overloaded(&self, now: u64, path: u64, rules: &Rules) -> Signal {
        self.signals.add(now);
        let before = self.signal_path.swap(path, Ordering::Relaxed);
        if before != WHOLE_HOST && before != path {
            self.mixed_at.store(now, Ordering::Relaxed);
        }
        if now < self.ignore_until.load(Ordering::Relaxed) {
            return Signal::Ignored;
        }
        let (signals, accepts) = (self.signals.count(now), self.accepts.count(now));
        if signals + accepts < rules.min_answers
            || (signals as f64) < rules.overload_share * (signals + accepts) as f64
        {
            return Signal::Ignored;
        }
        let accepted = self.accepted_rate(now);
        let mixed = self.mixed_at.load(Ordering::Relaxed);
        let one_path = mixed == 0 || now.saturating_sub(mixed) >= WINDOW_NS;
        let base = accepted.clamp(rules.min_rate, rules.max_rate);
        // Paced for a whole hold and a second more, and what the host accepts keeps falling
        // with the pace, below half of what it accepted when pacing began: the refusals are a
        // share of whatever is sent (a path that always answers 503, a host that is down), not
        // its capacity, and pacing would only spiral down. Stop pacing and leave them to the
        // breaker and retry, for `recover` from now. A host at its capacity keeps accepting it.
        let started = self.started.load(Ordering::Relaxed);
        let start_base = f64::from_bits(self.start_base.load(Ordering::Relaxed));
        if started != 0
            && now.saturating_sub(started) >= rules.hold_ns + WINDOW_NS
            && base < start_base / 2.0
        {
            self.ignore_until
                .store(now.saturating_add(rules.recover_ns), Ordering::Relaxed);
            self.since.store(0, Ordering::Relaxed);
            self.started.store(0, Ordering::Relaxed);
            return Signal::Unhelped;
        }
        self.base.store(base.to_bits(), Ordering::Relaxed);
        // One path's signals pace that path; a second path's widen it to the whole host.
        let scope = if one_path { path } else { WHOLE_HOST };
        if !self.is_paced() {
            self.scope.store(scope, Ordering::Relaxed);
        } else if self.scope.load(Ordering::Relaxed) != scope {
            self.scope.store(WHOLE_HOST, Ordering::Relaxed);
        }
        // Release: a reader that sees this `since` sees this `base` and this scope.
        self.since.fetch_max(now.max(1), Ordering::Release);
        if self
            .started
            .compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.start_base.store(base.to_bits(), Ordering::Relaxed);
        }
        Signal::Paced
    }

    /// The rate to pace at `now`, `None` while unpaced. Ends pacing once the rules say so.
    pub(crate) fn rate(&self, now: u64, rules: &Rules) -> Option<f64> {
        let since = self.since.load(Ordering::Acquire);
        if since == 0 {
            return None;
        }
        let base = f64::from_bits(self.base.load(Ordering::Relaxed));
        let rate = rules.rate(base, now.saturating_sub(since));
        if rate.is_none() {
            // Recovered; a signal that came meanwhile moved `since`, and keeps pacing on.
            if self
                .since
                .compare_exchange(since, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.started.store(0, Ordering::Relaxed);
            }
        }
        rate
    }

    /// The learned base rate, per second, while paced.
    pub(crate) fn base(&self) -> Option<f64> {
        self.is_paced()
            .then(|| f64::from_bits(self.base.load(Ordering::Relaxed)))
    }

    /// Accepts per second over the last second.
    pub(crate) fn accepted_rate(&self, now: u64) -> f64 {
        self.accepts.rate(now)
    }

    /// Whether nothing would be lost by forgetting this key: unpaced (or paced, but its last
    /// signal is older than `recover`: a host nobody called since), and no accept counted
    /// within the last second.
    pub(crate) fn is_idle(&self, now: u64, rules: &Rules) -> bool {
        let since = self.since.load(Ordering::Acquire);
        (since == 0 || now.saturating_sub(since) >= rules.recover_ns)
            && self.accepted_rate(now) == 0.0
    }

    /// Raises the base, and the base this stretch of pacing began with: the answers to
    /// requests sent before it began belong to where it began.
    fn raise(&self, rate: f64) {
        if rate > 0.0 {
            self.base.fetch_max(rate.to_bits(), Ordering::Relaxed);
            self.start_base.fetch_max(rate.to_bits(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;
    /// The path of most signals here.
    const PATH: u64 = 7;

    fn rules() -> Rules {
        Rules {
            overload_share: 0.2,
            min_answers: 0,
            min_rate: 1.0,
            max_rate: 10_000.0,
            hold_ns: S,
            ramp_ns: 2 * S,
            recover_ns: 10 * S,
        }
    }

    #[test]
    fn a_healthy_host_is_never_paced() {
        let (e, r) = (Estimate::new(), rules());
        for i in 0..1_000 {
            e.accepted(i * 1_000_000, true, &r);
        }
        assert!(!e.is_paced());
        assert_eq!(e.rate(S, &r), None);
    }

    #[test]
    fn a_signal_paces_at_what_the_host_accepted_in_the_last_second() {
        let (e, r) = (Estimate::new(), rules());
        // 5 accepted in the last second, 3 more long before.
        for t in [0, 1, 2] {
            e.accepted(t, true, &r);
        }
        for k in 0..5 {
            e.accepted(9 * S + k * 100_000_000, true, &r);
        }
        // One refusal among 5 answers is under a fifth: nothing; a second one paces. (On a
        // bucket boundary the rates cover exactly one second.)
        assert_eq!(Signal::Ignored, e.overloaded(10 * S, PATH, &r));
        assert_eq!(Signal::Paced, e.overloaded(10 * S, PATH, &r));
        assert_eq!(e.rate(10 * S, &r), Some(5.0));
    }

    #[test]
    fn accepts_that_arrive_just_after_the_signal_raise_the_estimate() {
        // The usual order under overload: the quick refusals come before the slow successes.
        let (e, r) = (Estimate::new(), rules());
        e.overloaded(S, PATH, &r);
        assert_eq!(e.base(), Some(1.0), "nothing accepted yet: the minimum");
        for _ in 0..5 {
            e.accepted(S, true, &r);
        }
        assert_eq!(e.base(), Some(5.0));
        // Paced requests' accepts do not raise it: the pace is what they show.
        for _ in 0..5 {
            e.accepted(S, false, &r);
        }
        assert_eq!(e.base(), Some(5.0));
        // Past the first second, accepts no longer raise it: the ramp does.
        e.accepted(S + WINDOW_NS, true, &r);
        assert_eq!(e.base(), Some(5.0));
    }

    #[test]
    fn the_rate_ramps_up_and_pacing_ends_after_recovery() {
        let (e, r) = (Estimate::new(), rules());
        for _ in 0..5 {
            e.accepted(S, true, &r);
        }
        e.overloaded(S, PATH, &r);
        e.overloaded(S, PATH, &r);
        assert_eq!(e.rate(2 * S, &r), Some(5.0), "held for a second");
        assert_eq!(e.rate(4 * S, &r), Some(10.0), "one ramp later: twice");
        assert_eq!(e.rate(6 * S, &r), Some(45.0), "two ramps later: nine times");
        assert!(e.is_paced());
        assert_eq!(e.rate(11 * S, &r), None);
        assert!(!e.is_paced(), "recovered");
    }

    #[test]
    fn a_few_signals_among_many_answers_pace_nothing() {
        let (e, r) = (Estimate::new(), rules());
        for _ in 0..100 {
            e.accepted(S, true, &r);
        }
        // 24 signals among 100 answers: 19 % of the 124.
        for _ in 0..24 {
            assert_eq!(Signal::Ignored, e.overloaded(S, PATH, &r));
        }
        assert!(!e.is_paced());
        assert_eq!(
            Signal::Paced,
            e.overloaded(S, PATH, &r),
            "the 25th makes 20 %"
        );
        assert_eq!(e.base(), Some(100.0));
    }

    #[test]
    fn a_signal_meanwhile_keeps_pacing_on() {
        let (e, r) = (Estimate::new(), rules());
        e.overloaded(S, PATH, &r);
        for _ in 0..3 {
            e.accepted(9 * S, true, &r);
        }
        for _ in 0..3 {
            e.overloaded(9 * S, PATH, &r);
        }
        // 10 s after the first signal, 3 after the last: held 1 s, then 2 s of ramp.
        assert_eq!(e.rate(12 * S, &r), Some(3.0 * 2.0));
    }

    #[test]
    fn with_nothing_accepted_the_rate_starts_slow_and_doubles() {
        let (e, r) = (Estimate::new(), rules());
        e.overloaded(S, PATH, &r);
        assert_eq!(e.base(), Some(1.0));
        assert_eq!(e.rate(S, &r), Some(1.0));
        assert_eq!(e.rate(S + SLOW_START_NS, &r), Some(2.0));
        assert_eq!(e.rate(S + 10 * SLOW_START_NS, &r), Some(1024.0));
        assert_eq!(
            e.rate(S + 100 * SLOW_START_NS, &r),
            None,
            "past the maximum"
        );
    }

    #[test]
    fn the_rate_ends_at_the_maximum() {
        let r = Rules {
            max_rate: 4.0,
            ..rules()
        };
        let e = Estimate::new();
        e.accepted(S, true, &r);
        e.accepted(S, true, &r);
        e.overloaded(S, PATH, &r);
        assert_eq!(e.rate(S, &r), Some(2.0));
        assert_eq!(e.rate(5 * S, &r), None, "past 4/s: unpaced");
    }

    #[test]
    fn idle_means_unpaced_and_quiet() {
        let (e, r) = (Estimate::new(), rules());
        assert!(e.is_idle(0, &r));
        e.accepted(S, true, &r);
        assert!(!e.is_idle(S, &r));
        assert!(e.is_idle(3 * S, &r));
        e.overloaded(3 * S, PATH, &r);
        assert!(!e.is_idle(5 * S, &r), "paced, its last signal recent");
        assert!(
            e.is_idle(20 * S, &r),
            "paced, but nobody called for longer than recover: nothing to lose"
        );
    }

    proptest! {
        /// Whatever the signals and accepts, the rate stays within the bounds, and a host that
        /// stops signalling is unpaced again after `recover`.
        #[test]
        fn the_rate_stays_in_bounds_and_always_recovers(
            events in proptest::collection::vec((0u64..30 * S, any::<bool>()), 0..200),
            min_rate in 0.01f64..100.0,
            share in 0.0f64..=1.0,
            span in 1.0f64..1_000.0,
            hold_ms in 0u64..10_000,
            ramp_ms in 1u64..10_000,
            recover_ms in 1u64..60_000,
        ) {
            let r = Rules {
                overload_share: share,
                min_answers: 0,
                min_rate,
                max_rate: min_rate * span,
                hold_ns: hold_ms * 1_000_000,
                ramp_ns: ramp_ms * 1_000_000,
                recover_ns: recover_ms * 1_000_000,
            };
            let e = Estimate::new();
            let mut events = events;
            events.sort_unstable();
            let mut last = 0;
            for (t, overload) in events {
                if overload { e.overloaded(t, PATH, &r); } else { e.accepted(t, t % 2 == 0, &r) }
                if let Some(rate) = e.rate(t, &r) {
                    prop_assert!(rate >= min_rate && rate < r.max_rate, "{rate}");
                }
                last = t;
            }
            let after = last + r.recover_ns;
            prop_assert_eq!(e.rate(after, &r), None);
            prop_assert!(!e.is_paced());
        }
    }

    #[test]
    fn too_few_answers_pace_nothing() {
        let r = Rules {
            min_answers: 10,
            ..rules()
        };
        let e = Estimate::new();
        // Three refusals in a quiet second: all of its answers, but only three.
        for _ in 0..3 {
            assert_eq!(Signal::Ignored, e.overloaded(S, PATH, &r));
        }
        assert!(!e.is_paced());
        for _ in 0..6 {
            e.accepted(S, true, &r);
        }
        assert_eq!(Signal::Paced, e.overloaded(S, PATH, &r), "the tenth answer");
    }

    #[test]
    fn one_paths_signals_pace_that_path_and_a_second_path_widens_it() {
        let (e, r) = (Estimate::new(), rules());
        for _ in 0..5 {
            e.accepted(S, true, &r);
        }
        e.overloaded(S, PATH, &r);
        e.overloaded(S, PATH, &r);
        assert!(e.is_paced());
        assert!(e.paces(PATH));
        assert!(!e.paces(PATH + 2), "another path is not paced");
        e.overloaded(S, PATH + 2, &r);
        assert!(
            e.paces(PATH) && e.paces(PATH + 2) && e.paces(PATH + 4),
            "the whole host"
        );
    }

    #[test]
    fn signals_from_many_paths_pace_the_whole_host_from_the_start() {
        let (e, r) = (Estimate::new(), rules());
        for path in 0..10 {
            e.overloaded(S, 2 * path + 1, &r);
        }
        assert!(e.is_paced());
        assert!(e.paces(1_001));
    }
}

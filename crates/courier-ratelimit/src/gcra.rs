//! The bucket behind one key: GCRA over one `AtomicU64`, lock-free.
//!
//! The state is the theoretical arrival time (TAT): the moment, in nanoseconds from the store's
//! base instant, at which the bucket would be full again. With emission interval `T = 1 / rate`
//! and tolerance `tau = (burst - 1) * T`, a request arriving at `now` may start at
//! `max(now, TAT - tau)` and moves the TAT to `max(TAT, now) + T`. A request that starts later
//! than `now` has reserved that slot (reservation semantics): the next caller gets the slot one
//! interval after it, so concurrent callers are spread `T` apart instead of woken together.
//!
//! Why this bounds every window: each admitted request moves the TAT forward by at least `T`,
//! and its start lies in `[TAT' - T - tau, TAT' - T]` for the TAT' it wrote. `n` starts inside
//! `[t, t + d]` therefore wrote `n` TATs at least `T` apart inside an interval of length
//! `d + tau`, so `n <= burst + d / T`, whatever order the callers' clocks reached the cell in.
//!
//! A server's "wait until" is kept beside it in `parked_until`: a parked bucket treats every
//! moment before the park ends as the moment it ends.
//!
//! Eviction swaps the TAT of an idle cell (full bucket, not parked) for [`EVICTED`] with one
//! compare-and-swap, so a reservation racing with it either lands first (and the eviction fails)
//! or sees the tombstone and retries on a fresh cell, which starts full: exactly what the evicted
//! one held. Parking and eviction also check each other's writes (both `SeqCst`, store then
//! load), so a park is never lost to an eviction. `courier-loom`'s `tests/bucket.rs` checks both
//! races in every interleaving, compiling this very file with loom's atomics
//! (`--cfg courier_loom`).

#[cfg(all(courier_loom, test))]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(all(courier_loom, test)))]
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// The TAT of a cell that was evicted; no live TAT reaches it.
pub(crate) const EVICTED: u64 = u64::MAX;

const MAX_TAT: u64 = EVICTED - 1;

/// What a reservation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The request may start at `start`; `ticket` is the TAT it wrote (used to give the slot
    /// back).
    Admit { start: u64, ticket: u64 },
    /// The first free slot is `retry_in` away, beyond what the caller accepts; nothing was
    /// taken. `parked` when the server's park is what holds it.
    Deny { retry_in: u64, parked: bool },
    /// The cell was evicted; look the key up again.
    Evicted,
}

/// What a sweep does with one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evict {
    /// Busy (refilling or parked): keep it.
    Keep,
    /// Evicted (now or before): remove it from the map.
    Remove,
    /// Evicted, but a park landed at the same moment: remove it and park a fresh cell until
    /// this instant.
    RemoveParked(u64),
}

/// One bucket.
#[derive(Debug, Default)]
pub(crate) struct Cell {
    tat: AtomicU64,
    parked_until: AtomicU64,
}

// === impl Cell ===

impl Cell {
    /// A full bucket, not parked.
    pub(crate) fn new() -> Self {
        Self {
            tat: AtomicU64::new(0),
            parked_until: AtomicU64::new(0),
        }
    }

    /// Reserves the next slot for a request arriving at `now`, unless it starts more than
    /// `max_wait` after `now`.
    #[inline]
    pub(crate) fn reserve(&self, now: u64, t: u64, tau: u64, max_wait: u64) -> Outcome {
        let parked = self.parked_until.load(Ordering::Acquire);
        let eff_now = now.max(parked);
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat == EVICTED {
                return Outcome::Evicted;
            }
            let start = eff_now.max(tat.saturating_sub(tau));
            let wait = start - now;
            if wait > max_wait {
                return Outcome::Deny {
                    retry_in: wait,
                    parked: parked > now && parked >= tat.saturating_sub(tau),
                };
            }
            let ticket = tat.max(eff_now).saturating_add(t).min(MAX_TAT);
            match self
                .tat
                .compare_exchange_weak(tat, ticket, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Outcome::Admit { start, ticket },
                Err(actual) => tat = actual,
            }
        }
    }

    /// When a request arriving at `now` could start, without reserving anything: the wait, and
    /// whether the server's park is what holds it. `None` when the cell was evicted (a fresh
    /// one starts full).
    pub(crate) fn next_start(&self, now: u64, tau: u64) -> Option<(u64, bool)> {
        let parked = self.parked_until.load(Ordering::Acquire);
        let tat = self.tat.load(Ordering::Acquire);
        if tat == EVICTED {
            return None;
        }
        let start = now.max(parked).max(tat.saturating_sub(tau));
        Some((
            start - now,
            parked > now && parked >= tat.saturating_sub(tau),
        ))
    }

    /// Gives back the slot that wrote `ticket`, if no later reservation was stacked on it.
    /// Returns whether it was given back.
    pub(crate) fn give_back(&self, ticket: u64, t: u64) -> bool {
        self.tat
            .compare_exchange(
                ticket,
                ticket.saturating_sub(t),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Keeps the bucket's level (the tokens it lacks) as its emission interval changes from
    /// `t_old` to `t_new` nanoseconds: a bucket short of `n` tokens at `now` is still short of
    /// `n`, and refills at the new rate from now on. A full or evicted bucket is left alone.
    pub(crate) fn rescale(&self, now: u64, t_old: u64, t_new: u64) {
        if t_old == t_new || t_old == 0 {
            return;
        }
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            if tat == EVICTED || tat <= now {
                return;
            }
            let owed = u128::from(tat - now) * u128::from(t_new) / u128::from(t_old);
            let scaled = u64::try_from(owed)
                .unwrap_or(u64::MAX)
                .saturating_add(now)
                .min(MAX_TAT);
            match self
                .tat
                .compare_exchange_weak(tat, scaled, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => tat = actual,
            }
        }
    }

    /// Parks the bucket until `until` (never shortens a park). Returns `false` when the cell was
    /// evicted meanwhile and the park must be set on a fresh cell.
    pub(crate) fn park(&self, until: u64) -> bool {
        self.parked_until.fetch_max(until, Ordering::SeqCst);
        // With `try_evict`'s fence: a store then a load on each side, so at least one of the
        // two sees the other's write (store buffering). Two `SeqCst` operations already
        // promise that; the fences say it in a form loom checks, since loom models a `SeqCst`
        // access as `AcqRel` (tokio-rs/loom#180). Neither path is hot.
        fence(Ordering::SeqCst);
        self.tat.load(Ordering::SeqCst) != EVICTED
    }

    /// Until when the bucket is parked (0 when it never was).
    pub(crate) fn parked_until(&self) -> u64 {
        self.parked_until.load(Ordering::Acquire)
    }

    /// Whether the cell is a tombstone.
    pub(crate) fn is_evicted(&self) -> bool {
        self.tat.load(Ordering::Acquire) == EVICTED
    }

    /// Evicts the cell if its bucket is full and it is not parked at `now`.
    pub(crate) fn try_evict(&self, now: u64) -> Evict {
        let tat = self.tat.load(Ordering::SeqCst);
        if tat == EVICTED {
            return Evict::Remove;
        }
        if tat > now || self.parked_until.load(Ordering::SeqCst) > now {
            return Evict::Keep;
        }
        if self
            .tat
            .compare_exchange(tat, EVICTED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // A reservation landed first: the bucket is in use.
            return Evict::Keep;
        }
        // See `park`.
        fence(Ordering::SeqCst);
        match self.parked_until.load(Ordering::SeqCst) {
            p if p > now => Evict::RemoveParked(p),
            _ => Evict::Remove,
        }
    }
}

#[cfg(all(test, not(courier_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    fn admit(c: &Cell, now: u64, t: u64, tau: u64) -> u64 {
        match c.reserve(now, t, tau, u64::MAX) {
            Outcome::Admit { start, .. } => start,
            other => panic!("expected a slot, got {other:?}"),
        }
    }

    /// A refusal says the park holds the request only when the park ends after the bucket
    /// would have a slot: else waiting out the park would not be enough.
    #[test]
    fn a_refusal_blames_the_park_only_when_the_park_is_what_holds_it() {
        let deny = |c: &Cell, now| match c.reserve(now, S, 0, 0) {
            Outcome::Deny { retry_in, parked } => (retry_in, parked),
            other => panic!("expected a refusal, got {other:?}"),
        };
        // Parked until 10 s, the bucket full: the park holds it.
        let parked = Cell::new();
        parked.park(10 * S);
        assert_eq!(deny(&parked, S), (9 * S, true));
        // Parked until 2 s, the bucket empty until 5 s: the bucket holds it.
        let empty = Cell::new();
        assert_eq!(admit(&empty, 0, 5 * S, 0), 0);
        empty.park(2 * S);
        assert_eq!(deny(&empty, S), (4 * S, false));
        // The bucket empty until 5 s, no park: the bucket.
        let bare = Cell::new();
        assert_eq!(admit(&bare, 0, 5 * S, 0), 0);
        assert_eq!(deny(&bare, S), (4 * S, false));
    }

    #[test]
    fn next_start_says_what_holds_a_request_without_reserving() {
        let c = Cell::new();
        assert_eq!(
            c.next_start(S, 0),
            Some((0, false)),
            "a full bucket, no park"
        );
        c.park(3 * S);
        assert_eq!(c.next_start(S, 0), Some((2 * S, true)), "the park holds it");
        assert_eq!(
            c.next_start(3 * S, 0),
            Some((0, false)),
            "a park that ends now holds nothing"
        );
        assert_eq!(
            c.next_start(4 * S, 0),
            Some((0, false)),
            "a park in the past"
        );
        assert_eq!(admit(&c, 4 * S, 6 * S, 0), 4 * S);
        assert_eq!(
            c.next_start(5 * S, 0),
            Some((5 * S, false)),
            "the bucket holds it, not the old park"
        );
        c.park(12 * S);
        assert_eq!(
            c.next_start(5 * S, 0),
            Some((7 * S, true)),
            "a park beyond the bucket's slot holds it"
        );
        assert_eq!(
            c.reserve(5 * S, S, 0, u64::MAX),
            Outcome::Admit {
                start: 12 * S,
                ticket: 13 * S
            }
        );
        assert_eq!(
            c.next_start(5 * S, 0),
            Some((8 * S, false)),
            "nothing reserved by asking"
        );
    }

    /// A TAT pushed to the top of the range by an absurd rate stays a TAT: it never reads as
    /// the eviction tombstone, so the bucket refuses instead of being taken for evicted.
    #[test]
    fn a_saturated_tat_is_not_a_tombstone() {
        let c = Cell::new();
        assert!(matches!(
            c.reserve(0, u64::MAX, 0, u64::MAX),
            Outcome::Admit { start: 0, .. }
        ));
        assert!(!c.is_evicted());
        assert!(matches!(
            c.reserve(0, u64::MAX, 0, 0),
            Outcome::Deny { parked: false, .. }
        ));
        assert!(matches!(
            c.reserve(0, u64::MAX, 0, u64::MAX),
            Outcome::Admit { .. }
        ));
        assert!(!c.is_evicted());
        assert_eq!(c.try_evict(0), Evict::Keep);
    }

    #[test]
    fn rescale_keeps_the_tokens_a_bucket_lacks() {
        let c = Cell::new();
        // burst 10 at 10/s (T = 100): eight taken at 0 leave two.
        for _ in 0..8 {
            assert!(matches!(c.reserve(0, 100, 900, 0), Outcome::Admit { .. }));
        }
        // To 1/s (T = 1000): still eight owed, now 8000 long.
        c.rescale(0, 100, 1000);
        for _ in 0..2 {
            assert!(matches!(c.reserve(0, 1000, 9000, 0), Outcome::Admit { .. }));
        }
        assert!(matches!(
            c.reserve(0, 1000, 9000, 0),
            Outcome::Deny { retry_in: 1000, .. }
        ));
        // A full bucket stays full.
        let full = Cell::new();
        full.rescale(5, 100, 1000);
        assert_eq!(full.next_start(5, 9000), Some((0, false)));
    }

    #[test]
    fn burst_two_rate_one() {
        let c = Cell::new();
        let starts: Vec<u64> = (0..5).map(|_| admit(&c, 0, S, S)).collect();
        assert_eq!(starts, [0, 0, S, 2 * S, 3 * S]);
    }

    #[test]
    fn deny_takes_nothing() {
        let c = Cell::new();
        assert_eq!(admit(&c, 0, S, 0), 0);
        assert_eq!(
            c.reserve(0, S, 0, S / 2),
            Outcome::Deny {
                retry_in: S,
                parked: false
            }
        );
        assert_eq!(admit(&c, 0, S, 0), S);
    }

    #[test]
    fn park_holds_and_eviction_respects_it() {
        let c = Cell::new();
        assert!(c.park(5 * S));
        assert_eq!(
            c.reserve(S, S, 0, 0),
            Outcome::Deny {
                retry_in: 4 * S,
                parked: true
            }
        );
        assert_eq!(c.try_evict(S), Evict::Keep);
        assert_eq!(admit(&c, S, S, 0), 5 * S);
        assert_eq!(c.try_evict(5 * S), Evict::Keep, "refilling until 6 s");
        assert_eq!(c.try_evict(6 * S), Evict::Remove);
        assert!(c.is_evicted());
        assert_eq!(c.reserve(7 * S, S, 0, 0), Outcome::Evicted);
        assert!(!c.park(9 * S), "a park on a tombstone must be redone");
    }

    /// A park that ends at the moment of the sweep holds nothing: the cell goes, and no park
    /// is carried to a fresh one.
    #[test]
    fn a_park_ending_now_does_not_keep_the_cell() {
        let c = Cell::new();
        assert!(c.park(5 * S));
        assert_eq!(
            c.try_evict(5 * S - 1),
            Evict::Keep,
            "parked one nanosecond more"
        );
        assert!(!c.is_evicted());
        assert_eq!(c.try_evict(5 * S), Evict::Remove);
        assert!(c.is_evicted());
        assert_eq!(c.try_evict(5 * S), Evict::Remove, "a tombstone stays one");
    }

    #[test]
    fn give_back_only_when_nothing_stacked() {
        let c = Cell::new();
        admit(&c, 0, S, 0);
        let Outcome::Admit { ticket: a, .. } = c.reserve(0, S, 0, u64::MAX) else {
            panic!("slot")
        };
        let Outcome::Admit { ticket: b, .. } = c.reserve(0, S, 0, u64::MAX) else {
            panic!("slot")
        };
        assert!(!c.give_back(a, S), "b is stacked on a");
        assert!(c.give_back(b, S));
        assert_eq!(admit(&c, 0, S, 0), 2 * S, "b's slot is free again");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Reservations that are never used are given back at any later moment, before or
        /// after their start, each at most once; the requests that were sent still never
        /// exceed `burst + rate * d` in any window of length `d`.
        #[test]
        fn giving_back_unsent_slots_keeps_every_window_bound(
            interval_ms in 1u64..2_000,
            burst in 1u32..6,
            ops in proptest::collection::vec(
                (prop_oneof![Just(0u64), 0u64..3_000], 0u64..10_000, 0u8..4, 0usize..8),
                1..80,
            ),
        ) {
            let t = interval_ms * 1_000_000;
            let tau = u64::from(burst - 1) * t;
            let cell = Cell::new();
            let (mut now, mut sent, mut unsent) = (0u64, Vec::new(), Vec::new());
            for (gap_ms, max_wait_ms, what, pick) in ops {
                now += gap_ms * 1_000_000;
                match what {
                    // Give back one of the slots that will never be used.
                    0 if !unsent.is_empty() => {
                        let ticket: u64 = unsent.swap_remove(pick % unsent.len());
                        cell.give_back(ticket, t);
                    }
                    _ => match cell.reserve(now, t, tau, max_wait_ms * 1_000_000) {
                        Outcome::Admit { start, ticket } if what == 1 => {
                            prop_assert!(start >= now);
                            unsent.push(ticket);
                        }
                        Outcome::Admit { start, .. } => {
                            prop_assert!(start >= now);
                            sent.push(start);
                        }
                        Outcome::Deny { .. } => {}
                        Outcome::Evicted => unreachable!("nothing evicts here"),
                    },
                }
            }
            sent.sort_unstable();
            for i in 0..sent.len() {
                for j in i..sent.len() {
                    let n = (j - i + 1) as u64;
                    let d = sent[j] - sent[i];
                    prop_assert!(
                        n <= u64::from(burst) + d / t,
                        "{n} starts in a window of {d} ns (burst {burst}, interval {t} ns)"
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Several threads reserve on one cell with their own synthetic clocks (arrival times
        /// drawn at random, in order per thread, interleaved at random between threads by the
        /// scheduler). Real time cannot drive this: the threads' interleaving is what is
        /// random, and the time each one claims to see is what the bound is checked against.
        #[test]
        fn no_window_exceeds_burst_plus_rate(
            interval_ms in 1u64..2_000,
            burst in 1u32..6,
            threads in proptest::collection::vec(
                proptest::collection::vec((0u64..3_000, 0u64..10_000), 1..40),
                2..5,
            ),
        ) {
            let t = interval_ms * 1_000_000;
            let tau = u64::from(burst - 1) * t;
            let cell = Cell::new();
            let mut starts: Vec<u64> = std::thread::scope(|s| {
                let handles: Vec<_> = threads
                    .iter()
                    .map(|arrivals| {
                        let cell = &cell;
                        s.spawn(move || {
                            let mut now = 0u64;
                            let mut mine = Vec::new();
                            for &(gap_ms, max_wait_ms) in arrivals {
                                now += gap_ms * 1_000_000;
                                let max_wait = max_wait_ms * 1_000_000;
                                match cell.reserve(now, t, tau, max_wait) {
                                    Outcome::Admit { start, .. } => {
                                        assert!(start >= now && start - now <= max_wait);
                                        mine.push(start);
                                    }
                                    Outcome::Deny { retry_in, .. } => assert!(retry_in > max_wait),
                                    Outcome::Evicted => unreachable!("nothing evicts here"),
                                }
                            }
                            mine
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().expect("reserving thread does not panic"))
                    .collect()
            });
            starts.sort_unstable();
            for i in 0..starts.len() {
                for j in i..starts.len() {
                    let n = (j - i + 1) as u64;
                    let d = starts[j] - starts[i];
                    prop_assert!(
                        n <= u64::from(burst) + d / t,
                        "{n} starts in a window of {d} ns (burst {burst}, interval {t} ns)"
                    );
                }
            }
        }
    }
}

//! The count of a limiter without a queue: the calls in flight and the limit, two atomics.
//!
//! With no queue nothing waits for a permit, so nothing has to be handed one when another is
//! given back: admitting is one compare-and-swap below the limit, giving back one
//! subtraction. A loom model checks that no interleaving admits more than the limit or loses
//! a permit (`crates/courier-loom/tests/permits.rs`, which compiles this file with loom's
//! atomics under `--cfg courier_loom`).

#[cfg(all(courier_loom, test))]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(all(courier_loom, test)))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// The calls in flight to one key and its limit.
#[derive(Debug)]
pub(crate) struct Direct {
    in_flight: AtomicUsize,
    limit: AtomicUsize,
}

impl Direct {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            limit: AtomicUsize::new(limit),
        }
    }

    /// One call more, if it stays within the limit: `Ok` with the calls in flight before it,
    /// else `Err` with the calls in flight and the limit.
    #[inline]
    pub(crate) fn admit(&self) -> Result<usize, (usize, usize)> {
        let limit = self.limit.load(Ordering::Acquire);
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|n| (n, limit))
    }

    /// One call fewer: a permit [`admit`](Self::admit) handed out is given back.
    #[inline]
    pub(crate) fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// A new limit, learned: calls already in flight over it finish; new ones wait for room.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
    }

    /// The calls in flight and the limit.
    pub(crate) fn status(&self) -> (usize, usize) {
        (
            self.in_flight.load(Ordering::Acquire),
            self.limit.load(Ordering::Acquire),
        )
    }
}

//! The failure-rate window: calls and failures over a sliding stretch of time.

use std::sync::atomic::{AtomicU64, Ordering};

// === impl Window ===

const WINDOW_BUCKETS: u64 = 10;
const IDX_BITS: u32 = 24;
const COUNT_BITS: u32 = 20;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Successes are counted into a bucket this many at a time: the clock is read once for them.
const FLUSH_EVERY: u64 = 64;

/// Calls and failures over a sliding window, in ten buckets of one atomic word each:
/// bucket index (24 bits), calls (20 bits), failures (20 bits).
///
/// A call counts once: its first attempt adds it (failed or not), and a later attempt only
/// changes its verdict (a retry that fails makes a call counted as answered a failed one; one
/// that succeeds forgives the call's failure). Successes wait in `pending` and reach a bucket
/// [`FLUSH_EVERY`] at a time, or when a failure or a verdict reads the window: a success costs
/// one atomic add and no clock read. Up to `FLUSH_EVERY - 1` of them may so land in a bucket
/// later than they came.
#[derive(Debug)]
pub(crate) struct Window {
    buckets: Box<[AtomicU64]>,
    bucket_ms: u64,
    threshold: f64,
    min_calls: u64,
    pending: AtomicU64,
}

impl Window {
    pub(crate) fn new(rate: crate::FailureRate) -> Self {
        let window_ms = rate.window().as_millis().min(u128::from(u64::MAX)) as u64;
        Self {
            buckets: (0..WINDOW_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            bucket_ms: (window_ms / WINDOW_BUCKETS).max(1),
            threshold: rate.threshold(),
            min_calls: u64::from(rate.min_calls().get()),
            pending: AtomicU64::new(0),
        }
    }

    /// A call succeeded; `now_ms` is read only when a batch of successes goes to its bucket.
    #[inline]
    pub(crate) fn count_success(&self, now_ms: impl FnOnce() -> u64) {
        let n = self.pending.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(FLUSH_EVERY) {
            self.flush(now_ms());
        }
    }

    #[cold]
    fn flush(&self, now_ms: u64) {
        let n = self.pending.swap(0, Ordering::Relaxed);
        if n > 0 {
            self.add(now_ms, n, 0);
        }
    }

    /// Adds `calls` calls and `fails` failures to the current bucket.
    pub(crate) fn add(&self, now_ms: u64, calls: u64, fails: u64) {
        let idx = (now_ms / self.bucket_ms) & IDX_MASK;
        let slot = &self.buckets[((now_ms / self.bucket_ms) % WINDOW_BUCKETS) as usize];
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let (c, f) = if cur & IDX_MASK == idx {
                (
                    (cur >> IDX_BITS) & COUNT_MASK,
                    cur >> (IDX_BITS + COUNT_BITS),
                )
            } else {
                (0, 0)
            };
            let c = (c + calls).min(COUNT_MASK);
            let f = (f + fails).min(COUNT_MASK);
            let new = idx | (c << IDX_BITS) | (f << (IDX_BITS + COUNT_BITS));
            match slot.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// A call counted as failed succeeded after all: the newest failure within the window
    /// becomes a success.
    pub(crate) fn forgive(&self, now_ms: u64) {
        let now = now_ms / self.bucket_ms;
        for back in 0..WINDOW_BUCKETS.min(now + 1) {
            let idx = (now - back) & IDX_MASK;
            let slot = &self.buckets[((now - back) % WINDOW_BUCKETS) as usize];
            let mut w = slot.load(Ordering::Relaxed);
            while w & IDX_MASK == idx && w >> (IDX_BITS + COUNT_BITS) > 0 {
                match slot.compare_exchange_weak(
                    w,
                    w - (1 << (IDX_BITS + COUNT_BITS)),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(actual) => w = actual,
                }
            }
        }
    }

    pub(crate) fn tripped(&self, now_ms: u64) -> bool {
        self.flush(now_ms);
        let cur = (now_ms / self.bucket_ms) & IDX_MASK;
        let (mut calls, mut fails) = (0u64, 0u64);
        for slot in self.buckets.iter() {
            let w = slot.load(Ordering::Relaxed);
            let age = cur.wrapping_sub(w & IDX_MASK) & IDX_MASK;
            if age < WINDOW_BUCKETS {
                calls += (w >> IDX_BITS) & COUNT_MASK;
                fails += w >> (IDX_BITS + COUNT_BITS);
            }
        }
        calls >= self.min_calls && fails.min(calls) as f64 >= self.threshold * calls as f64
    }

    pub(crate) fn clear(&self) {
        self.pending.store(0, Ordering::Relaxed);
        for slot in self.buckets.iter() {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailureRate;
    use std::num::NonZeroU32;
    use std::time::Duration;

    fn window(threshold: f64, min_calls: u32) -> Window {
        Window::new(
            FailureRate::new(
                threshold,
                Duration::from_secs(10),
                NonZeroU32::new(min_calls).unwrap(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn successes_waiting_in_the_batch_count_when_the_window_is_read() {
        let w = window(0.5, 4);
        for _ in 0..3 {
            w.count_success(|| unreachable!("no clock read below a batch"));
        }
        w.add(0, 1, 1);
        assert!(!w.tripped(0), "1 failure of 4 calls");
        w.add(0, 1, 1);
        assert!(!w.tripped(0), "2 of 5");
        w.add(0, 1, 1);
        assert!(w.tripped(0), "3 of 6");
        // A full batch goes to its bucket at once, reading the clock once.
        let w = window(0.5, 1);
        let mut reads = 0;
        for _ in 0..FLUSH_EVERY {
            w.count_success(|| {
                reads += 1;
                0
            });
        }
        assert_eq!(reads, 1);
        w.add(0, 0, 40);
        assert!(w.tripped(0), "40 failures against 64 calls");
    }

    #[test]
    fn a_forgiven_failure_is_found_in_an_older_bucket_and_not_past_the_window() {
        let w = window(0.5, 2);
        w.add(0, 2, 1);
        assert!(w.tripped(0));
        w.forgive(3_000);
        assert!(!w.tripped(3_000), "the failure of 3 s ago became a success");
        w.add(3_000, 0, 1);
        w.forgive(20_000);
        assert!(
            !w.tripped(20_000),
            "nothing left in the window to forgive or count"
        );
        w.clear();
        assert!(!w.tripped(0));
    }
}

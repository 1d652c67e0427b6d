//! A host's recent latencies, in a bounded histogram: what a learned hedge delay reads.
//!
//! Each latency goes into one of 240 buckets, log-linear in microseconds: exact below 16 µs,
//! then 8 buckets per doubling, so a bucket is at most 12.5 % wide (at 5 ms, 512 µs). A
//! percentile is read as its bucket's upper bound: never below the true value by more than a
//! bucket, so a hedge goes a little late rather than early.
//!
//! The window is two halves: the current one records, the one before it still counts, and
//! when a half is over the older is cleared. A percentile reads both, so it covers between one
//! half and the whole window of the most recent samples, and a host that changes is followed
//! within one window. A host is about 2 KiB, whatever its traffic.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Buckets: 16 exact ones below 16 µs, then 8 per doubling up to 2^32 µs (71 minutes).
const BUCKETS: usize = 16 + 28 * 8;
/// Samples needed, in the window, before a percentile is read.
const MIN_SAMPLES: u32 = super::MIN_LATENCIES;
/// New samples after which the cached percentile is computed again.
const RECOMPUTE_EVERY: u32 = 16;

/// The recent latencies of one host.
pub(crate) struct Sketch {
    inner: Mutex<Windows>,
}

struct Windows {
    /// When the current half began.
    start: Instant,
    half: Duration,
    current: Box<[u32; BUCKETS]>,
    previous: Box<[u32; BUCKETS]>,
    current_n: u32,
    previous_n: u32,
    /// The quantile last computed, which one, and the samples since.
    cached: Option<Duration>,
    cached_q: f64,
    stale: u32,
}

impl Sketch {
    /// An empty sketch over `window`, split in two halves.
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        Self {
            inner: Mutex::new(Windows {
                start: now,
                half: (window / 2).max(Duration::from_millis(1)),
                current: Box::new([0; BUCKETS]),
                previous: Box::new([0; BUCKETS]),
                current_n: 0,
                previous_n: 0,
                cached: None,
                cached_q: f64::NAN,
                stale: RECOMPUTE_EVERY,
            }),
        }
    }

    /// Records one latency.
    pub(crate) fn record(&self, latency: Duration, now: Instant) {
        let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.roll(now);
        w.current[bucket(latency)] += 1;
        w.current_n = w.current_n.saturating_add(1);
        w.stale = w.stale.saturating_add(1);
    }

    /// The `q` quantile (0 < q < 1) of the window's latencies, as its bucket's upper bound;
    /// `None` with fewer than [`MIN_SAMPLES`] samples.
    pub(crate) fn quantile(&self, q: f64, now: Instant) -> Option<Duration> {
        let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.roll(now);
        let learned = w.current_n.saturating_add(w.previous_n) >= MIN_SAMPLES;
        if w.stale >= RECOMPUTE_EVERY || (w.cached.is_none() && learned) || w.cached_q != q {
            w.cached = w.compute(q);
            w.cached_q = q;
            w.stale = 0;
        }
        w.cached
    }

    /// Whether nothing was recorded for a whole window: the sketch knows no more than a new one.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        let w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        now.saturating_duration_since(w.start) >= w.half * 2
    }
}

impl Windows {
    /// Moves on to the half `now` falls in, clearing what is older than the window.
    fn roll(&mut self, now: Instant) {
        let since = now.saturating_duration_since(self.start);
        if since < self.half {
            return;
        }
        if since < self.half * 2 {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.previous_n = self.current_n;
            self.start += self.half;
        } else {
            // Idle for a whole window or more: nothing recent is left.
            self.previous.fill(0);
            self.previous_n = 0;
            self.start = now;
        }
        self.current.fill(0);
        self.current_n = 0;
        self.stale = RECOMPUTE_EVERY;
    }

    fn compute(&self, q: f64) -> Option<Duration> {
        let n = self.current_n.saturating_add(self.previous_n);
        if n < MIN_SAMPLES {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest latency with at least q of n at or
        // below it.
        let rank = ((q * f64::from(n)).ceil() as u64).clamp(1, u64::from(n));
        let mut seen = 0u64;
        for (i, (a, b)) in self.current.iter().zip(self.previous.iter()).enumerate() {
            seen += u64::from(*a) + u64::from(*b);
            if seen >= rank {
                return Some(Duration::from_micros(upper_bound(i)));
            }
        }
        Some(Duration::from_micros(upper_bound(BUCKETS - 1)))
    }
}

/// The bucket of a latency.
fn bucket(latency: Duration) -> usize {
    let micros = u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .min(u64::from(u32::MAX));
    if micros < 16 {
        return micros as usize;
    }
    let exp = 63 - micros.leading_zeros() as usize; // 4..=31
    let mantissa = ((micros >> (exp - 3)) & 7) as usize;
    16 + (exp - 4) * 8 + mantissa
}

/// The first latency, in microseconds, past bucket `i`.
fn upper_bound(i: usize) -> u64 {
    if i < 16 {
        return i as u64 + 1;
    }
    let exp = (i - 16) / 8 + 4;
    let mantissa = ((i - 16) % 8) as u64;
    (9 + mantissa) << (exp - 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_latency_falls_in_a_bucket_whose_bound_is_above_it_by_at_most_an_eighth() {
        let mut micros = 0u64;
        while micros < u64::from(u32::MAX) {
            let i = bucket(Duration::from_micros(micros));
            assert!(i < BUCKETS, "{micros}");
            let upper = upper_bound(i);
            assert!(upper > micros, "{micros} -> {upper}");
            assert!(
                upper - micros <= micros / 8 + 1,
                "{micros} -> {upper}: too wide"
            );
            if i > 0 {
                assert!(
                    upper_bound(i - 1) <= micros,
                    "{micros}: bucket {i} starts late"
                );
            }
            micros = micros * 17 / 16 + 1;
        }
        assert_eq!(bucket(Duration::from_secs(86_400 * 365)), BUCKETS - 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_quantile_of_a_tail_sits_at_the_top_of_the_fast_answers() {
        let now = Instant::now();
        let sketch = Sketch::new(Duration::from_secs(10), now);
        assert_eq!(sketch.quantile(0.95, now), None);
        for i in 0..1000u64 {
            // 96 % between 5 and 6 ms, 4 % at 500 ms.
            let latency = if i % 25 == 0 {
                Duration::from_millis(500)
            } else {
                Duration::from_micros(5_000 + (i * 37) % 1_000)
            };
            sketch.record(latency, now);
        }
        let p95 = sketch.quantile(0.95, now).unwrap();
        assert!(
            p95 >= Duration::from_millis(6) && p95 <= Duration::from_micros(6_656),
            "{p95:?}"
        );
        let p99 = sketch.quantile(0.99, now).unwrap();
        assert!(p99 >= Duration::from_millis(500), "{p99:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn old_samples_leave_the_window() {
        let start = Instant::now();
        let sketch = Sketch::new(Duration::from_secs(10), start);
        for _ in 0..100 {
            sketch.record(Duration::from_millis(100), start);
        }
        assert!(sketch.quantile(0.5, start).unwrap() >= Duration::from_millis(100));
        // Half a window on: the old half still counts, beside the new samples.
        let later = start + Duration::from_secs(5);
        for _ in 0..300 {
            sketch.record(Duration::from_millis(2), later);
        }
        assert!(sketch.quantile(0.9, later).unwrap() >= Duration::from_millis(100));
        assert!(sketch.quantile(0.5, later).unwrap() < Duration::from_millis(3));
        // A whole half more: the 100 ms samples are gone.
        let later = start + Duration::from_secs(10);
        for _ in 0..30 {
            sketch.record(Duration::from_millis(2), later);
        }
        assert!(sketch.quantile(0.99, later).unwrap() < Duration::from_millis(3));
        assert!(!sketch.is_idle(later));
        // Idle for a whole window: nothing left, not enough samples to say anything.
        let idle = later + Duration::from_secs(30);
        assert!(sketch.is_idle(idle));
        assert_eq!(sketch.quantile(0.5, idle), None);
    }
}

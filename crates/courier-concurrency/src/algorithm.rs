//! How a key's limit is learned from latency: samples gathered into windows, and the rule
//! each [`Algorithm`] applies at the end of a window.

use std::time::Duration;
use tokio::time::Instant;

/// The rule that learns an adaptive limit from latency: [`LatencyAimd`](Self::LatencyAimd),
/// and the two candidates the crate docs compare it with on the same simulated hosts
/// ([Choosing the algorithm](crate#choosing-the-algorithm)). Only with the feature
/// `compare`, which courier-bench turns on to run the comparison: the layer always learns
/// by `LatencyAimd`.
///
/// Every rule reads the same windows (see the [crate docs](crate#the-adaptive-limit)).
/// `Vegas` takes the lowest window mean of the last 10 to 20 seconds for the unloaded
/// latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
#[cfg_attr(not(feature = "compare"), allow(unreachable_pub, dead_code))]
pub enum Algorithm {
    /// Additive increase, multiplicative decrease on latency, against an unloaded latency
    /// measured by probes (see the [crate docs](crate#the-adaptive-limit)). The layer's rule:
    /// it holds a queueing host's in-flight calls at its capacity.
    #[default]
    LatencyAimd,
    /// The gradient of the mean latency of a window against a long average of them,
    /// `1.5 × long / short` bounded to [0.5, 1], times the limit, plus a headroom of 4 calls,
    /// smoothed by 0.2. It lets latency reach 1.5 times its long average, and the long average
    /// drifts up with the queue it allows.
    Gradient2,
    /// The calls queued at the host, estimated as `limit × (1 − unloaded / mean)`: below
    /// `3 × log10(limit)` the limit grows, above `6 × log10(limit)` it shrinks (a log10 below
    /// 1 counts as 1), so a few calls always queue.
    Vegas,
}

/// The shortest a window lasts (unless a drop closes it): long enough for its mean to carry
/// little noise on a busy host.
const WINDOW_TIME: Duration = Duration::from_millis(100);

/// The fewest answers in a window.
pub(crate) const MIN_WINDOW: u32 = 8;

/// A window whose mean latency is more than this many times the unloaded latency shrinks the
/// limit ([`Algorithm::LatencyAimd`]).
const AIMD_TOLERANCE: f64 = 1.05;
/// How many standard errors (of the window's mean and the probe's, together) above the
/// tolerance a window's mean must be to shrink the limit: noise alone rarely gets there.
const NOISE: f64 = 2.0;
/// What [`Algorithm::LatencyAimd`] multiplies the limit by on a slow window or a drop.
const AIMD_BACKOFF: f64 = 0.9;
/// How long one period of the lowest window mean lasts: the lowest is that of the current
/// period and the previous one, so a host that became slower for good is measured anew
/// within two periods.
const BASE_PERIOD: Duration = Duration::from_secs(10);
/// How often [`Algorithm::LatencyAimd`] measures the unloaded latency, once it has settled.
const PROBE_EVERY: Duration = Duration::from_secs(10);

/// One window's samples.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    /// When the window's first answer came.
    since: Option<Instant>,
    count: u32,
    sum_ns: u64,
    /// The sum of squared latencies in ms², for the standard error of the mean.
    sum_sq_ms: f64,
    max_in_flight: usize,
    dropped: bool,
}

/// The lowest window mean over the current and the previous period.
#[derive(Debug, Clone, Copy)]
struct BaseRtt {
    current: f64,
    previous: f64,
    since: Instant,
}

impl BaseRtt {
    fn new(now: Instant) -> Self {
        Self {
            current: f64::INFINITY,
            previous: f64::INFINITY,
            since: now,
        }
    }

    fn update(&mut self, mean: f64, now: Instant) -> f64 {
        if now.saturating_duration_since(self.since) >= BASE_PERIOD {
            self.previous = self.current;
            self.current = f64::INFINITY;
            self.since = now;
        }
        self.current = self.current.min(mean);
        self.current.min(self.previous)
    }
}

/// [`Algorithm::LatencyAimd`]'s measure of the unloaded latency: a probe window at a quarter
/// of the limit, every [`PROBE_EVERY`].
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// The last probe's mean latency and its standard error (ns); until the first probe, the
    /// lowest window mean stands in ([`BaseRtt`]).
    base: Option<(f64, f64)>,
    /// While probing: the limit of the probe.
    probing: Option<usize>,
    /// When the next probe starts.
    next: Instant,
    /// How many probes ended: the first come a second apart, then two, four, and from then
    /// on every [`PROBE_EVERY`]. A probe at a quarter of a limit far above the host's capacity
    /// measures a queue; the next, at a quarter of the limit it led to, comes soon.
    probes: u32,
}

/// A key's adaptive limit: the rule, its bounds, and what it has learned.
#[derive(Debug, Clone)]
pub(crate) struct Controller {
    algorithm: Algorithm,
    min: f64,
    max: f64,
    limit: f64,
    window: Window,
    /// The lowest window mean of the last two periods ([`Algorithm::Vegas`], and
    /// [`Algorithm::LatencyAimd`] until its first probe).
    lowest: BaseRtt,
    probe: Probe,
    /// [`Algorithm::LatencyAimd`] doubles the limit on a full window at the unloaded latency
    /// until the first slow window or drop, then adds one.
    slow_start: bool,
    /// [`Algorithm::Gradient2`]'s long average of window means (ns), and how many it holds.
    long: f64,
    longs: u32,
}

impl Controller {
    pub(crate) fn new(algorithm: Algorithm, initial: usize, min: usize, max: usize) -> Self {
        let now = Instant::now();
        Self {
            algorithm,
            min: min as f64,
            max: max as f64,
            limit: initial as f64,
            window: Window::default(),
            lowest: BaseRtt::new(now),
            probe: Probe {
                base: None,
                probing: None,
                // The first answer starts the first probe.
                next: now,
                probes: 0,
            },
            slow_start: true,
            long: 0.0,
            longs: 0,
        }
    }

    /// The limit as a whole number of calls, within the bounds: a probe's while probing.
    pub(crate) fn limit(&self) -> usize {
        if let Some(probe) = self.probe.probing {
            return probe;
        }
        (self.limit.floor() as usize).clamp(self.min as usize, self.max as usize)
    }

    /// Takes one answer's latency (`None` for a drop with no latency worth reading) and the
    /// calls in flight when it was sent (itself included); returns the limit when it may have
    /// changed.
    pub(crate) fn sample(
        &mut self,
        rtt: Option<Duration>,
        in_flight: usize,
        dropped: bool,
        now: Instant,
    ) -> Option<usize> {
        if let Some(probe) = self.probe.probing {
            // Only calls sent under the probe's limit measure the unloaded latency.
            if in_flight > probe {
                return None;
            }
            let w = self.window.add(rtt, in_flight, false, MIN_WINDOW, now)?;
            self.probe.base = Some((w.mean, w.se));
            self.probe.probing = None;
            let every = Duration::from_secs(1 << self.probe.probes.min(4)).min(PROBE_EVERY);
            self.probe.probes = self.probe.probes.saturating_add(1);
            self.probe.next = now + every;
            return Some(self.limit());
        }
        if self.algorithm == Algorithm::LatencyAimd && now >= self.probe.next {
            let probe = ((self.limit / 4.0).floor() as usize).max(self.min as usize);
            self.probe.probing = Some(probe);
            self.window = Window::default();
            return Some(probe);
        }
        let size = u32::try_from(self.limit())
            .unwrap_or(u32::MAX)
            .max(MIN_WINDOW);
        let w = self.window.add(rtt, in_flight, dropped, size, now)?;
        let lowest = self.lowest.update(w.mean, now);
        let saturated = w.max_in_flight >= self.limit();
        let limit = self.limit;
        let next = match self.algorithm {
            Algorithm::LatencyAimd => {
                let (base, base_se) = self.probe.base.unwrap_or((lowest, 0.0));
                // Slower than the unloaded latency by more than the tolerance and the noise of
                // both means.
                let noise = NOISE * w.se.hypot(base_se);
                if w.dropped || w.mean > base * AIMD_TOLERANCE + noise {
                    self.slow_start = false;
                    limit * AIMD_BACKOFF
                } else if saturated && self.slow_start {
                    limit * 2.0
                } else if saturated {
                    limit + 1.0
                } else {
                    limit
                }
            }
            Algorithm::Gradient2 => {
                self.longs = self.longs.saturating_add(1);
                let n = f64::from(self.longs.min(100));
                self.long += (w.mean - self.long) / n;
                if self.long / w.mean > 2.0 {
                    self.long *= 0.95;
                }
                if (w.max_in_flight as f64) < limit / 2.0 && !w.dropped {
                    limit
                } else {
                    let gradient = if w.dropped {
                        0.5
                    } else {
                        (1.5 * self.long / w.mean).clamp(0.5, 1.0)
                    };
                    let target = limit * gradient + 4.0;
                    limit * 0.8 + target * 0.2
                }
            }
            Algorithm::Vegas => {
                let log = limit.log10().floor().max(1.0);
                let queued = limit * (1.0 - lowest / w.mean);
                if w.dropped {
                    limit - log
                } else if (w.max_in_flight as f64) * 2.0 < limit {
                    limit
                } else if queued <= log {
                    limit + 6.0 * log
                } else if queued < 3.0 * log {
                    limit + log
                } else if queued > 6.0 * log {
                    limit - log
                } else {
                    limit
                }
            }
        };
        self.limit = next.clamp(self.min, self.max);
        Some(self.limit())
    }
}

/// A closed window.
#[derive(Debug, Clone, Copy)]
struct Closed {
    /// The mean latency and its standard error, ns.
    mean: f64,
    se: f64,
    max_in_flight: usize,
    dropped: bool,
}

impl Window {
    /// Adds a sample; returns the window, and starts the next, once it holds `size` answers
    /// over [`WINDOW_TIME`] or more, or saw a drop (and an answer).
    fn add(
        &mut self,
        rtt: Option<Duration>,
        in_flight: usize,
        dropped: bool,
        size: u32,
        now: Instant,
    ) -> Option<Closed> {
        let since = *self.since.get_or_insert(now);
        if let Some(rtt) = rtt {
            let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
            self.sum_ns = self.sum_ns.saturating_add(ns);
            let ms = ns as f64 / 1e6;
            self.sum_sq_ms += ms * ms;
            self.count += 1;
        }
        self.max_in_flight = self.max_in_flight.max(in_flight);
        self.dropped |= dropped;
        let full = self.count >= size && now.saturating_duration_since(since) >= WINDOW_TIME;
        if self.count == 0 || !(full || self.dropped) {
            return None;
        }
        let w = std::mem::take(self);
        let n = f64::from(w.count);
        let mean = w.sum_ns as f64 / n;
        let mean_ms = mean / 1e6;
        let se = ((w.sum_sq_ms / n - mean_ms * mean_ms).max(0.0) / n).sqrt() * 1e6;
        Some(Closed {
            mean,
            se,
            max_in_flight: w.max_in_flight,
            dropped: w.dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    /// Feeds `n` answers of `rtt(i)` sent with `in_flight` calls in flight, one every 15 ms.
    async fn feed(c: &mut Controller, n: u32, in_flight: usize, rtt: impl Fn(u32) -> u64) {
        for i in 0..n {
            advance(Duration::from_millis(15)).await;
            c.sample(ms(rtt(i)), in_flight, false, Instant::now());
        }
    }

    /// A controller past its first probe, which measured 5 ms.
    async fn probed(initial: usize) -> Controller {
        let mut c = Controller::new(Algorithm::LatencyAimd, initial, 1, 100);
        let probe = (initial / 4).max(1);
        assert_eq!(c.sample(ms(5), initial, false, Instant::now()), Some(probe));
        assert_eq!(
            c.limit(),
            probe,
            "the first answer starts a probe at a quarter"
        );
        feed(&mut c, 8, probe, |_| 5).await;
        assert_eq!(c.limit(), initial, "the probe over, the limit is back");
        c
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_measures_only_calls_sent_under_its_limit() {
        let mut c = Controller::new(Algorithm::LatencyAimd, 20, 1, 100);
        c.sample(ms(5), 20, false, Instant::now());
        // Answers to calls sent before the probe carry the old load: they teach nothing.
        feed(&mut c, 50, 20, |_| 40).await;
        assert_eq!(c.limit(), 5);
        feed(&mut c, 8, 5, |_| 5).await;
        assert_eq!(c.limit(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn aimd_grows_while_latency_holds_and_shrinks_when_it_rises() {
        let mut c = probed(20).await;
        feed(&mut c, 20, 20, |_| 5).await;
        assert_eq!(
            c.limit(),
            40,
            "until the first slow window, a full window doubles"
        );
        feed(&mut c, 40, 40, |_| 9).await;
        assert_eq!(c.limit(), 36, "a slow window multiplies by 0.9");
        // The second probe, a second after the first, at a quarter.
        advance(Duration::from_millis(200)).await;
        feed(&mut c, 1, 36, |_| 5).await;
        assert_eq!(c.limit(), 9);
        feed(&mut c, 8, 9, |_| 5).await;
        assert_eq!(c.limit(), 36);
        feed(&mut c, 36, 36, |_| 5).await;
        assert_eq!(
            c.limit(),
            37,
            "then a full window at the unloaded latency adds one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsaturated_window_does_not_grow_the_limit() {
        let mut c = probed(20).await;
        feed(&mut c, 100, 3, |_| 5).await;
        assert_eq!(c.limit(), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_drop_closes_the_window_and_shrinks() {
        let mut c = probed(20).await;
        advance(Duration::from_millis(15)).await;
        c.sample(ms(5), 20, false, Instant::now());
        assert_eq!(c.sample(None, 20, true, Instant::now()), Some(18));
    }

    #[tokio::test(start_paused = true)]
    async fn noise_at_the_unloaded_latency_does_not_shrink_the_limit() {
        let mut c = probed(8).await;
        // 3 to 7 ms at random around 5 ms, no queue: the limit only grows.
        let mut x = 12345u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let rtt = 3 + x % 5;
            let l = c.limit();
            advance(Duration::from_millis(1)).await;
            c.sample(ms(rtt), l, false, Instant::now());
            assert!(c.limit() >= 8 || c.probe.probing.is_some(), "{}", c.limit());
        }
        assert!(c.limit() > 8, "{}", c.limit());
    }

    #[tokio::test(start_paused = true)]
    async fn bounds_hold_for_every_algorithm() {
        for algorithm in [
            Algorithm::LatencyAimd,
            Algorithm::Gradient2,
            Algorithm::Vegas,
        ] {
            let mut c = Controller::new(algorithm, 4, 2, 6);
            for i in 0..10_000u64 {
                let rtt = if i % 3 == 0 { ms(1) } else { ms(1 + i % 50) };
                advance(Duration::from_millis(3)).await;
                c.sample(rtt, (i % 9) as usize, i % 17 == 0, Instant::now());
                assert!((2..=6).contains(&c.limit()), "{algorithm:?}: {}", c.limit());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_slower_for_good_is_measured_anew_at_the_next_probe() {
        let mut c = probed(8).await;
        // The host is ten times slower for good: the limit falls...
        for _ in 0..6 {
            let l = c.limit();
            feed(&mut c, 8, l, |_| 50).await;
        }
        let fallen = c.limit();
        assert!(fallen <= 5, "{fallen}");
        // ...until the next probe, a second after the first, measures 50 ms as the unloaded
        // latency; then it grows again.
        advance(Duration::from_secs(1)).await;
        feed(&mut c, 10, 1, |_| 50).await;
        assert!(c.probe.probing.is_none());
        for _ in 0..20 {
            let l = c.limit();
            feed(&mut c, 10, l, |_| 50).await;
        }
        assert!(c.limit() > fallen + 5, "grows again: {}", c.limit());
    }
}

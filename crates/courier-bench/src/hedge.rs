//! The host and the figures of `benches/hedge.rs` (BENCHMARKS.md, section 8): a host with a slow
//! tail, every call's latency, its percentiles, and the tables held against the goals.
//!
//! The host is the [`LoopbackServer`] waiting before each answer as [`Tail`] draws it, per
//! request: 5 % of the requests wait 500 ms, the others 5 ms. The draws come from a seeded
//! generator, so the sequence of waits is the same on every run; which request gets which
//! wait follows the order the server reads them in, which the machine decides. The server
//! counts every request it receives, hedges included, whether or not the caller still waits
//! for it: the load the host sees.
//!
//! The goals are issue #32's: with hedging, the p99 at most [`TAIL_RATIO_GOAL`] times the
//! p50, and the host sees at most [`EXTRA_LOAD_GOAL_PERCENT`] % more requests than calls were
//! made.

use crate::server::LoopbackServer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::fmt::Write as _;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The wait of a fast answer.
pub const FAST: Duration = Duration::from_millis(5);

/// The wait of a slow answer.
pub const SLOW: Duration = Duration::from_millis(500);

/// How many requests in 100 wait [`SLOW`], on average.
pub const SLOW_PER_100: u32 = 5;

/// The seed of the first round; round `r` draws from `SEED + r`.
pub const SEED: u64 = 32;

/// The goal for the tail with hedging: the p99 at most this many times the p50.
pub const TAIL_RATIO_GOAL: u32 = 3;

/// The goal for the load: at most this many requests in 100 beyond one per call.
pub const EXTRA_LOAD_GOAL_PERCENT: u64 = 10;

/// The waits of the host with a tail: [`SLOW`] for [`SLOW_PER_100`] requests in 100, drawn
/// independently for each, else [`FAST`].
///
/// # Clone
///
/// Clones share one generator: the server draws from it, and the bench reseeds it between
/// runs so that every variant of a round sees the same sequence of waits.
#[derive(Debug, Clone)]
pub struct Tail {
    rng: Arc<Mutex<StdRng>>,
}

// === impl Tail ===

impl Tail {
    /// A tail whose draws start from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
        }
    }

    /// The wait of the next request.
    pub fn draw(&self) -> Duration {
        let roll = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random_range(0..100);
        if roll < SLOW_PER_100 { SLOW } else { FAST }
    }

    /// Starts the draws again from `seed`.
    pub fn reseed(&self, seed: u64) {
        *self.rng.lock().unwrap_or_else(|p| p.into_inner()) = StdRng::seed_from_u64(seed);
    }

    /// A loopback server that waits what this tail draws before each answer.
    ///
    /// # Errors
    ///
    /// As [`LoopbackServer::start`].
    pub fn serve(&self) -> io::Result<LoopbackServer> {
        let tail = self.clone();
        LoopbackServer::start_with_delays(move || tail.draw())
    }
}

/// Every call's latency of a run (or of several), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latencies {
    sorted: Vec<Duration>,
}

// === impl Latencies ===

impl Latencies {
    /// The latencies given, in any order.
    pub fn new(mut all: Vec<Duration>) -> Self {
        all.sort_unstable();
        Self { sorted: all }
    }

    /// The latencies of several runs together.
    pub fn merged<'a>(runs: impl IntoIterator<Item = &'a Self>) -> Self {
        Self::new(
            runs.into_iter()
                .flat_map(|r| r.sorted.iter().copied())
                .collect(),
        )
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `q` quantile (0 to 1) by nearest rank: the least latency with at least `q` of them
    /// at or below it; the least of all for 0 and the greatest for 1. Zero when there are none.
    pub fn quantile(&self, q: f64) -> Duration {
        let n = self.sorted.len();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
        self.sorted[rank.clamp(1, n) - 1]
    }

    /// The greatest latency, zero when there are none.
    pub fn max(&self) -> Duration {
        self.sorted.last().copied().unwrap_or_default()
    }

    /// The share of the latencies at or below `latency`: the CDF at that point.
    pub fn share_within(&self, latency: Duration) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let within = self.sorted.partition_point(|&l| l <= latency);
        within as f64 / self.sorted.len() as f64
    }

    /// The CDF as the chart draws it: (quantile, latency in milliseconds) at `per_nine`
    /// quantiles for each nine, from p0 up to `nines` nines (3: p99.9), each quantile
    /// `1 - 10^(-k / per_nine)`. Empty when there are no latencies.
    pub fn curve(&self, nines: u32, per_nine: u32) -> Vec<(f64, f64)> {
        if self.sorted.is_empty() || per_nine == 0 {
            return Vec::new();
        }
        (0..=nines * per_nine)
            .map(|k| 1.0 - 10f64.powf(-f64::from(k) / f64::from(per_nine)))
            .map(|q| (q, self.quantile(q).as_secs_f64() * 1e3))
            .collect()
    }
}

/// One variant's run: its latencies at the percentiles the tables show, and the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The 99.9th percentile.
    pub p999: Duration,
    /// The slowest call.
    pub max: Duration,
    /// Calls made.
    pub calls: u64,
    /// Requests the host received for them.
    pub requests: u64,
}

// === impl Summary ===

impl Summary {
    /// The figures of `calls` calls with these latencies, for which the host received
    /// `requests` requests.
    pub fn of(latencies: &Latencies, calls: u64, requests: u64) -> Self {
        Self {
            p50: latencies.quantile(0.5),
            p90: latencies.quantile(0.9),
            p99: latencies.quantile(0.99),
            p999: latencies.quantile(0.999),
            max: latencies.max(),
            calls,
            requests,
        }
    }

    /// The p99 over the p50.
    pub fn tail_ratio(&self) -> f64 {
        self.p99.as_secs_f64() / self.p50.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Requests the host received per call.
    pub fn requests_per_call(&self) -> f64 {
        self.requests as f64 / self.calls.max(1) as f64
    }

    /// The share of requests beyond one per call: 0.05 for 5 % more.
    pub fn extra_load(&self) -> f64 {
        self.requests_per_call() - 1.0
    }

    /// Whether the p99 is within [`TAIL_RATIO_GOAL`] times the p50.
    pub fn tail_met(&self) -> bool {
        self.p99 <= self.p50 * TAIL_RATIO_GOAL
    }

    /// Whether the extra load is within [`EXTRA_LOAD_GOAL_PERCENT`].
    pub fn load_met(&self) -> bool {
        u128::from(self.requests) * 100
            <= u128::from(self.calls) * u128::from(100 + EXTRA_LOAD_GOAL_PERCENT)
    }
}

/// `5.8 ms`.
pub fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// `+5.2 %`.
fn percent(share: f64) -> String {
    format!("{:+.1} %", share * 100.0)
}

/// The middle value, the upper one of the two middles for an even count; 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const HEADER: &str = "| variant | p50 | p90 | p99 | p99.9 | max | p99 / p50 | requests per call | extra load |\n\
                      | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";

/// One round's table: a row per variant, in the order given.
pub fn round_table(rows: &[(&str, Summary)]) -> String {
    let mut out = String::from(HEADER);
    for (name, s) in rows {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {:.2} | {:.3} | {} |",
            millis(s.p50),
            millis(s.p90),
            millis(s.p99),
            millis(s.p999),
            millis(s.max),
            s.tail_ratio(),
            s.requests_per_call(),
            percent(s.extra_load()),
        );
    }
    out
}

/// The rounds together: per variant, the median of each figure over its rounds, with the
/// least and the greatest in brackets.
pub fn summary_table(rows: &[(&str, Vec<Summary>)]) -> String {
    let mut out = String::from(HEADER);
    for (name, runs) in rows {
        let spread = |f: &dyn Fn(&Summary) -> f64, show: &dyn Fn(f64) -> String| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if runs.len() < 2 {
                return show(median(v));
            }
            format!("{} ({} to {})", show(median(v)), show(lo), show(hi))
        };
        let ms = |f: fn(&Summary) -> Duration| {
            spread(&|s| f(s).as_secs_f64() * 1e3, &|v| format!("{v:.1}"))
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ms(|s| s.p50),
            ms(|s| s.p90),
            ms(|s| s.p99),
            ms(|s| s.p999),
            ms(|s| s.max),
            spread(&Summary::tail_ratio, &|v| format!("{v:.2}")),
            spread(&Summary::requests_per_call, &|v| format!("{v:.3}")),
            spread(&Summary::extra_load, &percent),
        );
    }
    out.push_str("\nlatencies in ms: the median of the rounds (the least and the greatest)\n");
    out
}

/// Each variant held against the goals: the median over its rounds, and in how many rounds
/// each goal was met.
pub fn goals(rows: &[(&str, Vec<Summary>)]) -> String {
    let mut out = String::new();
    for (name, runs) in rows {
        let n = runs.len();
        let tail = runs.iter().filter(|s| s.tail_met()).count();
        let load = runs.iter().filter(|s| s.load_met()).count();
        let ratio = median(runs.iter().map(Summary::tail_ratio).collect());
        let extra = median(runs.iter().map(Summary::extra_load).collect());
        let _ = writeln!(
            out,
            "- {name}: p99 / p50 {ratio:.2} (goal at most {TAIL_RATIO_GOAL}), met in {tail} of \
             {n} rounds; extra load {} (goal at most {}), met in {load} of {n} rounds",
            percent(extra),
            percent(EXTRA_LOAD_GOAL_PERCENT as f64 / 100.0),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// 1 ms to 100 ms, one each, shuffled.
    fn hundred() -> Latencies {
        Latencies::new((1..=100).rev().map(ms).collect())
    }

    #[test]
    fn quantiles_are_by_nearest_rank() {
        let l = hundred();
        assert_eq!(l.len(), 100);
        assert_eq!(l.quantile(0.0), ms(1));
        assert_eq!(l.quantile(0.5), ms(50));
        assert_eq!(l.quantile(0.501), ms(51), "past a rank, the next one");
        assert_eq!(l.quantile(0.99), ms(99));
        assert_eq!(l.quantile(0.999), ms(100));
        assert_eq!(l.quantile(1.0), ms(100));
        assert_eq!(l.quantile(7.0), ms(100), "clamped");
        assert_eq!(l.max(), ms(100));
        let empty = Latencies::default();
        assert!(empty.is_empty());
        assert_eq!(empty.quantile(0.5), Duration::ZERO);
        assert_eq!(empty.max(), Duration::ZERO);
    }

    #[test]
    fn the_cdf_counts_what_is_at_or_below() {
        let l = hundred();
        assert_eq!(l.share_within(Duration::ZERO), 0.0);
        assert_eq!(l.share_within(ms(5)), 0.05);
        assert_eq!(l.share_within(ms(5) + Duration::from_micros(500)), 0.05);
        assert_eq!(l.share_within(ms(100)), 1.0);
        assert_eq!(Latencies::default().share_within(ms(1)), 0.0);
        // The quantile and the CDF agree: at least q of them at or below the q quantile.
        for q in [0.1, 0.5, 0.9, 0.95, 0.99] {
            assert!(l.share_within(l.quantile(q)) >= q, "{q}");
        }
    }

    #[test]
    fn the_curve_steps_through_each_nine() {
        let l = hundred();
        let curve = l.curve(2, 2);
        let qs: Vec<f64> = curve.iter().map(|(q, _)| *q).collect();
        let expected = [
            0.0,
            1.0 - 10f64.powf(-0.5),
            0.9,
            1.0 - 10f64.powf(-1.5),
            0.99,
        ];
        assert_eq!(qs.len(), expected.len());
        for (q, e) in qs.iter().zip(expected) {
            assert!((q - e).abs() < 1e-12, "{q} against {e}");
        }
        assert_eq!(curve[0].1, 1.0, "p0 is the least, in ms");
        assert_eq!(curve[2].1, 90.0);
        assert_eq!(curve[4].1, 99.0);
        assert!(
            curve.windows(2).all(|w| w[0].1 <= w[1].1),
            "a CDF never goes down"
        );
        assert!(Latencies::default().curve(3, 20).is_empty());
    }

    #[test]
    fn runs_merge_into_one_sorted_set() {
        let a = Latencies::new(vec![ms(3), ms(1)]);
        let b = Latencies::new(vec![ms(2), ms(9)]);
        let all = Latencies::merged([&a, &b]);
        assert_eq!(all, Latencies::new(vec![ms(1), ms(2), ms(3), ms(9)]));
        assert_eq!(all.quantile(0.5), ms(2));
    }

    #[test]
    fn the_tail_draws_five_slow_in_a_hundred_the_same_for_the_same_seed() {
        let draws = |tail: &Tail| -> Vec<Duration> { (0..20_000).map(|_| tail.draw()).collect() };
        let tail = Tail::new(SEED);
        let first = draws(&tail);
        assert!(first.iter().all(|&d| d == FAST || d == SLOW));
        let slow = first.iter().filter(|&&d| d == SLOW).count();
        // 1000 expected; the standard deviation of the count is about 31.
        assert!((850..=1150).contains(&slow), "{slow} slow of 20 000");
        let clone = tail.clone();
        clone.reseed(SEED);
        assert_eq!(
            draws(&tail),
            first,
            "reseeding a clone reseeds the one generator"
        );
        assert_eq!(
            draws(&Tail::new(SEED)),
            first,
            "the same seed, the same waits"
        );
        assert_ne!(
            draws(&Tail::new(SEED + 1)),
            first,
            "another seed, other waits"
        );
    }

    fn summary(p50: u64, p99: u64, calls: u64, requests: u64) -> Summary {
        Summary {
            p50: ms(p50),
            p90: ms(p50),
            p99: ms(p99),
            p999: ms(p99),
            max: ms(p99),
            calls,
            requests,
        }
    }

    #[test]
    fn a_summary_holds_the_tail_and_the_load_against_the_goals() {
        let l = Latencies::new(
            (0..1000)
                .map(|i| if i % 20 == 0 { ms(500) } else { ms(5) })
                .collect(),
        );
        let s = Summary::of(&l, 1000, 1049);
        assert_eq!(
            (s.p50, s.p90, s.p99, s.max),
            (ms(5), ms(5), ms(500), ms(500))
        );
        assert_eq!(s.tail_ratio(), 100.0);
        assert!(!s.tail_met());
        assert!((s.extra_load() - 0.049).abs() < 1e-12);
        assert!(s.load_met());
        let hedged = summary(6, 18, 10_000, 11_000);
        assert!(hedged.tail_met(), "3x is within the goal");
        assert!(hedged.load_met(), "10 % is within the goal");
        assert!(!summary(6, 19, 10_000, 11_001).tail_met());
        assert!(!summary(6, 18, 10_000, 11_001).load_met());
    }

    #[test]
    fn the_tables_give_each_round_and_the_median_with_its_range() {
        let round = round_table(&[("none", summary(6, 500, 1000, 1000))]);
        assert!(
            round.contains(
                "| none | 6.0 ms | 6.0 ms | 500.0 ms | 500.0 ms | 500.0 ms | 83.33 | 1.000 | +0.0 % |"
            ),
            "{round}"
        );
        let runs = vec![
            summary(6, 12, 1000, 1050),
            summary(5, 20, 1000, 1120),
            summary(7, 14, 1000, 1070),
        ];
        let table = summary_table(&[("hedged", runs.clone())]);
        assert!(
            table.contains(
                "| hedged | 6.0 (5.0 to 7.0) | 6.0 (5.0 to 7.0) | 14.0 (12.0 to 20.0) | \
                 14.0 (12.0 to 20.0) | 14.0 (12.0 to 20.0) | 2.00 (2.00 to 4.00) | \
                 1.070 (1.050 to 1.120) | +7.0 % (+5.0 % to +12.0 %) |"
            ),
            "{table}"
        );
        let goals = goals(&[("hedged", runs)]);
        assert!(
            goals.contains("p99 / p50 2.00 (goal at most 3), met in 2 of 3 rounds"),
            "{goals}"
        );
        assert!(
            goals.contains("extra load +7.0 % (goal at most +10.0 %), met in 2 of 3 rounds"),
            "{goals}"
        );
    }
}

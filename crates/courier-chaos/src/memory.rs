//! Resident memory, sampled through the run, and whether it stays flat after the warm-up.

use std::time::Duration;

/// The process's resident set size in KiB (`VmRSS` of `/proc/self/status`), or `None` where
/// there is no such file.
pub(crate) fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// One sample: seconds since the start, resident KiB.
pub(crate) type Sample = (f64, u64);

/// What the samples after the warm-up say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trend {
    /// Growth fitted by least squares, in KiB per minute.
    pub(crate) slope_kib_per_min: f64,
    /// Resident memory at the end of the warm-up and at the end, KiB.
    pub(crate) first_kib: u64,
    pub(crate) last_kib: u64,
    /// The most seen after the warm-up, KiB.
    pub(crate) peak_kib: u64,
    /// How many samples the fit used.
    pub(crate) samples: usize,
    /// From the first sample used to the last, seconds.
    pub(crate) span_secs: f64,
}

impl Trend {
    /// How much the fitted line grows over the samples, KiB.
    pub(crate) fn growth_kib(&self) -> f64 {
        self.slope_kib_per_min * self.span_secs / 60.0
    }
}

/// The fewest samples after the warm-up that a trend is fitted to.
pub(crate) const MIN_SAMPLES: usize = 20;

/// The trend of the samples taken at or after `warm_up`; `None` with fewer than
/// [`MIN_SAMPLES`] of them.
pub(crate) fn trend(samples: &[Sample], warm_up: Duration) -> Option<Trend> {
    let after: Vec<Sample> = samples
        .iter()
        .copied()
        .filter(|(t, _)| *t >= warm_up.as_secs_f64())
        .collect();
    if after.len() < MIN_SAMPLES {
        return None;
    }
    let n = after.len() as f64;
    let mean_t = after.iter().map(|(t, _)| t).sum::<f64>() / n;
    let mean_m = after.iter().map(|(_, m)| *m as f64).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for (t, m) in &after {
        cov += (t - mean_t) * (*m as f64 - mean_m);
        var += (t - mean_t) * (t - mean_t);
    }
    let slope_per_sec = if var > 0.0 { cov / var } else { 0.0 };
    Some(Trend {
        slope_kib_per_min: slope_per_sec * 60.0,
        first_kib: after[0].1,
        last_kib: after[after.len() - 1].1,
        peak_kib: after.iter().map(|(_, m)| *m).max().unwrap_or(0),
        samples: after.len(),
        span_secs: after[after.len() - 1].0 - after[0].0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let kib = rss_kib().expect("Linux has /proc/self/status");
        assert!(kib > 100, "{kib} KiB");
    }

    #[test]
    fn slope_of_a_line_and_of_a_flat_series() {
        let growing: Vec<Sample> = (0..100)
            .map(|i| (f64::from(i), 1000 + 2 * i as u64))
            .collect();
        let t = trend(&growing, Duration::from_secs(10)).unwrap();
        assert!((t.slope_kib_per_min - 120.0).abs() < 1e-6, "{t:?}");
        assert_eq!(
            (t.first_kib, t.last_kib, t.peak_kib, t.samples),
            (1020, 1198, 1198, 90)
        );

        // A warm-up climb, then a plateau with noise: flat.
        let plateau: Vec<Sample> = (0..100)
            .map(|i| {
                (
                    f64::from(i),
                    if i < 20 {
                        500 + 50 * i as u64
                    } else {
                        1500 + (i % 3) as u64
                    },
                )
            })
            .collect();
        let t = trend(&plateau, Duration::from_secs(20)).unwrap();
        assert!(t.slope_kib_per_min.abs() < 1.0, "{t:?}");
        assert!(
            trend(&plateau, Duration::from_secs(81)).is_none(),
            "19 samples are too few"
        );
        assert!(trend(&plateau, Duration::from_secs(80)).is_some());
    }
}

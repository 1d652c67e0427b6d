//! What the budgets let through over a run: the bounds of invariants (g) and (j), counted
//! at the server.

use std::time::Duration;

use crate::soak::{BUDGET_FLOOR, BUDGET_RATIO, BUDGET_WINDOW, HEDGE_RATIO};

/// The most retries a sliding-window budget lets through over `elapsed`: per host, the floor
/// once per 0.9 window (an entry stays between 0.9 and 1.0 window), plus `ratio` of the
/// calls. With `ratio` twice the budget's it is a hard bound: a deposit counts in at most two
/// stretches of 0.9 window; with the budget's own ratio it is what a steady load can spend.
pub(crate) fn budget_bound(calls: u64, hosts: usize, elapsed: Duration, ratio: f64) -> u64 {
    (floors(hosts, elapsed) + ratio * calls as f64).ceil() as u64
}

/// The retry budget's floor over `elapsed`, for `hosts` hosts: once per stretch of 0.9 window.
fn floors(hosts: usize, elapsed: Duration) -> f64 {
    let stretches = (elapsed.as_secs_f64() / (0.9 * BUDGET_WINDOW.as_secs_f64())).floor() + 1.0;
    hosts as f64 * f64::from(BUDGET_FLOOR) * stretches
}

/// The most requests beyond each call's first that the callers with hedging may send one
/// host over `elapsed`, from `calls` calls that made `attempts` attempts (each a deposit in the hedge budget):
/// the retry budget's (its floor once per stretch plus its ratio of the calls, as in
/// [`budget_bound`]) plus the hedge budget's (its ratio of the attempts,
/// every attempt of retry's counted, and no floor). With `factor` 2 it is a hard bound, each
/// deposit counting in at most two stretches of either budget's window; with 1 it is what a
/// steady load can spend.
pub(crate) fn extra_bound(calls: u64, attempts: u64, elapsed: Duration, factor: f64) -> u64 {
    let retries = floors(1, elapsed) + factor * BUDGET_RATIO * calls as f64;
    let hedges = factor * HEDGE_RATIO * attempts as f64;
    (retries + hedges).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bound_counts_floors_per_stretch_and_the_ratio() {
        // 60 s is 7 stretches of 9 s (and a part): 4 hosts * 10 * 7 + 10 % of 1000.
        let bound = budget_bound(1000, 4, Duration::from_secs(60), 0.1);
        assert_eq!(bound, 280 + 100);
        assert_eq!(budget_bound(0, 1, Duration::ZERO, 0.2), 10);
    }

    #[test]
    fn the_bound_of_the_hedged_callers_adds_both_budgets() {
        // 60 s is 7 stretches of 9 s: the retry budget's floor 70 times, its ratio of 1000
        // calls and the hedge budget's of 1200 requests, twice each for the hard bound.
        let sixty = Duration::from_secs(60);
        assert_eq!(extra_bound(1000, 1200, sixty, 1.0), 70 + 100 + 120);
        assert_eq!(extra_bound(1000, 1200, sixty, 2.0), 70 + 200 + 240);
        assert_eq!(extra_bound(0, 0, Duration::ZERO, 2.0), 10);
    }
}

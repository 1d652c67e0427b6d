//! The soak run end to end, and its outage schedule.

use super::*;

/// The soak is only as good as what it catches: a preset that retries POST without a key
/// and has no deadline breaks (a) and (c) within seconds.
#[test]
fn a_preset_that_breaks_its_promises_fails_the_soak() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let broken = preset(1, cache(None).unwrap()).deadline(None).retry(
        RetryLayer::new()
            .base(BACKOFF_BASE)
            .cap(BACKOFF_CAP)
            .without_budget()
            .idempotent_methods([http::Method::GET, http::Method::POST, http::Method::PATCH]),
    );
    let config = Config {
        transport: Transport::Hyper,
        mix: Mix::Chaos,
        duration: Duration::from_secs(4),
        max_calls: u64::MAX,
        concurrency: 16,
        seed: 1,
        hosts: 2,
        hedged_callers: 0,
    };
    let presets = Presets {
        plain: broken.clone(),
        hedged: broken.hedge(HedgeLayer::new()),
    };
    let report = runtime.block_on(run(config, &presets)).unwrap();
    let t = &report.tally;
    assert!(!t.passed());
    assert!(
        t.violations(Invariant::SentOnce).0 > 0,
        "{:?}",
        t.violations(Invariant::SentOnce)
    );
    assert!(
        t.violations(Invariant::Deadline).0 > 0,
        "slowest {:?}",
        t.slowest
    );
    assert_eq!(t.violations(Invariant::SameKey).0, 0);
    assert_eq!(t.violations(Invariant::Harness).0, 0);
    assert!(t.calls > 100 && t.reached > 50, "{t:?}");
}

/// Half the callers hedge every retry-safe request at once, four times, with a budget that
/// never runs out: the server sees far more than the budgets allow, and (j) fails; the
/// hedges keep every other promise, a keyless POST is still sent once. The broken-paths mix,
/// whose host is up all along: in the chaos mix, a run this short is mostly its final outage,
/// whose 503s stop hedges.
#[test]
fn hedges_past_their_budget_fail_the_soak() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cache = cache(None).unwrap();
    let unbounded = HedgeLayer::new()
        .after(Duration::ZERO)
        .attempts(5)
        .budget(RetryBudget::new().ratio(1000.0).floor(100_000));
    // Without a breaker under the hedges: a hedge of a call's first attempt reaches it as a
    // call of its own, and with every request hedged four times the failing paths' share of
    // those calls may open it and keep the load off the server. Nor adaptive pacing: the
    // host's 429s and 503s under that load slow the hedging callers down, and in some runs
    // refused most of their calls ("rate limited") before the hedges' extra load passed the
    // bound, so that the soak had nothing to catch.
    let presets = Presets {
        plain: defaults(1, cache.clone()),
        hedged: defaults(1, cache)
            .circuit_breaker(None)
            .adaptive_pacing(None)
            .hedge(unbounded),
    };
    let config = Config {
        transport: Transport::Hyper,
        mix: Mix::BrokenPaths,
        duration: Duration::from_secs(4),
        max_calls: u64::MAX,
        concurrency: 16,
        seed: 1,
        hosts: 1,
        hedged_callers: 8,
    };
    let report = runtime.block_on(run(config, &presets)).unwrap();
    let t = &report.tally;
    assert!(
        t.violations(Invariant::HedgeBudget).0 > 0,
        "{:?} against {:?}",
        t.hedged_hosts,
        report.hedged_bounds
    );
    for kept in [
        Invariant::SentOnce,
        Invariant::SameKey,
        Invariant::Deadline,
        Invariant::Hedged,
        Invariant::NoLateAttempt,
        Invariant::NoPermitHeld,
        Invariant::Harness,
    ] {
        assert_eq!(
            t.violations(kept).0,
            0,
            "{kept:?}: {:?}",
            t.violations(kept)
        );
    }
    assert!(t.hedges.sent > 0, "{:?}", t.hedges);
}

#[test]
fn outages_are_staggered_and_the_run_ends_in_one() {
    let length = Duration::from_secs(120);
    let down = |host, secs: f64| in_outage(host, Duration::from_secs_f64(secs), length);
    assert!(!down(0, 26.9) && down(0, 27.0) && down(0, 29.9) && !down(0, 30.0));
    // Host 1 is 7 s ahead: down from 20 s to 23 s.
    assert!(!down(1, 19.9) && down(1, 20.0) && !down(1, 23.0));
    for host in 0..4 {
        assert!(down(host, 117.0) && down(host, 119.9), "host {host}");
        let share = (0..1170)
            .filter(|t| down(host, f64::from(*t) / 10.0))
            .count();
        assert!(
            (90..=120).contains(&share),
            "host {host} down {share} of 1170 ticks"
        );
    }
}

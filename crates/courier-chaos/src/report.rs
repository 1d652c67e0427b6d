//! The summary of a run: the preset, what happened to the calls, the load on the server, and
//! the invariants with their verdicts.

use std::fmt::Write as _;
use std::time::Duration;

use crate::check::{DEADLINE_SLACK, Invariant, LATE_SLACK};
use crate::scenario::{DROP_SHARE, Kind, Mix};
use crate::soak::{
    ATTEMPT_TIMEOUT, ATTEMPTS, BACKOFF_BASE, BACKOFF_CAP, BREAKER_FAILURES, BUDGET_FLOOR,
    BUDGET_RATIO, BUDGET_WINDOW, CACHE_BYTES, DEADLINE, FAILING_ANSWERS_FOR, MAX_GROWTH_KIB,
    MAX_SLOPE_KIB_PER_MIN, OPEN_DURATION, OVERLOAD_BASE, Report,
};

/// Formats the report as the text table `courier-chaos` prints.
pub(crate) fn render(report: &Report) -> String {
    let mut out = String::new();
    let c = &report.config;
    let t = &report.tally;
    let _ = writeln!(
        out,
        "chaos soak ({}) over {}: {:.1} s of calls, {} callers, {} hosts, seed {}",
        c.mix.name(),
        c.transport.name(),
        report.chaos.as_secs_f64(),
        c.concurrency,
        c.hosts,
        c.seed
    );
    if c.mix == Mix::BrokenPaths {
        let _ = writeln!(
            out,
            "preset: the defaults (breaker, adaptive pacing, retry and its budget), with deadline \
             {DEADLINE:?}, attempt timeout {ATTEMPT_TIMEOUT:?}, cache {} MiB",
            CACHE_BYTES / (1024 * 1024)
        );
        let _ = writeln!(
            out,
            "faults: every call its own path with a random plan; one in six resets or stalls \
             past the attempt timeout on every attempt, the rest answer (200; 5xx then 200; 429 \
             or 503 with a hint; an unasked 304)"
        );
    } else {
        let _ = writeln!(
            out,
            "preset: deadline {DEADLINE:?}, attempt timeout {ATTEMPT_TIMEOUT:?}, retry {ATTEMPTS} \
         attempts (backoff {BACKOFF_BASE:?} ({OVERLOAD_BASE:?} after a bare 503 or 429) to \
         {BACKOFF_CAP:?}, budget {:.0} % + {BUDGET_FLOOR} per {BUDGET_WINDOW:?} per host), breaker \
         {BREAKER_FAILURES} failures ({FAILING_ANSWERS_FOR:?} of failing answers) / \
         {OPEN_DURATION:?} open, adaptive pacing, cache {} MiB",
            BUDGET_RATIO * 100.0,
            CACHE_BYTES / (1024 * 1024)
        );
        let _ = writeln!(
            out,
            "faults: a random plan per call; each host down {} every {}, and all down for the last {}",
            secs(crate::soak::OUTAGE),
            secs(crate::soak::OUTAGE_EVERY),
            secs(crate::soak::OUTAGE)
        );
    }
    let _ = writeln!(
        out,
        "calls: {} ({:.0}/s), {} dropped by their caller at a random moment ({:.0} % planned)",
        t.calls,
        t.calls as f64 / report.chaos.as_secs_f64().max(1e-9),
        t.dropped,
        DROP_SHARE * 100.0
    );

    let _ = writeln!(
        out,
        "\noutcome                                         calls"
    );
    let mut outcomes: Vec<(&String, &u64)> = t.outcomes.iter().collect();
    outcomes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (outcome, n) in outcomes {
        let _ = writeln!(out, "  {outcome:<44} {n:>8}");
    }

    let _ = writeln!(
        out,
        "\nplan kind            calls   server hits   hits per call"
    );
    let (mut calls, mut hits) = (0, 0);
    for kind in Kind::ALL {
        let load = t.by_kind.get(&kind).copied().unwrap_or_default();
        calls += load.calls;
        hits += load.hits;
        let _ = writeln!(
            out,
            "  {:<16} {:>8}   {:>11}   {:>13.3}",
            kind.name(),
            load.calls,
            load.hits,
            load.amplification()
        );
    }
    let overall = if calls == 0 {
        0.0
    } else {
        hits as f64 / calls as f64
    };
    let _ = writeln!(
        out,
        "  {:<16} {calls:>8}   {hits:>11}   {overall:>13.3}",
        "all"
    );
    let outage = t.by_kind.get(&Kind::Outage).copied().unwrap_or_default();
    let (calls_out, hits_out) = (calls - outage.calls, hits - outage.hits);
    let outside = if calls_out == 0 {
        0.0
    } else {
        hits_out as f64 / calls_out as f64
    };
    let _ = writeln!(
        out,
        "  {:<16} {calls_out:>8}   {hits_out:>11}   {outside:>13.3}",
        "all but outages"
    );
    let retry_share = if hits == 0 {
        0.0
    } else {
        t.retries as f64 / hits as f64
    };
    let _ = writeln!(
        out,
        "retries the server saw: {} ({:.1} % of its load, {:.1} % of the calls); budget: {} \
         at a steady load, {} at most",
        t.retries,
        retry_share * 100.0,
        t.retries as f64 / (t.calls.max(1)) as f64 * 100.0,
        report.budget_nominal,
        report.budget_bound
    );

    let _ = writeln!(
        out,
        "\ninvariant                                              verdict   measured"
    );
    for invariant in Invariant::ALL {
        let (count, examples) = t.violations(invariant);
        let verdict = match (count, invariant) {
            (0, Invariant::FlatMemory) if report.memory.is_none() => "n/a",
            // Hosts go down on purpose in the chaos mix: calls just after an outage are the
            // breaker's to refuse. Reported, judged in the broken-paths mix.
            (0, Invariant::HealthyServed) if c.mix == Mix::Chaos => "n/a",
            (0, _) => "ok",
            _ => "FAILED",
        };
        let measured = measured(report, invariant, count);
        if invariant == Invariant::Harness && count == 0 {
            continue;
        }
        let _ = writeln!(out, "{:<54} {verdict:<9} {measured}", invariant.label());
        for example in examples {
            let _ = writeln!(out, "      {example}");
        }
    }
    let _ = writeln!(
        out,
        "\n{}",
        if t.passed() {
            "chaos: every invariant held"
        } else {
            "chaos: FAILED"
        }
    );
    out
}

fn measured(report: &Report, invariant: Invariant, count: u64) -> String {
    let t = &report.tally;
    match invariant {
        Invariant::SentOnce => format!(
            "{count} of {} unkeyed POST/PATCH sent twice",
            t.once_only_calls
        ),
        Invariant::SameKey => format!(
            "{} keyed calls, {} attempts, {count} with another key",
            t.keyed_calls, t.keyed_attempts
        ),
        Invariant::Deadline => {
            // Timer lag in the second a call ended and the one before: a starved process
            // cannot return on time, whatever the code does.
            let lag_at = |at: Duration| {
                let second = at.as_secs() as usize;
                report.lag.worst_between(second.saturating_sub(1), second)
            };
            let mut text = format!(
                "slowest call {} (bound {}) {:.1} s in, timers up to {} late then; \
                 worst timer lag {}",
                secs(t.slowest),
                secs(DEADLINE + DEADLINE_SLACK),
                t.slowest_at.as_secs_f64(),
                millis(lag_at(t.slowest_at)),
                millis(report.lag.worst())
            );
            if !t.late_calls_at.is_empty() {
                let lags: Vec<String> = t
                    .late_calls_at
                    .iter()
                    .map(|at| millis(lag_at(*at)))
                    .collect();
                let _ = write!(
                    text,
                    "; timer lag when the late calls ended: {}",
                    lags.join(", ")
                );
            }
            text
        }
        Invariant::NoPanic => format!("{count} panics"),
        Invariant::FlatMemory => match report.memory {
            Some(m) => format!(
                "slope {:+.0} KiB/min ({:+.1} MiB fitted) over {} samples after {} warm-up; \
                 RSS {:.1} -> {:.1} MiB, peak {:.1} (fails past {MAX_SLOPE_KIB_PER_MIN:.0} KiB/min \
                 and {} MiB)",
                m.slope_kib_per_min,
                m.growth_kib() / 1024.0,
                m.samples,
                secs(report.warm_up),
                m.first_kib as f64 / 1024.0,
                m.last_kib as f64 / 1024.0,
                m.peak_kib as f64 / 1024.0,
                MAX_GROWTH_KIB / 1024
            ),
            None => format!(
                "not judged: too few samples after the {} warm-up; run longer",
                secs(report.warm_up)
            ),
        },
        Invariant::Recovers => {
            let worst = report.recovery.iter().flatten().max().copied();
            format!(
                "slowest host healthy after {} (bound {})",
                worst.map_or("never".to_owned(), secs),
                secs(crate::soak::recovery_bound(report.config.mix))
            )
        }
        Invariant::Budget => format!(
            "{} retries, at most {} allowed",
            t.retries, report.budget_bound
        ),
        Invariant::NoLateAttempt => format!(
            "{} attempts more than {} after their call ended",
            t.late_attempts,
            secs(LATE_SLACK)
        ),
        Invariant::HealthyServed => format!(
            "{} of {} calls to answering paths refused by the breaker ({:.3} %, bound {:.0} %)",
            t.answering_refused,
            t.answering_calls,
            t.refused_share() * 100.0,
            crate::soak::MAX_REFUSED_SHARE * 100.0
        ),
        Invariant::Harness => format!("{count} problems"),
    }
}

fn millis(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

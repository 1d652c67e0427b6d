//! The summary of a run: the preset, what happened to the calls, the load on the server, and
//! the invariants with their verdicts.

use std::fmt::Write as _;
use std::time::Duration;

use crate::check::{DEADLINE_SLACK, Invariant, LATE_SLACK, Load, Part};
use crate::scenario::{DROP_SHARE, Kind, Mix};
use crate::soak::{
    ATTEMPT_TIMEOUT, ATTEMPTS, BACKOFF_BASE, BACKOFF_CAP, BREAKER_FAILURES, BUDGET_FLOOR,
    BUDGET_RATIO, BUDGET_WINDOW, CACHE_BYTES, DEADLINE, FAILING_ANSWERS_FOR, HEDGE_RATIO,
    MAX_GROWTH_KIB, MAX_SLOPE_KIB_PER_MIN, MIN_HEDGED_CALLS_PER_HOST, OPEN_DURATION, OVERLOAD_BASE,
    Report,
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
    let hedged_callers = c.hedged_callers.min(c.concurrency);
    let _ = writeln!(
        out,
        "hedging: {hedged_callers} of the {} callers through the same preset with \
         .hedge(HedgeLayer::new()) (each host's p95 latency over 10 s, 2 requests at \
         most, budget {:.0} % per host over 10 s, no floor), the others without; each its own \
         budgets, breaker and limits, one cache",
        c.concurrency,
        HEDGE_RATIO * 100.0
    );
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
        "\noutcome                                         calls   without hedging   with hedging"
    );
    let mut outcomes: Vec<(&String, &u64)> = t.outcomes.iter().collect();
    outcomes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (outcome, n) in outcomes {
        let of = |part| t.part(part).outcomes.get(outcome).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "  {outcome:<44} {n:>8}   {:>15}   {:>12}",
            of(Part::Plain),
            of(Part::Hedged)
        );
    }

    let _ = writeln!(
        out,
        "\n                          without hedging                  with hedging\n\
         plan kind            calls   server hits   per call     calls   server hits   per call"
    );
    let mut all = [Load::default(); 2];
    for kind in Kind::ALL {
        let loads = t.by_kind.get(&kind).copied().unwrap_or_default();
        for (sum, load) in all.iter_mut().zip(loads) {
            sum.calls += load.calls;
            sum.hits += load.hits;
        }
        let _ = writeln!(out, "  {:<16} {}", kind.name(), loads_row(&loads));
    }
    let _ = writeln!(out, "  {:<16} {}", "all", loads_row(&all));
    let outage = t.by_kind.get(&Kind::Outage).copied().unwrap_or_default();
    let mut outside = all;
    for (sum, down) in outside.iter_mut().zip(outage) {
        sum.calls -= down.calls;
        sum.hits -= down.hits;
    }
    let _ = writeln!(out, "  {:<16} {}", "all but outages", loads_row(&outside));
    let plain = all[0];
    let retry_share = if plain.hits == 0 {
        0.0
    } else {
        t.retries as f64 / plain.hits as f64
    };
    let _ = writeln!(
        out,
        "retries the server saw from the callers without hedging: {} ({:.1} % of their load, \
         {:.1} % of their calls); budget: {} at a steady load, {} at most",
        t.retries,
        retry_share * 100.0,
        t.retries as f64 / (plain.calls.max(1)) as f64 * 100.0,
        report.budget_nominal,
        report.budget_bound
    );

    let _ = writeln!(
        out,
        "\nhow long successful calls took        p50        p90        p99    slowest"
    );
    for part in Part::ALL {
        let l = &t.part(part).latencies;
        let q = |q| match l.quantile(q) {
            None => "-".to_owned(),
            Some(Duration::ZERO) => "< 1 ms".to_owned(),
            Some(d) => millis(d),
        };
        let _ = writeln!(
            out,
            "  {:<32} {:>6} {:>10} {:>10} {:>10}",
            part.name(),
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0)
        );
    }
    if hedged_callers > 0 {
        hedged_part(&mut out, report);
    }

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
            (0, Invariant::HedgeBudget) if t.hedged_hosts.is_empty() => "n/a",
            (0, Invariant::Hedged) if !crate::soak::hedged_judged(report) => "n/a",
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

/// Calls, server hits and hits per call of each part, as one row.
fn loads_row(loads: &[Load; 2]) -> String {
    let [plain, hedged] = loads;
    format!(
        "{:>8}   {:>11}   {:>8.3}  {:>8}   {:>11}   {:>8.3}",
        plain.calls,
        plain.hits,
        plain.amplification(),
        hedged.calls,
        hedged.hits,
        hedged.amplification()
    )
}

/// What the callers with hedging saw and sent: the hedges on their answers, and their load on
/// each host against the bound of (j).
fn hedged_part(out: &mut String, report: &Report) {
    let t = &report.tally;
    let h = &t.hedges;
    let _ = writeln!(
        out,
        "\nhedges on the answers of the callers with hedging (the last attempt's, answers only): \
         {} answers of {} calls carried one; {} hedges went: {} won, {} cancelled, {} non-fatal; \
         {} refused below",
        h.calls,
        t.part(Part::Hedged).calls,
        h.sent,
        h.won,
        h.cancelled,
        h.sent - h.won - h.cancelled,
        h.refused
    );
    let _ = writeln!(
        out,
        "their load per host: requests beyond each call's first (retries and hedges) as the \
         server saw them, against the retry budget ({:.0} % of the calls + {BUDGET_FLOOR} per \
         window) and the hedge budget ({:.0} % of the attempts)",
        BUDGET_RATIO * 100.0,
        HEDGE_RATIO * 100.0
    );
    let _ = writeln!(
        out,
        "  host      calls           attempts      extra   budgets: steady    at most"
    );
    for (host, (load, (bound, nominal))) in
        t.hedged_hosts.iter().zip(&report.hedged_bounds).enumerate()
    {
        let _ = writeln!(
            out,
            "  {host:<4} {:>10}   {:>16}   {:>8}   {:>15}   {:>8}",
            load.calls, load.attempts, load.extra, nominal, bound
        );
    }
}

fn measured(report: &Report, invariant: Invariant, count: u64) -> String {
    let t = &report.tally;
    match invariant {
        Invariant::SentOnce => format!(
            "{count} of {} unkeyed POST/PATCH sent twice ({} with hedging)",
            t.once_only_calls, t.once_only_hedged
        ),
        Invariant::SameKey => format!(
            "{} keyed calls ({} with hedging), {} attempts, {count} with another key",
            t.keyed_calls, t.keyed_hedged, t.keyed_attempts
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
            let parts: Vec<String> = report
                .recovery
                .iter()
                .map(|(part, took)| {
                    let worst = if took.iter().any(Option::is_none) {
                        "never".to_owned()
                    } else {
                        took.iter()
                            .flatten()
                            .max()
                            .copied()
                            .map_or("-".to_owned(), secs)
                    };
                    format!("{worst} {}", part.name())
                })
                .collect();
            format!(
                "slowest host healthy after {} (bound {})",
                parts.join(", "),
                secs(crate::soak::recovery_bound(report.config.mix))
            )
        }
        Invariant::Budget => format!(
            "{} retries, at most {} allowed (callers without hedging)",
            t.retries, report.budget_bound
        ),
        Invariant::NoLateAttempt => format!(
            "{} attempts more than {} after their call ended",
            t.late_attempts,
            secs(LATE_SLACK)
        ),
        Invariant::HealthyServed => {
            let parts: Vec<String> = Part::ALL
                .iter()
                .map(|part| {
                    let p = t.part(*part);
                    format!(
                        "{} of {} ({:.3} %) {}",
                        p.answering_refused,
                        p.answering_calls,
                        p.refused_share() * 100.0,
                        part.name()
                    )
                })
                .collect();
            format!(
                "calls to answering paths refused by the breaker: {} (bound {:.0} %)",
                parts.join(", "),
                crate::soak::MAX_REFUSED_SHARE * 100.0
            )
        }
        Invariant::HedgeBudget => {
            let extra: u64 = t.hedged_hosts.iter().map(|h| h.extra).sum();
            let bound: u64 = report.hedged_bounds.iter().map(|(b, _)| b).sum();
            let closest = t
                .hedged_hosts
                .iter()
                .zip(&report.hedged_bounds)
                .map(|(h, (b, _))| (h.extra as f64 / (*b).max(1) as f64, h.extra, *b))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match closest {
                Some((_, e, b)) => format!(
                    "{extra} requests beyond their calls' first, at most {bound} allowed; closest \
                     host {e} of {b}"
                ),
                None => "no caller with hedging".to_owned(),
            }
        }
        Invariant::Hedged => format!(
            "{} hedges seen on {} answers, {} won (judged from {} calls per host)",
            t.hedges.sent, t.hedges.calls, t.hedges.won, MIN_HEDGED_CALLS_PER_HOST
        ),
        Invariant::NoPermitHeld => {
            let held: usize = report.permits.iter().flat_map(|(_, h)| h).sum();
            let hosts: usize = report.permits.iter().map(|(_, h)| h.len()).sum();
            format!(
                "{held} permits held over {hosts} hosts of {} stacks",
                report.permits.len()
            )
        }
        Invariant::Harness => format!("{count} problems"),
    }
}

fn millis(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

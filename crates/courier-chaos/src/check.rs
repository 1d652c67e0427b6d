//! The invariants, checked call by call from what the server recorded, and the tallies the
//! summary reports.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use courier_faultserver::Hit;
use http::Method;
use tokio::time::Instant;

use crate::scenario::Kind;

/// How late after its call ended an attempt may still reach the server: the time a request
/// written just before the end takes to be read.
pub(crate) const LATE_SLACK: Duration = Duration::from_millis(100);

/// How long past its deadline a call may return.
pub(crate) const DEADLINE_SLACK: Duration = Duration::from_millis(100);

/// Examples kept per invariant.
const EXAMPLES: usize = 5;

/// The invariants, as the summary names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Invariant {
    /// (a) no POST or PATCH without a key reaches the server twice.
    SentOnce,
    /// (b) every attempt of a keyed call carries the caller's key.
    SameKey,
    /// (c) no call, headers and body, returns later than its deadline plus 100 ms.
    Deadline,
    /// (d) no panic anywhere.
    NoPanic,
    /// (e) resident memory flat after the warm-up.
    FlatMemory,
    /// (f) after the chaos, a healthy plan succeeds within the breaker's open duration plus 5 s.
    Recovers,
    /// (g) the retries the server sees stay within the retry budget.
    Budget,
    /// (h) no attempt reaches the server after its call returned or was dropped.
    NoLateAttempt,
    /// (i) in the broken-paths mix, the breaker refuses under 1 % of the calls to paths
    /// that answer.
    HealthyServed,
    /// The soak itself: a plan the server refused, a worker that failed.
    Harness,
}

impl Invariant {
    pub(crate) const ALL: [Invariant; 10] = [
        Invariant::SentOnce,
        Invariant::SameKey,
        Invariant::Deadline,
        Invariant::NoPanic,
        Invariant::FlatMemory,
        Invariant::Recovers,
        Invariant::Budget,
        Invariant::NoLateAttempt,
        Invariant::HealthyServed,
        Invariant::Harness,
    ];

    pub(crate) const fn label(self) -> &'static str {
        match self {
            Invariant::SentOnce => "(a) unkeyed POST/PATCH reach the server at most once",
            Invariant::SameKey => "(b) every attempt of a keyed call carries its key",
            Invariant::Deadline => "(c) no call returns past its deadline + 100 ms",
            Invariant::NoPanic => "(d) no panic",
            Invariant::FlatMemory => "(e) resident memory flat after warm-up",
            Invariant::Recovers => "(f) healthy again within open duration + 5 s",
            Invariant::Budget => "(g) retries within the retry budget",
            Invariant::NoLateAttempt => "(h) no attempt after its call ended",
            Invariant::HealthyServed => "(i) breaker refuses < 1 % of answering paths' calls",
            Invariant::Harness => "    the soak ran as planned",
        }
    }
}

/// A call that ended, as the checker needs it.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) index: u64,
    pub(crate) host: usize,
    pub(crate) method: Method,
    pub(crate) key: Option<String>,
    pub(crate) kind: Kind,
    /// When it returned, or when its caller dropped it.
    pub(crate) ended: Instant,
    pub(crate) dropped: bool,
}

impl Finished {
    fn once_only(&self) -> bool {
        self.key.is_none() && matches!(self.method, Method::POST | Method::PATCH)
    }
}

/// Calls and server hits of one kind of plan.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    pub(crate) calls: u64,
    pub(crate) hits: u64,
}

impl Load {
    /// Server requests per call.
    pub(crate) fn amplification(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.hits as f64 / self.calls as f64
        }
    }
}

/// Everything counted in one run.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) calls: u64,
    pub(crate) dropped: u64,
    /// Final statuses and errors, by name.
    pub(crate) outcomes: BTreeMap<String, u64>,
    pub(crate) by_kind: BTreeMap<Kind, Load>,
    /// Calls that reached the server at least once.
    pub(crate) reached: u64,
    /// Attempts after a call's first, as the server saw them.
    pub(crate) retries: u64,
    pub(crate) once_only_calls: u64,
    pub(crate) keyed_calls: u64,
    pub(crate) keyed_attempts: u64,
    /// The longest a call that was not dropped took, and when it ended (since the start).
    pub(crate) slowest: Duration,
    pub(crate) slowest_at: Duration,
    /// When the first calls that missed their deadline ended (since the start).
    pub(crate) late_calls_at: Vec<Duration>,
    pub(crate) late_attempts: u64,
    /// Calls to paths that answer, and how many of them the breaker refused.
    pub(crate) answering_calls: u64,
    pub(crate) answering_refused: u64,
    violations: BTreeMap<Invariant, (u64, Vec<String>)>,
}

impl Tally {
    /// Records a breach of `invariant`.
    pub(crate) fn violate(&mut self, invariant: Invariant, example: impl fmt::Display) {
        let (count, examples) = self.violations.entry(invariant).or_default();
        *count += 1;
        if examples.len() < EXAMPLES {
            examples.push(example.to_string());
        }
    }

    /// How many times `invariant` was breached, and the first examples.
    pub(crate) fn violations(&self, invariant: Invariant) -> (u64, &[String]) {
        self.violations
            .get(&invariant)
            .map_or((0, &[][..]), |(n, e)| (*n, e.as_slice()))
    }

    /// Whether every invariant held.
    pub(crate) fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Counts a call to a path that answers, and whether the breaker refused it.
    pub(crate) fn answering(&mut self, refused: bool) {
        self.answering_calls += 1;
        self.answering_refused += u64::from(refused);
    }

    /// The share of the calls to answering paths the breaker refused.
    pub(crate) fn refused_share(&self) -> f64 {
        if self.answering_calls == 0 {
            0.0
        } else {
            self.answering_refused as f64 / self.answering_calls as f64
        }
    }

    /// Records how a call ended, `at` this long after the start, and checks its duration
    /// against the deadline.
    pub(crate) fn outcome(
        &mut self,
        index: u64,
        outcome: &str,
        took: Duration,
        at: Duration,
        deadline: Duration,
    ) {
        self.calls += 1;
        *self.outcomes.entry(outcome.to_owned()).or_default() += 1;
        if outcome == DROPPED {
            self.dropped += 1;
        } else if took > self.slowest {
            self.slowest = took;
            self.slowest_at = at;
        }
        // A call still running when its caller dropped it past the bound broke it as well.
        if took > deadline + DEADLINE_SLACK {
            if self.late_calls_at.len() < EXAMPLES {
                self.late_calls_at.push(at);
            }
            self.violate(
                Invariant::Deadline,
                format!(
                    "call {index} ({outcome}) took {took:?}, deadline {deadline:?}; ended {:.1} s in",
                    at.as_secs_f64()
                ),
            );
        }
    }

    /// Checks the hits the server recorded for a finished call. `server_start` is at or before
    /// the moment the server counts its hits' times from.
    pub(crate) fn hits(&mut self, call: &Finished, hits: &[Hit], server_start: Instant) {
        let load = self.by_kind.entry(call.kind).or_default();
        load.calls += 1;
        load.hits += hits.len() as u64;
        if !hits.is_empty() {
            self.reached += 1;
            self.retries += hits.len() as u64 - 1;
        }
        if call.once_only() {
            self.once_only_calls += 1;
            if hits.len() > 1 {
                self.violate(
                    Invariant::SentOnce,
                    format!(
                        "call {} ({} without a key, {}) reached the server {} times",
                        call.index,
                        call.method,
                        call.kind.name(),
                        hits.len()
                    ),
                );
            }
        }
        if let Some(key) = &call.key {
            self.keyed_calls += 1;
            self.keyed_attempts += hits.len() as u64;
            let seen: Vec<Option<&str>> =
                hits.iter().map(|h| h.idempotency_key.as_deref()).collect();
            if seen.iter().any(|k| *k != Some(key.as_str())) {
                self.violate(
                    Invariant::SameKey,
                    format!(
                        "call {} sent key {key:?}; the server saw {seen:?}",
                        call.index
                    ),
                );
            }
        }
        for hit in hits {
            // The hit came no earlier than this; later than the end plus the slack is too late.
            let at_least = server_start + Duration::from_secs_f64(hit.t_ms.max(0.0) / 1000.0);
            if at_least > call.ended + LATE_SLACK {
                self.late_attempts += 1;
                self.violate(
                    Invariant::NoLateAttempt,
                    format!(
                        "call {} ({}, {}) was {} {:?} before an attempt reached the server",
                        call.index,
                        call.method,
                        call.kind.name(),
                        if call.dropped { "dropped" } else { "returned" },
                        at_least - call.ended
                    ),
                );
            }
        }
    }

    /// Hits recorded for call `index` after its check: attempts that came later still.
    pub(crate) fn hits_after_check(&mut self, index: u64, hits: &[Hit]) {
        if hits.is_empty() {
            return;
        }
        self.late_attempts += hits.len() as u64;
        self.violate(
            Invariant::NoLateAttempt,
            format!(
                "call {index}: {} attempt(s) reached the server after the call was checked",
                hits.len()
            ),
        );
    }
}

/// The outcome name of a call its caller dropped.
pub(crate) const DROPPED: &str = "dropped by its caller";

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(t_ms: f64, key: Option<&str>) -> Hit {
        Hit {
            t_ms,
            method: "POST".to_owned(),
            path: "/s/c1".to_owned(),
            query: None,
            idempotency_key: key.map(str::to_owned),
            headers: Vec::new(),
        }
    }

    fn finished(method: Method, key: Option<&str>, ended: Instant) -> Finished {
        Finished {
            index: 1,
            host: 0,
            method,
            key: key.map(str::to_owned),
            kind: Kind::ServerErrors,
            ended,
            dropped: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unkeyed_post_seen_twice_breaks_a() {
        let start = Instant::now();
        let ended = start + Duration::from_secs(1);
        let mut tally = Tally::default();
        tally.hits(
            &finished(Method::POST, None, ended),
            &[hit(10.0, None)],
            start,
        );
        assert!(tally.passed());
        tally.hits(
            &finished(Method::PATCH, None, ended),
            &[hit(10.0, None), hit(20.0, None)],
            start,
        );
        assert_eq!(tally.violations(Invariant::SentOnce).0, 1);
        // A GET, or a keyed POST, may be sent again.
        let mut tally = Tally::default();
        tally.hits(
            &finished(Method::GET, None, ended),
            &[hit(1.0, None), hit(2.0, None)],
            start,
        );
        tally.hits(
            &finished(Method::POST, Some("k"), ended),
            &[hit(1.0, Some("k")), hit(2.0, Some("k"))],
            start,
        );
        assert!(tally.passed());
        assert_eq!(
            (tally.retries, tally.reached, tally.keyed_attempts),
            (2, 2, 2)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_or_missing_key_breaks_b() {
        let start = Instant::now();
        let ended = start + Duration::from_secs(1);
        for seen in [[Some("k"), Some("k2")], [Some("k"), None]] {
            let mut tally = Tally::default();
            let hits: Vec<Hit> = seen.iter().map(|k| hit(5.0, *k)).collect();
            tally.hits(&finished(Method::POST, Some("k"), ended), &hits, start);
            assert_eq!(tally.violations(Invariant::SameKey).0, 1, "{seen:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_after_the_end_breaks_h() {
        let start = Instant::now();
        let ended = start + Duration::from_millis(500);
        let mut tally = Tally::default();
        let call = finished(Method::GET, None, ended);
        tally.hits(&call, &[hit(450.0, None), hit(590.0, None)], start);
        assert!(tally.passed(), "within the slack");
        tally.hits(&call, &[hit(700.0, None)], start);
        assert_eq!(tally.violations(Invariant::NoLateAttempt).0, 1);
        tally.hits_after_check(9, &[hit(0.0, None)]);
        tally.hits_after_check(10, &[]);
        assert_eq!(tally.violations(Invariant::NoLateAttempt).0, 2);
        assert_eq!(tally.late_attempts, 2);
    }

    #[test]
    fn a_call_past_its_deadline_breaks_c() {
        let deadline = Duration::from_millis(1500);
        let at = Duration::from_secs;
        let mut tally = Tally::default();
        tally.outcome(1, "200", Duration::from_millis(1590), at(5), deadline);
        tally.outcome(2, DROPPED, Duration::from_millis(1200), at(6), deadline);
        assert!(tally.passed());
        assert_eq!((tally.calls, tally.dropped), (2, 1));
        assert_eq!(
            (tally.slowest, tally.slowest_at),
            (Duration::from_millis(1590), at(5))
        );
        tally.outcome(
            3,
            "deadline exceeded",
            Duration::from_millis(1601),
            at(7),
            deadline,
        );
        tally.outcome(4, DROPPED, Duration::from_millis(1650), at(8), deadline);
        let (count, examples) = tally.violations(Invariant::Deadline);
        assert_eq!(count, 2);
        assert!(
            examples[0].contains("call 3") && examples[0].contains("7.0 s in"),
            "{examples:?}"
        );
        assert_eq!(tally.late_calls_at, [at(7), at(8)]);
    }

    #[test]
    fn amplification_per_kind() {
        let load = Load { calls: 4, hits: 5 };
        assert!((load.amplification() - 1.25).abs() < 1e-9);
        assert_eq!(Load::default().amplification(), 0.0);
    }
}

//! The invariants, checked call by call from what the server recorded, and the tallies the
//! summary reports.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use courier::retry::hedge::{HedgeOutcome, Hedged};
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
    /// (j) the callers with hedging add no more requests per host than their retry and hedge
    /// budgets allow together.
    HedgeBudget,
    /// (k) the callers with hedging sent hedges.
    Hedged,
    /// (l) no concurrency permit is still held once every call has ended.
    NoPermitHeld,
    /// The soak itself: a plan the server refused, a worker that failed.
    Harness,
}

impl Invariant {
    pub(crate) const ALL: [Invariant; 13] = [
        Invariant::SentOnce,
        Invariant::SameKey,
        Invariant::Deadline,
        Invariant::NoPanic,
        Invariant::FlatMemory,
        Invariant::Recovers,
        Invariant::Budget,
        Invariant::NoLateAttempt,
        Invariant::HealthyServed,
        Invariant::HedgeBudget,
        Invariant::Hedged,
        Invariant::NoPermitHeld,
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
            Invariant::HedgeBudget => "(j) hedged callers' extra load within their budgets",
            Invariant::Hedged => "(k) the callers with hedging sent hedges",
            Invariant::NoPermitHeld => "(l) no concurrency permit held after the run",
            Invariant::Harness => "    the soak ran as planned",
        }
    }
}

/// Which stack a caller's calls go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    /// The soak's preset as it is.
    Plain,
    /// The same preset with `.hedge(HedgeLayer::new())`.
    Hedged,
}

impl Part {
    pub(crate) const ALL: [Part; 2] = [Part::Plain, Part::Hedged];

    const fn index(self) -> usize {
        match self {
            Part::Plain => 0,
            Part::Hedged => 1,
        }
    }

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Part::Plain => "without hedging",
            Part::Hedged => "with hedging",
        }
    }
}

/// A call that ended, as the checker needs it.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) index: u64,
    pub(crate) host: usize,
    pub(crate) part: Part,
    pub(crate) method: Method,
    pub(crate) key: Option<String>,
    pub(crate) kind: Kind,
    /// When it returned, or when its caller dropped it.
    pub(crate) ended: Instant,
    pub(crate) dropped: bool,
    /// The attempts the retry service sent (hedges aside), each a deposit in the hedge
    /// budget: the call's attempts as its answer or error lists them, or the most a call makes
    /// when they are not known (a call its caller dropped).
    pub(crate) attempts: u64,
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

/// How long calls took, in milliseconds, in a histogram of fixed size: a soak of any length
/// holds the same memory for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latencies {
    /// Calls by whole milliseconds; the last counts everything slower.
    millis: Vec<u64>,
    count: u64,
}

impl Latencies {
    /// The slowest bucket: past the deadline and its slack.
    const MAX_MS: usize = 4_000;

    pub(crate) fn record(&mut self, took: Duration) {
        if self.millis.is_empty() {
            self.millis = vec![0; Self::MAX_MS + 1];
        }
        let ms = usize::try_from(took.as_millis()).unwrap_or(usize::MAX);
        self.millis[ms.min(Self::MAX_MS)] += 1;
        self.count += 1;
    }

    /// The `q` quantile (0 to 1), to the millisecond; `None` with no calls.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (ms, n) in self.millis.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_millis(ms as u64));
            }
        }
        None
    }
}

/// What the calls of one part did.
#[derive(Debug, Default)]
pub(crate) struct PartTally {
    pub(crate) calls: u64,
    /// Final statuses and errors, by name.
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// How long the calls that succeeded (a 2xx or 3xx, its body read) took: where a hedge
    /// may cut the wait.
    pub(crate) latencies: Latencies,
    /// Calls to paths that answer, and how many of them the breaker refused.
    pub(crate) answering_calls: u64,
    pub(crate) answering_refused: u64,
}

impl PartTally {
    /// The share of the calls to answering paths the breaker refused.
    pub(crate) fn refused_share(&self) -> f64 {
        if self.answering_calls == 0 {
            0.0
        } else {
            self.answering_refused as f64 / self.answering_calls as f64
        }
    }
}

/// The load the callers with hedging put on one host.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostLoad {
    pub(crate) calls: u64,
    /// Attempts, hedges aside (see [`Finished::attempts`]).
    pub(crate) attempts: u64,
    /// Requests the server saw beyond each call's first: retries and hedges.
    pub(crate) extra: u64,
}

/// The hedges the callers saw on their answers ([`Hedged`]): only the last attempt's, and
/// only on an answer, so fewer than were sent.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HedgesSeen {
    /// Answers that carried the record: a hedge went.
    pub(crate) calls: u64,
    /// Hedges sent on: the requests after each call's first that no layer below refused.
    pub(crate) sent: u64,
    /// Hedges whose answer was the call's.
    pub(crate) won: u64,
    /// Hedges dropped because another request won or the call ended.
    pub(crate) cancelled: u64,
    /// Hedges refused below (breaker, rate limiter, concurrency limit) before they went.
    pub(crate) refused: u64,
}

impl HedgesSeen {
    pub(crate) fn record(&mut self, hedged: &Hedged) {
        self.calls += 1;
        for r in hedged.requests().iter().filter(|r| r.attempt > 1) {
            match r.outcome {
                HedgeOutcome::Refused => self.refused += 1,
                outcome => {
                    self.sent += 1;
                    self.won += u64::from(outcome == HedgeOutcome::Won);
                    self.cancelled += u64::from(outcome == HedgeOutcome::Cancelled);
                }
            }
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
    /// Calls and server hits of each kind of plan, for each part.
    pub(crate) by_kind: BTreeMap<Kind, [Load; 2]>,
    /// Calls that reached the server at least once.
    pub(crate) reached: u64,
    /// Attempts after a call's first, as the server saw them, for the callers without
    /// hedging: for those with it they count in [`Tally::hedged_hosts`].
    pub(crate) retries: u64,
    pub(crate) once_only_calls: u64,
    pub(crate) keyed_calls: u64,
    /// Of those, the calls of the callers with hedging.
    pub(crate) once_only_hedged: u64,
    pub(crate) keyed_hedged: u64,
    pub(crate) keyed_attempts: u64,
    /// The longest a call that was not dropped took, and when it ended (since the start).
    pub(crate) slowest: Duration,
    pub(crate) slowest_at: Duration,
    /// When the first calls that missed their deadline ended (since the start).
    pub(crate) late_calls_at: Vec<Duration>,
    pub(crate) late_attempts: u64,
    /// Each part's calls: [`Part::Plain`] first.
    pub(crate) parts: [PartTally; 2],
    /// The load of the callers with hedging, by host.
    pub(crate) hedged_hosts: Vec<HostLoad>,
    pub(crate) hedges: HedgesSeen,
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

    /// The tally of `part`.
    pub(crate) fn part(&self, part: Part) -> &PartTally {
        &self.parts[part.index()]
    }

    /// Counts a call of `part` to a path that answers, and whether the breaker refused it.
    pub(crate) fn answering(&mut self, part: Part, refused: bool) {
        let p = &mut self.parts[part.index()];
        p.answering_calls += 1;
        p.answering_refused += u64::from(refused);
    }

    /// The load of the callers with hedging on `host`.
    fn hedged_host(&mut self, host: usize) -> &mut HostLoad {
        if self.hedged_hosts.len() <= host {
            self.hedged_hosts.resize(host + 1, HostLoad::default());
        }
        &mut self.hedged_hosts[host]
    }

    /// Records how a call of `part` ended, `at` this long after the start, and checks its
    /// duration against the deadline.
    pub(crate) fn outcome(
        &mut self,
        part: Part,
        index: u64,
        outcome: &str,
        took: Duration,
        at: Duration,
        deadline: Duration,
    ) {
        self.calls += 1;
        *self.outcomes.entry(outcome.to_owned()).or_default() += 1;
        let p = &mut self.parts[part.index()];
        p.calls += 1;
        *p.outcomes.entry(outcome.to_owned()).or_default() += 1;
        if outcome.parse::<u16>().is_ok_and(|status| status < 400) {
            p.latencies.record(took);
        }
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
        let load = &mut self.by_kind.entry(call.kind).or_default()[call.part.index()];
        load.calls += 1;
        load.hits += hits.len() as u64;
        let extra = (hits.len() as u64).saturating_sub(1);
        self.reached += u64::from(!hits.is_empty());
        match call.part {
            Part::Plain => self.retries += extra,
            Part::Hedged => {
                let host = self.hedged_host(call.host);
                host.calls += 1;
                host.attempts += call.attempts;
                host.extra += extra;
            }
        }
        if call.once_only() {
            self.once_only_calls += 1;
            self.once_only_hedged += u64::from(call.part == Part::Hedged);
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
            self.keyed_hedged += u64::from(call.part == Part::Hedged);
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
            part: Part::Plain,
            method,
            key: key.map(str::to_owned),
            kind: Kind::ServerErrors,
            ended,
            dropped: false,
            attempts: 1,
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
        tally.outcome(
            Part::Plain,
            1,
            "200",
            Duration::from_millis(1590),
            at(5),
            deadline,
        );
        tally.outcome(
            Part::Hedged,
            2,
            DROPPED,
            Duration::from_millis(1200),
            at(6),
            deadline,
        );
        assert!(tally.passed());
        assert_eq!((tally.calls, tally.dropped), (2, 1));
        assert_eq!(
            (tally.slowest, tally.slowest_at),
            (Duration::from_millis(1590), at(5))
        );
        tally.outcome(
            Part::Hedged,
            3,
            "deadline exceeded",
            Duration::from_millis(1601),
            at(7),
            deadline,
        );
        tally.outcome(
            Part::Plain,
            4,
            DROPPED,
            Duration::from_millis(1650),
            at(8),
            deadline,
        );
        let (count, examples) = tally.violations(Invariant::Deadline);
        assert_eq!(count, 2);
        assert!(
            examples[0].contains("call 3") && examples[0].contains("7.0 s in"),
            "{examples:?}"
        );
        assert_eq!(tally.late_calls_at, [at(7), at(8)]);
        // Each part counts its own calls; only a success counts in the latencies.
        let (plain, hedged) = (tally.part(Part::Plain), tally.part(Part::Hedged));
        assert_eq!((plain.calls, hedged.calls), (2, 2));
        assert_eq!(
            plain.latencies.quantile(1.0),
            Some(Duration::from_millis(1590))
        );
        assert_eq!(hedged.latencies.quantile(0.5), None);
        assert_eq!(hedged.outcomes.get(DROPPED), Some(&1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedged_call_s_extra_hits_count_for_its_host_not_as_retries() {
        let start = Instant::now();
        let ended = start + Duration::from_secs(1);
        let mut tally = Tally::default();
        let plain = finished(Method::GET, None, ended);
        tally.hits(&plain, &[hit(1.0, None), hit(2.0, None)], start);
        let hedged = Finished {
            host: 2,
            part: Part::Hedged,
            attempts: 2,
            ..plain.clone()
        };
        let three = [hit(1.0, None), hit(2.0, None), hit(3.0, None)];
        tally.hits(&hedged, &three, start);
        tally.hits(&hedged, &[], start);
        assert_eq!(tally.retries, 1);
        assert_eq!(tally.reached, 2);
        assert_eq!(tally.hedged_hosts.len(), 3);
        let host = tally.hedged_hosts[2];
        assert_eq!((host.calls, host.attempts, host.extra), (2, 4, 2));
        let load = tally.by_kind[&Kind::ServerErrors];
        assert_eq!((load[0].calls, load[0].hits), (1, 2));
        assert_eq!((load[1].calls, load[1].hits), (2, 3));
    }

    #[test]
    fn latencies_give_quantiles_to_the_millisecond() {
        let mut latencies = Latencies::default();
        assert_eq!(latencies.quantile(0.5), None);
        for ms in 1..=100 {
            latencies.record(Duration::from_micros(ms * 1000 + 400));
        }
        latencies.record(Duration::from_secs(3600));
        assert_eq!(latencies.quantile(0.5), Some(Duration::from_millis(51)));
        assert_eq!(latencies.quantile(0.99), Some(Duration::from_millis(100)));
        // Past the last bucket: counted there.
        assert_eq!(latencies.quantile(1.0), Some(Duration::from_millis(4_000)));
    }

    #[test]
    fn amplification_per_kind() {
        let load = Load { calls: 4, hits: 5 };
        assert!((load.amplification() - 1.25).abs() < 1e-9);
        assert_eq!(Load::default().amplification(), 0.0);
    }
}

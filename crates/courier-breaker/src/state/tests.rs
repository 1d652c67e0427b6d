use super::*;

fn open_30s(_: u32) -> u64 {
    30_000
}

#[test]
fn forcing_the_phase_it_is_in_keeps_the_generation() {
    let m = Machine::new();
    let g = m.load().generation();
    assert_eq!(
        m.force(Phase::Closed),
        None,
        "a reset of a clean closed breaker"
    );
    assert_eq!(m.load().generation(), g);
    assert!(m.force(Phase::ForcedOpen).is_some());
    let g = m.load().generation();
    assert_eq!(m.force(Phase::ForcedOpen), None);
    assert_eq!(m.load().generation(), g, "forced open again");
}

#[test]
fn word_round_trips_and_saturates() {
    let w = Word::new(Phase::HalfOpen, u16::MAX, 99, u64::MAX);
    assert_eq!(w.phase(), Phase::HalfOpen);
    assert_eq!(w.generation(), u16::MAX);
    assert_eq!(w.trips(), TRIPS_MAX);
    assert_eq!(w.payload(), PAYLOAD_MAX);
    assert_eq!(w.next(Phase::Closed, 0, 0).generation(), 0, "wraps");
}

#[test]
fn closed_to_open_to_half_open_to_closed() {
    let m = Machine::new();
    let (a, _) = m.admit(1, || unreachable!("closed never reads the clock"));
    let Admission::Go(t) = a else { panic!() };
    assert_eq!(m.on_failure(t, Some(2), 0, open_30s), None);
    let tr = m.on_failure(t, Some(2), 10, open_30s).expect("trips");
    assert_eq!(
        (tr.from, tr.to, tr.reason),
        (Phase::Closed, Phase::Open, Reason::ConsecutiveFailures)
    );
    assert_eq!(m.load().payload(), 30_010);
    // A stale outcome from the closed generation changes nothing.
    assert_eq!(m.on_failure(t, Some(2), 20, open_30s), None);
    assert_eq!(
        m.admit(1, || 30_009).0,
        Admission::Reject {
            retry_in_ms: Some(1)
        }
    );
    let (a, tr) = m.admit(1, || 30_010);
    assert_eq!(tr.map(|t| t.to), Some(Phase::HalfOpen));
    let Admission::Go(trial) = a else { panic!() };
    assert_eq!(
        m.admit(1, || 30_011).0,
        Admission::Reject {
            retry_in_ms: Some(0)
        }
    );
    let tr = m.on_success(trial).expect("closes");
    assert_eq!((tr.from, tr.to), (Phase::HalfOpen, Phase::Closed));
    assert_eq!(m.load().trips(), 0);
}

/// Admits a call and returns its ticket.
fn go(m: &Machine, now: u64) -> Ticket {
    match m.admit(1, || now).0 {
        Admission::Go(t) => t,
        other => panic!("expected a call to go, got {other:?}"),
    }
}

/// A breaker taken through a whole cycle (trip, trial, close): closed again, in a later
/// generation than `old`, whose ticket is returned with it.
fn a_cycle_later() -> (Machine, Ticket, Ticket) {
    let m = Machine::new();
    let old = go(&m, 0);
    m.trip(m.load().generation(), Reason::FailureRate, 0, open_30s)
        .expect("trips");
    let old_trial = go(&m, 30_000);
    m.on_success(old_trial).expect("the trial closes it");
    assert_eq!(m.load().phase(), Phase::Closed);
    (m, old, old_trial)
}

#[test]
fn outcomes_of_an_earlier_generation_change_nothing() {
    let (m, old, old_trial) = a_cycle_later();
    let now = go(&m, 30_001);
    assert_eq!(m.on_failure(now, Some(3), 30_001, open_30s), None);
    assert_eq!(m.on_failure(now, Some(3), 30_002, open_30s), None);
    assert_eq!(m.load().payload(), 2, "two failures counted");
    // A late success or failure of a call let through before the trip counts for nothing.
    assert_eq!(m.on_success(old), None);
    assert_eq!(m.load().payload(), 2, "a stale success resets no count");
    assert_eq!(m.on_failure(old, Some(3), 30_003, open_30s), None);
    assert_eq!(m.load().payload(), 2, "a stale failure adds none");
    // So is a trial's of the earlier half-open.
    assert_eq!(m.on_failure(old_trial, Some(3), 30_004, open_30s), None);
    assert_eq!(m.load().phase(), Phase::Closed);
    // The third failure of this generation trips it.
    let tr = m.on_failure(now, Some(3), 30_005, open_30s).expect("trips");
    assert_eq!(tr.reason, Reason::ConsecutiveFailures);
}

#[test]
fn a_stale_trial_neither_closes_nor_reopens_a_later_half_open() {
    let (m, _, old_trial) = a_cycle_later();
    m.trip(m.load().generation(), Reason::FailureRate, 40_000, open_30s)
        .expect("trips again");
    let trial = go(&m, 70_000);
    assert_eq!(m.load().phase(), Phase::HalfOpen);
    assert_eq!(
        m.on_success(old_trial),
        None,
        "the old trial closes nothing"
    );
    assert_eq!(m.load().phase(), Phase::HalfOpen);
    assert_eq!(
        m.on_failure(old_trial, Some(3), 70_001, open_30s),
        None,
        "the old trial reopens nothing"
    );
    assert_eq!(m.load().phase(), Phase::HalfOpen);
    assert!(
        m.on_success(trial).is_some(),
        "this generation's trial closes it"
    );
}

#[test]
fn a_trip_happens_once_per_generation() {
    let m = Machine::new();
    let g = m.load().generation();
    assert!(m.trip(g, Reason::FailureRate, 0, open_30s).is_some());
    let open = m.load();
    assert_eq!(
        m.trip(g, Reason::FailureRate, 5, open_30s),
        None,
        "already open"
    );
    assert_eq!(m.load(), open, "the open deadline is not pushed back");
    // A rate measured in an earlier generation trips no later one.
    let (m, Ticket::Closed(old), _) = a_cycle_later() else {
        panic!("a closed ticket")
    };
    assert_eq!(m.trip(old, Reason::FailureRate, 30_001, open_30s), None);
    assert_eq!(m.load().phase(), Phase::Closed);
}

#[test]
fn forcing_says_why_and_only_a_reset_forgets_the_trips() {
    let m = Machine::new();
    m.trip(m.load().generation(), Reason::FailureRate, 0, open_30s)
        .expect("trips");
    assert_eq!(m.load().trips(), 1);
    let tr = m.force(Phase::ForcedOpen).expect("open to forced open");
    assert_eq!((tr.to, tr.reason), (Phase::ForcedOpen, Reason::ForcedOpen));
    assert_eq!(m.load().trips(), 1, "forcing open keeps the trip count");
    let tr = m.force(Phase::ForcedClosed).expect("to forced closed");
    assert_eq!(
        (tr.to, tr.reason),
        (Phase::ForcedClosed, Reason::ForcedClosed)
    );
    assert_eq!(m.load().trips(), 1, "forcing closed keeps it too");
    let tr = m.force(Phase::Closed).expect("a reset");
    assert_eq!((tr.to, tr.reason), (Phase::Closed, Reason::Reset));
    assert_eq!(m.load().trips(), 0, "a reset forgets the trips");
}

#[test]
fn every_reason_has_its_log_name() {
    let names = [
        (Reason::ConsecutiveFailures, "consecutive_failures"),
        (Reason::FailureRate, "failure_rate"),
        (Reason::OpenElapsed, "open_elapsed"),
        (Reason::TrialSucceeded, "trial_succeeded"),
        (Reason::TrialFailed, "trial_failed"),
        (Reason::ForcedOpen, "forced_open"),
        (Reason::ForcedClosed, "forced_closed"),
        (Reason::Reset, "reset"),
    ];
    for (reason, name) in names {
        assert_eq!(reason.as_str(), name);
    }
}

#[test]
fn released_trial_frees_the_permit() {
    let m = Machine::new();
    m.trip(0, Reason::FailureRate, 0, open_30s).unwrap();
    let (Admission::Go(trial), _) = m.admit(1, || 30_000) else {
        panic!()
    };
    m.release(trial);
    assert_eq!(m.load().payload(), 0);
    assert_eq!(m.load().phase(), Phase::HalfOpen);
    // Releasing twice does not underflow.
    m.release(trial);
    assert_eq!(m.load().payload(), 0);
    let (Admission::Go(next), _) = m.admit(1, || 30_000) else {
        panic!()
    };
    let tr = m
        .on_failure(next, Some(5), 30_001, |trips| 1000 * u64::from(trips))
        .unwrap();
    assert_eq!(
        (tr.from, tr.to, tr.open_ms),
        (Phase::HalfOpen, Phase::Open, 2000)
    );
}

use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Admit,
    Succeed(usize),
    Fail(usize),
    Release(usize),
    Tick(u64),
    Force(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Admit),
        2 => any::<usize>().prop_map(Op::Succeed),
        3 => any::<usize>().prop_map(Op::Fail),
        2 => any::<usize>().prop_map(Op::Release),
        2 => (0u64..60).prop_map(Op::Tick),
        1 => (0u8..3).prop_map(Op::Force),
    ]
}

/// Applies `ops` to `m` (admitting up to `max` trials, failing at `threshold`), and after each
/// hands `check` the word, the trials of its generation still out, and the clock.
fn drive(
    m: &Machine,
    max: u32,
    threshold: u32,
    ops: Vec<Op>,
    mut check: impl FnMut(Word, u64, u64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut now = 0u64;
    let mut out: Vec<Ticket> = Vec::new();
    for op in ops {
        match op {
            Op::Admit => {
                if let (Admission::Go(t), _) = m.admit(max, || now) {
                    out.push(t);
                }
            }
            Op::Succeed(i) if !out.is_empty() => {
                let t = out.swap_remove(i % out.len());
                m.on_success(t);
            }
            Op::Fail(i) if !out.is_empty() => {
                let t = out.swap_remove(i % out.len());
                m.on_failure(t, Some(threshold), now, |_| 10);
            }
            Op::Release(i) if !out.is_empty() => {
                let t = out.swap_remove(i % out.len());
                m.release(t);
            }
            Op::Tick(ms) => now += ms,
            Op::Force(p) => {
                m.force([Phase::ForcedOpen, Phase::ForcedClosed, Phase::Closed][p as usize]);
            }
            _ => {}
        }
        let w = m.load();
        let live = out
            .iter()
            .filter(|t| **t == Ticket::Trial(w.generation()))
            .count() as u64;
        check(w, live, now)?;
    }
    Ok(())
}

proptest! {
    /// Whatever the order of admissions, verdicts, cancellations and forced changes, the
    /// half-open permit count equals the trials of the current generation still out, it
    /// never passes the bound, and an open breaker always becomes due.
    #[test]
    fn permits_match_outstanding_trials(
        max in 1u32..4,
        threshold in 1u32..4,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let m = Machine::new();
        drive(&m, max, threshold, ops, |w, live, now| {
            if w.phase() == Phase::HalfOpen {
                prop_assert_eq!(w.payload(), live);
                prop_assert!(w.payload() <= u64::from(max));
            }
            if w.phase() == Phase::Open {
                prop_assert!(w.payload() <= now + 10, "an open breaker becomes due");
            }
            Ok(())
        })?;
    }
}

#[test]
fn forced_states() {
    let m = Machine::new();
    assert_eq!(
        m.force(Phase::ForcedOpen).map(|t| t.to),
        Some(Phase::ForcedOpen)
    );
    assert_eq!(m.admit(1, || 0).0, Admission::Reject { retry_in_ms: None });
    m.force(Phase::ForcedClosed);
    assert_eq!(m.admit(1, || 0).0, Admission::Go(Ticket::Unchecked));
    assert_eq!(m.on_failure(Ticket::Unchecked, Some(1), 0, open_30s), None);
    assert_eq!(
        m.force(Phase::Closed).map(|t| t.reason),
        Some(Reason::Reset)
    );
    assert_eq!(m.force(Phase::Closed), None, "no change, no event");
}

#[test]
fn a_packed_ticket_unpacks_to_itself() {
    for g in [0, 1, 0x7fff, u16::MAX] {
        for t in [Ticket::Closed(g), Ticket::Trial(g)] {
            assert_eq!(Ticket::unpack(t.pack()), Some(t));
        }
        assert_eq!(Ticket::packed_closed(Ticket::Closed(g).pack()), Some(g));
        assert_eq!(Ticket::packed_closed(Ticket::Trial(g).pack()), None);
    }
    assert_eq!(
        Ticket::unpack(Ticket::Unchecked.pack()),
        Some(Ticket::Unchecked)
    );
    assert_eq!(Ticket::packed_closed(Ticket::Unchecked.pack()), None);
    assert_eq!(Ticket::unpack(Ticket::SPENT), None);
    assert_eq!(Ticket::packed_closed(Ticket::SPENT), None);
}

#[test]
fn closed_clean_is_the_success_that_changes_nothing() {
    let m = Machine::new();
    let (Admission::Go(Ticket::Closed(g)), _) = m.admit(1, || 0) else {
        panic!()
    };
    assert_eq!(m.closed(), Some(g));
    assert!(m.closed_clean(g));
    assert!(!m.closed_clean(g.wrapping_add(1)), "another generation");
    m.on_failure(Ticket::Closed(g), Some(5), 0, open_30s);
    assert!(!m.closed_clean(g), "a failure is counted");
    m.on_success(Ticket::Closed(g));
    assert!(m.closed_clean(g));
    m.trip(g, Reason::FailureRate, 0, open_30s).unwrap();
    assert_eq!(m.closed(), None);
    assert!(!m.closed_clean(g) && !m.closed_clean(g.wrapping_add(1)));
}

#[test]
fn trials_judged_together_close_on_a_majority_and_reopen_on_half() {
    // Five trials: three successes close, three failures reopen, whatever comes first.
    for (verdicts, closes) in [
        ("ssfs", true),
        ("fsfss", true),
        ("ffsf", false),
        ("fff", false),
        ("sfsff", false),
    ] {
        let m = Machine::judging(5);
        m.trip(0, Reason::FailureRate, 0, open_30s).unwrap();
        let trials: Vec<Ticket> = (0..5)
            .map(|_| match m.admit(5, || 30_000).0 {
                Admission::Go(t) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            m.admit(5, || 30_000).0,
            Admission::Reject {
                retry_in_ms: Some(0)
            },
            "five trials at most"
        );
        let mut last = None;
        for (t, v) in trials.iter().zip(verdicts.chars()) {
            let tr = match v {
                's' => m.on_success(*t),
                _ => m.on_failure(*t, Some(1), 30_001, open_30s),
            };
            if tr.is_some() {
                assert!(last.is_none(), "{verdicts}: one decision");
                last = tr;
            }
        }
        let to = last.map(|t| t.to);
        assert_eq!(
            to,
            Some(if closes { Phase::Closed } else { Phase::Open }),
            "{verdicts}"
        );
        // The trials still out are stale now: they change nothing.
        for t in &trials[verdicts.len()..] {
            assert_eq!(m.on_failure(*t, Some(1), 30_002, open_30s), None);
        }
        assert_eq!(m.load().phase(), to.unwrap());
    }
}

#[test]
fn one_trial_is_decided_by_its_verdict_and_two_reopen_on_a_tie() {
    assert_eq!(
        (Machine::new().close_at(), Machine::new().reopen_at()),
        (1, 1)
    );
    let two = Machine::judging(2);
    assert_eq!((two.close_at(), two.reopen_at()), (2, 1));
    let ten = Machine::judging(10);
    assert_eq!((ten.close_at(), ten.reopen_at()), (6, 5));
}

proptest! {
    /// Trials judged together: the admitted count less the verdicts is the trials still out,
    /// never past the bound, and once every trial admitted has answered the breaker has
    /// decided (or can admit more).
    #[test]
    fn trials_judged_together_never_stick(
        max in 1u32..6,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let m = Machine::judging(max);
        drive(&m, max, 3, ops, |w, live, _| {
            if w.phase() == Phase::HalfOpen {
                prop_assert_eq!(w.admitted() - w.succeeded() - w.failed(), live);
                prop_assert!(w.admitted() <= u64::from(max));
                prop_assert!(w.succeeded() < m.close_at() && w.failed() < m.reopen_at());
                if live == 0 {
                    prop_assert!(w.admitted() < u64::from(max), "stuck half-open: {w:?}");
                }
            }
            Ok(())
        })?;
    }
}

//! A loom model of the breaker's permit accounting: every interleaving of a few threads
//! racing through half-open.
//!
//! The state machine is compiled here from its own source file with loom's atomics (how to
//! run it: the crate docs).
#![cfg(courier_loom)]

#[allow(dead_code)]
#[path = "../../courier-breaker/src/state.rs"]
mod state;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use state::{Admission, Machine, Phase, Reason, Ticket};

const NOW: u64 = 100;

fn open_ms(_trips: u32) -> u64 {
    50
}

/// A breaker that has just become due for a trial.
fn due() -> Machine {
    let m = Machine::new();
    m.trip(0, Reason::ConsecutiveFailures, 0, |_| NOW)
        .expect("a fresh breaker trips");
    m
}

/// With `max` permits and `threads` callers, at most `max` trials are ever in flight, and a
/// caller that gets no permit is refused; when every trial gives its permit back (cancelled),
/// no permit is left taken and the breaker is still half-open, ready for the next trial.
fn permits_are_bounded_and_returned(max: u32, threads: usize) {
    loom::model(move || {
        let m = Arc::new(due());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let admitted = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (m, in_flight, admitted) = (m.clone(), in_flight.clone(), admitted.clone());
                thread::spawn(move || match m.admit(max, || NOW).0 {
                    Admission::Go(ticket @ Ticket::Trial(_)) => {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= max as usize, "{now} trials in flight, max {max}");
                        admitted.fetch_add(1, Ordering::SeqCst);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        m.release(ticket);
                    }
                    Admission::Reject { retry_in_ms } => assert_eq!(retry_in_ms, Some(0)),
                    other => panic!("unexpected admission {other:?}"),
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let w = m.load();
        assert_eq!(w.phase(), Phase::HalfOpen);
        assert_eq!(w.payload(), 0, "a permit leaked");
        assert!(
            admitted.load(Ordering::SeqCst) >= 1,
            "someone got the first permit"
        );
    });
}

#[test]
fn one_permit_three_callers() {
    permits_are_bounded_and_returned(1, 3);
}

#[test]
fn two_permits_three_callers() {
    permits_are_bounded_and_returned(2, 3);
}

/// Two trials decide at once, one success and one failure, while a third caller arrives: the
/// breaker ends closed or open, never stuck in half-open, and the late caller is admitted only
/// in a state that allows it.
#[test]
fn racing_verdicts_never_leave_it_half_open() {
    loom::model(|| {
        let m = Arc::new(due());
        let (Admission::Go(a), _) = m.admit(2, || NOW) else {
            panic!("first trial")
        };
        let (Admission::Go(b), _) = m.admit(2, || NOW) else {
            panic!("second trial")
        };
        let t1 = {
            let m = m.clone();
            thread::spawn(move || m.on_success(a))
        };
        let t2 = {
            let m = m.clone();
            thread::spawn(move || m.on_failure(b, Some(5), NOW, open_ms))
        };
        let t3 = {
            let m = m.clone();
            thread::spawn(move || m.admit(2, || NOW).0)
        };
        let (s, f, late) = (t1.join().unwrap(), t2.join().unwrap(), t3.join().unwrap());
        assert!(
            s.is_some() ^ f.is_some(),
            "exactly one verdict wins: {s:?} {f:?}"
        );
        let w = m.load();
        match late {
            // Admitted while half-open with a free permit (impossible: both are taken), or
            // after the success closed it.
            Admission::Go(Ticket::Closed(_)) => assert!(s.is_some()),
            Admission::Go(other) => panic!("late caller got {other:?}"),
            Admission::Reject { .. } => {}
        }
        match w.phase() {
            Phase::Closed => assert!(s.is_some() && w.trips() == 0),
            Phase::Open => assert!(f.is_some() && w.trips() == 2 && w.payload() == NOW + 50),
            other => panic!("stuck in {other:?}"),
        }
    });
}

/// A cancelled trial gives its permit back while another caller races in and a reset comes
/// from the handle: whatever the order, nothing underflows and the result is consistent.
#[test]
fn release_racing_admission_and_reset() {
    loom::model(|| {
        let m = Arc::new(due());
        let (Admission::Go(trial), _) = m.admit(1, || NOW) else {
            panic!("first trial")
        };
        let t1 = {
            let m = m.clone();
            thread::spawn(move || m.release(trial))
        };
        let t2 = {
            let m = m.clone();
            thread::spawn(move || {
                let got = m.admit(1, || NOW).0;
                if let Admission::Go(t) = got {
                    m.release(t);
                }
                got
            })
        };
        let t3 = {
            let m = m.clone();
            thread::spawn(move || m.force(Phase::Closed))
        };
        t1.join().unwrap();
        let second = t2.join().unwrap();
        assert!(t3.join().unwrap().is_some(), "the reset changes the state");
        let w = m.load();
        assert!(w.payload() < 1 << 20, "no underflow: {w:?}");
        match w.phase() {
            Phase::Closed => assert_eq!(w.payload(), 0),
            other => panic!("a reset always lands on closed, got {other:?} ({second:?})"),
        }
    });
}

/// A stale outcome from before a transition never changes the new state: a failure counted
/// in a closed generation that has since tripped and reopened.
#[test]
fn stale_outcomes_are_ignored() {
    loom::model(|| {
        let m = Arc::new(Machine::new());
        let (Admission::Go(old), _) = m.admit(1, || 0) else {
            panic!("closed admits")
        };
        let t1 = {
            let m = m.clone();
            thread::spawn(move || m.on_failure(old, Some(1), 0, |_| NOW))
        };
        let t2 = {
            let m = m.clone();
            thread::spawn(move || m.on_failure(old, Some(1), 0, |_| NOW))
        };
        let (a, b) = (t1.join().unwrap(), t2.join().unwrap());
        assert!(a.is_some() ^ b.is_some(), "one trip, not two");
        let w = m.load();
        assert_eq!((w.phase(), w.trips()), (Phase::Open, 1));
    });
}

/// Three trials judged together answer at once, two successes and a failure: whatever the
/// order, exactly one verdict decides, and it closes the circuit.
#[test]
fn trials_judged_together_decide_once() {
    loom::model(|| {
        let m = Arc::new(Machine::judging(3));
        m.trip(0, Reason::ConsecutiveFailures, 0, |_| NOW)
            .expect("a fresh breaker trips");
        let tickets: Vec<Ticket> = (0..3)
            .map(|_| match m.admit(3, || NOW).0 {
                Admission::Go(t) => t,
                other => panic!("three trials are admitted: {other:?}"),
            })
            .collect();
        let handles: Vec<_> = [(tickets[0], true), (tickets[1], true), (tickets[2], false)]
            .into_iter()
            .map(|(t, ok)| {
                let m = m.clone();
                thread::spawn(move || {
                    if ok {
                        m.on_success(t)
                    } else {
                        m.on_failure(t, None, NOW, open_ms)
                    }
                })
            })
            .collect();
        let decided = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect::<Vec<_>>();
        assert_eq!(decided.len(), 1, "one decision: {decided:?}");
        assert_eq!(decided[0].to, Phase::Closed);
        assert_eq!(m.load().phase(), Phase::Closed);
    });
}

//! A loom model of the bucket cell's two races: a park against an eviction, and a reservation
//! against an eviction, in every interleaving.
//!
//! The cell is compiled here from its own source file with loom's atomics (how to run it: the
//! crate docs).
#![cfg(courier_loom)]

#[allow(dead_code)]
#[path = "../../courier-ratelimit/src/gcra.rs"]
mod gcra;

use gcra::{Cell, Evict, Outcome};
use loom::sync::Arc;
use loom::thread;

const S: u64 = 1_000_000_000;

/// A park that reports it landed on a live cell is never lost: the sweep that evicts the cell
/// either keeps it or carries the park to a fresh one. A park that reports a tombstone is
/// redone by its caller, so the sweep may drop it.
#[test]
fn a_park_is_never_lost_to_an_eviction() {
    loom::model(|| {
        let cell = Arc::new(Cell::new());
        let parker = {
            let cell = cell.clone();
            thread::spawn(move || cell.park(10 * S))
        };
        let evicted = cell.try_evict(5 * S);
        let landed = parker.join().expect("no panic");
        match (landed, evicted) {
            (true, Evict::Keep) => assert!(!cell.is_evicted()),
            (true, Evict::RemoveParked(until)) => assert_eq!(until, 10 * S),
            (true, Evict::Remove) => panic!("a park on a live cell was dropped by the sweep"),
            (false, evicted) => assert_ne!(evicted, Evict::Keep, "a tombstone, yet kept"),
        }
    });
}

/// A reservation racing an eviction either lands first (the eviction fails and the cell stays)
/// or sees the tombstone and looks the key up again: never both admitted and evicted.
#[test]
fn a_reservation_and_an_eviction_never_both_win() {
    loom::model(|| {
        let cell = Arc::new(Cell::new());
        let caller = {
            let cell = cell.clone();
            thread::spawn(move || cell.reserve(5 * S, S, 0, u64::MAX))
        };
        let evicted = cell.try_evict(5 * S);
        match (caller.join().expect("no panic"), evicted) {
            (Outcome::Admit { start, .. }, Evict::Keep) => {
                assert_eq!(start, 5 * S);
                assert!(!cell.is_evicted());
            }
            (Outcome::Evicted, Evict::Remove) => assert!(cell.is_evicted()),
            (outcome, evicted) => panic!("{outcome:?} with {evicted:?}"),
        }
    });
}

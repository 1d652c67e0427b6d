//! A loom model of the concurrency limit's count without a queue: calls admitted and given
//! back on several threads, and a limit learned meanwhile, in every interleaving.
//!
//! The count is compiled here from its own source file with loom's atomics (how to run it: the
//! crate docs).
#![cfg(courier_loom)]

#[allow(dead_code)]
#[path = "../../courier-concurrency/src/direct.rs"]
mod direct;

use direct::Direct;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

/// Calls holding a permit now, and the most at once.
#[derive(Default)]
struct Holders {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One call: admitted or refused; while admitted, counted among the holders.
fn call(count: &Direct, holders: &Holders) -> bool {
    if count.admit().is_err() {
        return false;
    }
    let now = holders.now.fetch_add(1, Ordering::SeqCst) + 1;
    holders.most.fetch_max(now, Ordering::SeqCst);
    holders.now.fetch_sub(1, Ordering::SeqCst);
    count.release();
    true
}

/// Three callers against a limit of two: never more than two hold a permit at once, at least
/// one call of every run is admitted, and none is left in flight.
#[test]
fn no_interleaving_admits_past_the_limit_or_loses_a_permit() {
    loom::model(|| {
        let count = Arc::new(Direct::new(2));
        let holders = Arc::new(Holders::default());
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (count, holders) = (count.clone(), holders.clone());
                thread::spawn(move || call(&count, &holders))
            })
            .collect();
        let mine = call(&count, &holders);
        let admitted = callers
            .into_iter()
            .map(|c| c.join().expect("no panic"))
            .fold(usize::from(mine), |n, a| n + usize::from(a));
        assert!(admitted >= 1);
        assert!(holders.most.load(Ordering::SeqCst) <= 2);
        assert_eq!(count.status(), (0, 2), "every permit came back");
    });
}

/// A limit learned while calls come and go: a call admitted after the new limit is stored
/// respects it, and the count comes back to zero.
#[test]
fn a_learned_limit_holds_for_the_calls_after_it() {
    loom::model(|| {
        let count = Arc::new(Direct::new(1));
        let holders = Arc::new(Holders::default());
        let caller = {
            let (count, holders) = (count.clone(), holders.clone());
            thread::spawn(move || call(&count, &holders))
        };
        count.set_limit(0);
        // After the store, this thread's calls see the new limit.
        assert!(
            count.admit().is_err(),
            "the limit this thread set holds for it"
        );
        caller.join().expect("no panic");
        assert!(holders.most.load(Ordering::SeqCst) <= 1);
        assert_eq!(count.status(), (0, 0));
    });
}

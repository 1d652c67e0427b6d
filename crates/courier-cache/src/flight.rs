//! Single-flight for revalidations: one upstream request per stored entry at a time.

use crate::entry::Entry;
use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// The revalidations in flight, by the identity of the entry they revalidate, with the
/// followers waiting for each.
#[derive(Default)]
pub(crate) struct Flights {
    inner: Mutex<Waiters>,
}

/// The followers of each flight, by entry address (hashed quickly: the addresses are ours).
type Waiters = HashMap<usize, Vec<oneshot::Sender<Arc<Entry>>>, foldhash::fast::RandomState>;

impl fmt::Debug for Flights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flights")
            .field("in_flight", &self.lock().len())
            .finish()
    }
}

/// What a request that must revalidate `entry` does.
pub(crate) enum Role {
    /// Go upstream; the guard releases the followers when it completes or drops.
    Leader(FlightGuard),
    /// Wait for the leader's updated entry; a closed channel means "go yourself".
    Follower(oneshot::Receiver<Arc<Entry>>),
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // A poisoned map still holds valid senders.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the flight for `entry`, or starts one.
    pub(crate) fn join(self: &Arc<Self>, entry: &Arc<Entry>) -> Role {
        let id = Arc::as_ptr(entry) as usize;
        let mut flights = self.lock();
        match flights.entry(id) {
            Slot::Occupied(mut waiters) => {
                let (tx, rx) = oneshot::channel();
                waiters.get_mut().push(tx);
                return Role::Follower(rx);
            }
            Slot::Vacant(slot) => {
                slot.insert(Vec::new());
            }
        }
        Role::Leader(FlightGuard {
            flights: self.clone(),
            // Held so the address cannot be reused while the flight exists.
            entry: entry.clone(),
            done: false,
        })
    }

    /// How many flights are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The leader's hold on a flight. Dropping it without [`FlightGuard::complete`] closes every
/// follower's channel, so no follower waits for a leader that is gone.
pub(crate) struct FlightGuard {
    flights: Arc<Flights>,
    entry: Arc<Entry>,
    done: bool,
}

impl FlightGuard {
    /// Hands the updated entry to every follower.
    pub(crate) fn complete(mut self, updated: &Arc<Entry>) {
        self.done = true;
        for waiter in self.take_waiters() {
            let _ = waiter.send(updated.clone());
        }
    }

    fn take_waiters(&self) -> Vec<oneshot::Sender<Arc<Entry>>> {
        let id = Arc::as_ptr(&self.entry) as usize;
        self.flights.lock().remove(&id).unwrap_or_default()
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        // After `complete` the flight is gone already (and a newer one may use the id).
        if !self.done {
            drop(self.take_waiters());
        }
    }
}

impl fmt::Debug for FlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlightGuard").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Timing;
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode, Version};
    use std::time::UNIX_EPOCH;
    use tokio::time::Instant;

    fn entry() -> Arc<Entry> {
        let now = Instant::now();
        Arc::new(Entry::new(
            StatusCode::OK,
            Version::HTTP_11,
            HeaderMap::new(),
            Bytes::new(),
            0,
            Vec::new(),
            Timing {
                request_time: now,
                response_time: now,
                response_wall: UNIX_EPOCH,
            },
        ))
    }

    #[tokio::test]
    async fn completing_leader_hands_the_entry_to_every_follower() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let Role::Leader(guard) = flights.join(&e) else {
            panic!("the first request leads")
        };
        let followers: Vec<_> = (0..3)
            .map(|_| match flights.join(&e) {
                Role::Follower(rx) => rx,
                Role::Leader(_) => panic!("one leader per entry"),
            })
            .collect();
        let updated = entry();
        guard.complete(&updated);
        assert_eq!(flights.len(), 0);
        for rx in followers {
            assert!(Arc::ptr_eq(&rx.await.unwrap(), &updated));
        }
    }

    #[tokio::test]
    async fn dropped_leader_releases_its_followers() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let leader = flights.join(&e);
        let Role::Follower(rx) = flights.join(&e) else {
            panic!("second request follows")
        };
        drop(leader);
        assert!(rx.await.is_err(), "the follower is told to go itself");
        assert_eq!(flights.len(), 0);
        assert!(
            matches!(flights.join(&e), Role::Leader(_)),
            "a new flight can start"
        );
    }

    #[tokio::test]
    async fn an_old_guard_never_closes_a_newer_flight() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let Role::Leader(first) = flights.join(&e) else {
            panic!("leads")
        };
        let updated = entry();
        first.complete(&updated);
        let second = flights.join(&e);
        let Role::Follower(rx) = flights.join(&e) else {
            panic!("follows the second flight")
        };
        assert_eq!(flights.len(), 1);
        drop(second);
        assert!(rx.await.is_err());
    }
}

//! Single-flight: one upstream request at a time for each stored entry being revalidated and
//! for each key missing from the store; the other requests wait for its result. A missing key
//! whose answer the cache did not store is remembered for a while (a pass, kept in the
//! in-memory store beside the entries: see [`Shared::passes`](crate::layer::Shared::passes)),
//! so that requests for it go on their own rather than wait for answers that cannot serve them.

use crate::entry::Entry;
use crate::key::UriKey;
use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a missing key whose answer was not stored is remembered: 60 s. Meanwhile its GETs
/// go upstream at once, each on its own, as they would with no cache; a pass only stops them
/// from waiting, and an answer one of them brings that may be stored is stored all the same
/// (then they are hits, and the pass ends). A crowd for such a key waits for its first request
/// once a minute, not at every request.
pub(crate) const PASS_MEMORY: Duration = Duration::from_secs(60);

/// The answer of a flight's leader, read on by its followers while they wait: its body ends,
/// and the entry is stored, whether or not the leader's caller reads it then.
pub(crate) trait Drive: Send + Sync {
    /// Reads the answer on; ready once it has been stored or given up.
    fn poll_drive(&self, cx: &mut Context<'_>) -> Poll<()>;
}

/// What a flight is for: small, as every leader's guard holds it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FlightKey {
    /// A revalidation of the stored entry at this address.
    Revalidation(usize),
    /// A request whose answer may be stored under the key text of this `hash`, for these
    /// `credentials` (the fingerprint the entry is selected by). The flight itself holds the
    /// key's parts: a request with the same hash and another key goes on its own.
    Miss { hash: u64, credentials: u64 },
}

impl FlightKey {
    /// The flight revalidating `entry`.
    pub(crate) fn revalidation(entry: &Arc<Entry>) -> Self {
        Self::Revalidation(Arc::as_ptr(entry) as usize)
    }
}

/// The flights under way, with the followers waiting for each, oldest first.
pub(crate) struct Flights {
    inner: Mutex<Table>,
    /// Hashes key texts when the store gave no hash of its own.
    hasher: foldhash::fast::RandomState,
}

struct Table {
    flights: Waiters,
}

/// Each flight (hashed quickly: addresses and key texts are ours).
type Waiters = HashMap<FlightKey, Flight, foldhash::fast::RandomState>;

/// One flight: its followers, oldest first, and its leader's answer once it has one to read.
#[derive(Default)]
struct Flight {
    followers: VecDeque<oneshot::Sender<Handoff>>,
    /// Weak: the answer belongs to the leader's caller and to the followers that read it.
    answer: Option<Weak<dyn Drive>>,
    /// The answer came with no one waiting, so it was not made one to share: a request that
    /// comes later goes on its own.
    unshared: bool,
    /// A miss's key (its parts, held by reference count): only a request for this key joins.
    key: Option<UriKey>,
}

/// Room for this many flights from the start. A smaller table marks most removals as
/// tombstones, and one flight opened and ended per miss then rebuilds it every few calls.
const INITIAL_FLIGHTS: usize = 16;

impl Default for Flights {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Table {
                flights: Waiters::with_capacity_and_hasher(
                    INITIAL_FLIGHTS,
                    foldhash::fast::RandomState::default(),
                ),
            }),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl fmt::Debug for Flights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flights")
            .field("in_flight", &self.lock().flights.len())
            .finish()
    }
}

/// What a request that joins a flight does.
pub(crate) enum Role {
    /// Go upstream; the guard hands the result to the followers.
    Leader(FlightGuard),
    /// Wait for the leader, reading its answer on once it has one; a closed channel means
    /// "go yourself".
    Follower(oneshot::Receiver<Handoff>, Option<Arc<dyn Drive>>),
    /// Go upstream outside the flight: its leader's answer is under way with no one to share
    /// it.
    Alone,
}

/// What a follower is handed.
pub(crate) enum Handoff {
    /// The entry the leader stored or updated.
    Entry(Arc<Entry>),
    /// The leader is gone (dropped before its answer was stored): lead in its place.
    Lead(FlightGuard),
    /// The leader's answer, to read on while waiting for what comes next.
    Answer(Arc<dyn Drive>, oneshot::Receiver<Handoff>),
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A poisoned map still holds valid senders.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the flight `key`, or starts one. `entry`, the entry a revalidation is for, is held
    /// by the flight so that its address cannot be reused while the flight lasts.
    /// `uri` is a miss's key.
    pub(crate) fn join(
        self: &Arc<Self>,
        key: FlightKey,
        entry: Option<&Arc<Entry>>,
        uri: Option<&UriKey>,
    ) -> Role {
        let mut table = self.lock();
        match table.flights.entry(key) {
            Slot::Occupied(mut slot) => {
                let flight = slot.get_mut();
                if flight.unshared || flight.key.as_ref() != uri {
                    return Role::Alone;
                }
                let (tx, rx) = oneshot::channel();
                flight.followers.push_back(tx);
                Role::Follower(rx, flight.answer.as_ref().and_then(Weak::upgrade))
            }
            Slot::Vacant(slot) => {
                let key = *slot.key();
                slot.insert(Flight {
                    key: uri.cloned(),
                    ..Flight::default()
                });
                Role::Leader(self.guard(key, entry.cloned()))
            }
        }
    }

    /// Starts the flight `key` unless one is under way already.
    pub(crate) fn lead(
        self: &Arc<Self>,
        key: FlightKey,
        entry: Option<&Arc<Entry>>,
    ) -> Option<FlightGuard> {
        let mut table = self.lock();
        match table.flights.entry(key) {
            Slot::Occupied(_) => None,
            Slot::Vacant(slot) => {
                let key = *slot.key();
                slot.insert(Flight::default());
                Some(self.guard(key, entry.cloned()))
            }
        }
    }

    fn guard(self: &Arc<Self>, key: FlightKey, entry: Option<Arc<Entry>>) -> FlightGuard {
        FlightGuard {
            flights: self.clone(),
            key,
            entry,
            armed: true,
        }
    }

    /// The flight key of a request missing from the store: `hash` is its key text's hash in
    /// the store when the store gave one (every key of a cache is hashed alike, either way).
    pub(crate) fn miss_key(&self, key: &UriKey, credentials: u64, hash: Option<u64>) -> FlightKey {
        let hash = hash.unwrap_or_else(|| self.hasher.hash_one(key.text().as_str()));
        FlightKey::Miss { hash, credentials }
    }

    /// How many flights are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().flights.len()
    }
}

impl Table {
    /// The flight `key`.
    fn flight(&mut self, key: &FlightKey) -> Option<&mut Flight> {
        self.flights.get_mut(key)
    }

    /// Ends the flight `key`: its followers.
    fn end(&mut self, key: &FlightKey) -> VecDeque<oneshot::Sender<Handoff>> {
        self.flights
            .remove(key)
            .map(|f| f.followers)
            .unwrap_or_default()
    }
}

/// The leader's hold on a flight. [`complete`](Self::complete) hands the followers an entry,
/// [`release`](Self::release) sends each on its own; dropping the guard without either (the
/// leader was cancelled) hands the flight to the oldest follower still waiting, so that no
/// follower waits for a leader that is gone and the others keep waiting for one request.
pub(crate) struct FlightGuard {
    flights: Arc<Flights>,
    key: FlightKey,
    /// The entry a revalidation is for.
    entry: Option<Arc<Entry>>,
    /// Whether the flight is still this guard's to end.
    armed: bool,
}

impl FlightGuard {
    /// Whether the flight is for a missing key (else for a revalidation).
    pub(crate) fn is_miss(&self) -> bool {
        matches!(self.key, FlightKey::Miss { .. })
    }

    /// What hands the followers the leader's answer, once the guard has gone into it; `None`
    /// when no one waits, and then no one will: a request that comes later goes on its own
    /// rather than wait for an answer its leader's caller may read at leisure. The answer is
    /// made one to share only for a crowd.
    pub(crate) fn publisher(&self) -> Option<Publisher> {
        let mut table = self.flights.lock();
        let flight = table.flight(&self.key)?;
        if flight.followers.is_empty() {
            flight.unshared = true;
            return None;
        }
        Some(Publisher {
            flights: self.flights.clone(),
            key: self.key,
        })
    }

    /// Hands `entry` to every follower.
    pub(crate) fn complete(mut self, entry: &Arc<Entry>) {
        for waiter in self.end() {
            let _ = waiter.send(Handoff::Entry(entry.clone()));
        }
    }

    /// Sends every follower on its own.
    pub(crate) fn release(mut self) {
        drop(self.end());
    }

    /// Ends the flight: its followers, and the guard disarmed.
    fn end(&mut self) -> VecDeque<oneshot::Sender<Handoff>> {
        self.armed = false;
        self.flights.lock().end(&self.key)
    }
}

/// Hands the followers of a flight its leader's answer.
pub(crate) struct Publisher {
    flights: Arc<Flights>,
    key: FlightKey,
}

impl Publisher {
    /// Hands the followers the leader's `answer` to read on while they wait, and every
    /// follower that comes later too. Called while the leader's guard is still in the answer.
    pub(crate) fn publish(self, answer: &Arc<dyn Drive>) {
        let mut table = self.flights.lock();
        let Some(flight) = table.flight(&self.key) else {
            return;
        };
        flight.answer = Some(Arc::downgrade(answer));
        let followers = std::mem::take(&mut flight.followers);
        for follower in followers {
            let (tx, rx) = oneshot::channel();
            if follower.send(Handoff::Answer(answer.clone(), rx)).is_ok() {
                flight.followers.push_back(tx);
            }
        }
    }
}

impl Handoff {
    /// A handoff that was never received: a guard in it has nothing left to end.
    fn disarm(&mut self) {
        if let Self::Lead(guard) = self {
            guard.armed = false;
        }
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut table = self.flights.lock();
        let Some(flight) = table.flight(&self.key) else {
            return;
        };
        // The answer, if any, went with the leader.
        flight.answer = None;
        while let Some(waiter) = flight.followers.pop_front() {
            if waiter.is_closed() {
                continue;
            }
            let guard = FlightGuard {
                flights: self.flights.clone(),
                key: self.key,
                entry: self.entry.clone(),
                armed: true,
            };
            match waiter.send(Handoff::Lead(guard)) {
                Ok(()) => return,
                // Gone meanwhile: disarmed, the guard is dropped without touching the map
                // (locked here).
                Err(mut handoff) => handoff.disarm(),
            }
        }
        table.flights.remove(&self.key);
    }
}

impl fmt::Debug for FlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlightGuard")
            .field("miss", &self.is_miss())
            .finish_non_exhaustive()
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

    fn join(flights: &Arc<Flights>, e: &Arc<Entry>) -> Role {
        flights.join(FlightKey::revalidation(e), Some(e), None)
    }

    fn follower(role: Role) -> oneshot::Receiver<Handoff> {
        match role {
            Role::Follower(rx, _) => rx,
            Role::Leader(_) => panic!("one leader per flight"),
            Role::Alone => panic!("no answer yet, so it waits"),
        }
    }

    #[tokio::test]
    async fn completing_leader_hands_the_entry_to_every_follower() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let Role::Leader(guard) = join(&flights, &e) else {
            panic!("the first request leads")
        };
        let followers: Vec<_> = (0..3).map(|_| follower(join(&flights, &e))).collect();
        let updated = entry();
        guard.complete(&updated);
        assert_eq!(flights.len(), 0);
        for rx in followers {
            let Ok(Handoff::Entry(got)) = rx.await else {
                panic!("handed the entry")
            };
            assert!(Arc::ptr_eq(&got, &updated));
        }
    }

    #[tokio::test]
    async fn a_released_flight_sends_every_follower_on_its_own() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let key = FlightKey::revalidation(&e);
        let guard = flights.lead(key, None).expect("no flight yet");
        assert!(flights.lead(key, None).is_none(), "one at a time");
        let followers: Vec<_> = (0..3)
            .map(|_| follower(flights.join(key, None, None)))
            .collect();
        guard.release();
        for rx in followers {
            assert!(rx.await.is_err());
        }
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn a_dropped_leader_hands_the_flight_to_the_oldest_follower_still_waiting() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let leader = join(&flights, &e);
        let gone = follower(join(&flights, &e));
        let next = follower(join(&flights, &e));
        let last = follower(join(&flights, &e));
        drop(gone);
        drop(leader);
        let Ok(Handoff::Lead(guard)) = next.await else {
            panic!("the oldest follower still waiting leads")
        };
        assert_eq!(flights.len(), 1, "the flight goes on");
        let updated = entry();
        guard.complete(&updated);
        assert!(matches!(last.await, Ok(Handoff::Entry(_))));
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn a_lead_handed_to_a_follower_that_never_takes_it_goes_on_to_the_next() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let leader = join(&flights, &e);
        let first = follower(join(&flights, &e));
        let second = follower(join(&flights, &e));
        drop(leader);
        // The handoff sits in the first follower's channel; dropped unread, it passes on.
        drop(first);
        assert!(matches!(second.await, Ok(Handoff::Lead(_))));
        assert_eq!(
            flights.len(),
            0,
            "the second dropped its lead with no one left"
        );
    }

    #[tokio::test]
    async fn an_answer_no_one_waited_for_sends_later_requests_on_their_own() {
        let flights = Arc::new(Flights::default());
        let uri = http::Uri::from_static("http://h/x");
        let uri = UriKey::new(&uri, &HeaderMap::new());
        let key = flights.miss_key(&uri, 0, None);
        let Role::Leader(guard) = flights.join(key, None, Some(&uri)) else {
            panic!("the first request leads")
        };
        assert!(guard.publisher().is_none(), "no one waits: nothing shared");
        assert!(matches!(flights.join(key, None, Some(&uri)), Role::Alone));
        guard.release();
        assert!(
            matches!(flights.join(key, None, Some(&uri)), Role::Leader(_)),
            "a new flight once the answer has ended"
        );

        let Role::Leader(guard) = flights.join(key, None, Some(&uri)) else {
            panic!("leads")
        };
        let rx = follower(flights.join(key, None, Some(&uri)));
        assert!(guard.publisher().is_some(), "someone waits: shared");
        drop(rx);
    }

    #[tokio::test]
    async fn a_key_with_another_keys_hash_goes_on_its_own() {
        let flights = Arc::new(Flights::default());
        let (a, b) = (
            http::Uri::from_static("http://h/a"),
            http::Uri::from_static("http://h/b"),
        );
        let none = HeaderMap::new();
        let (a, b) = (UriKey::new(&a, &none), UriKey::new(&b, &none));
        let first = flights.miss_key(&a, 0, Some(7));
        let other = flights.miss_key(&b, 0, Some(7));
        assert!(first == other, "one hash");
        let Role::Leader(_guard) = flights.join(first, None, Some(&a)) else {
            panic!("leads")
        };
        let second = flights.join(other, None, Some(&b));
        assert!(matches!(second, Role::Alone), "not a follower of /a");
        let third = flights.join(first, None, Some(&a));
        assert!(matches!(third, Role::Follower(..)), "a follower of /a");
        assert_eq!(flights.len(), 1);
    }

    #[tokio::test]
    async fn a_dropped_leader_without_followers_ends_the_flight() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        drop(join(&flights, &e));
        assert_eq!(flights.len(), 0);
        assert!(
            matches!(join(&flights, &e), Role::Leader(_)),
            "a new flight"
        );
    }

    #[tokio::test]
    async fn an_ended_guard_never_touches_a_newer_flight() {
        let flights = Arc::new(Flights::default());
        let e = entry();
        let Role::Leader(first) = join(&flights, &e) else {
            panic!("leads")
        };
        first.complete(&entry());
        let second = join(&flights, &e);
        let rx = follower(join(&flights, &e));
        assert_eq!(flights.len(), 1);
        let Role::Leader(second) = second else {
            panic!("leads")
        };
        second.release();
        assert!(rx.await.is_err());
    }
}

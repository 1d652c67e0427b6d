//! The state shared by the layer, every service it makes, their clones and the handle: one
//! [`Limiter`] per key, in a map bounded by `max_keys`.
//!
//! With a queue, a limiter's whole accounting (the calls in flight, the limit, the queue, what
//! the algorithm learned) is behind one mutex, taken once to admit a call, once to give its
//! permit back and once per answer to learn from it; a queued call takes it again each time it
//! is polled. No atomic counts a permit, so no interleaving can lose one: a permit is given
//! back by `Drop` ([`Permit`]), and a queued call that is dropped leaves the queue, or gives
//! back the permit it was handed meanwhile ([`Limiter::cancel`]).
//!
//! Without a queue (`max_queue` 0, the default) there is nothing to hand a permit to, so the
//! calls in flight and the limit are two atomics (`Direct`): a call is admitted by one
//! compare-and-swap below the limit and gives its permit back by one subtraction, and the
//! mutex is taken only to learn from an answer. Every caller of a host goes through its
//! limiter, so that lock was held by every worker thread twice per call.

use crate::algorithm::Controller;
use crate::config::{Config, Limit};
use crate::direct::Direct;
use courier_core::ConcurrencyLimited;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;
use tokio::time::Instant;

/// What a call got when it asked for a permit.
#[derive(Debug)]
pub(crate) enum Admission {
    /// A permit, now; the calls in flight before it.
    Now(usize),
    /// A place in the queue, under this ticket.
    Queued(u64),
    /// No permit and no place in the queue.
    Refused(ConcurrencyLimited),
}

/// A queued call.
#[derive(Debug)]
struct Waiter {
    ticket: u64,
    waker: Option<Waker>,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    limit: usize,
    queue: VecDeque<Waiter>,
    /// Tickets handed a permit while queued, not yet polled: each holds one of `in_flight`.
    granted: Vec<u64>,
    next_ticket: u64,
    controller: Option<Controller>,
}

/// The limit of one key.
#[derive(Debug)]
pub(crate) struct Limiter<K> {
    pub(crate) key: K,
    state: Mutex<State>,
    /// `Some` without a queue: the count, and `state`'s own count is unused (the algorithm,
    /// when there is one, stays in `state` and stores each new limit here).
    direct: Option<Direct>,
    max_queue: usize,
    /// The eviction epoch this limiter was last used in.
    last_used: AtomicU64,
    in_flight: crate::telemetry::InFlight,
}

impl<K: crate::LimitKey> Limiter<K> {
    fn new(key: K, config: &Config, epoch: u64) -> Self {
        let (limit, controller) = match config.limit {
            Limit::Fixed(n) => (n.get(), None),
            Limit::Adaptive(a) => {
                let c =
                    Controller::new(a.get_algorithm(), a.get_initial(), a.get_min(), a.get_max());
                (c.limit(), Some(c))
            }
        };
        crate::telemetry::limit(&key, limit);
        Self {
            in_flight: crate::telemetry::InFlight::new(&key),
            key,
            state: Mutex::new(State {
                in_flight: 0,
                limit,
                queue: VecDeque::new(),
                granted: Vec::new(),
                next_ticket: 0,
                controller,
            }),
            direct: (config.max_queue == 0).then(|| Direct::new(limit)),
            max_queue: config.max_queue,
            last_used: AtomicU64::new(epoch),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The accounting stays whole through a panic elsewhere: every change is one statement.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for a permit; `may_queue` is false when the call may not wait at all.
    pub(crate) fn admit(&self, may_queue: bool) -> Admission {
        if let Some(d) = &self.direct {
            return match d.admit() {
                Ok(before) => {
                    self.in_flight.up();
                    Admission::Now(before)
                }
                Err((in_flight, limit)) => {
                    Admission::Refused(ConcurrencyLimited::new(in_flight, limit))
                }
            };
        }
        let mut s = self.lock();
        if s.in_flight < s.limit && s.queue.is_empty() {
            let before = s.in_flight;
            s.in_flight += 1;
            drop(s);
            self.in_flight.set(before + 1);
            return Admission::Now(before);
        }
        if may_queue && s.queue.len() < self.max_queue {
            let ticket = s.next_ticket;
            s.next_ticket += 1;
            s.queue.push_back(Waiter {
                ticket,
                waker: None,
            });
            return Admission::Queued(ticket);
        }
        Admission::Refused(ConcurrencyLimited::new(s.in_flight, s.limit))
    }

    /// Whether `ticket` was handed a permit; else keeps `waker` to be woken when it is. The
    /// calls in flight before it, when it was.
    pub(crate) fn poll_ticket(&self, ticket: u64, waker: &Waker) -> Option<usize> {
        let mut s = self.lock();
        if let Some(i) = s.granted.iter().position(|&t| t == ticket) {
            s.granted.swap_remove(i);
            return Some(s.in_flight.saturating_sub(1));
        }
        if let Some(w) = s.queue.iter_mut().find(|w| w.ticket == ticket) {
            match &w.waker {
                Some(old) if old.will_wake(waker) => {}
                _ => w.waker = Some(waker.clone()),
            }
        }
        None
    }

    /// A queued call leaves: its place in the queue, or the permit it was handed meanwhile,
    /// goes back. Returns the refusal to answer with.
    pub(crate) fn cancel(&self, ticket: u64) -> ConcurrencyLimited {
        let mut s = self.lock();
        if let Some(i) = s.granted.iter().position(|&t| t == ticket) {
            s.granted.swap_remove(i);
            s.in_flight -= 1;
        } else if let Some(i) = s.queue.iter().position(|w| w.ticket == ticket) {
            s.queue.remove(i);
        }
        let refusal = ConcurrencyLimited::new(s.in_flight, s.limit);
        self.grant(s);
        refusal
    }

    /// Gives a permit back.
    pub(crate) fn release(&self) {
        if let Some(d) = &self.direct {
            d.release();
            self.in_flight.down();
            return;
        }
        let mut s = self.lock();
        s.in_flight -= 1;
        self.grant(s);
    }

    /// Learns from one answer: its latency (`None`: none worth reading), the calls in flight
    /// before it was sent, and whether it was a drop.
    pub(crate) fn learn(&self, rtt: Option<Duration>, in_flight: usize, dropped: bool) {
        let mut s = self.lock();
        let Some(c) = s.controller.as_mut() else {
            return;
        };
        if let Some(limit) = c.sample(rtt, in_flight + 1, dropped, Instant::now())
            && limit != s.limit
        {
            s.limit = limit;
            crate::telemetry::limit(&self.key, limit);
            match &self.direct {
                Some(d) => d.set_limit(limit),
                None => self.grant(s),
            }
        }
    }

    /// Hands free permits to the queue, first come first served, and wakes those served
    /// once the lock is let go.
    fn grant(&self, mut s: MutexGuard<'_, State>) {
        if s.queue.is_empty() {
            let in_flight = s.in_flight;
            drop(s);
            self.in_flight.set(in_flight);
            return;
        }
        let mut wake = Vec::new();
        while s.in_flight < s.limit
            && let Some(w) = s.queue.pop_front()
        {
            s.in_flight += 1;
            s.granted.push(w.ticket);
            wake.extend(w.waker);
        }
        let in_flight = s.in_flight;
        drop(s);
        self.in_flight.set(in_flight);
        wake.into_iter().for_each(Waker::wake);
    }

    /// The calls in flight, the limit and the calls queued.
    pub(crate) fn status(&self) -> (usize, usize, usize) {
        if let Some(d) = &self.direct {
            let (in_flight, limit) = d.status();
            return (in_flight, limit, 0);
        }
        let s = self.lock();
        (s.in_flight, s.limit, s.queue.len())
    }

    fn is_idle(&self) -> bool {
        if let Some(d) = &self.direct {
            return d.status().0 == 0;
        }
        let s = self.lock();
        s.in_flight == 0 && s.queue.is_empty()
    }
}

/// Gives one permit back: what a [`Permit`] knows of its limiter, whatever its key.
pub(crate) trait Release: Send + Sync + std::fmt::Debug {
    fn release(&self);
}

impl<K: crate::LimitKey> Release for Limiter<K> {
    fn release(&self) {
        Limiter::release(self);
    }
}

/// A permit: given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    limiter: Arc<dyn Release>,
}

impl Permit {
    /// The permit `limiter` just handed out (by [`Limiter::admit`] or a ticket).
    pub(crate) fn new<K: crate::LimitKey>(limiter: Arc<Limiter<K>>) -> Self {
        Self { limiter }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.release();
    }
}

/// Every limiter, keyed.
pub(crate) struct Shared<K> {
    pub(crate) config: Config,
    map: papaya::HashMap<K, Arc<Limiter<K>>, foldhash::fast::RandomState>,
    /// The one limiter when every request has the same key.
    single: Option<Arc<Limiter<K>>>,
    epoch: AtomicU64,
    /// Bumped after every eviction has removed its limiters: a limiter found while it is
    /// unchanged is still the one in the map.
    generation: AtomicU64,
    evicting: Mutex<()>,
}

impl<K: crate::LimitKey> std::fmt::Debug for Shared<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("keys", &self.len())
            .finish()
    }
}

impl<K: crate::LimitKey> Shared<K> {
    pub(crate) fn new(config: Config, single_key: Option<K>) -> Self {
        let single = single_key.map(|k| Arc::new(Limiter::new(k, &config, 0)));
        Self {
            config,
            map: papaya::HashMap::with_hasher(foldhash::fast::RandomState::default()),
            single,
            epoch: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            evicting: Mutex::new(()),
        }
    }

    /// Whether answers teach the limit anything (it is adaptive).
    pub(crate) fn learns(&self) -> bool {
        matches!(self.config.limit, Limit::Adaptive(_))
    }

    /// The limiter for `key`, made on first use.
    pub(crate) fn limiter(&self, key: K) -> Arc<Limiter<K>> {
        if let Some(l) = &self.single {
            return l.clone();
        }
        if let Some(l) = self.map.pin().get(&key) {
            let epoch = self.epoch.load(Ordering::Relaxed);
            if l.last_used.load(Ordering::Relaxed) != epoch {
                l.last_used.store(epoch, Ordering::Relaxed);
            }
            return l.clone();
        }
        self.insert(key)
    }

    #[cold]
    fn insert(&self, key: K) -> Arc<Limiter<K>> {
        if self.map.len() >= self.config.max_keys.get() {
            self.evict();
        }
        let map = self.map.pin();
        map.get_or_insert_with(key.clone(), || {
            let epoch = self.epoch.load(Ordering::Relaxed);
            Arc::new(Limiter::new(key, &self.config, epoch))
        })
        .clone()
    }

    /// Makes room: drops the limiters least recently used, idle ones (nothing in flight,
    /// nothing queued) first, until a quarter of the room is free again. A busy limiter that
    /// is dropped keeps counting its own calls until they end; a new call to its key starts a
    /// new limiter.
    fn evict(&self) {
        let _one_at_a_time = self.evicting.lock().unwrap_or_else(|p| p.into_inner());
        let max = self.config.max_keys.get();
        let map = self.map.pin();
        if map.len() < max {
            return;
        }
        self.epoch.fetch_add(1, Ordering::Relaxed);
        let mut all: Vec<_> = map
            .iter()
            .map(|(k, l)| ((!l.is_idle(), l.last_used.load(Ordering::Relaxed)), k))
            .collect();
        let keep = max - 1 - max / 4;
        let drop = all.len().saturating_sub(keep);
        all.sort_unstable_by_key(|(order, _)| *order);
        for (_, key) in all.into_iter().take(drop) {
            map.remove(key);
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The eviction generation: read it before a lookup, and a limiter found then stays the
    /// map's own for as long as the generation is the same.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The limiter for `key`, if there is one.
    pub(crate) fn get(&self, key: &K) -> Option<Arc<Limiter<K>>> {
        if let Some(l) = &self.single {
            return (l.key == *key).then(|| l.clone());
        }
        self.map.pin().get(key).cloned()
    }

    /// How many keys have a limiter.
    pub(crate) fn len(&self) -> usize {
        if self.single.is_some() {
            return 1;
        }
        self.map.len()
    }
}

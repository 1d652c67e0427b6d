//! The state shared by the layer, every service it makes, their clones and the handle.

use crate::config::Config;
use crate::outcome::{Outcome, Role};
use crate::state::{Admission, Machine, Phase, Reason, Ticket, Transition};
use crate::window::Window;
use courier_core::CircuitOpen;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

// === impl Core ===

/// Settings, the clock origin and the jitter source: what every breaker needs to decide.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: Config,
    base: Instant,
    rng: Mutex<SmallRng>,
}

impl Core {
    fn new(config: Config) -> Self {
        let rng = match config.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_rng(&mut rand::rng()),
        };
        Self {
            config,
            base: Instant::now(),
            rng: Mutex::new(rng),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        let ms = Instant::now()
            .saturating_duration_since(self.base)
            .as_millis();
        ms.min(u128::from(u64::MAX)) as u64
    }

    fn open_ms(&self, trips: u32) -> u64 {
        let u = match self.config.open_backoff {
            Some(b) if b.jitter_share() > 0.0 => {
                // A poisoned generator still makes numbers.
                let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
                rng.random::<f64>()
            }
            _ => 0.0,
        };
        self.config.open_ms(trips, u)
    }
}

// === impl Breaker ===

/// The breaker of one key.
#[derive(Debug)]
pub(crate) struct Breaker<K> {
    pub(crate) key: K,
    pub(crate) core: Arc<Core>,
    pub(crate) machine: Machine,
    window: Option<Window>,
    /// No slow-call threshold: a success while closed is a state read (and, with a window,
    /// one counted success).
    pub(crate) plain: bool,
    /// When the current run of failures began (ms since the base instant): written by the
    /// failure that makes the count 1, read when failing answers reach the count; `u64::MAX`
    /// (unknown, so it has lasted nothing) after a success, so that a failure that reads it
    /// before the run's first failure has written it never sees an earlier run's start.
    run_start_ms: AtomicU64,
    /// The eviction epoch this breaker was last used in.
    last_used: AtomicU64,
    /// Insertion order, to break ties when evicting.
    seq: u64,
}

impl<K: crate::BreakerKey> Breaker<K> {
    fn new(key: K, core: Arc<Core>, seq: u64, epoch: u64) -> Self {
        Self {
            key,
            window: core.config.failure_rate.map(Window::new),
            plain: core.config.slow_call.is_none(),
            machine: Machine::judging(core.config.half_open_trials.get()),
            core,
            run_start_ms: AtomicU64::new(u64::MAX),
            last_used: AtomicU64::new(epoch),
            seq,
        }
    }

    /// May a call go? `Ok` holds the [`Ticket::pack`]ed ticket. Closed costs one atomic load
    /// and reads no clock.
    #[inline]
    pub(crate) fn admit(&self) -> Result<u32, CircuitOpen> {
        if let Some(generation) = self.machine.closed() {
            return Ok(Ticket::Closed(generation).pack());
        }
        self.admit_slow()
    }

    #[cold]
    #[inline(never)]
    fn admit_slow(&self) -> Result<u32, CircuitOpen> {
        let max = self.core.config.half_open_trials.get();
        let (admission, transition) = self.machine.admit(max, || self.core.now_ms());
        if let Some(t) = transition {
            self.changed(t);
        }
        match admission {
            Admission::Go(ticket) => Ok(ticket.pack()),
            Admission::Reject { retry_in_ms } => {
                let state = crate::CircuitState::from(self.machine.load().phase());
                crate::telemetry::refused(&self.key, state);
                Err(CircuitOpen::new(retry_in_ms.map_or(
                    self.core.config.open_duration,
                    Duration::from_millis,
                )))
            }
        }
    }

    /// Takes a success in passing, when it changes no state: a call's first attempt,
    /// admitted closed in `generation`, answered with a verdict that does not count against
    /// the host; the breaker is still closed in that generation with no failure counted, and
    /// there is no slow-call threshold. A window counts it (one atomic add). Else `false`, and
    /// the caller records it.
    #[inline]
    pub(crate) fn success_in_passing(&self, generation: u16, role: Role) -> bool {
        if !(self.plain && role.is_first() && self.machine.closed_clean(generation)) {
            return false;
        }
        if let Some(window) = &self.window {
            window.count_success(|| self.core.now_ms());
        }
        true
    }

    /// Applies the outcome of an attempt in `role`.
    #[inline]
    pub(crate) fn record(&self, ticket: Ticket, outcome: Outcome, role: Role) {
        let transition = match (outcome, ticket) {
            (_, Ticket::Unchecked) => None,
            (Outcome::Neither, _) => {
                self.machine.release(ticket);
                None
            }
            // Trials are samples of the host, each judged whatever call it belongs to.
            (Outcome::Success, Ticket::Trial(_)) => self.machine.on_success(ticket),
            (_, Ticket::Trial(_)) => {
                let now = self.core.now_ms();
                self.machine
                    .on_failure(ticket, None, now, |trips| self.core.open_ms(trips))
            }
            (Outcome::Success, Ticket::Closed(generation)) => self.record_success(generation, role),
            (_, Ticket::Closed(generation)) => self.record_failure(generation, outcome, role),
        };
        if let Some(t) = transition {
            self.changed(t);
        }
    }

    #[cold]
    fn record_success(&self, generation: u16, role: Role) -> Option<Transition> {
        // The run of failures is over; until the next one writes its start, a run's start is
        // unknown, which counts as "just now".
        if self.core.config.answers_for_ms > 0 {
            self.run_start_ms.store(u64::MAX, Ordering::Relaxed);
        }
        // Only a call of the current closed generation feeds the window: one admitted before
        // a transition belongs to a window that is gone.
        if let Some(window) = &self.window
            && self.machine.closed() == Some(generation)
        {
            if role.in_window() {
                window.forgive(self.core.now_ms());
            } else if role.is_first() {
                window.count_success(|| self.core.now_ms());
            }
        }
        self.machine.on_success(Ticket::Closed(generation))
    }

    /// A failure while closed. The call counts once: in the window (where the rate judges
    /// failures after the request went out, and failing answers too unless they must last),
    /// and in the run of failures without a success, which opens the circuit at the count when
    /// the host is not there (every attempt that finds nothing listening counts), on failing
    /// answers once they have lasted `failing_answers_for`, and, with no window, on any
    /// failure.
    #[cold]
    fn record_failure(&self, generation: u16, outcome: Outcome, role: Role) -> Option<Transition> {
        let config = &self.core.config;
        let now = self.core.now_ms();
        let open_ms = |trips| self.core.open_ms(trips);
        let rated = match outcome {
            Outcome::FailingAnswer => config.answers_for_ms == 0,
            _ => true,
        };
        if let Some(window) = &self.window
            && self.machine.closed() == Some(generation)
        {
            match (rated, role.is_first()) {
                // A failure the rate weighs: the call is a failed one (its first attempt added
                // it already, when this is a retry).
                (true, first) if !role.in_window() => {
                    window.add(now, u64::from(first), 1);
                    if window.tripped(now) {
                        return self
                            .machine
                            .trip(generation, Reason::FailureRate, now, open_ms);
                    }
                }
                // A failing answer the rate leaves to the run: a call the host answered.
                (false, true) => window.add(now, 1, 0),
                _ => {}
            }
        }
        // A call counts once in the run; a connect failure counts at every attempt: each one
        // found nothing listening anew, and nothing was sent.
        if role.counted() && outcome != Outcome::Unreachable {
            return None;
        }
        let count = self.machine.count_failure(generation)?;
        if count == 1 && config.answers_for_ms > 0 {
            self.run_start_ms.store(now, Ordering::Relaxed);
        }
        if count < u64::from(config.consecutive_failures.get()) {
            return None;
        }
        let reason = match outcome {
            Outcome::Unreachable => Reason::ConsecutiveFailures,
            Outcome::FailingAnswer if config.answers_for_ms > 0 => {
                let lasted = now.saturating_sub(self.run_start_ms.load(Ordering::Relaxed));
                if lasted < config.answers_for_ms {
                    return None;
                }
                Reason::FailingAnswers
            }
            // With a window, the rate judges failures after the request went out (and failing
            // answers that need not last); without one, the count judges every failure.
            _ if self.window.is_some() => return None,
            _ => Reason::ConsecutiveFailures,
        };
        self.machine.trip(generation, reason, now, open_ms)
    }

    pub(crate) fn force(&self, to: Phase) {
        if let Some(t) = self.machine.force(to) {
            self.changed(t);
        }
    }

    #[cold]
    fn changed(&self, t: Transition) {
        if let Some(window) = &self.window
            && matches!(t.to, Phase::Closed | Phase::Open)
        {
            window.clear();
        }
        let (from, to) = (
            crate::CircuitState::from(t.from),
            crate::CircuitState::from(t.to),
        );
        crate::telemetry::transition(&self.key, from, to);
        let (from, to) = (from.as_str(), to.as_str());
        let why = t.reason.as_str();
        if matches!(t.to, Phase::Open | Phase::ForcedOpen) {
            tracing::warn!(
                target: "courier::breaker",
                host = ?self.key, from, to, why, open_ms = t.open_ms,
                "circuit opened; calls to this host fail fast"
            );
        } else {
            tracing::info!(
                target: "courier::breaker",
                host = ?self.key, from, to, why,
                "circuit state changed"
            );
        }
    }

    /// What eviction keeps longest: forced, then open or half-open, then closed with
    /// failures; a closed breaker with no failures loses nothing when dropped.
    fn rank(&self) -> u8 {
        let w = self.machine.load();
        match w.phase() {
            Phase::ForcedOpen | Phase::ForcedClosed => FORCED,
            Phase::Open | Phase::HalfOpen => 2,
            Phase::Closed if w.payload() > 0 => 1,
            Phase::Closed => 0,
        }
    }
}

/// The [`Breaker::rank`] of a breaker held open or closed by hand.
const FORCED: u8 = 3;

// === impl Shared ===

/// Every breaker, keyed; shared behind an `Arc` by the layer, its services and the handle.
pub(crate) struct Shared<K> {
    pub(crate) core: Arc<Core>,
    /// foldhash: HostKey hashes its authority byte by byte, which SipHash makes the largest
    /// cost of a lookup. foldhash's per-map random seed still keeps hashes unpredictable.
    map: papaya::HashMap<K, Arc<Breaker<K>>, foldhash::fast::RandomState>,
    /// The one breaker when every request has the same key.
    single: Option<Arc<Breaker<K>>>,
    epoch: AtomicU64,
    /// Bumped after every eviction has removed its breakers: a breaker found while it is
    /// unchanged is still the one in the map.
    generation: AtomicU64,
    seq: AtomicU64,
    evicting: Mutex<()>,
}

impl<K: crate::BreakerKey> std::fmt::Debug for Shared<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("core", &self.core)
            .field("keys", &self.len())
            .finish()
    }
}

impl<K: crate::BreakerKey> Shared<K> {
    pub(crate) fn new(config: Config, single_key: Option<K>) -> Self {
        let core = Arc::new(Core::new(config));
        let single = single_key.map(|k| Arc::new(Breaker::new(k, core.clone(), 0, 0)));
        Self {
            core,
            map: papaya::HashMap::with_hasher(foldhash::fast::RandomState::default()),
            single,
            epoch: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            seq: AtomicU64::new(1),
            evicting: Mutex::new(()),
        }
    }

    /// The eviction generation: read it before a lookup, and a breaker found then stays the
    /// map's own for as long as the generation is the same.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The breaker for `key`, made on first use.
    #[inline]
    pub(crate) fn breaker(&self, key: K) -> Arc<Breaker<K>> {
        if let Some(b) = &self.single {
            return b.clone();
        }
        if let Some(b) = self.map.pin().get(&key) {
            let epoch = self.epoch.load(Ordering::Relaxed);
            // Write only when it changes: a hot host's line stays shared between cores.
            if b.last_used.load(Ordering::Relaxed) != epoch {
                b.last_used.store(epoch, Ordering::Relaxed);
            }
            return b.clone();
        }
        self.insert(key)
    }

    #[cold]
    fn insert(&self, key: K) -> Arc<Breaker<K>> {
        if self.map.len() >= self.core.config.max_hosts.get() {
            self.evict();
        }
        let map = self.map.pin();
        map.get_or_insert_with(key.clone(), || {
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            let epoch = self.epoch.load(Ordering::Relaxed);
            Arc::new(Breaker::new(key, self.core.clone(), seq, epoch))
        })
        .clone()
    }

    /// Makes room: drops the breakers least worth keeping (least recently used epoch first,
    /// then by [`Breaker::rank`], then oldest) until a quarter of the room is free again.
    /// A breaker held by hand is never dropped: its handle's promise outlasts the bound, and
    /// only the operator makes such breakers.
    fn evict(&self) {
        let _one_at_a_time = self.evicting.lock().unwrap_or_else(|p| p.into_inner());
        let max = self.core.config.max_hosts.get();
        let map = self.map.pin();
        if map.len() < max {
            return;
        }
        self.epoch.fetch_add(1, Ordering::Relaxed);
        let mut all: Vec<_> = map
            .iter()
            .map(|(k, b)| {
                let recency = b.last_used.load(Ordering::Relaxed);
                ((recency, b.rank(), b.seq), k)
            })
            .collect();
        let keep = max - 1 - max / 4;
        let drop = all.len().saturating_sub(keep);
        all.retain(|((_, rank, _), _)| *rank != FORCED);
        all.sort_unstable_by_key(|(order, _)| *order);
        for (_, key) in all.into_iter().take(drop) {
            map.remove(key);
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The breaker for `key`, if there is one.
    pub(crate) fn get(&self, key: &K) -> Option<Arc<Breaker<K>>> {
        if let Some(b) = &self.single {
            return (b.key == *key).then(|| b.clone());
        }
        self.map.pin().get(key).cloned()
    }

    /// The breaker for `key`, made if missing (for the handle).
    pub(crate) fn get_or_make(&self, key: K) -> Arc<Breaker<K>> {
        match self.get(&key) {
            Some(b) => b,
            None if self.single.is_some() => self.breaker(key),
            None => self.insert(key),
        }
    }

    /// Every breaker.
    pub(crate) fn all(&self) -> Vec<Arc<Breaker<K>>> {
        if let Some(b) = &self.single {
            return vec![b.clone()];
        }
        self.map.pin().iter().map(|(_, b)| b.clone()).collect()
    }

    /// How many keys have a breaker.
    pub(crate) fn len(&self) -> usize {
        if self.single.is_some() {
            return 1;
        }
        self.map.len()
    }
}

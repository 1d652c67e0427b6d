//! The per-key state machine: one `AtomicU64`, no lock.
//!
//! Everything a call needs to be admitted or to report its outcome lives in a single word, so
//! the closed state costs one load on admission and one load on success. Transitions are
//! compare-and-swap on the whole word; the generation field makes stale outcomes (from calls
//! admitted before the last transition) harmless: they no longer match and are dropped.
//!
//! ```text
//!  63                      24 23   19 18        3 2   0
//! +--------------------------+-------+-----------+-----+
//! |         payload          | trips |    gen    | tag |
//! +--------------------------+-------+-----------+-----+
//! ```
//!
//! The payload is the consecutive-failure count while closed, the reopening deadline
//! (milliseconds since the breaker's base instant) while open, and while half-open three
//! counts of [`TRIAL_BITS`] each: trials admitted (and not given back), trials that succeeded,
//! trials that failed. The trials are judged together: the circuit closes once a majority of
//! them succeeded and opens again once half of them failed ([`Machine::judging`]).
//!
//! This module knows nothing of time or randomness: callers pass `now` in milliseconds and the
//! open duration for a given trip count. That keeps it small enough for a loom model:
//! `courier-loom`'s `tests/breaker.rs` compiles this very file with loom's atomics
//! (`--cfg courier_loom`).

#[cfg(all(courier_loom, test))]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(all(courier_loom, test)))]
use std::sync::atomic::{AtomicU64, Ordering};

const TAG_BITS: u32 = 3;
const GEN_BITS: u32 = 16;
const TRIPS_BITS: u32 = 5;
const GEN_SHIFT: u32 = TAG_BITS;
const TRIPS_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const PAYLOAD_SHIFT: u32 = TRIPS_SHIFT + TRIPS_BITS;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const TRIPS_MASK: u64 = (1 << TRIPS_BITS) - 1;
/// The largest payload: counts saturate at it, deadlines are capped to it (about 34 years).
pub(crate) const PAYLOAD_MAX: u64 = (1 << (64 - PAYLOAD_SHIFT)) - 1;
/// Trip counts saturate here; the open duration's growth is capped long before.
pub(crate) const TRIPS_MAX: u32 = TRIPS_MASK as u32;
/// Bits of each half-open count (admitted, succeeded, failed).
pub(crate) const TRIAL_BITS: u32 = 13;
const TRIAL_MASK: u64 = (1 << TRIAL_BITS) - 1;
/// The most trials a half-open breaker judges together.
pub(crate) const TRIALS_MAX: u32 = TRIAL_MASK as u32;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Calls pass; failures are counted.
    Closed,
    /// Calls fail at once until the deadline.
    Open,
    /// A bounded number of trial calls pass, judged together.
    HalfOpen,
    /// Held open by hand until released.
    ForcedOpen,
    /// Held closed by hand until released: calls pass and nothing is counted.
    ForcedClosed,
}

impl Phase {
    const fn tag(self) -> u64 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
            Self::ForcedOpen => 3,
            Self::ForcedClosed => 4,
        }
    }

    const fn from_tag(tag: u64) -> Self {
        match tag {
            0 => Self::Closed,
            1 => Self::Open,
            2 => Self::HalfOpen,
            3 => Self::ForcedOpen,
            // Only the five tags above are ever stored.
            _ => Self::ForcedClosed,
        }
    }
}

/// One decoded state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(u64);

impl Word {
    /// Builds a word; `trips` and `payload` saturate.
    pub(crate) const fn new(phase: Phase, generation: u16, trips: u32, payload: u64) -> Self {
        let trips = if trips > TRIPS_MAX { TRIPS_MAX } else { trips } as u64;
        let payload = if payload > PAYLOAD_MAX {
            PAYLOAD_MAX
        } else {
            payload
        };
        Self(
            phase.tag()
                | ((generation as u64) << GEN_SHIFT)
                | (trips << TRIPS_SHIFT)
                | (payload << PAYLOAD_SHIFT),
        )
    }

    /// The phase.
    pub(crate) const fn phase(self) -> Phase {
        Phase::from_tag(self.0 & TAG_MASK)
    }

    /// The generation: bumped by every transition.
    pub(crate) const fn generation(self) -> u16 {
        ((self.0 >> GEN_SHIFT) & GEN_MASK) as u16
    }

    /// Consecutive trips without a successful close.
    pub(crate) const fn trips(self) -> u32 {
        ((self.0 >> TRIPS_SHIFT) & TRIPS_MASK) as u32
    }

    /// Failures (closed), trials in flight (half-open) or deadline in ms (open).
    pub(crate) const fn payload(self) -> u64 {
        self.0 >> PAYLOAD_SHIFT
    }

    /// Closed in `generation` with no failure counted: a success there changes nothing.
    const fn closed_clean(self, generation: u16) -> bool {
        self.0 & TAG_MASK == Phase::Closed.tag()
            && self.generation() == generation
            && self.payload() == 0
    }

    const fn next(self, phase: Phase, trips: u32, payload: u64) -> Self {
        Self::new(phase, self.generation().wrapping_add(1), trips, payload)
    }

    const fn with_payload(self, payload: u64) -> Self {
        Self::new(self.phase(), self.generation(), self.trips(), payload)
    }

    /// Half-open: trials admitted and not given back.
    pub(crate) const fn admitted(self) -> u64 {
        self.payload() & TRIAL_MASK
    }

    /// Half-open: trials that succeeded.
    pub(crate) const fn succeeded(self) -> u64 {
        (self.payload() >> TRIAL_BITS) & TRIAL_MASK
    }

    /// Half-open: trials that failed.
    pub(crate) const fn failed(self) -> u64 {
        (self.payload() >> (2 * TRIAL_BITS)) & TRIAL_MASK
    }

    /// Half-open with these counts.
    const fn with_trials(self, admitted: u64, succeeded: u64, failed: u64) -> Self {
        self.with_payload(
            (admitted & TRIAL_MASK)
                | (succeeded & TRIAL_MASK) << TRIAL_BITS
                | (failed & TRIAL_MASK) << (2 * TRIAL_BITS),
        )
    }
}

/// Why a breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Closed: the consecutive-failure threshold was reached.
    ConsecutiveFailures,
    /// Closed: the failure rate over the window reached the threshold.
    FailureRate,
    /// Closed: failing answers kept coming, with no success, for as long as the layer asks.
    FailingAnswers,
    /// Open: the open duration has passed; a trial may go.
    OpenElapsed,
    /// Half-open: a majority of the trials succeeded.
    TrialSucceeded,
    /// Half-open: half of the trials failed.
    TrialFailed,
    /// The handle forced it open.
    ForcedOpen,
    /// The handle forced it closed.
    ForcedClosed,
    /// The handle reset it.
    Reset,
}

impl Reason {
    /// A short snake_case name for logs.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::ConsecutiveFailures => "consecutive_failures",
            Self::FailureRate => "failure_rate",
            Self::FailingAnswers => "failing_answers",
            Self::OpenElapsed => "open_elapsed",
            Self::TrialSucceeded => "trial_succeeded",
            Self::TrialFailed => "trial_failed",
            Self::ForcedOpen => "forced_open",
            Self::ForcedClosed => "forced_closed",
            Self::Reset => "reset",
        }
    }
}

/// A state change, for the caller to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transition {
    /// The phase before.
    pub(crate) from: Phase,
    /// The phase after.
    pub(crate) to: Phase,
    /// Why.
    pub(crate) reason: Reason,
    /// The open duration chosen, when `to` is `Open`.
    pub(crate) open_ms: u64,
}

/// What a call was admitted as; hand it back with the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ticket {
    /// Admitted while closed, in this generation.
    Closed(u16),
    /// Admitted as a half-open trial, in this generation: holds a permit.
    Trial(u16),
    /// Admitted while forced closed: the outcome is not counted.
    Unchecked,
}

impl Ticket {
    /// No ticket, in [`Ticket::pack`]'s encoding: the outcome is reported.
    pub(crate) const SPENT: u32 = u32::MAX;

    /// The ticket as one integer, which a caller keeps in a register: a closed ticket is
    /// its generation.
    #[inline]
    pub(crate) const fn pack(self) -> u32 {
        match self {
            Self::Closed(g) => g as u32,
            Self::Trial(g) => 1 << 16 | g as u32,
            Self::Unchecked => 2 << 16,
        }
    }

    /// The generation of a packed closed ticket, or `None`.
    #[inline]
    pub(crate) const fn packed_closed(packed: u32) -> Option<u16> {
        match Self::unpack(packed) {
            Some(Self::Closed(g)) => Some(g),
            _ => None,
        }
    }

    /// Undoes [`Ticket::pack`]; `None` for [`Ticket::SPENT`].
    pub(crate) const fn unpack(packed: u32) -> Option<Self> {
        match packed >> 16 {
            0 => Some(Self::Closed(packed as u16)),
            1 => Some(Self::Trial(packed as u16)),
            2 => Some(Self::Unchecked),
            _ => None,
        }
    }
}

/// The answer to "may this call go?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Go, and report the outcome with this ticket.
    Go(Ticket),
    /// Fail fast. `retry_in_ms` is `None` while forced open.
    Reject {
        /// Milliseconds until a trial may go.
        retry_in_ms: Option<u64>,
    },
}

/// The atomic state machine of one breaker.
#[derive(Debug)]
pub(crate) struct Machine {
    word: AtomicU64,
    /// Half-open judges this many trials together: it closes at `trials / 2 + 1` successes
    /// and opens again at `(trials + 1) / 2` failures (a tie opens), so once every trial has
    /// answered exactly one of the two has happened.
    trials: u32,
}

impl Default for Machine {
    fn default() -> Self {
        Self::new()
    }
}

impl Machine {
    /// A closed breaker whose half-open is decided by its first trial.
    pub(crate) fn new() -> Self {
        Self::judging(1)
    }

    /// A closed breaker whose half-open judges `trials` trials together (1 to
    /// [`TRIALS_MAX`]; clamped).
    pub(crate) fn judging(trials: u32) -> Self {
        Self {
            word: AtomicU64::new(Word::new(Phase::Closed, 0, 0, 0).0),
            trials: trials.clamp(1, TRIALS_MAX),
        }
    }

    /// Successful trials that close the circuit.
    const fn close_at(&self) -> u64 {
        self.trials as u64 / 2 + 1
    }

    /// Failed trials that open it again.
    const fn reopen_at(&self) -> u64 {
        (self.trials as u64).div_ceil(2)
    }

    /// The current word.
    #[inline]
    pub(crate) fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    fn cas(&self, current: Word, new: Word) -> Result<(), Word> {
        self.word
            .compare_exchange_weak(current.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(Word)
    }

    /// Decides whether a call may go. `now_ms` is read only while open.
    ///
    /// Open => HalfOpen once the deadline has passed; the caller that moves it is the first
    /// trial. HalfOpen admits at most `max_trials` trials (in flight or answered) before it
    /// decides.
    #[inline]
    pub(crate) fn admit(
        &self,
        max_trials: u32,
        now_ms: impl FnOnce() -> u64,
    ) -> (Admission, Option<Transition>) {
        let w = self.load();
        // Fast path: closed costs this one load.
        if w.phase() == Phase::Closed {
            return (Admission::Go(Ticket::Closed(w.generation())), None);
        }
        self.admit_slow(w, max_trials, now_ms)
    }

    #[cold]
    #[inline(never)]
    fn admit_slow(
        &self,
        mut w: Word,
        max_trials: u32,
        now_ms: impl FnOnce() -> u64,
    ) -> (Admission, Option<Transition>) {
        let mut now_ms = Some(now_ms);
        let mut now = None;
        loop {
            match w.phase() {
                Phase::Closed => return (Admission::Go(Ticket::Closed(w.generation())), None),
                Phase::ForcedClosed => return (Admission::Go(Ticket::Unchecked), None),
                Phase::ForcedOpen => return (Admission::Reject { retry_in_ms: None }, None),
                Phase::Open => {
                    let now = *now.get_or_insert_with(|| {
                        (now_ms.take().expect("the clock is read at most once"))()
                    });
                    let deadline = w.payload();
                    if now < deadline {
                        return (
                            Admission::Reject {
                                retry_in_ms: Some(deadline - now),
                            },
                            None,
                        );
                    }
                    let new = w.next(Phase::HalfOpen, w.trips(), 0).with_trials(1, 0, 0);
                    match self.cas(w, new) {
                        Ok(()) => {
                            let t = Transition {
                                from: Phase::Open,
                                to: Phase::HalfOpen,
                                reason: Reason::OpenElapsed,
                                open_ms: 0,
                            };
                            return (Admission::Go(Ticket::Trial(new.generation())), Some(t));
                        }
                        Err(actual) => w = actual,
                    }
                }
                Phase::HalfOpen => {
                    if w.admitted() >= u64::from(max_trials.min(TRIALS_MAX)) {
                        return (
                            Admission::Reject {
                                retry_in_ms: Some(0),
                            },
                            None,
                        );
                    }
                    let new = w.with_trials(w.admitted() + 1, w.succeeded(), w.failed());
                    match self.cas(w, new) {
                        Ok(()) => return (Admission::Go(Ticket::Trial(w.generation())), None),
                        Err(actual) => w = actual,
                    }
                }
            }
        }
    }

    /// A call succeeded.
    ///
    /// Closed: the failure count goes back to zero (no write when it already is).
    /// HalfOpen => Closed once a majority of the trials of the current generation succeeded.
    #[inline]
    pub(crate) fn on_success(&self, ticket: Ticket) -> Option<Transition> {
        let w = self.load();
        // Fast path: closed with nothing counted is left untouched.
        if let Ticket::Closed(g) = ticket
            && w.closed_clean(g)
        {
            return None;
        }
        self.on_success_slow(w, ticket)
    }

    /// The generation, when closed: a call may go.
    #[inline]
    pub(crate) fn closed(&self) -> Option<u16> {
        let w = self.load();
        (w.phase() == Phase::Closed).then_some(w.generation())
    }

    /// Closed in `generation` with no failure counted: a success there changes nothing.
    #[inline]
    pub(crate) fn closed_clean(&self, generation: u16) -> bool {
        self.load().closed_clean(generation)
    }

    #[cold]
    #[inline(never)]
    fn on_success_slow(&self, mut w: Word, ticket: Ticket) -> Option<Transition> {
        loop {
            let new = match (ticket, w.phase()) {
                (Ticket::Closed(g), Phase::Closed) if g == w.generation() && w.payload() > 0 => {
                    w.with_payload(0)
                }
                (Ticket::Trial(g), Phase::HalfOpen) if g == w.generation() => {
                    let succeeded = w.succeeded() + 1;
                    if succeeded >= self.close_at() {
                        w.next(Phase::Closed, 0, 0)
                    } else {
                        w.with_trials(w.admitted(), succeeded, w.failed())
                    }
                }
                _ => return None,
            };
            match self.cas(w, new) {
                Ok(()) => {
                    return (w.phase() == Phase::HalfOpen && new.phase() == Phase::Closed)
                        .then_some(Transition {
                            from: Phase::HalfOpen,
                            to: Phase::Closed,
                            reason: Reason::TrialSucceeded,
                            open_ms: 0,
                        });
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// A call failed.
    ///
    /// Closed => Open when the count reaches `threshold` (`None`: count only, the caller
    /// decides by rate and calls [`Machine::trip`]). HalfOpen => Open once half the trials of
    /// the current generation failed. `open_ms(trips)` gives the open duration for the
    /// `trips`-th trip in a row.
    pub(crate) fn on_failure(
        &self,
        ticket: Ticket,
        threshold: Option<u32>,
        now_ms: u64,
        open_ms: impl Fn(u32) -> u64,
    ) -> Option<Transition> {
        let mut w = self.load();
        loop {
            let (new, t) = match (ticket, w.phase()) {
                (Ticket::Closed(g), Phase::Closed) if g == w.generation() => {
                    let failures = w.payload().saturating_add(1);
                    match threshold {
                        Some(n) if failures >= u64::from(n) => {
                            let trips = w.trips().saturating_add(1);
                            let d = open_ms(trips);
                            let new = w.next(Phase::Open, trips, now_ms.saturating_add(d));
                            (new, Some((Reason::ConsecutiveFailures, d)))
                        }
                        _ => (w.with_payload(failures), None),
                    }
                }
                (Ticket::Trial(g), Phase::HalfOpen) if g == w.generation() => {
                    let failed = w.failed() + 1;
                    if failed < self.reopen_at() {
                        (w.with_trials(w.admitted(), w.succeeded(), failed), None)
                    } else {
                        let trips = w.trips().saturating_add(1);
                        let d = open_ms(trips);
                        let new = w.next(Phase::Open, trips, now_ms.saturating_add(d));
                        (new, Some((Reason::TrialFailed, d)))
                    }
                }
                _ => return None,
            };
            match self.cas(w, new) {
                Ok(()) => {
                    return t.map(|(reason, open_ms)| Transition {
                        from: w.phase(),
                        to: Phase::Open,
                        reason,
                        open_ms,
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Closed in `generation`: counts one more failure and returns the count (the caller then
    /// decides, and trips with [`Machine::trip`]); `None` when no longer closed in it.
    pub(crate) fn count_failure(&self, generation: u16) -> Option<u64> {
        let mut w = self.load();
        loop {
            if w.phase() != Phase::Closed || w.generation() != generation {
                return None;
            }
            let failures = w.payload().saturating_add(1).min(PAYLOAD_MAX);
            match self.cas(w, w.with_payload(failures)) {
                Ok(()) => return Some(failures),
                Err(actual) => w = actual,
            }
        }
    }

    /// Closed => Open for a reason found outside the word (the failure rate), if still in
    /// generation `generation`.
    pub(crate) fn trip(
        &self,
        generation: u16,
        reason: Reason,
        now_ms: u64,
        open_ms: impl Fn(u32) -> u64,
    ) -> Option<Transition> {
        let mut w = self.load();
        loop {
            if w.phase() != Phase::Closed || w.generation() != generation {
                return None;
            }
            let trips = w.trips().saturating_add(1);
            let d = open_ms(trips);
            let new = w.next(Phase::Open, trips, now_ms.saturating_add(d));
            match self.cas(w, new) {
                Ok(()) => {
                    return Some(Transition {
                        from: Phase::Closed,
                        to: Phase::Open,
                        reason,
                        open_ms: d,
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// A call ended without a verdict (cancelled, or refused locally below): a trial gives its
    /// permit back, so the next call can be the trial. Nothing else changes.
    pub(crate) fn release(&self, ticket: Ticket) {
        let Ticket::Trial(g) = ticket else { return };
        let mut w = self.load();
        while w.phase() == Phase::HalfOpen
            && w.generation() == g
            && w.admitted() > w.succeeded() + w.failed()
        {
            let new = w.with_trials(w.admitted() - 1, w.succeeded(), w.failed());
            match self.cas(w, new) {
                Ok(()) => return,
                Err(actual) => w = actual,
            }
        }
    }

    /// Moves to `to` by hand: `ForcedOpen`, `ForcedClosed`, or `Closed` (a reset, which also
    /// forgets the trip count).
    pub(crate) fn force(&self, to: Phase) -> Option<Transition> {
        let reason = match to {
            Phase::ForcedOpen => Reason::ForcedOpen,
            Phase::ForcedClosed => Reason::ForcedClosed,
            _ => Reason::Reset,
        };
        let to = match to {
            Phase::ForcedOpen | Phase::ForcedClosed => to,
            _ => Phase::Closed,
        };
        let mut w = self.load();
        loop {
            let trips = if to == Phase::Closed { 0 } else { w.trips() };
            // Already there with nothing counted: the generation stays, so calls in flight
            // keep their tickets (and the generation its room before it wraps).
            if w.phase() == to && w.trips() == trips && w.payload() == 0 {
                return None;
            }
            let new = w.next(to, trips, 0);
            match self.cas(w, new) {
                Ok(()) => {
                    let changed = w.phase() != to;
                    return changed.then_some(Transition {
                        from: w.phase(),
                        to,
                        reason,
                        open_ms: 0,
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }
}

// Named by path: courier-loom's tests/breaker.rs includes this file by path, and a module loaded so looks for
// its children beside it (where rustfmt looks too, whatever the cfg).
#[cfg(all(test, not(courier_loom)))]
#[path = "state/tests.rs"]
mod tests;

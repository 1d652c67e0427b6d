//! Reading and steering the breakers from outside the request path.

use crate::key::BreakerKey;
use crate::registry::Shared;
use crate::state::Phase;
use courier_core::HostKey;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls pass; failures are counted.
    Closed,
    /// Calls fail at once with `CircuitOpen`. Once the open duration has passed, the next call
    /// moves it to half-open.
    Open,
    /// A bounded number of trial calls pass, judged together: most succeeded closes it, half
    /// failed reopens it.
    HalfOpen,
    /// Held open by [`BreakerHandle::force_open`] until closed or reset by hand.
    ForcedOpen,
    /// Held closed by [`BreakerHandle::force_closed`] until reset: nothing is counted.
    ForcedClosed,
}

impl CircuitState {
    /// A short snake_case name for logs.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::ForcedOpen => "forced_open",
            Self::ForcedClosed => "forced_closed",
        }
    }

    /// Whether calls fail fast in this state (half-open only once its trials are taken).
    pub const fn is_open(&self) -> bool {
        matches!(self, Self::Open | Self::ForcedOpen)
    }
}

impl fmt::Display for CircuitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Phase> for CircuitState {
    fn from(p: Phase) -> Self {
        match p {
            Phase::Closed => Self::Closed,
            Phase::Open => Self::Open,
            Phase::HalfOpen => Self::HalfOpen,
            Phase::ForcedOpen => Self::ForcedOpen,
            Phase::ForcedClosed => Self::ForcedClosed,
        }
    }
}

/// A snapshot of one breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitStatus {
    state: CircuitState,
    consecutive_failures: u64,
    trips: u32,
    retry_in: Option<Duration>,
}

impl CircuitStatus {
    /// The state.
    pub const fn state(&self) -> CircuitState {
        self.state
    }

    /// Failures in a row while closed (0 in any other state).
    pub const fn consecutive_failures(&self) -> u64 {
        self.consecutive_failures
    }

    /// Trips in a row without a successful trial; the open duration grows with it when
    /// configured.
    pub const fn trips(&self) -> u32 {
        self.trips
    }

    /// While open: how long until a trial may go.
    pub const fn retry_in(&self) -> Option<Duration> {
        self.retry_in
    }
}

/// Reads each key's breaker and steers it by hand. Clones share the same breakers as the
/// layer it came from and every service that layer made.
///
/// Every change it makes is logged like any other (`courier::breaker`, reason `forced_open`,
/// `forced_closed` or `reset`).
pub struct BreakerHandle<K = HostKey> {
    pub(crate) shared: Arc<Shared<K>>,
}

impl<K> Clone for BreakerHandle<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K: BreakerKey> fmt::Debug for BreakerHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerHandle")
            .field("keys", &self.shared.len())
            .finish()
    }
}

impl<K: BreakerKey> BreakerHandle<K> {
    /// The state of `key`'s breaker; `None` when it has none yet (it would start closed).
    pub fn state(&self, key: &K) -> Option<CircuitState> {
        self.status(key).map(|s| s.state)
    }

    /// A snapshot of `key`'s breaker; `None` when it has none yet.
    pub fn status(&self, key: &K) -> Option<CircuitStatus> {
        let b = self.shared.get(key)?;
        let w = b.machine.load();
        let state = CircuitState::from(w.phase());
        let retry_in = (state == CircuitState::Open)
            .then(|| Duration::from_millis(w.payload().saturating_sub(b.core.now_ms())));
        Some(CircuitStatus {
            state,
            consecutive_failures: if state == CircuitState::Closed {
                w.payload()
            } else {
                0
            },
            trips: w.trips(),
            retry_in,
        })
    }

    /// Every key with a breaker, and its state.
    pub fn states(&self) -> Vec<(K, CircuitState)> {
        self.shared
            .all()
            .into_iter()
            .map(|b| (b.key.clone(), b.machine.load().phase().into()))
            .collect()
    }

    /// How many keys have a breaker (bounded by `max_hosts`).
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// Whether no key has a breaker yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds `key`'s breaker open until [`force_closed`](Self::force_closed) or
    /// [`reset`](Self::reset). Calls fail with `CircuitOpen` whose `retry_in` is the open
    /// duration.
    pub fn force_open(&self, key: K) {
        self.shared.get_or_make(key).force(Phase::ForcedOpen);
    }

    /// Holds `key`'s breaker closed until [`reset`](Self::reset): every call passes and
    /// nothing is counted.
    pub fn force_closed(&self, key: K) {
        self.shared.get_or_make(key).force(Phase::ForcedClosed);
    }

    /// Puts `key`'s breaker back to closed with nothing counted, releasing any forced state
    /// and starting the growing open duration over.
    pub fn reset(&self, key: &K) {
        if let Some(b) = self.shared.get(key) {
            b.force(Phase::Closed);
        }
    }

    /// [`reset`](Self::reset) for every key.
    pub fn reset_all(&self) {
        for b in self.shared.all() {
            b.force(Phase::Closed);
        }
    }
}

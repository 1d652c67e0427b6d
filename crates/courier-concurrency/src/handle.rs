//! [`ConcurrencyHandle`]: reads the limits a layer's services share.

use crate::limiter::Shared;
use std::fmt;
use std::sync::Arc;

/// Reads the calls in flight, the limit and the calls queued of each key, for the services
/// of the layer it was taken from ([`ConcurrencyLimitLayer::handle`](crate::ConcurrencyLimitLayer::handle)).
pub struct ConcurrencyHandle<K> {
    pub(crate) shared: Arc<Shared<K>>,
}

/// One key's limit, as read by [`ConcurrencyHandle::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConcurrencyStatus {
    /// Calls holding a permit: under way, or their bodies not yet ended.
    pub in_flight: usize,
    /// The limit now: fixed, or as learned so far.
    pub limit: usize,
    /// Calls waiting in the queue.
    pub queued: usize,
}

impl<K: crate::LimitKey> ConcurrencyHandle<K> {
    /// The status of `key`'s limit; `None` when no call with that key was seen (or its limit
    /// was evicted).
    pub fn status(&self, key: &K) -> Option<ConcurrencyStatus> {
        let (in_flight, limit, queued) = self.shared.get(key)?.status();
        Some(ConcurrencyStatus {
            in_flight,
            limit,
            queued,
        })
    }

    /// How many keys have a limit.
    pub fn keys(&self) -> usize {
        self.shared.len()
    }
}

impl<K> Clone for ConcurrencyHandle<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K: crate::LimitKey> fmt::Debug for ConcurrencyHandle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyHandle")
            .field("keys", &self.shared.len())
            .finish()
    }
}

//! Request bodies a layer can send again: [`RetryBody`].
//!
//! Retry sends a request body again on another attempt; the cache sends a revalidation again
//! without its validators when the server's 304 selects no stored response. Both need a copy of
//! the body, and a streaming body can only tell at run time whether it can give one whole.

use std::task::{Context, Poll};

/// A request body a layer can send again.
///
/// Implemented for every `Clone` type, and by `courier_retry::ReplayBody` for streaming bodies
/// (up to a byte cap).
pub trait RetryBody: Sized {
    /// A copy to send on another attempt, or `None` when the body cannot be sent again whole.
    fn try_clone_body(&self) -> Option<Self>;

    /// Whether a copy made now by [`try_clone_body`](Self::try_clone_body) would be whole,
    /// once no earlier attempt can still read the body.
    ///
    /// `Ready(true)`: a copy made now is whole. `Ready(false)`: it can no longer be (the body
    /// outgrew what it keeps, or failed). `Pending`: another copy may still be read, which may
    /// change the answer; the waker is woken when it has let go or the answer is known.
    ///
    /// The retry layer calls it on the copy it keeps aside, before it sends each retry. The
    /// default says `Ready(true)`: right for every `Clone` body.
    fn poll_replayable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let _ = cx;
        Poll::Ready(true)
    }

    /// A copy to keep aside while the request is sent, for a request that may have to be sent
    /// again later (the cache's, when a 304 selects nothing), or `None` when keeping one could
    /// hold back another copy's replay or might not stay whole.
    ///
    /// The default is [`try_clone_body`](Self::try_clone_body): right for every `Clone` body.
    fn try_clone_aside(&self) -> Option<Self> {
        self.try_clone_body()
    }
}

impl<T: Clone> RetryBody for T {
    fn try_clone_body(&self) -> Option<Self> {
        Some(self.clone())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    /// A body that is not `Clone` and says only whether it can be copied, to see the defaults.
    struct Once(Option<u8>);

    impl RetryBody for Once {
        fn try_clone_body(&self) -> Option<Self> {
            self.0.map(|b| Self(Some(b)))
        }
    }

    #[test]
    fn a_clone_body_copies_itself_aside_and_for_a_retry() {
        let body = String::from("payload");
        assert_eq!(body.try_clone_body().as_deref(), Some("payload"));
        assert_eq!(body.try_clone_aside().as_deref(), Some("payload"));
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(body.poll_replayable(&mut cx), Poll::Ready(true));
    }

    #[test]
    fn the_defaults_follow_try_clone_body() {
        let mut cx = Context::from_waker(Waker::noop());
        let whole = Once(Some(7));
        assert_eq!(whole.try_clone_aside().and_then(|b| b.0), Some(7));
        assert_eq!(whole.poll_replayable(&mut cx), Poll::Ready(true));
        assert!(
            Once(None).try_clone_aside().is_none(),
            "no copy aside without a copy"
        );
    }
}

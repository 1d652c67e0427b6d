//! The one failure this crate adds: a replay of a request body that is no longer whole.
//!
//! The retry layer itself adds no failures: an inner error passes through inside a
//! [`CallFailed`](courier_core::CallFailed) that carries the call's attempts, and an HTTP
//! status stays a response.

use std::error::Error;
use std::fmt;

/// A [`ReplayBody`](crate::ReplayBody) was asked to send its bytes again after they were
/// dropped: the body outgrew its replay cap, or the original body failed.
///
/// The retry layer does not retry a request whose body is over the cap (the call stops with
/// [`Reason::BodyNotReplayable`](courier_core::extensions::Reason::BodyNotReplayable)), and it
/// sends a replay only once every earlier attempt has let go of the body within the cap, so it
/// never meets this error itself. It surfaces when a replay is read while another copy is
/// still pushing the body past the cap (copies made and sent by hand): the replay then fails
/// instead of sending a partial body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayCapExceeded {
    cap: usize,
}

impl ReplayCapExceeded {
    /// The body could not be replayed under a cap of `cap` bytes.
    pub(crate) const fn new(cap: usize) -> Self {
        Self { cap }
    }

    /// The replay cap in bytes.
    pub const fn cap(&self) -> usize {
        self.cap
    }
}

impl fmt::Display for ReplayCapExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request body cannot be sent again: it is over the replay cap of {} bytes or failed; raise the cap with ReplayBody::with_cap or send it once",
            self.cap
        )
    }
}

impl Error for ReplayCapExceeded {}

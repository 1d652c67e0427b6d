//! The deadline of the request being served, as a task-local scope.
//!
//! [`DeadlineScopeLayer`](crate::DeadlineScopeLayer) runs each incoming request's handler inside
//! a scope holding that request's deadline. [`DeadlineLayer`](crate::DeadlineLayer) and
//! [`AttemptTimeoutLayer`](crate::AttemptTimeoutLayer) read it when the outgoing request's
//! [`CallContext`] carries no deadline, or a later one, so a call made while handling a request
//! never outlives what its own caller is willing to wait.
//!
//! The scope belongs to the task polling the handler. Work moved to another task
//! (`tokio::spawn`) leaves it behind: carry the deadline along with [`current_deadline`] and
//! [`scope`], or into the outgoing request's [`CallContext`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use courier_deadline::scope::{current_deadline, scope};
//! use std::time::Duration;
//! use tokio::time::Instant;
//!
//! assert_eq!(current_deadline(), None);
//! let outer = Instant::now() + Duration::from_secs(2);
//! scope(outer, async move {
//!     assert_eq!(current_deadline(), Some(outer));
//!     // A nested scope only shrinks.
//!     scope(Instant::now() + Duration::from_secs(60), async move {
//!         assert_eq!(current_deadline(), Some(outer));
//!     })
//!     .await;
//! })
//! .await;
//! # }
//! ```

use courier_core::CallContext;
use http::Extensions;
use std::future::Future;
use tokio::time::Instant;

tokio::task_local! {
    static CURRENT: Instant;
}

/// The deadline of the request being served by the current task, if a scope is active.
pub fn current_deadline() -> Option<Instant> {
    CURRENT.try_with(|d| *d).ok()
}

/// Runs `fut` with `deadline` as the current deadline, or with the active one if that is
/// earlier: a nested scope only shrinks.
///
/// The active scope is read when `scope` is called.
pub fn scope<F: Future>(deadline: Instant, fut: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(
        earliest(Some(deadline), current_deadline()).unwrap_or(deadline),
        fut,
    )
}

/// Runs `f` with `deadline` (or the active one if earlier) as the current deadline.
pub fn sync_scope<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(
        earliest(Some(deadline), current_deadline()).unwrap_or(deadline),
        f,
    )
}

/// The deadline in force for an outgoing request: the earlier of its [`CallContext`]'s and the
/// active scope's.
pub fn effective_deadline(ext: &Extensions) -> Option<Instant> {
    earliest(CallContext::deadline_in(ext), current_deadline())
}

pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

pub(crate) fn scoped<F: Future>(
    deadline: Instant,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Instant, F> {
    CURRENT.scope(deadline, fut)
}

pub(crate) fn sync_scoped<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(deadline, f)
}

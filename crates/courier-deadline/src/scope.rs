//! The deadline of the request being served, as a task-local scope.
//!
//! [`DeadlineScopeLayer`](crate::DeadlineScopeLayer) runs each incoming request's handler inside
//! a scope holding that request's deadline. [`DeadlineLayer`](crate::DeadlineLayer) and
//! [`AttemptTimeoutLayer`](crate::AttemptTimeoutLayer) read it when the outgoing request carries
//! no [`Deadline`] extension, or a later one, so a call made while handling a request never
//! outlives what its own caller is willing to wait.
//!
//! The scope belongs to the task polling the handler. Work moved to another task
//! (`tokio::spawn`) leaves it behind: carry the deadline along with [`current_deadline`] and
//! [`scope`], or copy it into the outgoing request's extensions.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use courier_core::Deadline;
//! use courier_deadline::scope::{current_deadline, scope};
//! use std::time::Duration;
//!
//! assert_eq!(current_deadline(), None);
//! let outer = Deadline::after(Duration::from_secs(2));
//! scope(outer, async move {
//!     assert_eq!(current_deadline(), Some(outer));
//!     // A nested scope only shrinks.
//!     scope(Deadline::after(Duration::from_secs(60)), async move {
//!         assert_eq!(current_deadline(), Some(outer));
//!     })
//!     .await;
//! })
//! .await;
//! # }
//! ```

use courier_core::Deadline;
use http::Extensions;
use std::future::Future;

tokio::task_local! {
    static CURRENT: Deadline;
}

/// The deadline of the request being served by the current task, if a scope is active.
pub fn current_deadline() -> Option<Deadline> {
    CURRENT.try_with(|d| *d).ok()
}

/// Runs `fut` with `deadline` as the current deadline, or with the active one if that is
/// earlier: a nested scope only shrinks.
///
/// The active scope is read when `scope` is called.
pub fn scope<F: Future>(deadline: Deadline, fut: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(
        earliest(Some(deadline), current_deadline()).unwrap_or(deadline),
        fut,
    )
}

/// Runs `f` with `deadline` (or the active one if earlier) as the current deadline.
pub fn sync_scope<R>(deadline: Deadline, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(
        earliest(Some(deadline), current_deadline()).unwrap_or(deadline),
        f,
    )
}

/// The deadline in force for an outgoing request: the earlier of its [`Deadline`] extension and
/// the active scope.
pub fn effective_deadline(ext: &Extensions) -> Option<Deadline> {
    earliest(Deadline::get(ext), current_deadline())
}

pub(crate) fn earliest(a: Option<Deadline>, b: Option<Deadline>) -> Option<Deadline> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

pub(crate) fn scoped<F: Future>(
    deadline: Deadline,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Deadline, F> {
    CURRENT.scope(deadline, fut)
}

pub(crate) fn sync_scoped<R>(deadline: Deadline, f: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(deadline, f)
}

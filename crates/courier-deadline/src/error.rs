//! The errors this crate's layers fail with, defined in `courier-core` so that every layer and
//! the facade agree on them.
//!
//! - [`DeadlineExceeded`]: the call's budget was spent. `classify_error` calls it `Local`:
//!   never retried.
//! - [`AttemptTimedOut`]: one attempt ran out of its own time. `classify_error` calls it
//!   `Timeout`: a retry layer may try again when the request is retry-safe.

pub use courier_core::{AttemptTimedOut, BoxError, DeadlineExceeded};

//! The failures this layer adds.
//!
//! An open circuit fails the call with [`CircuitOpen`] (from `courier-core`), boxed in a
//! [`BoxError`]; test for it with `err.is::<CircuitOpen>()`. Errors from the inner service pass
//! through unchanged, boxed. A setting that cannot work (a failure rate out of range) is
//! refused when it is built, with [`InvalidConfig`] (from `courier-core`, the one every layer's
//! settings answer).

pub use courier_core::{BoxError, CircuitOpen, InvalidConfig};

//! The failures this layer adds.
//!
//! An open circuit fails the call with [`CircuitOpen`] (from `courier-core`), boxed in a
//! [`BoxError`]; test for it with `err.is::<CircuitOpen>()`. Errors from the inner service pass
//! through unchanged, boxed.

use std::error::Error;
use std::fmt;

pub use courier_core::{BoxError, CircuitOpen};

/// A setting that cannot work, with what to use instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConfig {
    message: &'static str,
}

impl InvalidConfig {
    pub(crate) const fn new(message: &'static str) -> Self {
        Self { message }
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid circuit breaker setting: {}", self.message)
    }
}

impl Error for InvalidConfig {}

//! The errors of the rate limit layer.
//!
//! A refused call fails with [`RateLimited`] (from `courier-core`, so every layer and the facade
//! agree on it) inside a [`BoxError`](courier_core::BoxError); test it with
//! `err.is::<RateLimited>()` or [`is_caused_by`](courier_core::is_caused_by). A bad rate or
//! burst is refused when the layer is built, with [`InvalidConfig`].

pub use courier_core::RateLimited;

use std::error::Error;
use std::fmt;

/// A rate limit setting that cannot work, refused when it is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConfig {
    what: &'static str,
    got: String,
}

impl InvalidConfig {
    pub(crate) fn new(what: &'static str, got: impl fmt::Display) -> Self {
        Self {
            what,
            got: got.to_string(),
        }
    }

    /// What the setting must be.
    pub fn requirement(&self) -> &str {
        self.what
    }

    /// The value that was given, as text.
    pub fn given(&self) -> &str {
        &self.got
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate limit: {}, got {}; fix the value and build the layer again",
            self.what, self.got
        )
    }
}

impl Error for InvalidConfig {}

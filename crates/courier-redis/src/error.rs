//! The errors of building a [`RedisStore`](crate::RedisStore).
//!
//! Deciding never fails with an error of this crate: when Redis is slow or down, the store's
//! [`FailurePolicy`](crate::FailurePolicy) decides instead (in process, or a refusal the layer
//! returns as [`RateLimited`](courier_core::RateLimited)).

use courier_core::BoxError;
use std::error::Error;
use std::fmt;

/// Why a [`RedisStore`](crate::RedisStore) could not be built.
#[derive(Debug)]
pub struct ConnectError {
    kind: Kind,
    source: Option<BoxError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    InvalidUrl,
    NoRuntime,
    Unreachable,
}

impl ConnectError {
    pub(crate) fn invalid_url(source: redis::RedisError) -> Self {
        Self {
            kind: Kind::InvalidUrl,
            source: Some(Box::new(source)),
        }
    }

    pub(crate) fn no_runtime() -> Self {
        Self {
            kind: Kind::NoRuntime,
            source: None,
        }
    }

    pub(crate) fn unreachable(source: Option<BoxError>) -> Self {
        Self {
            kind: Kind::Unreachable,
            source,
        }
    }

    /// The URL could not be parsed.
    pub fn is_invalid_url(&self) -> bool {
        self.kind == Kind::InvalidUrl
    }

    /// The store was built outside a tokio runtime.
    pub fn is_no_runtime(&self) -> bool {
        self.kind == Kind::NoRuntime
    }

    /// Redis did not answer within the connect timeout (only from
    /// [`RedisStoreBuilder::connect`](crate::RedisStoreBuilder::connect)).
    pub fn is_unreachable(&self) -> bool {
        self.kind == Kind::Unreachable
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::InvalidUrl => "invalid redis url; use redis://[user:password@]host[:port][/db]",
            Kind::NoRuntime => {
                "the redis store must be built inside a tokio runtime; build it from async code"
            }
            Kind::Unreachable => {
                "redis did not answer within the connect timeout; check the url and that redis \
                 runs, or use connect_lazy to start without it"
            }
        })
    }
}

impl Error for ConnectError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}

/// The command did not answer within the store's command timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommandTimedOut;

impl fmt::Display for CommandTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("redis did not answer within the command timeout")
    }
}

impl Error for CommandTimedOut {}

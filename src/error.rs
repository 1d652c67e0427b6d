//! One matchable error for everything the stack can fail with.

use courier_core::classify::{FailureKind, TransportError};
use courier_core::{
    AttemptTimedOut, Attempts, BoxError, CallFailed, CircuitOpen, ConcurrencyLimited,
    DeadlineExceeded, RateLimited, attempts_of, cause_ref,
};
use std::error::Error as StdError;
use std::fmt;
use std::ops::Deref;
use std::time::Duration;

/// Every failure a courier stack can produce, as one enum to `match` on.
///
/// Layers fail with [`BoxError`]; `Error::from(box_error)` finds the courier refusal in its
/// `source()` chain, or else classifies the transport failure. HTTP statuses are never errors:
/// a 503 comes back as a response.
///
/// Every variant keeps the attempts of the call ([`attempts`](Self::attempts)): a refusal is an
/// [`Attempted`] refusal, which derefs to it; a transport failure has them beside its source.
/// A failure that no retry layer saw (a stack without one, or a refusal above it) has an empty
/// [`Attempts`].
///
/// ```
/// use courier::Error;
/// use courier::core::{BoxError, CircuitOpen};
/// use std::time::Duration;
///
/// let err: BoxError = Box::new(CircuitOpen::new(Duration::from_secs(3)));
/// match Error::from(err) {
///     Error::CircuitOpen(open) => assert_eq!(open.retry_in(), Duration::from_secs(3)),
///     other => panic!("unexpected {other}"),
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The call's total budget was spent.
    DeadlineExceeded(Attempted<DeadlineExceeded>),
    /// The last attempt timed out.
    AttemptTimedOut(Attempted<AttemptTimedOut>),
    /// The host's circuit is open.
    CircuitOpen(Attempted<CircuitOpen>),
    /// The rate limiter refused the call.
    RateLimited(Attempted<RateLimited>),
    /// The concurrency limit refused the call: as many calls as it allows were in flight.
    ConcurrencyLimited(Attempted<ConcurrencyLimited>),
    /// The transport failed: connect, timeout, read, tls or other.
    Transport {
        /// What kind of failure it was.
        kind: FailureKind,
        /// The transport's own error.
        source: BoxError,
        /// Every attempt of the call, the failed last one included.
        attempts: Attempts,
    },
    /// A pagination stream met a page it had visited already, a link it does not follow, or a
    /// page it could not read.
    #[cfg(feature = "paginate")]
    Pagination(crate::paginate::PaginationError),
    /// [`Client`](crate::Client) could not build the request (a bad URL, header name or value,
    /// or a body that did not serialize): nothing was sent.
    #[cfg(feature = "client")]
    Builder(crate::client::BuilderError),
    /// [`Client`](crate::Client) did not follow a redirect: too many hops, https to http, a
    /// body it cannot send again, or a `Location` that is no URL it follows.
    #[cfg(feature = "client")]
    Redirect(crate::client::RedirectError),
    /// An answer with a 4xx or 5xx status, from
    /// [`Response::error_for_status`](crate::client::Response::error_for_status): the
    /// response is kept, body included.
    #[cfg(feature = "client")]
    Status(crate::client::StatusError),
    /// A response body that is not the JSON asked for
    /// ([`Response::json`](crate::client::Response::json)).
    #[cfg(feature = "client")]
    Decode(crate::client::DecodeError),
}

/// No attempt: what a pagination failure of its own, or a request never built, carries.
#[cfg(any(feature = "paginate", feature = "client"))]
static NO_ATTEMPTS: Attempts = Attempts::new();

impl Error {
    /// Every attempt of the call, the first first: the last one's record says why the call
    /// stopped (`never_retried` after a refusal, `attempts_exhausted`, `deadline_passed` when
    /// the deadline ended an attempt under way, ...). Empty when the call made no attempt
    /// through a retry layer.
    pub fn attempts(&self) -> &Attempts {
        match self {
            Self::DeadlineExceeded(e) => e.attempts(),
            Self::AttemptTimedOut(e) => e.attempts(),
            Self::CircuitOpen(e) => e.attempts(),
            Self::RateLimited(e) => e.attempts(),
            Self::ConcurrencyLimited(e) => e.attempts(),
            Self::Transport { attempts, .. } => attempts,
            #[cfg(feature = "paginate")]
            Self::Pagination(_) => &NO_ATTEMPTS,
            #[cfg(feature = "client")]
            Self::Builder(_) => &NO_ATTEMPTS,
            #[cfg(feature = "client")]
            Self::Redirect(e) => e.attempts(),
            #[cfg(feature = "client")]
            Self::Status(e) => e.attempts(),
            #[cfg(feature = "client")]
            Self::Decode(e) => e.attempts(),
        }
    }

    /// The failure kind, as the retry layer classifies it.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::DeadlineExceeded(_)
            | Self::CircuitOpen(_)
            | Self::RateLimited(_)
            | Self::ConcurrencyLimited(_) => FailureKind::Local,
            Self::AttemptTimedOut(_) => FailureKind::Timeout,
            Self::Transport { kind, .. } => *kind,
            #[cfg(feature = "paginate")]
            Self::Pagination(_) => FailureKind::Other,
            #[cfg(feature = "client")]
            Self::Builder(_) => FailureKind::Local,
            #[cfg(feature = "client")]
            Self::Redirect(_) | Self::Status(_) | Self::Decode(_) => FailureKind::Other,
        }
    }

    /// How long the refusing layer says to wait before calling again, if it said.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            Self::CircuitOpen(e) => Some(e.retry_in()),
            Self::RateLimited(e) => Some(e.retry_in()),
            _ => None,
        }
    }

    /// Whether the attempt that ended the call never reached the network: the circuit
    /// breaker, the rate limiter or the concurrency limit refused it, or its connection was
    /// never made.
    ///
    /// A spent deadline says `false`: it may fire while the request is out or its response
    /// is read. For a request that is not retry-safe (POST or PATCH without an
    /// `Idempotency-Key`) this tells whether the request reached the server at all, since
    /// courier's retry repeats such a request only after a failed connect. A retried
    /// idempotent request may have reached the server on an earlier attempt.
    pub fn nothing_sent(&self) -> bool {
        #[cfg(feature = "client")]
        if matches!(self, Self::Builder(_)) {
            return true;
        }
        matches!(
            self,
            Self::CircuitOpen(_)
                | Self::RateLimited(_)
                | Self::ConcurrencyLimited(_)
                | Self::Transport {
                    kind: FailureKind::Connect,
                    ..
                }
        )
    }
}

impl From<BoxError> for Error {
    fn from(err: BoxError) -> Self {
        match err.downcast::<Self>() {
            Ok(err) => *err,
            Err(err) => {
                let (err, attempts) = match err.downcast::<CallFailed>() {
                    Ok(failed) => failed.into_parts(),
                    Err(err) => {
                        let attempts = attempts_of(&*err).cloned().unwrap_or_default();
                        (err, attempts)
                    }
                };
                classify_box(err, attempts)
            }
        }
    }
}

fn classify_box(err: BoxError, attempts: Attempts) -> Error {
    let e: &(dyn StdError + 'static) = &*err;
    // The outermost refusal wins: a deadline that fired while the breaker was open is a
    // deadline.
    if let Some(d) = cause_ref::<DeadlineExceeded>(e) {
        return Error::DeadlineExceeded(Attempted::new(*d, attempts));
    }
    if let Some(c) = cause_ref::<CircuitOpen>(e) {
        return Error::CircuitOpen(Attempted::new(*c, attempts));
    }
    if let Some(r) = cause_ref::<RateLimited>(e) {
        return Error::RateLimited(Attempted::new(*r, attempts));
    }
    if let Some(c) = cause_ref::<ConcurrencyLimited>(e) {
        return Error::ConcurrencyLimited(Attempted::new(*c, attempts));
    }
    if let Some(t) = cause_ref::<AttemptTimedOut>(e) {
        return Error::AttemptTimedOut(Attempted::new(*t, attempts));
    }
    // A transport's mark is kept, and the error shown is the transport's own.
    match err.downcast::<TransportError>() {
        Ok(marked) => Error::Transport {
            kind: marked.kind(),
            source: marked.into_inner(),
            attempts,
        },
        Err(err) => Error::Transport {
            kind: crate::transport::classify(&*err),
            source: err,
            attempts,
        },
    }
}

/// A refusal of one of courier's layers, with the attempts of the call it ended; it derefs to
/// the refusal, so `Error::CircuitOpen(open) => open.retry_in()` reads as the refusal does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempted<T> {
    refusal: T,
    attempts: Attempts,
}

// === impl Attempted ===

impl<T> Attempted<T> {
    /// `refusal`, which ended a call after `attempts`.
    pub const fn new(refusal: T, attempts: Attempts) -> Self {
        Self { refusal, attempts }
    }

    /// Every attempt of the call; see [`Error::attempts`].
    pub fn attempts(&self) -> &Attempts {
        &self.attempts
    }

    /// The refusal.
    pub fn into_inner(self) -> T {
        self.refusal
    }
}

impl<T> Deref for Attempted<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.refusal
    }
}

impl<T: fmt::Display> fmt::Display for Attempted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.refusal.fmt(f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadlineExceeded(e) => e.fmt(f),
            Self::AttemptTimedOut(e) => e.fmt(f),
            Self::CircuitOpen(e) => e.fmt(f),
            Self::RateLimited(e) => e.fmt(f),
            Self::ConcurrencyLimited(e) => e.fmt(f),
            Self::Transport { kind, source, .. } => {
                // Each part quoted as an excerpt: a client's message may hold the URL or a
                // header it was given, whole, control characters and all.
                let quoted = |e: &dyn StdError| {
                    courier_core::excerpt::Excerpt::new(&e.to_string()).to_string()
                };
                write!(f, "{kind} failure: {}", quoted(&**source))?;
                let mut next = source.source();
                while let Some(cause) = next {
                    write!(f, ": {}", quoted(cause))?;
                    next = cause.source();
                }
                Ok(())
            }
            #[cfg(feature = "paginate")]
            Self::Pagination(e) => write!(f, "pagination stopped: {e}"),
            #[cfg(feature = "client")]
            Self::Builder(e) => e.fmt(f),
            #[cfg(feature = "client")]
            Self::Redirect(e) => e.fmt(f),
            #[cfg(feature = "client")]
            Self::Status(e) => e.fmt(f),
            #[cfg(feature = "client")]
            Self::Decode(e) => e.fmt(f),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::DeadlineExceeded(e) => Some(&**e),
            Self::AttemptTimedOut(e) => Some(&**e),
            Self::CircuitOpen(e) => Some(&**e),
            Self::RateLimited(e) => Some(&**e),
            Self::ConcurrencyLimited(e) => Some(&**e),
            Self::Transport { source, .. } => Some(&**source),
            #[cfg(feature = "paginate")]
            Self::Pagination(e) => Some(e),
            #[cfg(feature = "client")]
            Self::Builder(e) => Some(e),
            #[cfg(feature = "client")]
            Self::Redirect(e) => Some(e),
            #[cfg(feature = "client")]
            Self::Status(e) => Some(e),
            #[cfg(feature = "client")]
            Self::Decode(e) => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn a_transport_failure_quotes_its_causes_bounded_and_escaped() {
        let long = format!(
            "error sending request for url (http://h/{}\r\nX: 1)",
            "a".repeat(5000)
        );
        let e = Error::from(BoxError::from(io::Error::new(
            io::ErrorKind::ConnectionReset,
            long,
        )));
        let text = e.to_string();
        assert!(text.len() < 600, "{} bytes", text.len());
        assert!(!text.contains('\r') && !text.contains('\n'), "{text}");
        assert!(text.contains("bytes)"), "{text}");
    }

    #[test]
    fn classifies_refusals_and_transport_failures() {
        let e = Error::from(BoxError::from(RateLimited::new(Duration::from_secs(1))));
        assert!(matches!(e, Error::RateLimited(_)));
        assert_eq!(e.retry_in(), Some(Duration::from_secs(1)));
        assert!(e.nothing_sent());

        let e = Error::from(BoxError::from(ConcurrencyLimited::new(8, 8)));
        let Error::ConcurrencyLimited(limited) = &e else {
            panic!("a concurrency refusal, got {e:?}")
        };
        assert_eq!((limited.in_flight(), limited.limit()), (8, 8));
        assert_eq!(e.kind(), FailureKind::Local);
        assert!(e.nothing_sent());
        assert_eq!(e.retry_in(), None);

        let e = Error::from(BoxError::from(io::Error::from(
            io::ErrorKind::ConnectionReset,
        )));
        assert!(matches!(
            e,
            Error::Transport {
                kind: FailureKind::Read,
                ..
            }
        ));
        assert!(!e.nothing_sent());

        let e = Error::from(BoxError::from(DeadlineExceeded::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
        )));
        assert!(
            !e.nothing_sent(),
            "a deadline may fire with the request out"
        );

        let wrapped = io::Error::other(DeadlineExceeded::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
        ));
        assert!(matches!(
            Error::from(BoxError::from(wrapped)),
            Error::DeadlineExceeded(_)
        ));
    }

    #[cfg(feature = "paginate")]
    #[test]
    fn converting_twice_keeps_the_variant() {
        use crate::paginate::PaginationError;
        let looping = PaginationError::CursorLoop {
            cursor: "c2".into(),
        };
        let e: BoxError = Box::new(Error::Pagination(looping));
        assert!(matches!(
            Error::from(e),
            Error::Pagination(PaginationError::CursorLoop { .. })
        ));
    }
}

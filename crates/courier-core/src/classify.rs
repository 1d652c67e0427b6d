//! Did it work, and may asking again change the answer?
//!
//! Two questions, one per kind of answer:
//!
//! - A **status**: 408, 429, 500, 502, 503 and 504 may change if asked again; 501 and every other
//!   status is final. A 403 counts as a rate limit (and so may change) only when it carries
//!   `Retry-After` or says the quota is spent ([`may_change`]).
//! - A **failure**: [`classify_error`] walks the error's `source()` chain and names its
//!   [`FailureKind`]: connect (nothing was sent, so any method may be retried), timeout or read
//!   (the request may have run: idempotent methods only), tls or local (never retried), other.
//!
//! # Who knows what
//!
//! This crate carries no HTTP client and has no features: the same error is classified the
//! same way in every build. It recognises, by type, [`TransportError`] (a failure its
//! transport has already classified), [`TlsError`], courier's own refusals, tokio's `Elapsed`
//! and `std::io::Error` kinds (an `io::Error`'s payload first). A transport's own error types
//! are the transport's to know: the `courier` facade's transports (hyper-util, reqwest, a tonic
//! channel) hand up every failure as a [`TransportError`], classified by typed downcasts of
//! hyper's, hyper-util's, reqwest's and rustls's errors (`courier::transport::classify`).
//!
//! A layer put over a client of your own sees that client's errors: an error this crate does
//! not know is read through the `io::Error` it wraps, where it wraps one, and is `Other`
//! otherwise. Classify them where they are made: map them into a [`TransportError`]
//! (`ServiceBuilder::map_err(courier::transport::classified)` with the facade, or
//! [`TransportError::new`] with a kind of your choosing), or walk them with
//! [`classify_error_with`] and a function that knows your client's types.
//!
//! An I/O error such as "host unreachable" is connect only where no transport error about an
//! established connection wraps it ([`Recognized::Connection`]): hyper reports the same kinds
//! on a socket that has already sent the request.

use crate::error::{
    AttemptTimedOut, BoxError, CircuitOpen, ConcurrencyLimited, DeadlineExceeded, RateLimited,
};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::fmt;
use std::io;

/// The statuses that may change if the same request is asked again.
#[doc(hidden)]
pub const RETRYABLE_STATUSES: [StatusCode; 6] = [
    StatusCode::REQUEST_TIMEOUT,
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::INTERNAL_SERVER_ERROR,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// Whether `status` is one of [`RETRYABLE_STATUSES`].
#[doc(hidden)]
pub fn is_retryable_status(status: StatusCode) -> bool {
    RETRYABLE_STATUSES.contains(&status)
}

/// Whether a 403 is a rate limit: it carries a `Retry-After` or says the quota is spent.
#[doc(hidden)]
pub fn is_rate_limit_403(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::FORBIDDEN
        && (headers.contains_key(http::header::RETRY_AFTER)
            || crate::hints::quota_exhausted(headers))
}

/// Whether asking again may change this answer: a retryable status, or a rate-limiting 403.
pub fn may_change(status: StatusCode, headers: &HeaderMap) -> bool {
    is_retryable_status(status) || is_rate_limit_403(status, headers)
}

/// What kind of failure an error is, for deciding whether to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The connection was never made: nothing was sent. Safe to retry for any method.
    Connect,
    /// No answer in time. The request may have run.
    Timeout,
    /// The connection broke while sending or reading (reset, closed, incomplete message). The
    /// request may have run.
    Read,
    /// The TLS handshake or certificate check failed. Retrying will not help.
    Tls,
    /// A failure on our side: one of our own refusals (open circuit, rate limited, deadline
    /// spent), or a request the transport reports as the caller's own: its body failing while
    /// it was written (a body that errs or ends short of its length), whatever the body's own
    /// error says, or a request the transport cannot send. Never retried, and no mark against
    /// the host.
    Local,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// A short snake_case name for logs.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Read => "read",
            Self::Tls => "tls",
            Self::Local => "local",
            Self::Other => "other",
        }
    }

    /// Whether the request certainly did not reach the server.
    pub const fn nothing_sent(&self) -> bool {
        matches!(self, Self::Connect)
    }

    /// Whether this kind may be retried at all (for a retry-safe request).
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Self::Connect | Self::Timeout | Self::Read)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names the kind of failure by walking `err`'s `source()` chain, outermost first, with what
/// this crate knows (see [Who knows what](self#who-knows-what)).
///
/// ```
/// use courier_core::classify::{FailureKind, classify_error};
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(classify_error(&refused), FailureKind::Connect);
/// let reset = io::Error::from(io::ErrorKind::ConnectionReset);
/// assert_eq!(classify_error(&reset), FailureKind::Read);
/// ```
pub fn classify_error(err: &(dyn Error + 'static)) -> FailureKind {
    classify_error_with(err, |_| None)
}

/// What a transport says of one of its own errors (that error alone, not its causes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recognized {
    /// The error is of this kind, whatever it wraps.
    Kind(FailureKind),
    /// The error is the transport's, about a connection it had, and says no kind of its own:
    /// the walk goes on to its causes, where an I/O kind that would mean "nothing was sent"
    /// (host unreachable, not connected) came after the request may have been written, and is
    /// a read failure.
    Connection,
}

/// [`classify_error`], asking `recognize` first about each error of the chain: how a
/// transport teaches the walk its own error types, by typed downcasts. The errors this crate
/// knows are recognised after `recognize` has said nothing; a [`TransportError`] or a
/// [`TlsError`] before it.
///
/// ```
/// use courier_core::classify::{FailureKind, Recognized, classify_error_with};
/// use std::{fmt, io};
///
/// #[derive(Debug)]
/// struct PoolClosed;
/// impl fmt::Display for PoolClosed {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("pool closed")
///     }
/// }
/// impl std::error::Error for PoolClosed {}
///
/// let err = io::Error::other(PoolClosed);
/// let kind = classify_error_with(&err, |e| {
///     e.is::<PoolClosed>().then_some(Recognized::Kind(FailureKind::Read))
/// });
/// assert_eq!(kind, FailureKind::Read);
/// ```
pub fn classify_error_with(
    err: &(dyn Error + 'static),
    recognize: impl Fn(&(dyn Error + 'static)) -> Option<Recognized>,
) -> FailureKind {
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    // Whether the walk has passed a transport's error about a connection it had: a connect
    // failure reports itself as such first, so below one of these an I/O kind that would mean
    // "nothing was sent" (host unreachable, not connected) came after the request may have
    // been written, as Linux reports on an established socket once its retransmissions fail.
    let mut connected = false;
    while let Some(e) = next {
        match classify_one(e, &recognize) {
            Some(Recognized::Kind(kind)) => {
                return match kind {
                    FailureKind::Connect if connected => FailureKind::Read,
                    kind => kind,
                };
            }
            Some(Recognized::Connection) => connected = true,
            None => {}
        }
        next = crate::error::next_cause(e);
    }
    FailureKind::Other
}

fn classify_one(
    e: &(dyn Error + 'static),
    recognize: &impl Fn(&(dyn Error + 'static)) -> Option<Recognized>,
) -> Option<Recognized> {
    // A transport's explicit mark wins over whatever it wraps (a refusal from the handshake's
    // connection included): a TLS failure is not retried.
    if let Some(t) = e.downcast_ref::<TransportError>() {
        return Some(Recognized::Kind(t.kind));
    }
    if e.is::<TlsError>() {
        return Some(Recognized::Kind(FailureKind::Tls));
    }
    if let Some(known) = recognize(e) {
        return Some(known);
    }
    let kind = if e.is::<DeadlineExceeded>()
        || e.is::<CircuitOpen>()
        || e.is::<RateLimited>()
        || e.is::<ConcurrencyLimited>()
    {
        FailureKind::Local
    } else if e.is::<AttemptTimedOut>() || e.is::<tokio::time::error::Elapsed>() {
        FailureKind::Timeout
    } else if let Some(err) = e.downcast_ref::<io::Error>() {
        return classify_io(err, recognize);
    } else {
        return None;
    };
    Some(Recognized::Kind(kind))
}

fn classify_io(
    err: &io::Error,
    recognize: &impl Fn(&(dyn Error + 'static)) -> Option<Recognized>,
) -> Option<Recognized> {
    use io::ErrorKind::*;
    // io::Error's own source() skips the payload; look at it directly. What the payload is
    // (a TLS stack's failure, one of our refusals) wins over the kind it was filed under.
    if let Some(Recognized::Kind(kind)) = err
        .get_ref()
        .and_then(|inner| classify_one(inner, recognize))
    {
        return Some(Recognized::Kind(kind));
    }
    let kind = match err.kind() {
        ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable
        | NotConnected => FailureKind::Connect,
        TimedOut => FailureKind::Timeout,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => FailureKind::Read,
        _ => return None,
    };
    Some(Recognized::Kind(kind))
}

/// A transport's failure with the kind the transport gave it: [`classify_error`] takes that
/// kind as it is, whatever the error wraps.
///
/// The `courier` facade's transports hand up every failure as one of these; a transport of
/// your own can too, with a kind of its choosing. It is transparent: `Display` is the
/// original error's, `source()` is the original error, and
/// [`cause_ref`](crate::cause_ref) finds the original's type through it.
///
/// ```
/// use courier_core::classify::{FailureKind, TransportError, classify_error};
/// use std::io;
///
/// // A pool that reports "not connected" for a connection it had: a read failure.
/// let err = TransportError::new(FailureKind::Read, io::Error::from(io::ErrorKind::NotConnected));
/// assert_eq!(classify_error(&err), FailureKind::Read);
/// assert!(courier_core::is_caused_by::<io::Error>(&err));
/// ```
#[derive(Debug)]
pub struct TransportError {
    kind: FailureKind,
    source: BoxError,
}

impl TransportError {
    /// `source`, classified as `kind`.
    pub fn new(kind: FailureKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// The kind the transport gave the failure.
    pub const fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The transport's own error.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.source
    }

    /// The transport's own error, unwrapped.
    pub fn into_inner(self) -> BoxError {
        self.source
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl Error for TransportError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

/// A TLS failure, for transports that want to mark one explicitly (classified as
/// [`FailureKind::Tls`]).
#[derive(Debug)]
pub struct TlsError(pub Box<dyn Error + Send + Sync + 'static>);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tls failure: {}; check the certificate and the server name",
            self.0
        )
    }
}

impl Error for TlsError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_tls_error_is_tls_alone_wrapped_or_wrapping() {
        let bare = TlsError("unknown issuer".into());
        assert_eq!(classify_error(&bare), FailureKind::Tls);
        let over_refusal = TlsError(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(classify_error(&over_refusal), FailureKind::Tls);
        let in_io = io::Error::other(TlsError("expired".into()));
        assert_eq!(classify_error(&in_io), FailureKind::Tls);
    }

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn statuses() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(
                may_change(StatusCode::from_u16(s).unwrap(), &HeaderMap::new()),
                "{s}"
            );
        }
        for s in [
            200, 201, 204, 301, 304, 400, 401, 403, 404, 409, 422, 501, 505,
        ] {
            assert!(
                !may_change(StatusCode::from_u16(s).unwrap(), &HeaderMap::new()),
                "{s}"
            );
        }
        assert!(may_change(
            StatusCode::FORBIDDEN,
            &hm(&[("retry-after", "5")])
        ));
        assert!(may_change(
            StatusCode::FORBIDDEN,
            &hm(&[("x-ratelimit-remaining", "0")])
        ));
        assert!(!may_change(
            StatusCode::FORBIDDEN,
            &hm(&[("x-ratelimit-remaining", "10")])
        ));
    }

    #[derive(Debug)]
    struct Wrap(Box<dyn Error + Send + Sync>);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrap")
        }
    }
    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn io_kinds() {
        use io::ErrorKind::*;
        for (kind, want) in [
            (ConnectionRefused, FailureKind::Connect),
            (TimedOut, FailureKind::Timeout),
            (ConnectionReset, FailureKind::Read),
            (UnexpectedEof, FailureKind::Read),
            (BrokenPipe, FailureKind::Read),
            (PermissionDenied, FailureKind::Other),
        ] {
            let err = Wrap(Box::new(io::Error::from(kind)));
            assert_eq!(classify_error(&err), want, "{kind:?}");
        }
    }

    #[test]
    fn our_refusals_are_local_and_timeouts_are_timeouts() {
        let err = Wrap(Box::new(CircuitOpen::new(Duration::from_secs(1))));
        assert_eq!(classify_error(&err), FailureKind::Local);
        let err = Wrap(Box::new(DeadlineExceeded::new(
            Duration::ZERO,
            Duration::ZERO,
        )));
        assert_eq!(classify_error(&err), FailureKind::Local);
        let err = Wrap(Box::new(AttemptTimedOut::new(Duration::from_secs(1))));
        assert_eq!(classify_error(&err), FailureKind::Timeout);
        // A refusal wrapped in an io::Error payload is still ours.
        let err = io::Error::other(RateLimited::new(Duration::from_secs(1)));
        assert_eq!(classify_error(&err), FailureKind::Local);
    }

    #[test]
    fn tls_marker() {
        let err = io::Error::new(io::ErrorKind::InvalidData, TlsError("bad cert".into()));
        assert_eq!(classify_error(&Wrap(Box::new(err))), FailureKind::Tls);
    }

    #[test]
    fn every_failure_kind_has_its_own_name_and_retry_rule() {
        // (kind, name in logs, nothing was sent, may be retried)
        let table = [
            (FailureKind::Connect, "connect", true, true),
            (FailureKind::Timeout, "timeout", false, true),
            (FailureKind::Read, "read", false, true),
            (FailureKind::Tls, "tls", false, false),
            (FailureKind::Local, "local", false, false),
            (FailureKind::Other, "other", false, false),
        ];
        for (kind, name, nothing_sent, retryable) in table {
            assert_eq!(kind.as_str(), name, "{kind:?}");
            assert_eq!(kind.to_string(), name, "{kind:?}");
            assert_eq!(kind.nothing_sent(), nothing_sent, "{kind:?}");
            assert_eq!(kind.is_retryable(), retryable, "{kind:?}");
        }
    }

    /// An error of a TLS stack, printing in `Debug` what that stack prints.
    struct StackError(&'static str);
    impl fmt::Debug for StackError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl fmt::Display for StackError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("stack error")
        }
    }
    impl Error for StackError {}

    #[test]
    fn an_io_payload_that_is_no_tls_failure_leaves_the_kind_to_decide() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "connect to 10.0.0.1:443");
        assert_eq!(classify_error(&refused), FailureKind::Connect);
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, StackError("Reset"));
        assert_eq!(classify_error(&reset), FailureKind::Read);
        let other = io::Error::other("disk full");
        assert_eq!(classify_error(&other), FailureKind::Other);
    }

    /// A failure no type here knows, filed under an I/O kind that means "nothing was sent".
    #[test]
    fn an_unknown_payload_is_read_through_its_io_kind_in_every_build() {
        let err = io::Error::new(
            io::ErrorKind::ConnectionRefused,
            StackError("InvalidCertificate(UnknownIssuer)"),
        );
        assert_eq!(
            classify_error(&err),
            FailureKind::Connect,
            "no error is classified by its text"
        );
    }

    #[test]
    fn a_transport_error_keeps_the_kind_its_transport_gave_it() {
        let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
        for kind in [
            FailureKind::Connect,
            FailureKind::Timeout,
            FailureKind::Read,
            FailureKind::Tls,
            FailureKind::Local,
            FailureKind::Other,
        ] {
            let err = TransportError::new(kind, refused());
            assert_eq!(classify_error(&err), kind, "{kind:?}");
            assert_eq!(classify_error(&Wrap(Box::new(err))), kind, "{kind:?}");
        }
        let err = TransportError::new(FailureKind::Read, refused());
        assert_eq!(err.kind(), FailureKind::Read);
        assert_eq!(err.to_string(), refused().to_string(), "transparent");
        assert!(err.source().is_some_and(|s| s.is::<io::Error>()));
        assert!(crate::error::is_caused_by::<io::Error>(&err));
        assert!(err.get_ref().is::<io::Error>());
        assert!(err.into_inner().is::<io::Error>());
    }

    /// A transport's own error types, taught to the walk.
    #[derive(Debug)]
    enum Client {
        Connecting,
        Connected(io::Error),
    }
    impl fmt::Display for Client {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("client error")
        }
    }
    impl Error for Client {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            match self {
                Self::Connecting => None,
                Self::Connected(io) => Some(io),
            }
        }
    }

    fn recognize(e: &(dyn Error + 'static)) -> Option<Recognized> {
        match e.downcast_ref::<Client>()? {
            Client::Connecting => Some(Recognized::Kind(FailureKind::Connect)),
            Client::Connected(_) => Some(Recognized::Connection),
        }
    }

    #[test]
    fn a_transport_teaches_the_walk_its_types() {
        let connecting = Wrap(Box::new(Client::Connecting));
        assert_eq!(classify_error(&connecting), FailureKind::Other);
        assert_eq!(
            classify_error_with(&connecting, recognize),
            FailureKind::Connect
        );
        // Below an error about a connection it had, "unreachable" came after the request.
        let lost = Client::Connected(io::Error::from(io::ErrorKind::HostUnreachable));
        assert_eq!(classify_error(&lost), FailureKind::Connect, "core alone");
        assert_eq!(classify_error_with(&lost, recognize), FailureKind::Read);
        // An explicit mark wins over what the transport would say.
        let marked = TransportError::new(FailureKind::Tls, Client::Connecting);
        assert_eq!(classify_error_with(&marked, recognize), FailureKind::Tls);
        // In an I/O payload, the transport's kind wins over the kind it was filed under.
        let filed = io::Error::new(io::ErrorKind::ConnectionReset, Client::Connecting);
        assert_eq!(classify_error_with(&filed, recognize), FailureKind::Connect);
    }

    #[test]
    fn a_tls_error_says_what_to_check_and_keeps_its_cause() {
        let cause = io::Error::new(io::ErrorKind::InvalidData, "unknown issuer");
        let err = TlsError(Box::new(cause));
        assert_eq!(
            err.to_string(),
            "tls failure: unknown issuer; check the certificate and the server name"
        );
        let source = err.source().expect("the wrapped failure is the source");
        assert_eq!(source.to_string(), "unknown issuer");
        assert!(crate::error::is_caused_by::<io::Error>(&err));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_elapsed() {
        let err = tokio::time::timeout(Duration::from_millis(1), std::future::pending::<()>())
            .await
            .unwrap_err();
        assert_eq!(classify_error(&err), FailureKind::Timeout);
    }
}

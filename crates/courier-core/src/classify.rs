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
//!   An I/O error such as "host unreachable" is connect only where no transport error about an
//!   established connection wraps it: hyper reports the same kinds on a socket that has already
//!   sent the request.
//!
//! It recognises `std::io::Error` kinds, tokio's `Elapsed`, courier's own refusals and
//! [`TlsError`] always; hyper-util's legacy client error and `hyper::Error` with the `hyper`
//! feature; `reqwest::Error` with the `reqwest` feature; tower's `Elapsed` with the `tower`
//! feature. The `courier` facade turns on the features of the transports it is built with, so
//! that this crate itself carries no HTTP client. Without the feature, a transport's error is
//! still read through the `std::io::Error` it wraps, where it wraps one.

use crate::error::{AttemptTimedOut, CircuitOpen, DeadlineExceeded, RateLimited};
use http::{HeaderMap, StatusCode};
use std::error::Error;
use std::fmt;
use std::io;

/// The statuses that may change if the same request is asked again.
pub const RETRYABLE_STATUSES: [StatusCode; 6] = [
    StatusCode::REQUEST_TIMEOUT,
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::INTERNAL_SERVER_ERROR,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// Whether `status` is one of [`RETRYABLE_STATUSES`].
pub fn is_retryable_status(status: StatusCode) -> bool {
    RETRYABLE_STATUSES.contains(&status)
}

/// Whether a 403 is a rate limit: it carries a `Retry-After` or says the quota is spent.
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
    /// spent), or a request hyper reports as the caller's own: its body failing while it was
    /// written (a body that errs or ends short of its length), whatever the body's own error
    /// says, or a request hyper cannot send. Never retried, and no mark against the host.
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

/// Names the kind of failure by walking `err`'s `source()` chain, outermost first.
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
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    // Whether the walk has passed a transport's error about a connection it had: a connect
    // failure reports itself as such first, so below one of these an I/O kind that would mean
    // "nothing was sent" (host unreachable, not connected) came after the request may have
    // been written, as Linux reports on an established socket once its retransmissions fail.
    let mut connected = false;
    while let Some(e) = next {
        if let Some(kind) = classify_one(e) {
            return match kind {
                FailureKind::Connect if connected => FailureKind::Read,
                kind => kind,
            };
        }
        connected |= is_transport_error(e);
        next = crate::error::next_cause(e);
    }
    FailureKind::Other
}

/// An error of a transport this module knows, which [`classify_one`] did not take as a connect
/// failure.
fn is_transport_error(e: &(dyn Error + 'static)) -> bool {
    #[cfg(feature = "reqwest")]
    if e.is::<reqwest::Error>() {
        return true;
    }
    #[cfg(feature = "hyper")]
    if e.is::<hyper::Error>() || e.is::<hyper_util::client::legacy::Error>() {
        return true;
    }
    let _ = e;
    false
}

fn classify_one(e: &(dyn Error + 'static)) -> Option<FailureKind> {
    // A transport's explicit mark wins over whatever it wraps (a refusal from the handshake's
    // connection included): a TLS failure is not retried.
    if e.is::<TlsError>() {
        return Some(FailureKind::Tls);
    }
    if e.is::<DeadlineExceeded>() || e.is::<CircuitOpen>() || e.is::<RateLimited>() {
        return Some(FailureKind::Local);
    }
    if e.is::<AttemptTimedOut>() || e.is::<tokio::time::error::Elapsed>() {
        return Some(FailureKind::Timeout);
    }
    #[cfg(feature = "tower")]
    if e.is::<tower::timeout::error::Elapsed>() {
        return Some(FailureKind::Timeout);
    }
    #[cfg(feature = "hyper")]
    if let Some(err) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if err.is_connect() {
            return Some(if chain_has_tls(e) {
                FailureKind::Tls
            } else {
                FailureKind::Connect
            });
        }
        return None;
    }
    #[cfg(feature = "hyper")]
    if let Some(err) = e.downcast_ref::<hyper::Error>() {
        if is_callers_own(err) {
            return Some(FailureKind::Local);
        }
        if err.is_timeout() {
            return Some(FailureKind::Timeout);
        }
        if err.is_incomplete_message() || err.is_canceled() || err.is_closed() || err.is_parse() {
            return Some(FailureKind::Read);
        }
        return None;
    }
    #[cfg(feature = "reqwest")]
    if let Some(err) = e.downcast_ref::<reqwest::Error>() {
        // reqwest's `is_timeout` looks through the whole chain, down to the error of a
        // request body that failed: the body's own failure decides first.
        if err.is_builder() || chain_has_callers_own(e) {
            return Some(FailureKind::Local);
        }
        if err.is_connect() {
            return Some(if chain_has_tls(e) {
                FailureKind::Tls
            } else {
                FailureKind::Connect
            });
        }
        if err.is_timeout() {
            return Some(FailureKind::Timeout);
        }
        return None;
    }
    if let Some(err) = e.downcast_ref::<io::Error>() {
        return classify_io(err);
    }
    None
}

fn classify_io(err: &io::Error) -> Option<FailureKind> {
    use io::ErrorKind::*;
    // io::Error's own source() skips the payload; look at it directly.
    if let Some(inner) = err.get_ref() {
        if let Some(kind) = classify_one(inner) {
            return Some(kind);
        }
        if looks_like_tls(inner) {
            return Some(FailureKind::Tls);
        }
    }
    match err.kind() {
        ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable
        | NotConnected => Some(FailureKind::Connect),
        TimedOut => Some(FailureKind::Timeout),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => Some(FailureKind::Read),
        _ => None,
    }
}

/// The caller's side of a request failed, not the host: the request's own body erred
/// (`User::Body`) or ended short of its length ("body write aborted"), or the request was one
/// hyper cannot send. Sending it again fails the same way.
#[cfg(feature = "hyper")]
fn is_callers_own(err: &hyper::Error) -> bool {
    err.is_user() || err.is_body_write_aborted()
}

#[cfg(feature = "reqwest")]
fn chain_has_callers_own(err: &(dyn Error + 'static)) -> bool {
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<hyper::Error>().is_some_and(is_callers_own) {
            return true;
        }
        next = crate::error::next_cause(e);
    }
    false
}

#[cfg(feature = "hyper")]
fn chain_has_tls(err: &(dyn Error + 'static)) -> bool {
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        if looks_like_tls(e) {
            return true;
        }
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.get_ref().is_some_and(|inner| looks_like_tls(inner))
        {
            return true;
        }
        next = crate::error::next_cause(e);
    }
    false
}

/// TLS stacks are not dependencies of this crate; their errors are recognised by the type name
/// they print in `Debug` (`rustls::Error` prints its variants, native-tls its `ssl` errors), or
/// by [`TlsError`], which adapters can wrap a TLS failure in.
fn looks_like_tls(e: &(dyn Error + 'static)) -> bool {
    if e.is::<TlsError>() {
        return true;
    }
    let debug = format!("{e:?}");
    [
        "InvalidCertificate",
        "AlertReceived",
        "PeerIncompatible",
        "PeerMisbehaved",
        "NoCertificatesPresented",
        "UnsupportedNameType",
        "HandshakeFailure",
        "CERTIFICATE_VERIFY_FAILED",
        "certificate verify failed",
    ]
    .iter()
    .any(|needle| debug.contains(needle))
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
        #[cfg(feature = "tower")]
        {
            let err = Wrap(Box::new(tower::timeout::error::Elapsed::new()));
            assert_eq!(classify_error(&err), FailureKind::Timeout);
        }
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

    #[test]
    fn tls_stack_errors_are_known_by_their_debug_names() {
        for debug in [
            "InvalidCertificate(UnknownIssuer)",
            "AlertReceived(HandshakeFailure)",
            "PeerIncompatible(Tls12NotOffered)",
            "PeerMisbehaved(IncorrectBinderValue)",
            "NoCertificatesPresented",
            "UnsupportedNameType",
            "Ssl(HandshakeFailure)",
            "Ssl(Error { code: 1, reason: CERTIFICATE_VERIFY_FAILED })",
            "error:0A000086:SSL routines::certificate verify failed",
        ] {
            let err = io::Error::new(io::ErrorKind::InvalidData, StackError(debug));
            assert_eq!(classify_error(&err), FailureKind::Tls, "{debug}");
            // Even under an I/O kind that would otherwise mean "nothing sent".
            let err = io::Error::new(io::ErrorKind::ConnectionRefused, StackError(debug));
            assert_eq!(classify_error(&err), FailureKind::Tls, "{debug}");
        }
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

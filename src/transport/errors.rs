//! What the transports' own errors mean, known by their types: see [Failures](super#failures).

use courier_core::BoxError;
use courier_core::classify::{FailureKind, Recognized, TransportError, classify_error_with};
use std::error::Error;

/// The kind of failure `err` is, with what the facade's transports know of their own errors
/// (see [Failures](super#failures)) and what courier-core knows of the rest.
pub fn classify(err: &(dyn Error + 'static)) -> FailureKind {
    classify_error_with(err, recognize)
}

/// `err` as a [`TransportError`] of the kind [`classify`] gives it: for
/// `ServiceBuilder::map_err` over a client the facade did not build. An error that is a
/// `TransportError` already is kept as it is.
pub fn classified<E: Into<BoxError>>(err: E) -> TransportError {
    let err = err.into();
    match err.downcast::<TransportError>() {
        Ok(done) => *done,
        Err(err) => TransportError::new(classify(&*err), err),
    }
}

/// What one error of a transport's says of itself; `None` for a type it does not know.
fn recognize(e: &(dyn Error + 'static)) -> Option<Recognized> {
    if e.is::<tower::timeout::error::Elapsed>() {
        return Some(Recognized::Kind(FailureKind::Timeout));
    }
    #[cfg(feature = "rustls")]
    if e.is::<rustls::Error>() {
        return Some(Recognized::Kind(FailureKind::Tls));
    }
    #[cfg(any(feature = "hyper-client", feature = "reqwest"))]
    if let Some(known) = hyper_errors::recognize(e) {
        return Some(known);
    }
    #[cfg(feature = "reqwest")]
    if let Some(err) = e.downcast_ref::<reqwest::Error>() {
        // reqwest's `is_timeout` looks through the whole chain, down to the error of a
        // request body that failed: the body's own failure decides first.
        let kind = if err.is_builder() || hyper_errors::chain_has_callers_own(e) {
            FailureKind::Local
        } else if err.is_connect() {
            connect_or_tls(e)
        } else if err.is_timeout() {
            FailureKind::Timeout
        } else {
            return Some(Recognized::Connection);
        };
        return Some(Recognized::Kind(kind));
    }
    None
}

/// A connect failure: `tls` when its handshake failed, else `connect`.
#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
fn connect_or_tls(err: &(dyn Error + 'static)) -> FailureKind {
    if chain_has_tls(err) {
        FailureKind::Tls
    } else {
        FailureKind::Connect
    }
}

/// Whether a TLS stack's failure stands in `err`'s chain (I/O payloads included).
#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
fn chain_has_tls(err: &(dyn Error + 'static)) -> bool {
    #[cfg(feature = "rustls")]
    if courier_core::is_caused_by::<rustls::Error>(err) {
        return true;
    }
    courier_core::is_caused_by::<courier_core::classify::TlsError>(err)
}

#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
mod hyper_errors {
    use super::{FailureKind, Recognized, connect_or_tls};
    use std::error::Error;

    /// hyper-util's legacy client error and `hyper::Error`.
    pub(super) fn recognize(e: &(dyn Error + 'static)) -> Option<Recognized> {
        if let Some(err) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            return Some(if err.is_connect() {
                Recognized::Kind(connect_or_tls(e))
            } else {
                Recognized::Connection
            });
        }
        let err = e.downcast_ref::<hyper::Error>()?;
        let kind = if is_callers_own(err) {
            FailureKind::Local
        } else if err.is_timeout() {
            FailureKind::Timeout
        } else if err.is_incomplete_message()
            || err.is_canceled()
            || err.is_closed()
            || err.is_parse()
        {
            // Under TLS 1.3 a server refuses the client's certificate after the client's side
            // of the handshake has ended: its alert ends a connection that the request was
            // queued on or written to, and hyper reports that connection's end with the alert
            // as its cause. A refused handshake, not a lost read.
            if super::chain_has_tls(e) {
                FailureKind::Tls
            } else {
                FailureKind::Read
            }
        } else {
            return Some(Recognized::Connection);
        };
        Some(Recognized::Kind(kind))
    }

    /// The caller's side of a request failed, not the host: the request's own body erred
    /// (`User::Body`) or ended short of its length ("body write aborted"), or the request was
    /// one hyper cannot send. Sending it again fails the same way.
    fn is_callers_own(err: &hyper::Error) -> bool {
        err.is_user() || err.is_body_write_aborted()
    }

    /// Whether a hyper error in `err`'s chain says the request's own body failed.
    #[cfg(feature = "reqwest")]
    pub(super) fn chain_has_callers_own(err: &(dyn Error + 'static)) -> bool {
        let mut next: Option<&(dyn Error + 'static)> = Some(err);
        while let Some(e) = next {
            if e.downcast_ref::<hyper::Error>().is_some_and(is_callers_own) {
                return true;
            }
            next = courier_core::next_cause(e);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[derive(Debug)]
    struct Wrap(BoxError);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrap")
        }
    }
    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn towers_elapsed_is_a_timeout() {
        let err = Wrap(Box::new(tower::timeout::error::Elapsed::new()));
        assert_eq!(classify(&err), FailureKind::Timeout);
        assert_eq!(
            courier_core::classify::classify_error(&classified(err)),
            FailureKind::Timeout,
            "marked for every layer"
        );
    }

    #[test]
    fn what_core_knows_is_classified_as_core_does() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::TimedOut,
            io::ErrorKind::PermissionDenied,
        ] {
            let err = io::Error::from(kind);
            assert_eq!(
                classify(&err),
                courier_core::classify::classify_error(&err),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_classified_error_is_not_classified_twice() {
        let marked = TransportError::new(
            FailureKind::Tls,
            io::Error::from(io::ErrorKind::ConnectionRefused),
        );
        let again = classified(marked);
        assert_eq!(again.kind(), FailureKind::Tls);
        assert!(again.get_ref().is::<io::Error>(), "not wrapped twice");
    }

    /// The failures a TLS stack reports, each `tls` alone, in an I/O error's payload, and
    /// under an I/O kind that would otherwise mean "nothing was sent".
    #[cfg(feature = "rustls")]
    #[test]
    fn rustls_errors_are_tls_by_their_type() {
        use rustls::{
            AlertDescription, CertificateError, Error as Tls, PeerIncompatible, PeerMisbehaved,
        };
        let failures = || {
            [
                Tls::InvalidCertificate(CertificateError::UnknownIssuer),
                Tls::AlertReceived(AlertDescription::HandshakeFailure),
                Tls::PeerIncompatible(PeerIncompatible::Tls12NotOffered),
                Tls::PeerMisbehaved(PeerMisbehaved::DuplicateServerHelloExtensions),
                Tls::NoCertificatesPresented,
                Tls::UnsupportedNameType,
            ]
        };
        for failure in failures() {
            let what = format!("{failure:?}");
            assert_eq!(classify(&failure), FailureKind::Tls, "{what}");
            let err = io::Error::new(io::ErrorKind::InvalidData, failure);
            assert_eq!(classify(&err), FailureKind::Tls, "{what}");
        }
        for failure in failures() {
            let what = format!("{failure:?}");
            let err = io::Error::new(io::ErrorKind::ConnectionRefused, failure);
            assert_eq!(classify(&err), FailureKind::Tls, "{what}");
            assert_eq!(
                courier_core::classify::classify_error(&classified(err)),
                FailureKind::Tls,
                "{what}: marked for every layer"
            );
        }
    }
}

//! The values telemetry reports, named once for every layer.
//!
//! The layers describe a call with the OpenTelemetry HTTP client semantic conventions (spans
//! and the `http.client.request.duration` histogram) and with courier's own names under a
//! `courier.` prefix. What a value looks like is decided here, so that a span and a metric
//! name a host, a method or a failure the same way:
//!
//! - [`method`]: `http.request.method`, a known method as it is, any other as `_OTHER`.
//! - [`server_address`] and [`server_port`]: the host without userinfo or port, and the port,
//!   explicit or the scheme's default.
//! - [`UrlFull`]: `url.full` without userinfo, and without the query unless asked.
//! - [`error_type`]: `error.type` of a failure: one of courier's refusals by name
//!   (`circuit_open`, `rate_limited`, `concurrency_limited`, `deadline_exceeded`,
//!   `attempt_timeout`), else the failure's [`FailureKind`](crate::FailureKind).
//! - [`status_class`]: `2xx` to `5xx`, the bounded label of a status.
//! - [`key_label`]: the label of a layer's key: a host as `scheme://host[:port]`, the global
//!   key as `global`.
//!
//! Nothing here allocates but [`key_label`] and `UrlFull`'s `Display`, which the layers call
//! only when a subscriber or a recorder listens. Whether a `metrics` recorder listens is
//! `metrics_recording` (feature `metrics`).

use crate::HostKey;
use crate::classify::classify_error;
use crate::error::{
    AttemptTimedOut, CircuitOpen, ConcurrencyLimited, DeadlineExceeded, RateLimited, cause_ref,
};
use http::{HeaderMap, Method, StatusCode, Uri};
use std::any::Any;
use std::error::Error;
use std::fmt;

/// Whether a `metrics` recorder listens on this thread now: one set for this scope
/// (`metrics::with_local_recorder`) or the global one. The layers skip their per-call metrics
/// when none does.
///
/// The facade hands out its own no-op recorder when none is installed and gives no way to ask
/// whether it did, so that one is told by where it lives: it has no size and is a `static`.
/// The global recorder is boxed, so one of no size is at the dangling address of every boxed
/// value of no size; one set for a scope from a local variable is on this thread's stack.
/// Both count as recorders. One case is taken for none: a recorder of no size set for a
/// scope from a `static` of its own. Such a recorder keeps no state; give it a field, or
/// install it globally, to have courier's per-call metrics reach it.
#[cfg(feature = "metrics")]
#[inline]
pub fn metrics_recording() -> bool {
    metrics::with_recorder(|recorder| !looks_like_noop(recorder))
}

/// See [`metrics_recording`].
#[cfg(feature = "metrics")]
#[inline]
fn looks_like_noop(recorder: &dyn metrics::Recorder) -> bool {
    /// Farther than this from a local of this thread is not on its stack.
    const STACK: usize = 1 << 30;
    if std::mem::size_of_val(recorder) != 0 {
        return false;
    }
    let address = std::ptr::from_ref(recorder).cast::<()>().addr();
    let here = 0u8;
    let local = std::ptr::from_ref(&here).addr();
    address != std::mem::align_of_val(recorder) && address.abs_diff(local) > STACK
}

/// `http.request.method`: a method the HTTP specification defines as it is, any other as
/// `_OTHER` (the semantic conventions' bound on its values).
pub fn method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "_OTHER",
    }
}

/// The authority of a request as it is written (userinfo and port included): the URI's, else
/// the `Host` header's; `None` when neither names one (or the header is not text).
#[doc(hidden)]
pub fn authority<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    match uri.authority() {
        Some(a) => Some(a.as_str()),
        None => headers.get(http::header::HOST)?.to_str().ok(),
    }
}

/// Splits an authority into its host (userinfo removed; an IPv6 literal keeps its brackets)
/// and its port: the digits after the last `:` (none after an IPv6 literal's `]`), `None`
/// when there are none or they are no port. Byte by byte: an authority is short, and this is
/// on every attempt's path once something listens.
#[doc(hidden)]
pub fn split_authority(authority: &str) -> (&str, Option<u16>) {
    let bytes = authority.as_bytes();
    let mut digits = bytes.len();
    while digits > 0 && bytes[digits - 1].is_ascii_digit() && bytes.len() - digits < 6 {
        digits -= 1;
    }
    let (host_end, port) = match digits.checked_sub(1) {
        Some(colon) if bytes[colon] == b':' => {
            let port = bytes[digits..]
                .iter()
                .try_fold(0u32, |n, &d| Some(n * 10 + u32::from(d - b'0')))
                .filter(|_| digits < bytes.len())
                .and_then(|n| u16::try_from(n).ok());
            (colon, port)
        }
        _ => (bytes.len(), None),
    };
    let host = &authority[..host_end];
    let start = host.bytes().rposition(|b| b == b'@').map_or(0, |at| at + 1);
    (&host[start..], port)
}

/// `server.address` and `server.port` together, reading the authority once (see
/// [`server_address`] and [`server_port`]).
#[doc(hidden)]
pub fn server<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> (Option<&'a str>, Option<u16>) {
    let (address, port) = match authority(uri, headers) {
        Some(a) => {
            let (host, port) = split_authority(a);
            (Some(host), port)
        }
        None => (None, None),
    };
    (address, port.or(default_port(uri.scheme_str())))
}

/// The default port of a scheme: 80 for `http`, 443 for `https`, else `None`.
#[doc(hidden)]
pub fn default_port(scheme: Option<&str>) -> Option<u16> {
    match scheme {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    }
}

/// `server.address`: the host a request goes to, without userinfo or port; `None` when the
/// request names none.
pub fn server_address<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    server(uri, headers).0
}

/// `server.port`: the port a request goes to, explicit or the default of `http` (80) and
/// `https` (443); `None` when neither says.
pub fn server_port(uri: &Uri, headers: &HeaderMap) -> Option<u16> {
    server(uri, headers).1
}

/// `url.full`: the URI with its userinfo removed, and its query removed unless `query` is
/// set. Formats only when displayed.
#[derive(Debug, Clone, Copy)]
pub struct UrlFull<'a> {
    uri: &'a Uri,
    query: bool,
}

impl<'a> UrlFull<'a> {
    /// The `url.full` of `uri`, with its query when `query` is set.
    pub const fn new(uri: &'a Uri, query: bool) -> Self {
        Self { uri, query }
    }
}

impl fmt::Display for UrlFull<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(scheme) = self.uri.scheme_str() {
            write!(f, "{scheme}://")?;
        }
        if let Some(a) = self.uri.authority() {
            let a = a.as_str();
            f.write_str(a.rsplit_once('@').map_or(a, |(_, host)| host))?;
        }
        f.write_str(self.uri.path())?;
        match self.uri.query() {
            Some(q) if self.query => write!(f, "?{q}"),
            _ => Ok(()),
        }
    }
}

/// `error.type` of a call ended from outside before it answered: `deadline_exceeded` when its
/// deadline had passed (a deadline layer above ended it), else `canceled` (its caller dropped
/// it).
#[doc(hidden)]
pub const fn ended_from_outside(deadline_passed: bool) -> &'static str {
    if deadline_passed {
        "deadline_exceeded"
    } else {
        "canceled"
    }
}

/// `error.type` of a failure: courier's refusals by name, else the failure's kind
/// (`connect`, `timeout`, `read`, `tls`, `local`, `other`).
pub fn error_type(err: &(dyn Error + 'static)) -> &'static str {
    if cause_ref::<CircuitOpen>(err).is_some() {
        "circuit_open"
    } else if cause_ref::<RateLimited>(err).is_some() {
        "rate_limited"
    } else if cause_ref::<ConcurrencyLimited>(err).is_some() {
        "concurrency_limited"
    } else if cause_ref::<DeadlineExceeded>(err).is_some() {
        ended_from_outside(true)
    } else if cause_ref::<AttemptTimedOut>(err).is_some() {
        "attempt_timeout"
    } else {
        classify_error(err).as_str()
    }
}

/// The class of a status: `1xx`, `2xx`, `3xx`, `4xx` or `5xx` (anything else is `other`).
pub const fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        _ => "other",
    }
}

/// Whether a status is an error of a client span (4xx and 5xx, as the semantic conventions
/// say for the client side).
#[doc(hidden)]
pub const fn is_error_status(status: StatusCode) -> bool {
    status.as_u16() >= 400
}

/// The label of a layer's key: a [`HostKey`] as `scheme://host[:port]` (never userinfo), the
/// global key `()` as `global`, any other key as its `Debug` text. Bounded as the layer's keys
/// are, by its maximum of keys.
pub fn key_label<K: fmt::Debug + 'static>(key: &K) -> String {
    let any: &dyn Any = key;
    if let Some(host) = any.downcast_ref::<HostKey>() {
        host.to_string()
    } else if any.is::<()>() {
        "global".to_owned()
    } else {
        format!("{key:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "metrics")]
    #[test]
    fn a_recorder_is_told_from_none() {
        struct Stateless;
        impl metrics::Recorder for Stateless {
            fn describe_counter(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_gauge(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_histogram(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn register_counter(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Counter {
                metrics::Counter::noop()
            }
            fn register_gauge(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Gauge {
                metrics::Gauge::noop()
            }
            fn register_histogram(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Histogram {
                metrics::Histogram::noop()
            }
        }
        assert!(!metrics_recording(), "none installed");
        let debugging = metrics_util::debugging::DebuggingRecorder::new();
        metrics::with_local_recorder(&debugging, || assert!(metrics_recording()));
        metrics::with_local_recorder(&Stateless, || {
            assert!(metrics_recording(), "a recorder of no size is still one");
        });
        let stateless = Stateless;
        metrics::with_local_recorder(&stateless, || {
            assert!(metrics_recording(), "on the stack");
        });
        let boxed = Box::new(Stateless);
        metrics::with_local_recorder(&*boxed, || assert!(metrics_recording(), "boxed"));
        assert!(!metrics_recording(), "none once the scopes are over");
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn url_full_drops_userinfo_and_query_unless_asked() {
        let u = uri("https://user:secret@api.example:8443/items?page=2&token=x");
        assert_eq!(
            UrlFull::new(&u, false).to_string(),
            "https://api.example:8443/items"
        );
        assert_eq!(
            UrlFull::new(&u, true).to_string(),
            "https://api.example:8443/items?page=2&token=x"
        );
        assert_eq!(
            UrlFull::new(&uri("/relative?q=1"), false).to_string(),
            "/relative"
        );
    }

    #[test]
    fn server_address_and_port() {
        let h = HeaderMap::new();
        let u = uri("http://user@api.example:8080/x");
        assert_eq!(server_address(&u, &h), Some("api.example"));
        assert_eq!(server_port(&u, &h), Some(8080));
        let u = uri("https://api.example/x");
        assert_eq!(server_port(&u, &h), Some(443));
        let u = uri("http://[::1]/x");
        assert_eq!(server_address(&u, &h), Some("[::1]"));
        assert_eq!(server_port(&u, &h), Some(80));
        let u = uri("http://[::1]:9/x");
        assert_eq!(server_address(&u, &h), Some("[::1]"));
        assert_eq!(server_port(&u, &h), Some(9));
        let u = uri("http://a:b@[::1]:9/x");
        assert_eq!(server(&u, &h), (Some("[::1]"), Some(9)));
        // A port that is empty or too large counts as absent: the scheme's default stands.
        let u = uri("http://api.example:/x");
        assert_eq!(server(&u, &h), (Some("api.example"), Some(80)));
        let u = uri("http://u:1@api.example:8080/x");
        assert_eq!(server(&u, &h), (Some("api.example"), Some(8080)));
        let u = uri("http://u@api.example/x");
        assert_eq!(server(&u, &h), (Some("api.example"), Some(80)));
        let mut big = HeaderMap::new();
        big.insert(http::header::HOST, "api.example:99999".parse().unwrap());
        assert_eq!(server(&uri("/x"), &big), (Some("api.example"), None));
        let mut h = HeaderMap::new();
        h.insert(
            http::header::HOST,
            "from-header.example:81".parse().unwrap(),
        );
        assert_eq!(server_address(&uri("/x"), &h), Some("from-header.example"));
        assert_eq!(server_port(&uri("/x"), &h), Some(81));
        // Garbage in the Host header counts as absent.
        let mut h = HeaderMap::new();
        h.insert(
            http::header::HOST,
            http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        assert_eq!(server_address(&uri("/x"), &h), None);
        assert_eq!(server_port(&uri("/x"), &h), None);
    }

    #[test]
    fn methods_statuses_and_errors() {
        assert_eq!(method(&Method::GET), "GET");
        assert_eq!(method(&Method::from_bytes(b"PURGE").unwrap()), "_OTHER");
        assert_eq!(status_class(StatusCode::SERVICE_UNAVAILABLE), "5xx");
        assert_eq!(status_class(StatusCode::NOT_MODIFIED), "3xx");
        assert!(is_error_status(StatusCode::NOT_FOUND));
        assert!(!is_error_status(StatusCode::OK));
        let open = CircuitOpen::new(std::time::Duration::from_secs(1));
        assert_eq!(error_type(&open), "circuit_open");
        let limited = RateLimited::new(std::time::Duration::from_secs(1));
        assert_eq!(error_type(&limited), "rate_limited");
        let bounded = ConcurrencyLimited::new(8, 8);
        assert_eq!(error_type(&bounded), "concurrency_limited");
        let io = std::io::Error::other("boom");
        assert_eq!(error_type(&io), "other");
    }

    #[test]
    fn key_labels() {
        let key = HostKey::from_parts(&uri("http://u:p@API.example:80/x"), &HeaderMap::new());
        assert_eq!(key_label(&key), "http://api.example");
        assert_eq!(key_label(&()), "global");
        assert_eq!(key_label(&7u8), "7");
    }
}

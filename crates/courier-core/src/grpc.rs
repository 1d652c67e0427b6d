//! gRPC as courier's layers see it: a POST over HTTP/2 whose outcome travels in `grpc-status`.
//!
//! A gRPC call is an `http::Request` with `content-type: application/grpc` (or `+proto` and
//! the like). Its answer is an HTTP 200 whether it worked or not: the outcome is the
//! `grpc-status` field. A server that refuses before answering sends it with the response
//! headers ("trailers-only"), and that is the only place a layer can read it without
//! buffering the body; once headers without a status have arrived, the call is committed
//! (gRFC A6): its outcome comes in the trailers, after the messages, and it is never retried.
//!
//! - [`status_in_headers`]: the code of a trailers-only answer.
//! - [`Pushback`]: `grpc-retry-pushback-ms`, the server's word on when (or whether) to retry.
//! - [`encode_timeout`] / [`decode_timeout`]: the `grpc-timeout` field, the deadline's time
//!   left on the wire.
//!
//! Nothing here panics on any header value: what cannot be read counts as absent (a
//! malformed pushback counts as "do not retry", as gRFC A6 says).

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Version};
use std::fmt;
use std::time::Duration;

/// `grpc-status`: the call's outcome, a decimal code.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-timeout`: the time the client gives the call, e.g. `1500m`.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `grpc-retry-pushback-ms`: when the server would have the client retry.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// Whether these headers are a gRPC message's: `content-type` is `application/grpc`, alone
/// or with a `+` or `;` suffix.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        let prefix = b"application/grpc";
        v.len() >= prefix.len()
            && v[..prefix.len()].eq_ignore_ascii_case(prefix)
            && matches!(v.get(prefix.len()), None | Some(b'+' | b';'))
    })
}

/// Whether a request is a gRPC call: HTTP/2 and a gRPC `content-type`. The version is checked
/// first, so an HTTP/1.1 request costs one comparison.
#[doc(hidden)]
pub fn is_grpc_request<B>(req: &http::Request<B>) -> bool {
    req.version() == Version::HTTP_2 && is_grpc(req.headers())
}

/// A gRPC status code (0 to 16 are the ones gRPC defines; others are kept as they came).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrpcCode(u16);

impl GrpcCode {
    /// Not an error.
    pub const OK: Self = Self(0);
    /// Cancelled, typically by the caller.
    pub const CANCELLED: Self = Self(1);
    /// Unknown error.
    pub const UNKNOWN: Self = Self(2);
    /// The client specified an invalid argument.
    pub const INVALID_ARGUMENT: Self = Self(3);
    /// The deadline expired before the operation could complete.
    pub const DEADLINE_EXCEEDED: Self = Self(4);
    /// Some requested entity was not found.
    pub const NOT_FOUND: Self = Self(5);
    /// The entity the client attempted to create already exists.
    pub const ALREADY_EXISTS: Self = Self(6);
    /// The caller may not execute the operation.
    pub const PERMISSION_DENIED: Self = Self(7);
    /// Some resource has been exhausted (a quota, the disk).
    pub const RESOURCE_EXHAUSTED: Self = Self(8);
    /// The system is not in a state required for the operation.
    pub const FAILED_PRECONDITION: Self = Self(9);
    /// The operation was aborted (a concurrency conflict).
    pub const ABORTED: Self = Self(10);
    /// The operation was attempted past the valid range.
    pub const OUT_OF_RANGE: Self = Self(11);
    /// The operation is not implemented.
    pub const UNIMPLEMENTED: Self = Self(12);
    /// An invariant the system relies on is broken.
    pub const INTERNAL: Self = Self(13);
    /// The service is currently unavailable: most likely transient.
    pub const UNAVAILABLE: Self = Self(14);
    /// Unrecoverable data loss or corruption.
    pub const DATA_LOSS: Self = Self(15);
    /// The request does not have valid authentication credentials.
    pub const UNAUTHENTICATED: Self = Self(16);

    /// The code numbered `code`.
    pub const fn new(code: u16) -> Self {
        Self(code)
    }

    /// Its number.
    pub const fn get(self) -> u16 {
        self.0
    }

    /// Its name in gRPC's documents, `UNAVAILABLE` and so on; `None` for a code gRPC does not
    /// define.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "OK",
            1 => "CANCELLED",
            2 => "UNKNOWN",
            3 => "INVALID_ARGUMENT",
            4 => "DEADLINE_EXCEEDED",
            5 => "NOT_FOUND",
            6 => "ALREADY_EXISTS",
            7 => "PERMISSION_DENIED",
            8 => "RESOURCE_EXHAUSTED",
            9 => "FAILED_PRECONDITION",
            10 => "ABORTED",
            11 => "OUT_OF_RANGE",
            12 => "UNIMPLEMENTED",
            13 => "INTERNAL",
            14 => "UNAVAILABLE",
            15 => "DATA_LOSS",
            16 => "UNAUTHENTICATED",
            _ => return None,
        })
    }

    /// Reads a `grpc-status` value: ASCII digits, at most five; anything else is `None`.
    pub fn from_header(value: &HeaderValue) -> Option<Self> {
        let v = value.as_bytes();
        if v.is_empty() || v.len() > 5 || !v.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = v.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
        u16::try_from(n).ok().map(Self)
    }
}

impl fmt::Debug for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "GrpcCode({})", self.0),
        }
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

/// The code of a trailers-only gRPC answer: a gRPC `content-type` with `grpc-status` among
/// the response headers. `None` for any other answer, a gRPC one that goes on to send messages
/// included (its status comes in the trailers; the call is committed).
pub fn status_in_headers(headers: &HeaderMap) -> Option<GrpcCode> {
    // The content type first: a standard name is found without hashing its text, and most
    // answers are not gRPC's.
    if !is_grpc(headers) {
        return None;
    }
    GrpcCode::from_header(headers.get(GRPC_STATUS)?)
}

/// `grpc-retry-pushback-ms`: the server's word on retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry after this long (exactly; it replaces the backoff).
    After(Duration),
    /// Do not retry: the value was negative or could not be read (gRFC A6).
    Never,
}

impl Pushback {
    /// The pushback among `headers`, if there is one.
    pub fn parse(headers: &HeaderMap) -> Option<Self> {
        let value = headers.get(GRPC_RETRY_PUSHBACK_MS)?;
        let v = value.as_bytes();
        if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
            return Some(Self::Never);
        }
        let ms = v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        Some(Self::After(Duration::from_millis(ms)))
    }
}

/// `grpc-timeout` for `left`: the finest unit (nanoseconds up to hours) in which the time fits
/// gRPC's eight digits, rounded up to it. Zero is `0n`; beyond 99 999 999 hours the largest
/// value is sent.
///
/// ```
/// use courier_core::grpc::encode_timeout;
/// use std::time::Duration;
///
/// assert_eq!(encode_timeout(Duration::from_millis(1500)), "1500000u");
/// assert_eq!(encode_timeout(Duration::from_secs(90)), "90000000u");
/// assert_eq!(encode_timeout(Duration::from_secs(3600)), "3600000m");
/// assert_eq!(encode_timeout(Duration::from_nanos(1)), "1n");
/// ```
pub fn encode_timeout(left: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let ns = left.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    let (value, unit) = units
        .iter()
        .map(|&(per, unit)| (ns.div_ceil(per), unit))
        .find(|&(value, _)| value <= MAX)
        .unwrap_or((MAX, 'H'));
    HeaderValue::from_str(&format!("{value}{unit}")).unwrap_or(HeaderValue::from_static("0n"))
}

/// Reads a `grpc-timeout` value: one to eight digits and a unit (`H`, `M`, `S`, `m`, `u`,
/// `n`); anything else is `None`.
///
/// ```
/// use courier_core::grpc::decode_timeout;
/// use http::HeaderValue;
/// use std::time::Duration;
///
/// assert_eq!(decode_timeout(&HeaderValue::from_static("1500m")), Some(Duration::from_millis(1500)));
/// assert_eq!(decode_timeout(&HeaderValue::from_static("1500")), None);
/// assert_eq!(decode_timeout(&HeaderValue::from_static("123456789S")), None);
/// ```
pub fn decode_timeout(value: &HeaderValue) -> Option<Duration> {
    let v = value.as_bytes();
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn grpc_content_types() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;charset=x",
        ] {
            assert!(is_grpc(&headers(&[("content-type", ct)])), "{ct}");
        }
        for ct in [
            "application/grpc-web",
            "application/json",
            "application/grp",
            "",
        ] {
            assert!(!is_grpc(&headers(&[("content-type", ct)])), "{ct}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_trailers_only_answer_has_its_code_in_the_headers() {
        let h = headers(&[("content-type", "application/grpc"), ("grpc-status", "14")]);
        assert_eq!(status_in_headers(&h), Some(GrpcCode::UNAVAILABLE));
        // Not gRPC, or no status, or garbage: none.
        assert_eq!(status_in_headers(&headers(&[("grpc-status", "14")])), None);
        assert_eq!(
            status_in_headers(&headers(&[("content-type", "application/grpc")])),
            None
        );
        for bad in ["", "-1", "1 4", "99999999", "x"] {
            let h = headers(&[("content-type", "application/grpc"), ("grpc-status", bad)]);
            assert_eq!(status_in_headers(&h), None, "{bad:?}");
        }
        assert_eq!(GrpcCode::new(14).to_string(), "UNAVAILABLE");
        assert_eq!(GrpcCode::new(99).to_string(), "99");
        assert_eq!(format!("{:?}", GrpcCode::new(99)), "GrpcCode(99)");
    }

    #[test]
    fn pushback_is_a_wait_or_a_refusal() {
        let p = |v: &str| Pushback::parse(&headers(&[("grpc-retry-pushback-ms", v)]));
        assert_eq!(p("300"), Some(Pushback::After(Duration::from_millis(300))));
        assert_eq!(p("0"), Some(Pushback::After(Duration::ZERO)));
        for bad in ["-1", "", "1.5", "abc", "9999999999999999999999"] {
            assert_eq!(p(bad), Some(Pushback::Never), "{bad:?}");
        }
        assert_eq!(Pushback::parse(&HeaderMap::new()), None);
    }

    #[test]
    fn timeouts_pick_the_finest_unit_that_fits_and_round_up() {
        let e = |d| encode_timeout(d).to_str().unwrap().to_owned();
        assert_eq!(e(Duration::ZERO), "0n");
        assert_eq!(e(Duration::from_nanos(99_999_999)), "99999999n");
        assert_eq!(e(Duration::from_nanos(100_000_001)), "100001u");
        assert_eq!(e(Duration::from_secs(100_000)), "100000S");
        assert_eq!(e(Duration::from_secs(100_000_000)), "1666667M");
        assert_eq!(e(Duration::MAX), "99999999H");
    }

    proptest! {
        #[test]
        fn an_encoded_timeout_reads_back_no_shorter_and_within_one_unit(ns in 0u64..u64::MAX / 2) {
            let d = Duration::from_nanos(ns);
            let v = encode_timeout(d);
            let back = decode_timeout(&v).expect("reads back");
            prop_assert!(back >= d, "{v:?} reads {back:?} < {d:?}");
            let digits = v.len() - 1;
            prop_assert!(digits <= 8);
            // Less than one unit of the chosen size more. A coarser unit is chosen only when
            // the finer one needs more than eight digits, so the value then has at least
            // 10^8 / 1000 of the coarser units: off by under a hundred-thousandth (or 1 ns).
            prop_assert!(
                back - d <= d / 100_000 + Duration::from_nanos(1),
                "{v:?}: {d:?} -> {back:?}"
            );
        }

        #[test]
        fn no_header_value_panics(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(v) = HeaderValue::from_bytes(&bytes) {
                let _ = decode_timeout(&v);
                let _ = GrpcCode::from_header(&v);
                let mut h = HeaderMap::new();
                h.insert(GRPC_RETRY_PUSHBACK_MS, v.clone());
                h.insert(GRPC_STATUS, v);
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                let _ = Pushback::parse(&h);
                let _ = status_in_headers(&h);
            }
        }
    }
}

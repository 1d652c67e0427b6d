//! The deadline on the wire: the time left, in whole milliseconds, in a request header.
//!
//! The default header is [`DEFAULT_HEADER`], `x-request-deadline-ms`, whose value is the number
//! of milliseconds the caller will still wait, as plain ASCII digits (`1500`). Why this shape:
//!
//! - **Relative, not absolute.** Two hosts' clocks never agree exactly; a duration survives the
//!   trip where a timestamp would carry the skew along (gRPC's `grpc-timeout` is relative for the
//!   same reason). The receiver adds it to its own `now`; the time the request spent on the wire
//!   is the only error, and it errs on the safe side.
//! - **Milliseconds as digits.** Every HTTP stack and every language reads a decimal integer;
//!   `grpc-timeout`'s unit suffixes (`100m`, `2S`) would mean something else to gRPC proxies on
//!   the path, and Envoy owns and rewrites its `x-envoy-*` timeout headers at the edge.
//! - **The name says the unit.** `-ms` leaves no doubt, and `x-request-` keeps it apart from any
//!   response header.
//!
//! Writing rounds down (the receiver never believes it has more than the sender will wait) and
//! never produces a negative or overflowing value. Reading ignores garbage (signs, fractions,
//! units, empty values) and caps absurd values at a configurable maximum
//! ([`DEFAULT_MAX_INCOMING`], one hour). When a header repeats (as separate lines or folded into
//! one, comma-separated), the smallest valid value wins.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use std::time::Duration;

/// The default deadline header: `x-request-deadline-ms`, the time left in whole milliseconds.
pub const DEFAULT_HEADER: HeaderName = HeaderName::from_static("x-request-deadline-ms");

/// The default cap on an incoming deadline: one hour. Longer values are read as one hour.
pub const DEFAULT_MAX_INCOMING: Duration = Duration::from_secs(3600);

/// Whole milliseconds in `d`, saturating at `u64::MAX`.
pub(crate) fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Writes `left` to `name` in `headers` as whole milliseconds, replacing any value there.
///
/// ```
/// use courier_deadline::propagate::{DEFAULT_HEADER, write_header};
/// use std::time::Duration;
///
/// let mut headers = http::HeaderMap::new();
/// write_header(&mut headers, &DEFAULT_HEADER, Duration::from_micros(1_499_999));
/// assert_eq!(headers[&DEFAULT_HEADER], "1499");
/// ```
pub fn write_header(headers: &mut HeaderMap, name: &HeaderName, left: Duration) {
    headers.insert(name.clone(), HeaderValue::from(whole_millis(left)));
}

/// Reads the time left from `name` in `headers`, capped at `max`.
///
/// Returns `None` when the header is missing or no value is a plain decimal integer. Values
/// above `max`, however long, read as `max`. When the header repeats, the smallest value wins.
///
/// ```
/// use courier_deadline::propagate::{DEFAULT_HEADER, read_header};
/// use std::time::Duration;
///
/// let max = Duration::from_secs(60);
/// let mut headers = http::HeaderMap::new();
/// headers.insert(DEFAULT_HEADER, "250".parse().unwrap());
/// assert_eq!(read_header(&headers, &DEFAULT_HEADER, max), Some(Duration::from_millis(250)));
/// headers.insert(DEFAULT_HEADER, "-5".parse().unwrap());
/// assert_eq!(read_header(&headers, &DEFAULT_HEADER, max), None);
/// headers.insert(DEFAULT_HEADER, "99999999999999999999999".parse().unwrap());
/// assert_eq!(read_header(&headers, &DEFAULT_HEADER, max), Some(max));
/// ```
pub fn read_header(headers: &HeaderMap, name: &HeaderName, max: Duration) -> Option<Duration> {
    headers
        .get_all(name)
        .iter()
        // An intermediary may fold repeated lines into one, comma-separated (RFC 9110 5.3).
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(parse_millis)
        .min()
        .map(|ms| Duration::from_millis(ms).min(max))
}

/// Plain decimal digits (optional surrounding spaces or tabs), saturating at `u64::MAX`.
fn parse_millis(raw: &[u8]) -> Option<u64> {
    let digits = raw.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// On a gRPC call (HTTP/2, `content-type: application/grpc`), sets `grpc-timeout` to `left`,
/// gRPC's own deadline field, unless the request already carries a shorter one (the caller's
/// own, e.g. tonic's `Request::set_timeout`). Any other request is left alone.
pub fn write_grpc_timeout<B>(req: &mut http::Request<B>, left: Duration) {
    write_grpc_timeout_with(req, || left);
}

/// As [`write_grpc_timeout`], with the time left worked out only for a gRPC call: most
/// requests are not one.
#[inline]
pub(crate) fn write_grpc_timeout_with<B>(
    req: &mut http::Request<B>,
    left: impl FnOnce() -> Duration,
) {
    if !courier_core::grpc::is_grpc_request(req) {
        return;
    }
    let left = left();
    let headers = req.headers_mut();
    let theirs = headers
        .get(courier_core::grpc::GRPC_TIMEOUT)
        .and_then(courier_core::grpc::decode_timeout);
    if theirs.is_none_or(|theirs| left < theirs) {
        headers.insert(
            courier_core::grpc::GRPC_TIMEOUT,
            courier_core::grpc::encode_timeout(left),
        );
    }
}

/// An incoming gRPC call's `grpc-timeout`, capped at `max`, when it can be read.
pub fn read_grpc_timeout(headers: &HeaderMap, max: Duration) -> Option<Duration> {
    let left = headers
        .get(courier_core::grpc::GRPC_TIMEOUT)
        .and_then(courier_core::grpc::decode_timeout)?;
    Some(left.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: Duration = Duration::from_secs(3600);

    fn read(values: &[&[u8]]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(DEFAULT_HEADER, HeaderValue::from_bytes(v).unwrap());
        }
        read_header(&headers, &DEFAULT_HEADER, MAX)
    }

    #[test]
    fn garbage_is_ignored() {
        for bad in [
            &b""[..],
            b" ",
            b"-1",
            b"+5",
            b"1.5",
            b"1e3",
            b"100m",
            b"0x10",
            b"1 2",
            b"\xff\xfe",
            b"NaN",
        ] {
            assert_eq!(read(&[bad]), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(read(&[]), None);
    }

    #[test]
    fn absurd_values_are_capped() {
        assert_eq!(read(&[b"3600001"]), Some(MAX));
        assert_eq!(read(&[b"18446744073709551615"]), Some(MAX));
        assert_eq!(read(&[b"184467440737095516150000000000"]), Some(MAX));
    }

    #[test]
    fn smallest_valid_value_wins() {
        assert_eq!(
            read(&[b"900", b"garbage", b" 300 ", b"600"]),
            Some(Duration::from_millis(300))
        );
        assert_eq!(read(&[b"0"]), Some(Duration::ZERO));
        // Repeated lines folded into one by an intermediary.
        assert_eq!(read(&[b"300, 900"]), Some(Duration::from_millis(300)));
        assert_eq!(read(&[b"900,x, 300"]), Some(Duration::from_millis(300)));
        assert_eq!(read(&[b","]), None);
    }

    #[test]
    fn write_rounds_down_and_saturates() {
        let mut headers = HeaderMap::new();
        write_header(&mut headers, &DEFAULT_HEADER, Duration::from_nanos(999_999));
        assert_eq!(headers[&DEFAULT_HEADER], "0");
        write_header(&mut headers, &DEFAULT_HEADER, Duration::MAX);
        assert_eq!(headers[&DEFAULT_HEADER], u64::MAX.to_string().as_str());
        assert_eq!(headers.get_all(&DEFAULT_HEADER).iter().count(), 1);
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(v) = HeaderValue::from_bytes(&raw) {
                let mut headers = HeaderMap::new();
                headers.insert(DEFAULT_HEADER, v);
                if let Some(d) = read_header(&headers, &DEFAULT_HEADER, MAX) {
                    prop_assert!(d <= MAX);
                }
            }
        }

        #[test]
        fn written_values_read_back(ms in any::<u64>(), sub_ms in 0u32..1_000_000) {
            let left = Duration::from_millis(ms) + Duration::from_nanos(u64::from(sub_ms));
            let mut headers = HeaderMap::new();
            write_header(&mut headers, &DEFAULT_HEADER, left);
            let back = read_header(&headers, &DEFAULT_HEADER, Duration::MAX).unwrap();
            prop_assert_eq!(back, Duration::from_millis(ms));
            prop_assert!(back <= left);
        }
    }
}

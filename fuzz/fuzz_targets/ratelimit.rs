#![no_main]
//! The `RateLimit` and `RateLimit-Policy` structured fields (RFC 9651), one or several lines
//! each: nothing may panic; a wait is capped; a field split over several lines reads as the
//! same field on one line; a wait comes only from a spent quota.
//!
//! Input: lines of `RateLimit`, then a 0xfe byte, then lines of `RateLimit-Policy`; lines are
//! separated by 0xff bytes.

use courier_core::hints::{MAX_HINT, parse_ratelimit, parse_ratelimit_policy, quota_exhausted};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The field as sent (one header per line) and as one line joined with ", ".
fn field(headers: &mut HeaderMap, joined: &mut HeaderMap, name: HeaderName, lines: &[u8]) {
    let lines: Vec<HeaderValue> = lines
        .split(|b| *b == 0xff)
        .filter_map(|line| HeaderValue::from_bytes(line).ok())
        .collect();
    if lines.is_empty() {
        return;
    }
    let mut one = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            one.extend_from_slice(b", ");
        }
        one.extend_from_slice(line.as_bytes());
    }
    for line in lines {
        headers.append(name.clone(), line);
    }
    joined.insert(
        name,
        HeaderValue::from_bytes(&one).expect("joined valid values"),
    );
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == 0xfe);
    let mut headers = HeaderMap::new();
    let mut joined = HeaderMap::new();
    field(
        &mut headers,
        &mut joined,
        RATELIMIT,
        parts.next().unwrap_or_default(),
    );
    field(
        &mut headers,
        &mut joined,
        POLICY,
        parts.next().unwrap_or_default(),
    );

    let wait = parse_ratelimit(&headers);
    if let Some(wait) = wait {
        assert!(wait <= MAX_HINT);
        assert!(
            quota_exhausted(&headers),
            "a wait from a quota not spent: {headers:?}"
        );
    }
    let policies = parse_ratelimit_policy(&headers);
    assert_eq!(parse_ratelimit(&joined), wait, "{headers:?}");
    assert_eq!(quota_exhausted(&joined), quota_exhausted(&headers));
    assert_eq!(parse_ratelimit_policy(&joined), policies);
});

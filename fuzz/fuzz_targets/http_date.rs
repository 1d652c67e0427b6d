#![no_main]
//! HTTP-dates on arbitrary text, where courier reads them: `Retry-After` counted from the
//! response's `Date`. Nothing may panic; a date reads back the same once written as an
//! IMF-fixdate; the wait is the distance to the date, zero for the past, capped.
//!
//! Input: the `Date` value, a 0xff byte, the `Retry-After` value.

use courier_core::ManualClock;
use courier_core::hints::{HintConfig, MAX_HINT, parse_retry_after, server_now};
use http::{HeaderMap, HeaderValue, header};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The moment a field value names, read as any HTTP-date parser would, whitespace around it
/// allowed.
fn date(value: &HeaderValue) -> Option<SystemTime> {
    let at = httpdate::parse_http_date(value.to_str().ok()?.trim()).ok()?;
    // Written back as IMF-fixdate, the same moment (dates carry whole seconds).
    let written = httpdate::fmt_http_date(at);
    assert_eq!(
        httpdate::parse_http_date(&written).ok(),
        Some(at),
        "{written:?}"
    );
    Some(at)
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == 0xff);
    let date_text = parts.next().unwrap_or_default();
    let retry_text = parts.next().unwrap_or_default();
    let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));

    let mut headers = HeaderMap::new();
    let server_date = HeaderValue::from_bytes(date_text).ok().and_then(|value| {
        let at = date(&value);
        headers.insert(header::DATE, value);
        at
    });
    let now = server_now(&headers, &clock);
    assert_eq!(
        now,
        server_date.unwrap_or(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    );

    let Ok(retry_after) = HeaderValue::from_bytes(retry_text) else {
        return;
    };
    let wait = parse_retry_after(&retry_after, now);
    if let Some(wait) = wait {
        assert!(wait <= MAX_HINT);
    }
    if let Some(at) = date(&retry_after) {
        let expected = at
            .duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_HINT);
        assert_eq!(
            wait,
            Some(expected),
            "Retry-After {retry_after:?} from {now:?}"
        );
    }
    headers.insert(header::RETRY_AFTER, retry_after);
    let hint = HintConfig::new().clock(clock).parse(&headers);
    if wait.is_some() {
        assert_eq!(hint.map(|h| h.wait()), wait);
    }
});

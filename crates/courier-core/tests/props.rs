//! Property tests for the header parsers: no input panics, values saturate, dates count from the
//! server's clock.

use courier_core::cache_control::{CacheControl, EntityTag, EntityTagList};
use courier_core::hints::{HintConfig, MAX_HINT, parse_ratelimit_policy};
use courier_core::{ManualClock, WaitSource};
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use std::time::{Duration, UNIX_EPOCH};

const HINT_HEADERS: [&str; 9] = [
    "retry-after",
    "date",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "cache-control",
];

fn header_map(values: &[(usize, Vec<u8>)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (i, v) in values {
        if let Ok(value) = HeaderValue::from_bytes(v) {
            h.append(
                HeaderName::from_static(HINT_HEADERS[i % HINT_HEADERS.len()]),
                value,
            );
        }
    }
    h
}

/// Bytes biased towards what these fields are made of, so the parsers get past their first check.
fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        "[0-9a-zA-Z ,;=\"\\-./:*()<>?]{0,40}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #[test]
    fn hint_parsing_never_panics(
        values in proptest::collection::vec((0usize..9, field_bytes()), 0..6),
        now in 0u64..=u64::from(u32::MAX) * 4,
    ) {
        let h = header_map(&values);
        let config = HintConfig::new().clock(ManualClock::new(UNIX_EPOCH + Duration::from_secs(now)));
        if let Some(hint) = config.parse(&h) {
            prop_assert!(hint.wait() <= MAX_HINT);
        }
        let _ = parse_ratelimit_policy(&h);
        let _ = CacheControl::from_headers(&h);
    }

    #[test]
    fn text_parsers_never_panic(text in "\\PC{0,60}") {
        let _ = CacheControl::parse_str(&text);
        let _ = EntityTag::parse(&text);
        let _ = EntityTag::parse_lenient(&text);
        let _ = EntityTagList::parse(&text);
    }

    #[test]
    fn thirty_digit_delay_seconds_saturate(digits in "[1-9][0-9]{29}") {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_str(&digits).unwrap());
        let hint = HintConfig::new().parse(&h).unwrap();
        prop_assert_eq!(hint.wait(), MAX_HINT);
        prop_assert_eq!(hint.source(), WaitSource::RetryAfter);
    }

    #[test]
    fn http_date_wait_is_the_servers_delta(
        server_now in 0u64..4_000_000_000,
        delta in 0u64..100_000,
        our_now in 0u64..4_000_000_000,
    ) {
        let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(server_now));
        let after = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(server_now + delta));
        let mut h = HeaderMap::new();
        h.insert("date", HeaderValue::from_str(&date).unwrap());
        h.insert("retry-after", HeaderValue::from_str(&after).unwrap());
        let config = HintConfig::new().clock(ManualClock::new(UNIX_EPOCH + Duration::from_secs(our_now)));
        prop_assert_eq!(config.parse(&h).unwrap().wait(), Duration::from_secs(delta));
    }
}

#![no_main]
//! `Cache-Control` on arbitrary text: nothing may panic, no duration passes delta-seconds'
//! "infinity", and a field read from headers says what its text says.

use courier_core::cache_control::{CacheControl, delta_seconds};
use http::{HeaderMap, HeaderValue, header::CACHE_CONTROL};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

const INFINITY: Duration = Duration::from_secs(1 << 31);

fuzz_target!(|text: &str| {
    let cc = CacheControl::parse_str(text);
    for d in [
        cc.max_age,
        cc.s_maxage,
        cc.stale_while_revalidate,
        cc.stale_if_error,
    ]
    .into_iter()
    .flatten()
    {
        assert!(d <= INFINITY, "{d:?} from {text:?}");
    }
    assert!(delta_seconds(text) <= INFINITY);
    if let Ok(value) = HeaderValue::from_str(text) {
        let mut headers = HeaderMap::new();
        headers.insert(CACHE_CONTROL, value);
        assert_eq!(CacheControl::from_headers(&headers), cc);
        // A second field with the same directives changes nothing: the smallest value wins.
        headers.append(
            CACHE_CONTROL,
            HeaderValue::from_str(text).expect("valid above"),
        );
        assert_eq!(CacheControl::from_headers(&headers), cc);
    }
});

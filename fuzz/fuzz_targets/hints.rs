#![no_main]
//! Every server-hint field, fed arbitrary bytes: nothing may panic, no wait may exceed the cap.

use courier_core::hints::{HintConfig, MAX_HINT, parse_ratelimit_policy};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 8] = [
    "retry-after",
    "date",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
];

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    // Split the input into one value per field on 0xff bytes.
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == 0xff)) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    if let Some(hint) = HintConfig::new().parse(&headers) {
        assert!(hint.wait() <= MAX_HINT);
    }
    let _ = parse_ratelimit_policy(&headers);
});

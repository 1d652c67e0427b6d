#![no_main]
//! Every server-hint field, fed arbitrary bytes: nothing may panic, no wait may exceed the
//! cap, and a quota wait always comes with a quota that reads as spent.
//!
//! Input: a first byte choosing the reset format and our clock, then one value per field,
//! separated by 0xff bytes, in the order of `NAMES`.

use courier_core::ManualClock;
use courier_core::hints::{
    HintConfig, MAX_HINT, ResetFormat, parse_ratelimit_policy, quota_exhausted,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

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
    let Some((&selector, data)) = data.split_first() else {
        return;
    };
    let format = match selector % 3 {
        0 => ResetFormat::Auto,
        1 => ResetFormat::EpochSeconds,
        _ => ResetFormat::DeltaSeconds,
    };
    // Our clock: the epoch, around 2023, or the far future.
    let now = UNIX_EPOCH
        + match selector / 3 % 3 {
            0 => Duration::ZERO,
            1 => Duration::from_secs(1_700_000_000),
            _ => Duration::from_secs(u64::from(u32::MAX) * 64),
        };
    let mut headers = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == 0xff)) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    let config = HintConfig::new()
        .reset_format(format)
        .clock(ManualClock::new(now));
    let hint = config.parse(&headers);
    let quota = config.parse_quota(&headers);
    if let Some(hint) = hint {
        assert!(hint.wait() <= MAX_HINT);
    }
    if let Some(quota) = quota {
        assert!(quota.wait() <= MAX_HINT);
        assert!(
            quota_exhausted(&headers),
            "a quota wait of {:?} from a quota that is not spent: {headers:?}",
            quota.wait()
        );
    }
    if !headers.contains_key(http::header::RETRY_AFTER) {
        assert_eq!(hint, quota, "without Retry-After the hint is the quota's");
    }
    let _ = parse_ratelimit_policy(&headers);
});

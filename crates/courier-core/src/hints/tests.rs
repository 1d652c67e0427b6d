use super::*;
use crate::clock::ManualClock;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn a_ratelimit_list_split_over_two_lines_is_one_list() {
    let h = headers(&[
        ("ratelimit", r#""burst";r=5;t=1"#),
        ("ratelimit", r#""daily";r=0;t=30"#),
    ]);
    let hint = HintConfig::new().parse(&h);
    assert_eq!(
        hint.map(|h| (h.wait(), h.source())),
        Some((Duration::from_secs(30), WaitSource::RateLimit)),
        "the spent policy on the second line counts"
    );
    let h = headers(&[
        ("ratelimit-policy", r#""burst";q=5;w=1"#),
        ("ratelimit-policy", r#""daily";q=100;w=86400"#),
    ]);
    let names: Vec<_> = parse_ratelimit_policy(&h)
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["burst", "daily"]);
}

#[test]
fn a_ratelimit_field_with_nothing_remaining_is_a_spent_quota_without_a_reset() {
    for value in [r#""default";r=0"#, "limit=10, remaining=0"] {
        let h = headers(&[("ratelimit", value)]);
        assert!(quota_exhausted(&h), "{value}");
        assert!(
            crate::classify::may_change(http::StatusCode::FORBIDDEN, &h),
            "{value}: a 403 that says the quota is spent may change"
        );
        assert_eq!(parse_ratelimit(&h), None, "{value}: no reset, no wait");
    }
    let h = headers(&[("ratelimit", r#""default";r=3"#)]);
    assert!(!quota_exhausted(&h));
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn config_at(secs: u64) -> HintConfig {
    HintConfig::new().clock(ManualClock::new(at(secs)))
}

// 1994-11-06 08:49:37 UTC, the RFC 9110 example date.
const RFC_DATE_SECS: u64 = 784_111_777;

#[test]
fn retry_after_delay_seconds() {
    let h = headers(&[("retry-after", "120")]);
    let hint = config_at(0).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::from_secs(120));
    assert_eq!(hint.source(), WaitSource::RetryAfter);
}

#[test]
fn retry_after_all_three_date_formats() {
    for date in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        let h = headers(&[("retry-after", date)]);
        let hint = config_at(RFC_DATE_SECS - 7).parse(&h).expect(date);
        assert_eq!(hint.wait(), Duration::from_secs(7), "{date}");
    }
}

#[test]
fn retry_after_date_counts_from_the_response_date() {
    // Server clock 40 s behind ours: Date is 40 s before our now, Retry-After 2 s after Date.
    let h = headers(&[
        ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"),
    ]);
    let hint = config_at(RFC_DATE_SECS + 40).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::from_secs(2));
}

#[test]
fn invalid_date_header_falls_back_to_our_clock() {
    let h = headers(&[
        ("date", "yesterday"),
        ("retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"),
    ]);
    let hint = config_at(RFC_DATE_SECS).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::from_secs(2));
}

#[test]
fn date_in_the_past_is_zero() {
    let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]);
    let hint = config_at(RFC_DATE_SECS + 3600).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::ZERO);
}

#[test]
fn garbage_counts_as_absent() {
    for v in [
        "",
        "soon",
        "-5",
        "1.5",
        "+3",
        "0x10",
        "12 s",
        "Sun, 99 Nov 1994 08:49:37 GMT",
    ] {
        let h = headers(&[("retry-after", v)]);
        assert_eq!(config_at(0).parse(&h), None, "{v:?}");
    }
    let mut h = HeaderMap::new();
    h.insert("retry-after", HeaderValue::from_bytes(b"\xff\xfe").unwrap());
    assert_eq!(config_at(0).parse(&h), None);
}

#[test]
fn huge_delay_saturates_and_caps() {
    let h = headers(&[("retry-after", "999999999999999999999999999999")]);
    assert_eq!(config_at(0).parse(&h).unwrap().wait(), MAX_HINT);
}

#[test]
fn first_of_duplicated_fields() {
    let h = headers(&[("retry-after", "3"), ("retry-after", "100")]);
    assert_eq!(
        config_at(0).parse(&h).unwrap().wait(),
        Duration::from_secs(3)
    );
}

#[test]
fn x_ratelimit_epoch_and_delta() {
    let now = 1_700_000_000;
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000042"),
    ]);
    let hint = config_at(now).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::from_secs(42));
    assert_eq!(hint.source(), WaitSource::QuotaReset);

    let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "42")]);
    assert_eq!(
        config_at(now).parse(&h).unwrap().wait(),
        Duration::from_secs(42)
    );
    let epoch = config_at(now).reset_format(ResetFormat::EpochSeconds);
    assert_eq!(
        epoch.parse(&h).unwrap().wait(),
        Duration::ZERO,
        "42 as epoch is long past"
    );
    let delta = config_at(now).reset_format(ResetFormat::DeltaSeconds);
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000042"),
    ]);
    assert_eq!(delta.parse(&h).unwrap().wait(), MAX_HINT);
}

#[test]
fn x_ratelimit_reset_in_epoch_milliseconds_under_auto() {
    let now = 1_700_000_000;
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000042500"),
    ]);
    assert_eq!(
        config_at(now).parse(&h).unwrap().wait(),
        Duration::from_millis(42_500)
    );
    // Said to be seconds, it is a moment far ahead: capped.
    let epoch = config_at(now).reset_format(ResetFormat::EpochSeconds);
    assert_eq!(epoch.parse(&h).unwrap().wait(), MAX_HINT);
}

#[test]
fn x_ratelimit_epoch_counts_from_the_response_date() {
    // Date says 1700000000 while our clock is 100 s ahead.
    let date = httpdate::fmt_http_date(at(1_700_000_000));
    let h = headers(&[
        ("date", &date),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1700000005"),
    ]);
    assert_eq!(
        config_at(1_700_000_100).parse(&h).unwrap().wait(),
        Duration::from_secs(5)
    );
}

#[test]
fn x_ratelimit_needs_remaining_zero() {
    let h = headers(&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "42")]);
    assert_eq!(config_at(0).parse(&h), None);
    let h = headers(&[("x-ratelimit-reset", "42")]);
    assert_eq!(config_at(0).parse(&h), None);
    let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "-1")]);
    assert_eq!(config_at(0).parse(&h), None);
}

#[test]
fn ietf_ratelimit_list_form() {
    let h = headers(&[("ratelimit", r#""default";r=0;t=10, "burst";r=5;t=1"#)]);
    let hint = config_at(0).parse(&h).unwrap();
    assert_eq!(hint.wait(), Duration::from_secs(10));
    assert_eq!(hint.source(), WaitSource::RateLimit);
    let h = headers(&[("ratelimit", r#""default";r=50;t=30"#)]);
    assert_eq!(config_at(0).parse(&h), None, "quota left: no wait");
    let h = headers(&[("ratelimit", r#""a";r=0;t=10, "b";r=0;t=30"#)]);
    assert_eq!(
        config_at(0).parse(&h).unwrap().wait(),
        Duration::from_secs(30)
    );
}

#[test]
fn ietf_ratelimit_older_forms() {
    let h = headers(&[("ratelimit", "limit=10, remaining=0, reset=7")]);
    assert_eq!(
        config_at(0).parse(&h).unwrap().wait(),
        Duration::from_secs(7)
    );
    let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "9")]);
    assert_eq!(
        config_at(0).parse(&h).unwrap().wait(),
        Duration::from_secs(9)
    );
    let h = headers(&[("ratelimit", "limit=10, remaining=-1, reset=7")]);
    assert_eq!(config_at(0).parse(&h), None);
}

#[test]
fn precedence_retry_after_then_ratelimit_then_x() {
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "30"),
        ("ratelimit", r#""d";r=0;t=20"#),
        ("retry-after", "10"),
    ]);
    assert_eq!(
        config_at(0).parse(&h).unwrap().source(),
        WaitSource::RetryAfter
    );
    let h = headers(&[
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "30"),
        ("ratelimit", r#""d";r=0;t=20"#),
        ("retry-after", "garbage"),
    ]);
    let hint = config_at(0).parse(&h).unwrap();
    assert_eq!(
        (hint.wait(), hint.source()),
        (Duration::from_secs(20), WaitSource::RateLimit)
    );
}

#[test]
fn a_policy_named_by_a_token_keeps_its_name() {
    let h = headers(&[("ratelimit-policy", "burst;q=10;w=1, \"day\";q=5000;w=86400")]);
    let names: Vec<_> = parse_ratelimit_policy(&h)
        .into_iter()
        .map(|p| (p.name, p.quota))
        .collect();
    assert_eq!(names, [("burst".to_owned(), 10), ("day".to_owned(), 5000)]);
}

#[test]
fn policy_field() {
    let h = headers(&[("ratelimit-policy", r#""default";q=100;w=10, 50;w=1"#)]);
    let p = parse_ratelimit_policy(&h);
    assert_eq!(
        p,
        vec![
            RateLimitPolicy {
                name: "default".into(),
                quota: 100,
                window: Some(Duration::from_secs(10))
            },
            RateLimitPolicy {
                name: String::new(),
                quota: 50,
                window: Some(Duration::from_secs(1))
            },
        ]
    );
    assert!(parse_ratelimit_policy(&headers(&[("ratelimit-policy", "((")])).is_empty());
}

#[test]
fn quota_exhausted_detects_rate_limit_403() {
    assert!(quota_exhausted(&headers(&[("x-ratelimit-remaining", "0")])));
    assert!(!quota_exhausted(&headers(&[(
        "x-ratelimit-remaining",
        "1"
    )])));
    assert!(!quota_exhausted(&HeaderMap::new()));
}

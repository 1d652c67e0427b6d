use super::fields::{HOP_BY_HOP, is_hop_by_hop};
use super::*;
use proptest::prop_oneof;
use proptest::strategy::{Just, Strategy};
use std::time::UNIX_EPOCH;

fn timing(wall: u64) -> Timing {
    let now = Instant::now();
    Timing {
        request_time: now,
        response_time: now,
        response_wall: UNIX_EPOCH + Duration::from_secs(wall),
    }
}

fn entry(headers: &[(&str, &str)], wall: u64) -> Entry {
    let mut map = HeaderMap::new();
    for (n, v) in headers {
        map.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    Entry::new(
        StatusCode::OK,
        Version::HTTP_11,
        map,
        Bytes::from_static(b"body"),
        0,
        Vec::new(),
        timing(wall),
    )
}

fn date(secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

#[tokio::test(start_paused = true)]
async fn max_age_wins_over_expires() {
    let e = entry(
        &[
            ("cache-control", "max-age=10"),
            ("date", &date(1000)),
            ("expires", &date(2000)),
        ],
        1000,
    );
    assert_eq!(e.lifetime, Some(Duration::from_secs(10)));
}

#[tokio::test(start_paused = true)]
async fn expires_minus_date_and_age() {
    // The server's clock is 500 s behind ours: Expires - Date still gives 100 s, and the
    // apparent age (500 s) makes it stale at once, as RFC 9111 section 4.2.3 says.
    let e = entry(
        &[
            ("date", &date(1000)),
            ("expires", &date(1100)),
            ("age", "30"),
        ],
        1000,
    );
    assert_eq!(e.lifetime, Some(Duration::from_secs(100)));
    assert_eq!(e.corrected_initial_age, Duration::from_secs(30));
    let skewed = entry(&[("date", &date(1000)), ("expires", &date(1100))], 1500);
    assert_eq!(skewed.corrected_initial_age, Duration::from_secs(500));
    assert!(!skewed.is_fresh(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn garbage_dates_and_ages_never_panic() {
    for (n, v) in [
        ("expires", "0"),
        ("expires", "tomorrow"),
        ("date", "garbage"),
        ("age", "-5"),
        ("age", "99999999999999999999999"),
        ("vary", "*, accept"),
        ("etag", "unquoted"),
    ] {
        let e = entry(&[(n, v)], 1000);
        let _ = e.is_fresh(Instant::now());
        let _ = e.staleness(Instant::now(), false);
        let _ = e.staleness(Instant::now(), true);
    }
    let e = entry(&[("expires", "0")], 1000);
    assert_eq!(e.lifetime, Some(Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn hop_by_hop_fields_are_not_stored() {
    let e = entry(
        &[
            ("connection", "x-secret"),
            ("x-secret", "1"),
            ("transfer-encoding", "chunked"),
            ("etag", "\"a\""),
        ],
        1000,
    );
    assert!(e.headers.get("x-secret").is_none());
    assert!(e.headers.get("transfer-encoding").is_none());
    assert!(e.headers.get("etag").is_some());
}

#[tokio::test(start_paused = true)]
async fn freshening_replaces_fields_but_not_content_length() {
    let e = entry(
        &[
            ("etag", "\"a\""),
            ("content-length", "4"),
            ("x-ratelimit-remaining", "59"),
            ("x-keep", "1"),
        ],
        1000,
    );
    let mut nm = HeaderMap::new();
    nm.insert("content-length", "0".parse().unwrap());
    nm.insert("x-ratelimit-remaining", "58".parse().unwrap());
    nm.append("x-multi", "a".parse().unwrap());
    nm.append("x-multi", "b".parse().unwrap());
    let f = e.freshened(&nm, timing(1000));
    assert_eq!(f.headers["content-length"], "4");
    assert_eq!(f.headers["x-ratelimit-remaining"], "58");
    assert_eq!(f.headers["x-keep"], "1");
    assert_eq!(f.headers.get_all("x-multi").iter().count(), 2);
    assert_eq!(f.body, e.body);
}

/// The entry's fields as first computed, field by field with `HeaderMap` lookups: what the
/// one-pass scan and the 304 shortcuts must reproduce.
mod reference {
    use super::*;

    pub(super) struct Derived {
        pub(super) headers: HeaderMap,
        pub(super) etag: Option<EntityTag>,
        pub(super) last_modified: Option<HeaderValue>,
        pub(super) cache_control: CacheControl,
        pub(super) lifetime: Option<Duration>,
        pub(super) corrected_initial_age: Duration,
    }

    fn date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| httpdate::parse_http_date(t.trim()).ok())
    }

    pub(super) fn new(mut headers: HeaderMap, timing: Timing) -> Derived {
        if headers.contains_key(header::CONNECTION) {
            let named: Vec<HeaderName> = headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|t| t.split(','))
                .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
                .collect();
            for name in named {
                headers.remove(name);
            }
        }
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
        let etag = headers
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse_lenient);
        let cc = CacheControl::from_headers(&headers);
        let date_value = date(&headers, header::DATE).unwrap_or(timing.response_wall);
        let lifetime = match cc.max_age {
            Some(max_age) => Some(max_age),
            None if headers.contains_key(header::EXPIRES) => Some(
                date(&headers, header::EXPIRES)
                    .and_then(|e| e.duration_since(date_value).ok())
                    .unwrap_or(Duration::ZERO),
            ),
            None => None,
        };
        let apparent = timing
            .response_wall
            .duration_since(date_value)
            .unwrap_or(Duration::ZERO);
        let age = headers
            .get(header::AGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map_or(Duration::ZERO, |s| Duration::from_secs(s.min(1 << 31)));
        let delay = timing
            .response_time
            .saturating_duration_since(timing.request_time);
        Derived {
            last_modified: headers.get(header::LAST_MODIFIED).cloned(),
            headers,
            etag,
            cache_control: cc,
            lifetime,
            corrected_initial_age: apparent.max(age.saturating_add(delay)),
        }
    }

    pub(super) fn freshened(
        stored: &HeaderMap,
        not_modified: &HeaderMap,
        timing: Timing,
    ) -> Derived {
        let mut headers = stored.clone();
        let mut replaced: Vec<&HeaderName> = Vec::new();
        for (name, value) in not_modified {
            if name == header::CONTENT_LENGTH || HOP_BY_HOP.contains(name) {
                continue;
            }
            if !replaced.contains(&name) {
                headers.remove(name);
                replaced.push(name);
            }
            headers.append(name.clone(), value.clone());
        }
        let mut derived = new(headers.clone(), timing);
        if !not_modified.contains_key(header::DATE) {
            // Aged as a response without `Date`: from when the 304 arrived.
            headers.remove(header::DATE);
            let undated = new(headers, timing);
            derived.lifetime = undated.lifetime;
            derived.corrected_initial_age = undated.corrected_initial_age;
        }
        derived
    }

    pub(super) fn selected_by(stored: &Derived, not_modified: &HeaderMap) -> bool {
        let tag = not_modified
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse_lenient);
        if let Some(tag) = tag {
            return match &stored.etag {
                Some(s) if tag.is_weak() => s.weak_eq(&tag),
                Some(s) => s.strong_eq(&tag),
                None => false,
            };
        }
        match not_modified.get(header::LAST_MODIFIED) {
            Some(lm) => stored.last_modified.as_ref() == Some(lm),
            None => true,
        }
    }
}

/// Fields drawn from a small pool, so that 304s and stored responses share names and values.
fn fields() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    let field = prop_oneof![
        Just(("etag", "\"a\"")),
        Just(("etag", "W/\"a\"")),
        Just(("etag", "\"b\"")),
        Just(("etag", "unquoted")),
        Just(("etag", " unquoted ")),
        Just(("etag", "\"unquoted\"")),
        Just(("etag", "W/\"unquoted\"")),
        Just(("etag", "W/unquoted")),
        Just(("etag", "a, b")),
        Just(("etag", "*")),
        Just(("cache-control", "no-cache")),
        Just(("cache-control", "max-age=60")),
        Just(("cache-control", "no-store")),
        Just(("cache-control", "max-age=5, stale-if-error=30")),
        Just(("content-length", "4")),
        Just(("connection", "x-hop, keep-alive")),
        Just(("x-hop", "1")),
        Just(("keep-alive", "timeout=5")),
        Just(("transfer-encoding", "chunked")),
        Just(("date", "Thu, 01 Jan 1970 00:16:40 GMT")),
        Just(("date", "garbage")),
        Just(("expires", "Thu, 01 Jan 1970 00:18:20 GMT")),
        Just(("expires", "0")),
        Just(("age", "30")),
        Just(("age", "-1")),
        Just(("last-modified", "Thu, 01 Jan 1970 00:00:01 GMT")),
        Just(("last-modified", "Thu, 01 Jan 1970 00:00:02 GMT")),
        Just(("x-ratelimit-remaining", "58")),
        Just(("x-ratelimit-remaining", "59")),
        Just(("content-type", "text/plain")),
    ];
    proptest::collection::vec(field, 0..8)
}

fn map(fields: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (n, v) in fields {
        map.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    map
}

fn in_order(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

fn assert_same(got: &Entry, want: &reference::Derived) {
    assert_eq!(in_order(&got.headers), in_order(&want.headers));
    assert_eq!(got.etag(), want.etag.as_ref());
    assert_eq!(got.etag_value.as_ref(), want.headers.get(header::ETAG));
    assert_eq!(got.last_modified, want.last_modified);
    assert_eq!(got.cache_control, want.cache_control);
    assert_eq!(got.lifetime, want.lifetime);
    assert_eq!(got.corrected_initial_age, want.corrected_initial_age);
}

proptest::proptest! {
    #[test]
    fn entries_and_304_updates_match_the_field_by_field_reference(
        stored in fields(),
        not_modified in fields(),
        later in fields(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let _guard = rt.enter();
        let e = entry(&stored, 1000);
        let want = reference::new(map(&stored), timing(1000));
        assert_same(&e, &want);

        let nm = map(&not_modified);
        let fields = Fields::scan(&nm);
        proptest::prop_assert_eq!(e.selected_by(&fields), reference::selected_by(&want, &nm));

        let f = e.freshened(&nm, timing(1500));
        let want_f = reference::freshened(&want.headers, &nm, timing(1500));
        assert_same(&f, &want_f);
        proptest::prop_assert_eq!(f.weight, f.compute_weight());

        // A second 304 on the freshened entry: the shortcuts hold across updates too.
        let nm = map(&later);
        let fields = Fields::scan(&nm);
        proptest::prop_assert_eq!(f.selected_by(&fields), reference::selected_by(&want_f, &nm));
        let g = f.freshened(&nm, timing(2000));
        assert_same(&g, &reference::freshened(&want_f.headers, &nm, timing(2000)));
    }
}

#[test]
fn hop_by_hop_names_by_text_are_the_listed_ones() {
    for name in &HOP_BY_HOP {
        assert!(is_hop_by_hop(name), "{name}");
    }
    for name in [
        header::CONTENT_LENGTH,
        header::ETAG,
        header::CACHE_CONTROL,
        header::TRAILER,
        HeaderName::from_static("x-connection"),
        HeaderName::from_static("t"),
    ] {
        assert_eq!(is_hop_by_hop(&name), HOP_BY_HOP.contains(&name), "{name}");
    }
}

/// Field values for `Vary` matching: members, commas, whitespace and bytes >= 0x80.
fn vary_values() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let value = proptest::collection::vec(
        prop_oneof![
            Just(b"a".to_vec()),
            Just(b"b".to_vec()),
            Just(b"ab".to_vec()),
            Just(b",".to_vec()),
            Just(b", ".to_vec()),
            Just(b" ".to_vec()),
            Just(b"\t".to_vec()),
            Just(b"\xe4".to_vec()),
            Just(b"\xfc".to_vec()),
            Just("\u{fffd}".as_bytes().to_vec()),
        ],
        0..5,
    )
    .prop_map(|parts| parts.concat());
    proptest::collection::vec(value, 0..3)
}

fn with_values(values: &[Vec<u8>]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for v in values {
        map.append("x-v", HeaderValue::from_bytes(v).unwrap());
    }
    map
}

proptest::proptest! {
    #[test]
    fn vary_matching_agrees_with_comparing_normalized_bytes(
        stored in vary_values(),
        request in vary_values(),
    ) {
        let name = HeaderName::from_static("x-v");
        let (stored, request) = (with_values(&stored), with_values(&request));
        let want = normalized(&stored, &name);
        proptest::prop_assert_eq!(
            vary_matches(&request, &name, want.as_deref()),
            normalized(&request, &name) == want
        );
        proptest::prop_assert!(vary_matches(&stored, &name, want.as_deref()));
    }
}

#[tokio::test(start_paused = true)]
async fn obs_text_tags_are_compared_on_their_bytes() {
    let stored = |tag: &[u8]| {
        let mut map = HeaderMap::new();
        map.insert(header::ETAG, HeaderValue::from_bytes(tag).unwrap());
        Entry::new(
            StatusCode::OK,
            Version::HTTP_11,
            map,
            Bytes::new(),
            0,
            Vec::new(),
            timing(1000),
        )
    };
    let selects = |entry: &Entry, tag: &[u8]| {
        let mut map = HeaderMap::new();
        map.insert(header::ETAG, HeaderValue::from_bytes(tag).unwrap());
        entry.selected_by(&Fields::scan(&map))
    };
    let strong = stored(b"\"caf\xe9\"");
    assert_eq!(strong.etag(), Some(&EntityTag::strong("caf\u{fffd}")));
    assert!(selects(&strong, b"\"caf\xe9\""));
    assert!(selects(&strong, b" W/\"caf\xe9\""));
    assert!(
        !selects(&strong, b"\"caf\xe8\""),
        "same lossy text, other bytes"
    );
    assert!(!selects(&strong, "\"caf\u{fffd}\"".as_bytes()));
    let weak = stored(b"W/\"caf\xe9\"");
    assert!(selects(&weak, b"W/\"caf\xe9\""));
    assert!(
        !selects(&weak, b"\"caf\xe9\""),
        "a strong tag matches strongly"
    );
    assert!(stored(b"\"a\"b\"").etag().is_none());
}

#[tokio::test(start_paused = true)]
async fn an_unquoted_tag_selects_only_the_same_unquoted_tag() {
    let selects =
        |entry: &Entry, tag: &str| entry.selected_by(&Fields::scan(&map(&[("etag", tag)])));
    let bare = entry(&[("etag", "abc")], 1000);
    let tag = bare.etag().expect("an unquoted tag is kept");
    assert!(tag.is_unquoted() && tag.is_weak());
    assert_eq!(tag.to_string(), "abc");
    assert!(selects(&bare, "abc"));
    assert!(
        selects(&bare, " abc\t"),
        "the field's whitespace is no part of the tag"
    );
    for other in ["\"abc\"", "W/\"abc\"", "W/abc", "abd", "ABC"] {
        assert!(!selects(&bare, other), "{other}");
    }
    // No tag at all: a 304 with a garbage field is one without a validator, which
    // selects the entry its request nominated (as for quoted tags).
    for garbage in ["a, b", "*", "a b", "\"abc"] {
        assert!(selects(&bare, garbage), "{garbage}");
    }
    // A stored quoted tag is never selected by the bare one.
    assert!(!selects(&entry(&[("etag", "\"abc\"")], 1000), "abc"));
    assert!(!selects(&entry(&[("etag", "W/\"abc\"")], 1000), "abc"));
    // Garbage is still no validator.
    for garbage in ["a, b", "*", "a b", "\"abc", "a\"b", ""] {
        assert!(
            entry(&[("etag", garbage)], 1000).etag().is_none(),
            "{garbage}"
        );
    }
}

#[test]
fn directives_are_found_outside_quoted_values_only() {
    let cc = |values: &[&[u8]]| {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::CACHE_CONTROL, HeaderValue::from_bytes(v).unwrap());
        }
        has_directive(&h, "proxy-revalidate")
    };
    assert!(cc(&[b"proxy-revalidate"]));
    assert!(cc(&[b"max-age=60 , Proxy-Revalidate"]));
    assert!(cc(&[b"max-age=60", b"proxy-revalidate=\"x\""]));
    assert!(cc(&[b"ext=\"a\\\"b\", proxy-revalidate"]));
    assert!(cc(&[b"ext=\"caf\xe9\",proxy-revalidate"]));
    assert!(!cc(&[b"ext=\"proxy-revalidate\""]));
    assert!(!cc(&[b"ext=\"a, proxy-revalidate\""]));
    assert!(!cc(&[b"ext=\"a\\\", proxy-revalidate"]));
    assert!(!cc(&[b"must-revalidate, proxy-revalidated"]));
    assert!(!cc(&[]));
}

#[tokio::test(start_paused = true)]
async fn s_maxage_is_the_lifetime_of_a_shared_cache_only() {
    let e = entry(&[("cache-control", "max-age=100, s-maxage=10")], 1000);
    assert_eq!(e.lifetime_for(false), Some(Duration::from_secs(100)));
    assert_eq!(e.lifetime_for(true), Some(Duration::from_secs(10)));
    assert!(!e.must_revalidate(false) && e.must_revalidate(true));
    let e = entry(&[("cache-control", "max-age=100, proxy-revalidate")], 1000);
    assert_eq!(e.lifetime_for(true), Some(Duration::from_secs(100)));
    assert!(!e.must_revalidate(false) && e.must_revalidate(true));
    let e = entry(&[("cache-control", "max-age=100, must-revalidate")], 1000);
    assert!(e.must_revalidate(false) && e.must_revalidate(true));
}

#[test]
fn vary_parsing() {
    let mut h = HeaderMap::new();
    h.insert("vary", "Accept, accept-encoding,,".parse().unwrap());
    assert_eq!(vary_names(&h).unwrap().len(), 2);
    h.insert("vary", "accept, *".parse().unwrap());
    assert!(vary_names(&h).is_none());
    h.insert("vary", "bad name".parse().unwrap());
    assert!(vary_names(&h).is_none());
}

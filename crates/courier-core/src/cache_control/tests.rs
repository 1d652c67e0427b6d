use super::*;

#[test]
fn rfc_9111_directives() {
    let cc = CacheControl::parse_str("no-store");
    assert!(cc.no_store);
    let cc = CacheControl::parse_str(r#"no-cache="Set-Cookie", max-age=3600, must-revalidate"#);
    assert!(cc.no_cache && cc.must_revalidate);
    assert_eq!(cc.max_age, Some(Duration::from_secs(3600)));
    let cc = CacheControl::parse_str(r#"Public, S-MaxAge=10, max-age="20""#);
    assert!(cc.public);
    assert_eq!(cc.s_maxage, Some(Duration::from_secs(10)));
    assert_eq!(cc.max_age, Some(Duration::from_secs(20)));
    let cc = CacheControl::parse_str("max-age=60, stale-while-revalidate=30, stale-if-error=86400");
    assert_eq!(cc.stale_while_revalidate, Some(Duration::from_secs(30)));
    assert_eq!(cc.stale_if_error, Some(Duration::from_secs(86400)));
}

/// Every flag directive sets its own field and no other.
#[test]
fn each_flag_directive_sets_its_own_field() {
    let flags = |cc: &CacheControl| {
        [
            cc.no_store,
            cc.no_cache,
            cc.private,
            cc.public,
            cc.must_revalidate,
            cc.only_if_cached,
            cc.no_transform,
            cc.immutable,
        ]
    };
    let names = [
        "no-store",
        "no-cache",
        "private",
        "public",
        "must-revalidate",
        "only-if-cached",
        "no-transform",
        "immutable",
    ];
    for (i, name) in names.iter().enumerate() {
        let mut want = [false; 8];
        want[i] = true;
        assert_eq!(flags(&CacheControl::parse_str(name)), want, "{name}");
        assert_eq!(
            flags(&CacheControl::parse_str(&name.to_uppercase())),
            want,
            "{name}"
        );
    }
    assert_eq!(
        flags(&CacheControl::parse_str("x-unknown, max-age=5")),
        [false; 8]
    );
}

#[test]
fn bad_and_duplicated_values() {
    assert_eq!(
        CacheControl::parse_str("max-age=abc").max_age,
        Some(Duration::ZERO)
    );
    assert_eq!(
        CacheControl::parse_str("max-age=-1").max_age,
        Some(Duration::ZERO)
    );
    assert_eq!(
        CacheControl::parse_str("max-age=99999999999999999999999").max_age,
        Some(Duration::from_secs(1 << 31))
    );
    assert_eq!(
        CacheControl::parse_str("max-age=60, max-age=10").max_age,
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        CacheControl::parse_str(r#"private="a, b", max-age=5"#).max_age,
        Some(Duration::from_secs(5))
    );
    assert_eq!(CacheControl::parse_str(",,, ,"), CacheControl::default());
}

/// A quoted-pair (`\"`) stands for the character after the backslash: an escaped quote
/// does not end the quoted string, and what follows it up to the real closing quote is value.
#[test]
fn an_escaped_quote_inside_a_quoted_value_does_not_end_it() {
    let cc = CacheControl::parse_str(r#"no-cache="a\",no-store,", max-age=5"#);
    assert!(cc.no_cache);
    assert!(!cc.no_store, "no-store is inside the quoted value");
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
    assert_eq!(
        CacheControl::parse_str(r#"max-age="1\2""#).max_age,
        Some(Duration::from_secs(12)),
        "a quoted-pair of a digit is the digit"
    );
}

/// Whatever stands between a closing quote and the next comma belongs to no directive.
#[test]
fn text_after_a_closing_quote_is_skipped_up_to_the_comma() {
    let cc = CacheControl::parse_str(r#"no-cache="x" no-store, max-age=5"#);
    assert!(cc.no_cache);
    assert!(!cc.no_store, "no-store is garbage after the quoted value");
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
    let cc = CacheControl::parse_str(r#"private="x"max-age=1,max-age=9"#);
    assert_eq!(cc.max_age, Some(Duration::from_secs(9)));
}

#[test]
fn obs_text_in_a_value_hides_no_directive() {
    let mut h = HeaderMap::new();
    h.append(
        "cache-control",
        http::HeaderValue::from_bytes(b"no-store, ext=\"caf\xe9\", max-age=5").unwrap(),
    );
    h.append(
        "cache-control",
        http::HeaderValue::from_bytes("no-cache, x=\"caf\u{e9}\"".as_bytes()).unwrap(),
    );
    let cc = CacheControl::from_headers(&h);
    assert!(cc.no_store && cc.no_cache);
    assert_eq!(cc.max_age, Some(Duration::from_secs(5)));
}

#[test]
fn several_fields_merge() {
    let mut h = HeaderMap::new();
    h.append("cache-control", "private".parse().unwrap());
    h.append("cache-control", "max-age=7".parse().unwrap());
    let cc = CacheControl::from_headers(&h);
    assert!(cc.private);
    assert_eq!(cc.max_age, Some(Duration::from_secs(7)));
}

#[test]
fn rfc_9110_etag_comparison_table() {
    // Section 8.8.3.2.
    let w1 = EntityTag::parse(r#"W/"1""#).unwrap();
    let w2 = EntityTag::parse(r#"W/"2""#).unwrap();
    let s1 = EntityTag::parse(r#""1""#).unwrap();
    assert!(!w1.strong_eq(&w1) && w1.weak_eq(&w1));
    assert!(!w1.strong_eq(&w2) && !w1.weak_eq(&w2));
    assert!(!w1.strong_eq(&s1) && w1.weak_eq(&s1));
    assert!(s1.strong_eq(&s1) && s1.weak_eq(&s1));
}

#[test]
fn etag_parsing() {
    assert_eq!(EntityTag::parse(r#""""#), Some(EntityTag::strong("")));
    assert_eq!(
        EntityTag::parse(r#" W/"a-b" "#),
        Some(EntityTag::weak("a-b"))
    );
    assert_eq!(EntityTag::parse("abc"), None);
    assert_eq!(EntityTag::parse(r#""a"b""#), None);
    assert_eq!(EntityTag::parse(r#"w/"a""#), None, "W/ is case-sensitive");
    assert_eq!(EntityTag::weak("x").to_string(), r#"W/"x""#);
}

#[test]
fn only_a_quoted_tag_without_w_slash_is_strong() {
    let strong = EntityTag::parse(r#""v1""#).unwrap();
    assert!(!strong.is_weak() && !strong.is_unquoted());
    assert!(!EntityTag::strong("v1").is_weak());
    assert!(EntityTag::weak("v1").is_weak());
    assert!(!EntityTagRef::Strong(b"v1").is_weak());
    assert!(!strong.borrowed().is_weak());
    assert!(EntityTagRef::Weak(b"v1").is_weak());
    assert!(EntityTagRef::Unquoted(b"v1").is_weak());
}

#[test]
fn etag_lists() {
    assert_eq!(EntityTagList::parse(" * "), EntityTagList::Any);
    let l = EntityTagList::parse(r#""xyzzy", W/"r2d2xxxx", "c3piozzzz", "a,b""#);
    let EntityTagList::Tags(tags) = &l else {
        panic!("tags")
    };
    assert_eq!(tags.len(), 4);
    assert!(tags[1].is_weak());
    assert_eq!(tags[3].tag(), "a,b");
    assert!(l.weak_matches(&EntityTag::strong("r2d2xxxx")));
}

#[test]
fn an_unquoted_tag_is_kept_by_the_lenient_parser_only() {
    let unquoted = |b: &'static [u8]| Some(EntityTagRef::Unquoted(b));
    for (value, want) in [
        (&b"abc"[..], unquoted(b"abc")),
        (b" abc\t", unquoted(b"abc")),
        (b"W/abc", unquoted(b"W/abc")),
        (b"a/b;c=d\\e", unquoted(b"a/b;c=d\\e")),
        (b"**", unquoted(b"**")),
        (b"\"abc\"", Some(EntityTagRef::Strong(b"abc"))),
        (b" W/\"abc\" ", Some(EntityTagRef::Weak(b"abc"))),
    ] {
        assert_eq!(EntityTagRef::parse_lenient(value), want, "{value:?}");
    }
    assert_eq!(EntityTagRef::parse(b"abc"), None);
    assert_eq!(EntityTag::parse("abc"), None);
}

#[test]
fn garbage_is_no_tag_even_leniently() {
    for value in [
        &b""[..],
        b"  \t ",
        b"*",
        b" * ",
        b"a b",
        b"a\tb",
        b"a,b",
        b"a, b",
        b"\"a\", \"b\"",
        b"\"abc",
        b"abc\"",
        b"a\"b",
        b"\"a\"b\"",
        b"W/\"abc",
        b"w/\"abc\"",
        b"caf\xe9",
        b"\x01abc",
        b"abc\x7f",
        b"abc\n",
        b"\r\nabc",
        b"a\0b",
    ] {
        assert_eq!(EntityTagRef::parse_lenient(value), None, "{value:?}");
    }
}

#[test]
fn an_unquoted_tag_compares_weakly_with_unquoted_tags_only() {
    let bare = EntityTag::parse_lenient("abc").unwrap();
    let strong = EntityTag::strong("abc");
    let weak = EntityTag::weak("abc");
    assert!(bare.weak_eq(&bare) && !bare.strong_eq(&bare));
    assert!(!bare.weak_eq(&EntityTag::parse_lenient("abd").unwrap()));
    assert!(!bare.weak_eq(&EntityTag::parse_lenient("ABC").unwrap()));
    for quoted in [&strong, &weak] {
        assert!(!bare.weak_eq(quoted) && !quoted.weak_eq(&bare));
        assert!(!bare.strong_eq(quoted) && !quoted.strong_eq(&bare));
    }
    assert_ne!(bare, weak);
    assert!(bare.is_weak() && bare.is_unquoted() && !weak.is_unquoted());
    assert_eq!(bare.tag(), "abc");
    assert_eq!(bare.to_string(), "abc");
    // Weak W/abc is no weak form of abc: its `W/` is part of the opaque value.
    let w = EntityTag::parse_lenient("W/abc").unwrap();
    assert!(!w.weak_eq(&bare) && w.to_string() == "W/abc");
    assert!(
        !EntityTagList::parse("abc").weak_matches(&bare),
        "lists stay strict"
    );
}

/// Bytes biased towards what entity tags are made of.
fn tag_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..12),
        proptest::collection::vec(
            prop_oneof![
                Just(b'a'),
                Just(b'Z'),
                Just(b'"'),
                Just(b'W'),
                Just(b'/'),
                Just(b','),
                Just(b'*'),
                Just(b' '),
                Just(b'\t'),
                Just(0x01),
                Just(0x7f),
                Just(0xe9),
            ],
            0..8,
        ),
    ]
}

proptest::proptest! {
    #[test]
    fn lenient_parsing_extends_strict_parsing(bytes in tag_bytes()) {
        let strict = EntityTagRef::parse(&bytes);
        let lenient = EntityTagRef::parse_lenient(&bytes);
        if strict.is_some() {
            proptest::prop_assert_eq!(lenient, strict);
        }
        if let Some(tag @ EntityTagRef::Unquoted(opaque)) = lenient {
            proptest::prop_assert!(strict.is_none());
            proptest::prop_assert!(!opaque.is_empty() && opaque != b"*");
            proptest::prop_assert!(
                opaque.iter().all(|&b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b','),
                "{:?}", opaque
            );
            // What is sent back is the value as it came, without the whitespace around it.
            proptest::prop_assert_eq!(trim_ows(&bytes), opaque);
            proptest::prop_assert!(tag.is_weak() && !tag.strong_eq(tag) && tag.weak_eq(tag));
        }
    }

    #[test]
    fn a_written_tag_parses_back_to_itself(bytes in tag_bytes()) {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return Ok(());
        };
        if let Some(tag) = EntityTag::parse_lenient(text) {
            let written = tag.to_string();
            proptest::prop_assert_eq!(EntityTag::parse_lenient(&written), Some(tag.clone()));
            proptest::prop_assert_eq!(EntityTag::parse(&written).is_some(), !tag.is_unquoted());
        }
    }

    #[test]
    fn comparisons_on_bytes_agree_with_owned_tags(a in tag_bytes(), b in tag_bytes()) {
        let (Ok(a), Ok(b)) = (std::str::from_utf8(&a), std::str::from_utf8(&b)) else {
            return Ok(());
        };
        let (Some(x), Some(y)) = (EntityTag::parse_lenient(a), EntityTag::parse_lenient(b)) else {
            return Ok(());
        };
        let (rx, ry) = (
            EntityTagRef::parse_lenient(a.as_bytes()).unwrap(),
            EntityTagRef::parse_lenient(b.as_bytes()).unwrap(),
        );
        proptest::prop_assert_eq!(x.weak_eq(&y), rx.weak_eq(ry));
        proptest::prop_assert_eq!(x.strong_eq(&y), rx.strong_eq(ry));
        proptest::prop_assert_eq!(x.weak_eq(&y), y.weak_eq(&x));
        // Strong equality implies weak equality; an unquoted tag is never strongly equal.
        proptest::prop_assert!(!x.strong_eq(&y) || x.weak_eq(&y));
        proptest::prop_assert!(!(x.is_unquoted() || y.is_unquoted()) || !x.strong_eq(&y));
        // Weakly equal tags are written alike, but for a `W/`.
        if x.weak_eq(&y) {
            proptest::prop_assert_eq!(x.is_unquoted(), y.is_unquoted());
            proptest::prop_assert_eq!(x.tag(), y.tag());
        }
    }
}

#![no_main]
//! Entity tags on arbitrary bytes: nothing may panic; the strict reading is a part of the
//! lenient one; comparisons are what RFC 9110 section 8.8.3.2 says; a tag written back reads
//! back the same; every tag an `If-None-Match` list names matches it.

use courier_core::cache_control::{EntityTag, EntityTagList, EntityTagRef};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let strict = EntityTagRef::parse(data);
    let lenient = EntityTagRef::parse_lenient(data);
    if let Some(tag) = strict {
        assert_eq!(lenient, Some(tag), "a quoted tag reads the same either way");
        assert!(!matches!(tag, EntityTagRef::Unquoted(_)));
    }
    if let Some(tag) = lenient {
        assert!(tag.weak_eq(tag), "weak comparison is reflexive");
        assert_eq!(
            tag.strong_eq(tag),
            !tag.is_weak(),
            "only a strong tag is strongly itself"
        );
        if let EntityTagRef::Unquoted(opaque) = tag {
            assert!(strict.is_none());
            assert!(!opaque.is_empty() && opaque != b"*");
            assert!(
                !opaque
                    .iter()
                    .any(|b| matches!(b, b'"' | b',') || !b.is_ascii_graphic())
            );
        }
    }

    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for (tag, read) in [
        (
            EntityTag::parse(text),
            EntityTag::parse as fn(&str) -> Option<EntityTag>,
        ),
        (EntityTag::parse_lenient(text), EntityTag::parse_lenient),
    ] {
        if let Some(tag) = tag {
            let written = tag.to_string();
            assert_eq!(read(&written).as_ref(), Some(&tag), "{written:?}");
        }
    }
    let list = EntityTagList::parse(text);
    match &list {
        EntityTagList::Any => assert_eq!(text.trim(), "*"),
        EntityTagList::Tags(tags) => {
            for tag in tags {
                assert!(!tag.is_unquoted(), "a list holds quoted tags only");
                assert!(list.weak_matches(tag));
            }
        }
    }
});

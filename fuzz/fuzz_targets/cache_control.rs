#![no_main]
//! `Cache-Control` and entity-tag parsing on arbitrary text: nothing may panic.

use courier_core::cache_control::{CacheControl, EntityTag, EntityTagList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = CacheControl::parse_str(text);
    if let Some(tag) = EntityTag::parse(text) {
        assert_eq!(EntityTag::parse(&tag.to_string()), Some(tag));
    }
    let _ = EntityTagList::parse(text);
});

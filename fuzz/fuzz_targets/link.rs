#![no_main]
//! The `Link` parser on arbitrary text: nothing may panic, every link has a rel.

use courier_core::link::parse_link_header;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let base = url::Url::parse("https://api.example.com/v1/items?page=1").expect("valid base");
    for link in parse_link_header(text, &base) {
        assert!(!link.rels().is_empty());
    }
});

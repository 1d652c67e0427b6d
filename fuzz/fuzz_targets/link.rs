#![no_main]
//! The `Link` parser on arbitrary text: nothing may panic, every link has lowercase rels,
//! and a link written back as a field member reads back the same.

use courier::paginate::link::{next_link, parse_link_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let base = url::Url::parse("https://api.example.com/v1/items?page=1").expect("valid base");
    let links = parse_link_header(text, &base);
    for link in &links {
        assert!(!link.rels().is_empty());
        assert!(
            link.rels()
                .iter()
                .all(|r| !r.is_empty() && *r == r.to_ascii_lowercase())
        );
        let written = link.to_string();
        assert_eq!(
            parse_link_header(&written, &base),
            std::slice::from_ref(link),
            "{written:?} does not read back as the link it was written from"
        );
    }
    if let Some(next) = next_link(&links) {
        assert!(
            links
                .iter()
                .any(|l| l.target() == next && l.has_rel("next"))
        );
    }
});

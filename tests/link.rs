//! Property tests for the `Link` parser: no input panics, and what the `Link` formatter writes
//! parses back to the same links.

use courier::paginate::link::{Link, parse_link_header};
use proptest::prelude::*;
use url::Url;

proptest! {
    #[test]
    fn the_parser_never_panics(text in "\\PC{0,60}", base in "(http|https)://[a-z]{1,8}(:[0-9]{1,5})?/[a-z/]{0,10}") {
        let base = Url::parse(&base).unwrap_or_else(|_| Url::parse("http://a/").unwrap());
        let _ = parse_link_header(&text, &base);
    }

    #[test]
    fn link_formatter_round_trips(
        links in proptest::collection::vec(
            (
                "[a-z]{1,8}",
                "[a-z0-9=&,;]{0,12}",
                proptest::collection::vec("[a-z][a-z0-9.-]{0,8}", 1..3),
                proptest::collection::vec(("[a-z]{1,6}", "[ -~]{0,12}"), 0..3),
            ),
            1..5,
        )
    ) {
        let base = Url::parse("https://api.example.com/list").unwrap();
        let built: Vec<Link> = links
            .into_iter()
            .map(|(path, query, rels, params)| {
                let target = Url::parse(&format!("https://h.example/{path}?{query}")).unwrap();
                params
                    .into_iter()
                    .filter(|(name, _)| name != "rel")
                    .fold(Link::new(target, rels), |l, (k, v)| l.with_param(k, v))
            })
            .collect();
        let text = built.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        prop_assert_eq!(parse_link_header(&text, &base), built);
    }
}

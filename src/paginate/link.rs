//! RFC 8288 `Link` fields, for following a server's pagination.
//!
//! The parser survives commas inside `<...>` and inside quoted strings, reads several
//! space-separated relation types (`rel="next last"`), resolves relative targets against the
//! page's own URL, ignores every `rel` after the first (RFC 8288 section 3.3), and drops a link
//! without `rel` or whose target cannot be resolved. Unquoted values run to the next `;` or `,`
//! and empty parameters are skipped (RFC 8288 appendix B.3); bytes above 0x7f in a field do not
//! hide its links. A link whose `anchor` names another resource keeps it as its
//! [`Link::context`] and is never the page's [`next_link`]. Malformed members are skipped,
//! never fatal.
//!
//! ```
//! use courier::paginate::link::{next_link, parse_link_header};
//! use url::Url;
//!
//! let base = Url::parse("http://127.0.0.1:8080/items?page=1").unwrap();
//! let links = parse_link_header(r#"</items?page=2>; rel="next", </items?page=3>; rel="last""#, &base);
//! assert_eq!(links[0].target().as_str(), "http://127.0.0.1:8080/items?page=2");
//! assert_eq!(next_link(&links).unwrap().as_str(), "http://127.0.0.1:8080/items?page=2");
//! ```

use std::fmt;
use url::{Position, Url};

/// One link: a resolved target, its relation types and its other parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    target: Url,
    rels: Vec<String>,
    params: Vec<(String, String)>,
    /// The resolved `anchor`, when it names another resource than the page.
    context: Option<Url>,
}

impl Link {
    /// A link to `target` with relation types `rels` (stored lowercase).
    pub fn new(target: Url, rels: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            target,
            rels: rels
                .into_iter()
                .map(|r| r.into().to_ascii_lowercase())
                .collect(),
            params: Vec::new(),
            context: None,
        }
    }

    /// Adds a target attribute (`title`, `type`, ...).
    pub fn with_param(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.params
            .push((name.into().to_ascii_lowercase(), value.into()));
        self
    }

    /// The absolute target.
    pub fn target(&self) -> &Url {
        &self.target
    }

    /// The relation types, lowercase.
    pub fn rels(&self) -> &[String] {
        &self.rels
    }

    /// Whether the link has relation type `rel` (ASCII case-insensitive).
    pub fn has_rel(&self, rel: &str) -> bool {
        self.rels.iter().any(|r| r.eq_ignore_ascii_case(rel))
    }

    /// The target attributes other than `rel`, names lowercase.
    pub fn params(&self) -> &[(String, String)] {
        &self.params
    }

    /// The resource the link is about, when its `anchor` names another one than the page it
    /// came with (RFC 8288 section 3.2), resolved; `None` for a link about the page itself.
    pub fn context(&self) -> Option<&Url> {
        self.context.as_ref()
    }

    /// The first value of the attribute `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Writes the link as a `Link` field member: `<target>; rel="a b"; name="value"`.
impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}>; rel=", self.target)?;
        write_quoted(f, &self.rels.join(" "))?;
        for (k, v) in &self.params {
            write!(f, "; {k}=")?;
            write_quoted(f, v)?;
        }
        Ok(())
    }
}

fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        if c == '"' || c == '\\' {
            f.write_str("\\")?;
        }
        write!(f, "{c}")?;
    }
    f.write_str("\"")
}

/// The target of the first link with `rel="next"` about the page itself (a link whose `anchor`
/// names another resource gives that resource's next, not the page's).
pub fn next_link(links: &[Link]) -> Option<&Url> {
    links
        .iter()
        .find(|l| l.has_rel("next") && l.context.is_none())
        .map(Link::target)
}

/// Parses every member of a `Link` field value, resolving targets against `base`.
pub fn parse_link_header(value: &str, base: &Url) -> Vec<Link> {
    let mut p = Cursor {
        s: value.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    loop {
        p.skip_while(|b| b == b',' || is_ows(b));
        if p.at_end() {
            return out;
        }
        match p.link(base) {
            Some(Some(link)) => out.push(link),
            Some(None) => {}
            None => p.skip_member(),
        }
    }
}

/// Parses every `Link` field in `headers` (several fields are one comma-joined list).
pub fn parse_link_headers(headers: &http::HeaderMap, base: &Url) -> Vec<Link> {
    headers
        .get_all(http::header::LINK)
        .iter()
        // obs-text (bytes above 0x7f) may stand in a quoted string (RFC 9110 section 5.6.4):
        // it must not hide the field's links.
        .flat_map(|v| parse_link_header(&String::from_utf8_lossy(v.as_bytes()), base))
        .collect()
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_while(&mut self, f: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &str {
        let start = self.i;
        self.skip_while(f);
        // Only ASCII predicates are used, so the slice boundaries are char boundaries.
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("")
    }

    /// Skips to the next top-level comma, past `<...>` and quoted strings.
    fn skip_member(&mut self) {
        let mut in_angle = false;
        let mut in_quote = false;
        while let Some(b) = self.peek() {
            self.i += 1;
            match b {
                b'\\' if in_quote => self.i += 1,
                b'"' if !in_angle => in_quote = !in_quote,
                b'<' if !in_quote => in_angle = true,
                b'>' if !in_quote => in_angle = false,
                b',' if !in_angle && !in_quote => return,
                _ => {}
            }
        }
    }

    /// `Some(Some(link))` for a good member, `Some(None)` for a well-formed member to drop,
    /// `None` for a malformed one (the caller skips to the next comma).
    fn link(&mut self, base: &Url) -> Option<Option<Link>> {
        if self.peek()? != b'<' {
            return None;
        }
        self.i += 1;
        let target = self.take_while(|b| b != b'>').trim().to_owned();
        if self.peek()? != b'>' {
            return None;
        }
        self.i += 1;
        let mut rels: Option<Vec<String>> = None;
        let mut params = Vec::new();
        loop {
            self.skip_while(is_ows);
            match self.peek() {
                None | Some(b',') => break,
                Some(b';') => self.i += 1,
                Some(_) => return None,
            }
            self.skip_while(is_ows);
            let name = self.take_while(is_tchar).to_ascii_lowercase();
            if name.is_empty() {
                // An empty parameter (`; ;`, a trailing `;`) is skipped (RFC 8288 appendix
                // B.3); anything else that is no name makes the member malformed.
                match self.peek() {
                    None | Some(b';' | b',') => continue,
                    Some(_) => return None,
                }
            }
            self.skip_while(is_ows);
            let value = if self.peek() == Some(b'=') {
                self.i += 1;
                self.skip_while(is_ows);
                if self.peek() == Some(b'"') {
                    self.quoted()?
                } else {
                    // Unquoted: up to the next `;` or `,` (appendix B.3), as RFC 5988's
                    // `type=text/html` was written.
                    self.take_while(|b| b != b';' && b != b',')
                        .trim_end_matches([' ', '\t'])
                        .to_owned()
                }
            } else {
                String::new()
            };
            // RFC 8288 3.3: occurrences of rel after the first are ignored.
            if name == "rel" {
                if rels.is_none() {
                    rels = Some(
                        value
                            .split_ascii_whitespace()
                            .map(str::to_ascii_lowercase)
                            .collect(),
                    );
                }
            } else {
                params.push((name, value));
            }
        }
        let rels = match rels {
            Some(r) if !r.is_empty() => r,
            _ => return Some(None),
        };
        // A byte that was not UTF-8 (replaced when the field was read) would name another
        // resource than the server meant: such a link is dropped, not followed.
        if target.contains('\u{fffd}') {
            return Some(None);
        }
        let Ok(target) = base.join(&target) else {
            return Some(None);
        };
        // RFC 8288 3.2: `anchor` replaces the link's context, resolved like the target.
        let context = match params.iter().find(|(k, _)| k == "anchor") {
            None => None,
            // A fragment of the page (`anchor="#section"`) is still the page.
            Some((_, anchor)) => match base.join(anchor) {
                Ok(context) if context[..Position::AfterQuery] == base[..Position::AfterQuery] => {
                    None
                }
                Ok(context) => Some(context),
                Err(_) => return Some(None),
            },
        };
        Some(Some(Link {
            target,
            rels,
            params,
            context,
        }))
    }

    fn quoted(&mut self) -> Option<String> {
        debug_assert_eq!(self.peek(), Some(b'"'));
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let b = self.peek()?;
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).ok(),
                b'\\' => {
                    out.push(self.peek()?);
                    self.i += 1;
                }
                _ => out.push(b),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn obs_text_in_a_title_keeps_the_links_of_the_field() {
        // RFC 9110 5.6.4: qdtext includes obs-text; a title in UTF-8 must not hide rel="next".
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::LINK,
            http::HeaderValue::from_bytes(
                "<https://api.example.com/v1/items?page=2>; rel=\"next\"; title=\"n\u{e4}chste Seite\""
                    .as_bytes(),
            )
            .unwrap(),
        );
        let links = parse_link_headers(&h, &base());
        assert_eq!(
            next_link(&links).map(Url::as_str),
            Some("https://api.example.com/v1/items?page=2")
        );
        assert_eq!(links[0].param("title"), Some("n\u{e4}chste Seite"));
    }

    #[test]
    fn a_legacy_unquoted_media_type_or_a_trailing_semicolon_keeps_rel_next() {
        // RFC 5988 allowed `type=text/html` unquoted; RFC 8288 appendix B.3 reads an unquoted
        // value up to `;` or `,`, and an empty parameter after a `;` is skipped.
        for v in [
            r#"<https://api.example.com/v1/items?page=2>; rel="next"; type=text/html"#,
            r#"<https://api.example.com/v1/items?page=2>; rel="next";"#,
            r#"<https://api.example.com/v1/items?page=2>; ; rel=next ; type=text/html , </x>; rel=last"#,
        ] {
            let links = parse_link_header(v, &base());
            assert_eq!(
                next_link(&links).map(Url::as_str),
                Some("https://api.example.com/v1/items?page=2"),
                "{v}"
            );
        }
        let links = parse_link_header(
            r#"</a>; rel="next"; type=text/html ; title=x, </b>; rel=last"#,
            &base(),
        );
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].param("type"), Some("text/html"));
        assert_eq!(links[0].param("title"), Some("x"));
    }

    #[test]
    fn anchor_changes_the_context_of_a_next_link() {
        // RFC 8288 3.2: with `anchor`, the link's context is the anchor, not this page; this
        // says "the next page after /v1/comments", not "the next page after this one".
        let links = parse_link_header(
            r#"</v1/comments?page=2>; rel="next"; anchor="/v1/comments""#,
            &base(),
        );
        assert_eq!(next_link(&links), None);
        assert_eq!(
            links[0].context().map(Url::as_str),
            Some("https://api.example.com/v1/comments")
        );
        // An anchor naming the page itself changes nothing.
        let page = base();
        let links = parse_link_header(
            &format!(r#"</v1/items?page=2>; rel="next"; anchor="{page}""#),
            &page,
        );
        assert_eq!(links[0].context(), None);
        assert!(next_link(&links).is_some());
        let links = parse_link_header(r##"</v1/items?page=2>; rel="next"; anchor="#top""##, &page);
        assert_eq!(
            links[0].context(),
            None,
            "a fragment of the page is the page"
        );
    }

    #[test]
    fn a_target_with_bytes_that_are_not_utf8_is_dropped() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::LINK,
            http::HeaderValue::from_bytes(
                b"</v1/items?name=M\xfcller>; rel=\"next\", </v1/last>; rel=\"last\"",
            )
            .unwrap(),
        );
        let links = parse_link_headers(&h, &base());
        assert_eq!(next_link(&links), None, "not a page the server named");
        assert_eq!(links.len(), 1, "the other link stays");
    }

    fn base() -> Url {
        Url::parse("https://api.example.com/v1/items?page=1").unwrap()
    }

    #[test]
    fn rfc_8288_examples() {
        // Section 3.5.
        let links = parse_link_header(
            r#"<http://example.com/TheBook/chapter2>; rel="previous"; title="previous chapter""#,
            &base(),
        );
        assert_eq!(links.len(), 1);
        assert!(links[0].has_rel("previous"));
        assert_eq!(links[0].param("title"), Some("previous chapter"));

        let links = parse_link_header(r#"</>; rel="http://example.net/foo""#, &base());
        assert_eq!(links[0].target().as_str(), "https://api.example.com/");
        assert!(links[0].has_rel("http://example.net/foo"));

        let links = parse_link_header(
            r#"</TheBook/chapter2>; rel="previous"; title*=UTF-8'de'letztes%20Kapitel, </TheBook/chapter4>; rel="next"; title*=UTF-8'de'n%c3%a4chstes%20Kapitel"#,
            &Url::parse("http://example.org/").unwrap(),
        );
        assert_eq!(links.len(), 2);
        assert_eq!(
            links[1].target().as_str(),
            "http://example.org/TheBook/chapter4"
        );

        let links = parse_link_header(
            r#"<http://example.org/>; rel="start http://example.net/relation/other""#,
            &base(),
        );
        assert_eq!(
            links[0].rels(),
            ["start", "http://example.net/relation/other"]
        );
    }

    #[test]
    fn commas_inside_targets_and_quotes() {
        let links = parse_link_header(
            r#"<https://a.example/x?ids=1,2,3>; rel="next"; title="a, b", <https://a.example/last>; rel=last"#,
            &base(),
        );
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].target().as_str(), "https://a.example/x?ids=1,2,3");
        assert_eq!(links[0].param("title"), Some("a, b"));
        assert!(links[1].has_rel("last"));
    }

    #[test]
    fn github_style_pagination() {
        let v = r#"<https://api.github.com/repositories/1300192/issues?page=2>; rel="prev", <https://api.github.com/repositories/1300192/issues?page=4>; rel="next", <https://api.github.com/repositories/1300192/issues?page=515>; rel="last", <https://api.github.com/repositories/1300192/issues?page=1>; rel="first""#;
        let links = parse_link_header(v, &base());
        assert_eq!(links.len(), 4);
        assert_eq!(
            next_link(&links).unwrap().as_str(),
            "https://api.github.com/repositories/1300192/issues?page=4"
        );
    }

    #[test]
    fn drops_links_without_rel_and_skips_garbage() {
        let links = parse_link_header(
            r#"<https://a.example/1>; title="x", garbage, <https://a.example/2>; rel="NEXT"; rel="last""#,
            &base(),
        );
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].rels(), ["next"], "the second rel is ignored");
        assert!(parse_link_header("<unterminated; rel=next", &base()).is_empty());
        assert!(parse_link_header("", &base()).is_empty());
        assert!(parse_link_header(r#"<a>; rel="next"#, &base()).is_empty());
    }

    #[test]
    fn relative_targets_resolve_against_the_page() {
        let links = parse_link_header(r#"<?page=2>; rel="next""#, &base());
        assert_eq!(
            links[0].target().as_str(),
            "https://api.example.com/v1/items?page=2"
        );
        let links = parse_link_header(r#"<other>; rel="next""#, &base());
        assert_eq!(
            links[0].target().as_str(),
            "https://api.example.com/v1/other"
        );
    }

    #[test]
    fn display_round_trips() {
        let link = Link::new(
            Url::parse("https://a.example/x?a=1,2").unwrap(),
            ["next", "last"],
        )
        .with_param("title", r#"say "hi", ok\"#);
        let text = link.to_string();
        assert_eq!(parse_link_header(&text, &base()), vec![link]);
    }
}

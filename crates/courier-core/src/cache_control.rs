//! `Cache-Control` directives (RFC 9111 section 5.2) and entity tags (RFC 9110 section 8.8.3).
//!
//! ```
//! use courier_core::cache_control::{CacheControl, EntityTag};
//! use std::time::Duration;
//!
//! let cc = CacheControl::parse_str(r#"private, max-age=60, stale-if-error="300""#);
//! assert!(cc.private);
//! assert_eq!(cc.max_age, Some(Duration::from_secs(60)));
//! assert_eq!(cc.stale_if_error, Some(Duration::from_secs(300)));
//!
//! let a = EntityTag::parse(r#"W/"v1""#).unwrap();
//! let b = EntityTag::parse(r#""v1""#).unwrap();
//! assert!(a.weak_eq(&b) && !a.strong_eq(&b));
//! ```

use http::HeaderMap;
use std::fmt;
use std::time::Duration;

/// The directives of one or more `Cache-Control` fields.
///
/// Delta-seconds that do not parse make the response stale (`Some(0)`), as RFC 9111 section
/// 1.2.2 advises; huge ones saturate. When a directive repeats, the smallest value wins.
/// Unknown directives are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `no-store`.
    pub no_store: bool,
    /// `no-cache` (with or without a field list: a private cache treats both alike).
    pub no_cache: bool,
    /// `private`.
    pub private: bool,
    /// `public`.
    pub public: bool,
    /// `max-age`.
    pub max_age: Option<Duration>,
    /// `s-maxage` (for shared caches; recorded, not used by a private cache).
    pub s_maxage: Option<Duration>,
    /// `must-revalidate`.
    pub must_revalidate: bool,
    /// `stale-while-revalidate` (RFC 5861).
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error` (RFC 5861).
    pub stale_if_error: Option<Duration>,
    /// `only-if-cached` (request).
    pub only_if_cached: bool,
    /// `no-transform`.
    pub no_transform: bool,
    /// `immutable` (RFC 8246).
    pub immutable: bool,
}

impl CacheControl {
    /// The directives of every `Cache-Control` field in `headers`.
    pub fn from_headers(headers: &HeaderMap) -> Self {
        let mut cc = Self::default();
        for value in headers.get_all(http::header::CACHE_CONTROL) {
            // Directive names are tokens; obs-text (bytes >= 0x80) may only stand inside a
            // value, where the lossy conversion alters it without hiding the directives around
            // it. ASCII and UTF-8 fields are borrowed, not copied.
            cc.merge_str(&String::from_utf8_lossy(value.as_bytes()));
        }
        cc
    }

    /// The directives of one field value.
    pub fn parse_str(text: &str) -> Self {
        let mut cc = Self::default();
        cc.merge_str(text);
        cc
    }

    fn merge_str(&mut self, text: &str) {
        for (name, value) in directives(text) {
            let secs = || Some(value.as_deref().map_or(Duration::ZERO, delta_seconds));
            match name.as_str() {
                "no-store" => self.no_store = true,
                "no-cache" => self.no_cache = true,
                "private" => self.private = true,
                "public" => self.public = true,
                "must-revalidate" => self.must_revalidate = true,
                "only-if-cached" => self.only_if_cached = true,
                "no-transform" => self.no_transform = true,
                "immutable" => self.immutable = true,
                "max-age" => self.max_age = min_opt(self.max_age, secs()),
                "s-maxage" => self.s_maxage = min_opt(self.s_maxage, secs()),
                "stale-while-revalidate" => {
                    self.stale_while_revalidate = min_opt(self.stale_while_revalidate, secs())
                }
                "stale-if-error" => self.stale_if_error = min_opt(self.stale_if_error, secs()),
                _ => {}
            }
        }
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses delta-seconds (RFC 9111 section 1.2.2), as `Cache-Control` values and the `Age`
/// field carry them: surrounding whitespace is allowed, values too large saturate at 2^31
/// seconds ("infinity"), and anything but digits is zero.
///
/// ```
/// use courier_core::cache_control::delta_seconds;
/// use std::time::Duration;
///
/// assert_eq!(delta_seconds(" 60 "), Duration::from_secs(60));
/// assert_eq!(delta_seconds("99999999999999999999"), Duration::from_secs(1 << 31));
/// assert_eq!(delta_seconds("-1"), Duration::ZERO);
/// ```
pub fn delta_seconds(text: &str) -> Duration {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Duration::ZERO;
    }
    let secs = text.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    });
    // 2^31 seconds is "infinity" for delta-seconds (RFC 9111 section 1.2.2).
    Duration::from_secs(secs.min(1 << 31))
}

/// Splits a directive list into lowercase names and unquoted values, respecting quotes.
fn directives(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return out;
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ',' {
                break;
            }
            name.push(c.to_ascii_lowercase());
            chars.next();
        }
        let mut value = None;
        if chars.peek() == Some(&'=') {
            chars.next();
            let mut v = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                v.push(n);
                            }
                        }
                        _ => v.push(c),
                    }
                }
                // Anything between the closing quote and the comma is garbage.
                while chars.peek().is_some_and(|c| *c != ',') {
                    chars.next();
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == ',' {
                        break;
                    }
                    v.push(c);
                    chars.next();
                }
            }
            value = Some(v.trim().to_owned());
        }
        out.push((name.trim().to_owned(), value));
    }
}

/// An entity tag: `"xyzzy"` or weak `W/"xyzzy"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityTag {
    weak: bool,
    tag: String,
}

impl EntityTag {
    /// A strong tag (the opaque part, without quotes).
    pub fn strong(tag: impl Into<String>) -> Self {
        Self {
            weak: false,
            tag: tag.into(),
        }
    }

    /// A weak tag (the opaque part, without quotes).
    pub fn weak(tag: impl Into<String>) -> Self {
        Self {
            weak: true,
            tag: tag.into(),
        }
    }

    /// Parses one entity tag. Surrounding whitespace is allowed; anything else malformed is
    /// `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (weak, rest) = match text.strip_prefix("W/") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let tag = rest.strip_prefix('"')?.strip_suffix('"')?;
        if !tag
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
        {
            return None;
        }
        Some(Self {
            weak,
            tag: tag.to_owned(),
        })
    }

    /// Whether the tag is weak.
    pub const fn is_weak(&self) -> bool {
        self.weak
    }

    /// The opaque part, without quotes.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Strong comparison: both strong and the same opaque part.
    pub fn strong_eq(&self, other: &Self) -> bool {
        !self.weak && !other.weak && self.tag == other.tag
    }

    /// Weak comparison: the same opaque part, weak or not.
    pub fn weak_eq(&self, other: &Self) -> bool {
        self.tag == other.tag
    }
}

impl fmt::Display for EntityTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.weak {
            f.write_str("W/")?;
        }
        write!(f, "\"{}\"", self.tag)
    }
}

/// The value of `If-None-Match` / `If-Match`: `*` or a list of tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityTagList {
    /// `*`: any current representation.
    Any,
    /// The listed tags (malformed members are skipped).
    Tags(Vec<EntityTag>),
}

impl EntityTagList {
    /// Parses a list value; commas inside tags are kept.
    pub fn parse(text: &str) -> Self {
        if text.trim() == "*" {
            return Self::Any;
        }
        let mut tags = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find('"') {
            let weak = rest[..start].trim_end().ends_with("W/");
            let after = &rest[start + 1..];
            let Some(end) = after.find('"') else { break };
            let candidate = format!("{}\"{}\"", if weak { "W/" } else { "" }, &after[..end]);
            if let Some(tag) = EntityTag::parse(&candidate) {
                tags.push(tag);
            }
            rest = &after[end + 1..];
        }
        Self::Tags(tags)
    }

    /// Whether `tag` matches under weak comparison (what `If-None-Match` uses).
    pub fn weak_matches(&self, tag: &EntityTag) -> bool {
        match self {
            Self::Any => true,
            Self::Tags(tags) => tags.iter().any(|t| t.weak_eq(tag)),
        }
    }
}

#[cfg(test)]
mod tests {
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
        let cc =
            CacheControl::parse_str("max-age=60, stale-while-revalidate=30, stale-if-error=86400");
        assert_eq!(cc.stale_while_revalidate, Some(Duration::from_secs(30)));
        assert_eq!(cc.stale_if_error, Some(Duration::from_secs(86400)));
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
}

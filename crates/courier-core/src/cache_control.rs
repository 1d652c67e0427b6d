//! `Cache-Control` directives (RFC 9111 section 5.2) and entity tags (RFC 9110 section 8.8.3,
//! and, leniently, the unquoted tags some servers send: see [`EntityTag`]).
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
#[doc(hidden)]
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

/// An entity tag: `"xyzzy"`, weak `W/"xyzzy"`, or (read by [`EntityTag::parse_lenient`] only)
/// unquoted `xyzzy`.
///
/// # Unquoted tags
///
/// RFC 9110 section 8.8.3 quotes every tag:
///
/// ```text
/// entity-tag = [ weak ] opaque-tag
/// weak       = %s"W/"
/// opaque-tag = DQUOTE *etagc DQUOTE
/// etagc      = %x21 / %x23-7E / obs-text
/// ```
///
/// Some servers send the tag bare (`ETag: xyzzy`) and answer `304` to `If-None-Match: xyzzy`.
/// [`EntityTag::parse_lenient`] keeps such a value as an opaque tag (see
/// [`EntityTagRef::parse_lenient`] for which values), which:
///
/// - is written back verbatim ([`Display`](fmt::Display)), as the server compares it;
/// - counts as weak ([`is_weak`](Self::is_weak)): it never satisfies a strong comparison, so it
///   can make no `Range` or strong `If-Match` answer wrong;
/// - matches weakly only another unquoted tag with the same bytes. The opaque-tag of `"xyzzy"`
///   is the quoted string, quotes included, so it is not the same tag as bare `xyzzy`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EntityTag {
    form: Form,
    tag: String,
}

/// How an owned tag was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Form {
    Strong,
    Weak,
    Unquoted,
}

impl EntityTag {
    /// A strong tag (the opaque part, without quotes).
    pub fn strong(tag: impl Into<String>) -> Self {
        Self {
            form: Form::Strong,
            tag: tag.into(),
        }
    }

    /// A weak tag (the opaque part, without quotes).
    pub fn weak(tag: impl Into<String>) -> Self {
        Self {
            form: Form::Weak,
            tag: tag.into(),
        }
    }

    /// Parses one entity tag as RFC 9110 writes it (quoted). Surrounding whitespace is allowed;
    /// anything else malformed, an unquoted tag included, is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        EntityTagRef::parse(text.as_bytes()).map(Self::from)
    }

    /// Parses one entity tag as an `ETag` field may carry it: a quoted tag as
    /// [`parse`](Self::parse) reads it, or an unquoted one (see [Unquoted
    /// tags](#unquoted-tags) and [`EntityTagRef::parse_lenient`]).
    ///
    /// ```
    /// use courier_core::cache_control::EntityTag;
    ///
    /// let bare = EntityTag::parse_lenient("abc").unwrap();
    /// assert!(bare.is_unquoted() && bare.is_weak());
    /// assert_eq!(bare.to_string(), "abc", "written back as it came");
    /// assert!(bare.weak_eq(&EntityTag::parse_lenient(" abc ").unwrap()));
    /// assert!(!bare.weak_eq(&EntityTag::weak("abc")), "\"abc\" is another opaque-tag");
    /// assert!(!bare.strong_eq(&bare), "never strong");
    /// assert_eq!(EntityTag::parse_lenient("a, b"), None);
    /// assert_eq!(EntityTag::parse("abc"), None);
    /// ```
    pub fn parse_lenient(text: &str) -> Option<Self> {
        EntityTagRef::parse_lenient(text.as_bytes()).map(Self::from)
    }

    /// Whether the tag is weak: `W/"…"`, or unquoted (compared weakly only).
    pub const fn is_weak(&self) -> bool {
        !matches!(self.form, Form::Strong)
    }

    /// Whether the tag came without quotes (see [Unquoted tags](#unquoted-tags)).
    pub const fn is_unquoted(&self) -> bool {
        matches!(self.form, Form::Unquoted)
    }

    /// The opaque part, without quotes (an unquoted tag's whole value).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// This tag, borrowed (its opaque part as bytes).
    pub fn borrowed(&self) -> EntityTagRef<'_> {
        let tag = self.tag.as_bytes();
        match self.form {
            Form::Strong => EntityTagRef::Strong(tag),
            Form::Weak => EntityTagRef::Weak(tag),
            Form::Unquoted => EntityTagRef::Unquoted(tag),
        }
    }

    /// Strong comparison: both strong and the same opaque part.
    pub fn strong_eq(&self, other: &Self) -> bool {
        self.borrowed().strong_eq(other.borrowed())
    }

    /// Weak comparison: the same opaque part, weak or not. An unquoted tag matches only an
    /// unquoted one.
    pub fn weak_eq(&self, other: &Self) -> bool {
        self.borrowed().weak_eq(other.borrowed())
    }
}

impl From<EntityTagRef<'_>> for EntityTag {
    /// An owned copy. An opaque part that is not UTF-8 (obs-text) is copied lossily: compare
    /// such tags as [`EntityTagRef`]s, on their bytes.
    fn from(tag: EntityTagRef<'_>) -> Self {
        let (form, bytes) = match tag {
            EntityTagRef::Strong(bytes) => (Form::Strong, bytes),
            EntityTagRef::Weak(bytes) => (Form::Weak, bytes),
            EntityTagRef::Unquoted(bytes) => (Form::Unquoted, bytes),
        };
        Self {
            form,
            tag: String::from_utf8_lossy(bytes).into_owned(),
        }
    }
}

impl fmt::Display for EntityTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.form {
            Form::Strong => write!(f, "\"{}\"", self.tag),
            Form::Weak => write!(f, "W/\"{}\"", self.tag),
            Form::Unquoted => f.write_str(&self.tag),
        }
    }
}

/// An entity tag read from a field's bytes without copying: how it compares, and its opaque
/// part (without quotes; obs-text, bytes >= 0x80, kept as it came).
///
/// ```
/// use courier_core::cache_control::EntityTagRef;
///
/// let stored = EntityTagRef::parse(b"\"caf\xe9\"").unwrap();
/// assert_eq!(stored, EntityTagRef::Strong(b"caf\xe9"));
/// assert!(stored.weak_eq(EntityTagRef::parse(b"W/\"caf\xe9\"").unwrap()));
/// assert!(!stored.weak_eq(EntityTagRef::parse(b"\"caf\xe8\"").unwrap()));
/// assert_eq!(EntityTagRef::parse_lenient(b"abc"), Some(EntityTagRef::Unquoted(b"abc")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityTagRef<'a> {
    /// `"xyzzy"`.
    Strong(&'a [u8]),
    /// `W/"xyzzy"`.
    Weak(&'a [u8]),
    /// `xyzzy`, without quotes: outside RFC 9110's grammar, read by
    /// [`parse_lenient`](Self::parse_lenient) only. Weak: see [`EntityTag`]'s [Unquoted
    /// tags](EntityTag#unquoted-tags).
    Unquoted(&'a [u8]),
}

impl<'a> EntityTagRef<'a> {
    /// Parses one quoted entity tag (RFC 9110 section 8.8.3), surrounding whitespace (SP,
    /// HTAB) allowed; `None` for anything else.
    pub fn parse(bytes: &'a [u8]) -> Option<Self> {
        let bytes = trim_ows(bytes);
        let (weak, rest) = match bytes.strip_prefix(b"W/") {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        let opaque = rest.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        if !opaque.iter().all(|&b| is_etagc(b)) {
            return None;
        }
        Some(if weak {
            Self::Weak(opaque)
        } else {
            Self::Strong(opaque)
        })
    }

    /// Parses one entity tag as an `ETag` field may carry it: a quoted one as
    /// [`parse`](Self::parse) does, or else an unquoted one.
    ///
    /// An unquoted tag is, once the surrounding whitespace (SP, HTAB) is trimmed, one or more
    /// visible ASCII characters (`%x21-7E`) other than DQUOTE and comma, and not `*` alone.
    /// So these are refused: an empty value, a control character, whitespace inside, obs-text,
    /// a DQUOTE anywhere (`"abc`, `a"b`, `W/"abc`: a broken quoted tag is no unquoted one),
    /// a comma (`a, b` is a list, and a list cannot be sent back as one tag), and `*` (sent back
    /// in `If-None-Match` it would match any representation). A `W/` before an unquoted value
    /// is part of its opaque value.
    pub fn parse_lenient(bytes: &'a [u8]) -> Option<Self> {
        if let Some(tag) = Self::parse(bytes) {
            return Some(tag);
        }
        let bytes = trim_ows(bytes);
        let unquoted = !bytes.is_empty()
            && bytes != b"*"
            && bytes
                .iter()
                .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b',');
        unquoted.then_some(Self::Unquoted(bytes))
    }

    /// Whether the tag is weak: `W/"…"`, or unquoted (compared weakly only).
    pub const fn is_weak(self) -> bool {
        !matches!(self, Self::Strong(_))
    }

    /// The opaque part: without quotes, or an unquoted tag's whole value.
    pub const fn opaque(self) -> &'a [u8] {
        match self {
            Self::Strong(tag) | Self::Weak(tag) | Self::Unquoted(tag) => tag,
        }
    }

    /// Strong comparison (RFC 9110 section 8.8.3.2): both strong and the same opaque bytes.
    pub fn strong_eq(self, other: EntityTagRef<'_>) -> bool {
        matches!((self, other), (Self::Strong(a), EntityTagRef::Strong(b)) if a == b)
    }

    /// Weak comparison (RFC 9110 section 8.8.3.2): the same opaque bytes, weak or not. An
    /// unquoted tag matches only an unquoted one: its opaque-tag has no quotes.
    pub fn weak_eq(self, other: EntityTagRef<'_>) -> bool {
        match (self, other) {
            (Self::Unquoted(a), EntityTagRef::Unquoted(b)) => a == b,
            (Self::Unquoted(_), _) | (_, EntityTagRef::Unquoted(_)) => false,
            (a, b) => a.opaque() == b.opaque(),
        }
    }
}

/// `bytes` without the whitespace (SP, HTAB) around it: RFC 9110's OWS.
fn trim_ows(bytes: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ows(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

/// `etagc` of RFC 9110 section 8.8.3: `%x21 / %x23-7E / obs-text`.
const fn is_etagc(b: u8) -> bool {
    b == 0x21 || (0x23 <= b && b <= 0x7e) || b >= 0x80
}

/// The value of `If-None-Match` / `If-Match`: `*` or a list of tags.
#[doc(hidden)]
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
mod tests;

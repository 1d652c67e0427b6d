//! The store key of a request, built without allocating.
//!
//! The key is the text `scheme:` `//` host (both lowercased, userinfo dropped, the port as
//! written unless it is the scheme's default) followed by the path and query, e.g.
//! `http://api.example.com:8080/v1/items?page=2`. An `http` URI with port 80 and an `https` one
//! with port 443 (or an empty port) name the same resource as without it (RFC 9110 section
//! 4.2.3): the port is left out of their key.
//! A request keeps its URI's reference-counted parts ([`UriKey`]). The in-memory store hashes
//! those parts as the byte stream of the key text ([`KeyHasher`]), so a lookup builds no text at
//! all, and compares them with the stored text part by part; any other store is handed the text,
//! written into a buffer on the stack ([`KeyText`]) unless the URI is long. The stores compare
//! whole keys, so two URIs can never share an entry because their hashes collide.

use crate::ascii::lowercase_word;
use courier_core::without_default_port;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Uri};
use std::fmt;
use std::hash::Hasher;

/// Keys up to this many bytes are built on the stack.
const INLINE: usize = 256;

/// The parts of a request that its key is made of, kept by reference count (cloning one copies
/// no URI bytes). Two equal keys have the same key text (the URI's scheme and authority compare
/// without case, as the text lowercases them); two keys with one text may still differ (a port
/// written out, userinfo), and are then told apart.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct UriKey {
    uri: Uri,
    /// The `Host` field, when the URI has no authority.
    host: Option<HeaderValue>,
}

impl UriKey {
    /// The key parts of a request: its URI, and its `Host` field when the URI has no authority.
    pub(crate) fn new(uri: &Uri, headers: &HeaderMap) -> Self {
        let host = if uri.authority().is_none() {
            headers.get(header::HOST).cloned()
        } else {
            None
        };
        Self {
            uri: uri.clone(),
            host,
        }
    }

    /// The key text.
    pub(crate) fn text(&self) -> KeyText {
        KeyText::from_parts(self.parts())
    }

    /// The parts of the key text, borrowed.
    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts::new(&self.uri, self.host.as_ref())
    }

    /// The key as it may appear in logs: without the query, which may carry secrets.
    pub(crate) fn loggable(&self) -> Loggable<'_> {
        Loggable(self)
    }
}

impl fmt::Debug for UriKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.loggable(), f)
    }
}

/// Displays a key without its query.
pub(crate) struct Loggable<'a>(&'a UriKey);

impl fmt::Display for Loggable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(loggable(self.0.text().as_str()))
    }
}

/// Displays key parts without the query.
struct LoggableParts<'a>(Parts<'a>);

impl fmt::Display for LoggableParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(loggable(KeyText::from_parts(self.0).as_str()))
    }
}

/// A key text as it may appear in logs: without the query, which may carry secrets.
pub(crate) fn loggable(key: &str) -> &str {
    key.split_once('?').map_or(key, |(k, _)| k)
}

/// The key text in pieces: `scheme` and `host` still to be lowercased.
#[derive(Clone, Copy)]
pub(crate) struct Parts<'a> {
    scheme: Option<&'a str>,
    /// The authority without its userinfo.
    host: &'a str,
    path: &'a str,
    /// Whether the authority carried userinfo (dropped from the key).
    userinfo: bool,
}

impl<'a> Parts<'a> {
    /// The key parts of a request (see [`UriKey::new`]), borrowed from it.
    pub(crate) fn of_request(uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        let host = match uri.authority() {
            Some(_) => None,
            None => headers.get(header::HOST),
        };
        Self::new(uri, host)
    }

    fn new(uri: &'a Uri, host: Option<&'a HeaderValue>) -> Self {
        let authority = uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| host.and_then(|h| h.to_str().ok()))
            .unwrap_or("");
        // Userinfo is rare: look for its `@` a word at a time, without a search call.
        let userinfo = has_byte(authority.as_bytes(), b'@');
        let host = match userinfo {
            true => authority.rsplit_once('@').map_or(authority, |(_, h)| h),
            false => authority,
        };
        Self {
            scheme: uri.scheme_str(),
            host: without_default_port(uri.scheme_str(), host),
            path: uri.path_and_query().map_or("/", |pq| pq.as_str()),
            userinfo,
        }
    }

    /// The key as it may appear in logs: without the query, which may carry secrets.
    pub(crate) fn loggable(self) -> impl fmt::Display + 'a {
        LoggableParts(self)
    }

    /// Whether the URI's authority carried userinfo.
    pub(crate) fn has_userinfo(&self) -> bool {
        self.userinfo
    }

    /// Feeds the key text to `hasher`, exactly as [`KeyHasher::text`] feeds it.
    pub(crate) fn hash<H: Hasher>(&self, hasher: &mut KeyHasher<H>) {
        match self.scheme {
            // `http` parses the standard schemes into lowercase names of their own.
            Some(scheme @ ("http" | "https")) => {
                hasher.push(scheme.as_bytes(), false);
                hasher.push(b"://", false);
            }
            Some(scheme) => {
                hasher.push(scheme.as_bytes(), true);
                hasher.push(b"://", false);
            }
            None => hasher.push(b"//", false),
        }
        hasher.push(self.host.as_bytes(), true);
        hasher.push(self.path.as_bytes(), false);
    }

    /// The key text, owned, and the length of its origin part.
    fn owned_text(self) -> (String, usize) {
        let scheme_len = self.scheme.map_or(0, |s| s.len() + 1);
        let mut text = String::with_capacity(scheme_len + 2 + self.host.len() + self.path.len());
        if let Some(scheme) = self.scheme {
            text.push_str(scheme);
            text.push(':');
        }
        text.push_str("//");
        text.push_str(self.host);
        let origin_len = text.len();
        text.make_ascii_lowercase();
        text.push_str(self.path);
        (text, origin_len)
    }

    /// Whether `text` is this key's text, byte for byte.
    pub(crate) fn is_text(&self, text: &str) -> bool {
        let mut rest = text.as_bytes();
        let scheme = match self.scheme {
            // `http` parses the standard schemes into lowercase names of their own.
            Some(scheme @ ("http" | "https")) => strip(&mut rest, scheme.as_bytes()),
            Some(scheme) => strip_lowered(&mut rest, scheme.as_bytes()),
            None => true,
        };
        if !(scheme && (self.scheme.is_none() || strip(&mut rest, b":"))) {
            return false;
        }
        strip(&mut rest, b"//")
            && strip_lowered(&mut rest, self.host.as_bytes())
            && rest == self.path.as_bytes()
    }
}

const LO: u64 = u64::from_ne_bytes([0x01; 8]);
const HI: u64 = u64::from_ne_bytes([0x80; 8]);

/// Eight bytes of `bytes` from `at` (which has at least eight left).
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0_u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// Whether `needle` occurs in `bytes`, checked a word at a time; the last word overlaps the
/// one before it rather than leave a tail to check byte by byte.
fn has_byte(bytes: &[u8], needle: u8) -> bool {
    let len = bytes.len();
    if len < 8 {
        return bytes.contains(&needle);
    }
    let pattern = u64::from_ne_bytes([needle; 8]);
    // A zero byte in `w` (exact for whether there is one).
    let zero_in = |w: u64| w.wrapping_sub(LO) & !w & HI != 0;
    let mut at = 0;
    while at + 8 < len {
        if zero_in(word(bytes, at) ^ pattern) {
            return true;
        }
        at += 8;
    }
    zero_in(word(bytes, len - 8) ^ pattern)
}

/// Copies `src` into `dst` (of the same length), ASCII-lowercased, a word at a time.
#[inline]
fn copy_lowered(dst: &mut [u8], src: &[u8]) {
    let len = src.len();
    if len < 8 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = s.to_ascii_lowercase();
        }
        return;
    }
    let mut at = 0;
    while at + 8 <= len {
        dst[at..at + 8].copy_from_slice(&lowercase_word(word(src, at)).to_ne_bytes());
        at += 8;
    }
    if at < len {
        // The last word again, overlapping the one before: lowering is idempotent.
        dst[len - 8..].copy_from_slice(&lowercase_word(word(src, len - 8)).to_ne_bytes());
    }
}

/// Removes `prefix` from the front of `rest`, if it is there.
fn strip(rest: &mut &[u8], prefix: &[u8]) -> bool {
    match rest.strip_prefix(prefix) {
        Some(tail) => {
            *rest = tail;
            true
        }
        None => false,
    }
}

/// Removes `part`, ASCII-lowercased, from the front of `rest`, if it is there.
fn strip_lowered(rest: &mut &[u8], part: &[u8]) -> bool {
    if rest.len() < part.len() {
        return false;
    }
    let len = part.len();
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    if len < 8 {
        return head
            .iter()
            .zip(part)
            .all(|(h, p)| *h == p.to_ascii_lowercase());
    }
    let mut equal = true;
    let mut at = 0;
    while at + 8 <= len {
        equal &= word(head, at) == lowercase_word(word(part, at));
        at += 8;
    }
    if at < len {
        // The last word, overlapping the one before.
        equal &= word(head, len - 8) == lowercase_word(word(part, len - 8));
    }
    equal
}

/// Hashes a key text a chunk at a time, so that the text and its [`Parts`] hash alike however
/// the bytes are split: only the byte stream and its length count.
pub(crate) struct KeyHasher<H> {
    state: H,
    buf: [u8; 64],
    len: usize,
    total: usize,
}

impl<H: Hasher> KeyHasher<H> {
    pub(crate) fn new(state: H) -> Self {
        Self {
            state,
            buf: [0; 64],
            len: 0,
            total: 0,
        }
    }

    /// Feeds a whole key text.
    pub(crate) fn text(mut self, text: &str) -> u64 {
        self.push(text.as_bytes(), false);
        self.finish()
    }

    /// Feeds `bytes`, ASCII-lowercased when `lower`.
    #[inline]
    fn push(&mut self, bytes: &[u8], lower: bool) {
        let end = self.len + bytes.len();
        if end < self.buf.len() {
            // The common case: the whole key fits in one chunk.
            let dst = &mut self.buf[self.len..end];
            if lower {
                copy_lowered(dst, bytes);
            } else {
                dst.copy_from_slice(bytes);
            }
            self.len = end;
            self.total += bytes.len();
        } else {
            self.push_chunks(bytes, lower);
        }
    }

    #[cold]
    #[inline(never)]
    fn push_chunks(&mut self, mut bytes: &[u8], lower: bool) {
        self.total += bytes.len();
        while !bytes.is_empty() {
            let n = (self.buf.len() - self.len).min(bytes.len());
            let dst = &mut self.buf[self.len..self.len + n];
            if lower {
                copy_lowered(dst, &bytes[..n]);
            } else {
                dst.copy_from_slice(&bytes[..n]);
            }
            self.len += n;
            bytes = &bytes[n..];
            if self.len == self.buf.len() {
                self.state.write(&self.buf);
                self.len = 0;
            }
        }
    }

    pub(crate) fn finish(mut self) -> u64 {
        self.state.write(&self.buf[..self.len]);
        // A key in one chunk is hashed with its length already; a longer one has its length
        // added, as its chunks do not say it.
        if self.total != self.len {
            self.state.write_usize(self.total);
        }
        self.state.finish()
    }
}

/// The text of a key, on the stack unless it is long.
pub(crate) struct KeyText {
    repr: Repr,
    /// Where the path begins: the text before it is the origin (`scheme://host`).
    origin_len: usize,
}

// Large on purpose: it lives on the stack for the moment a store is asked.
#[allow(clippy::large_enum_variant)]
enum Repr {
    Inline { buf: [u8; INLINE], len: usize },
    Heap(String),
}

impl KeyText {
    /// The key of `uri`; `host` is used when the URI has no authority.
    pub(crate) fn new(uri: &Uri, host: Option<&HeaderValue>) -> Self {
        Self::from_parts(Parts::new(uri, host))
    }

    pub(crate) fn from_parts(parts: Parts<'_>) -> Self {
        let Parts {
            scheme, host, path, ..
        } = parts;
        let upper = scheme.map_or(0, |s| s.len() + 1) + 2 + host.len() + path.len();
        if upper > INLINE {
            return Self::on_heap(parts);
        }
        let mut buf = [0_u8; INLINE];
        let mut len = 0;
        if let Some(scheme) = scheme {
            put(&mut buf, &mut len, scheme.as_bytes(), true);
            put(&mut buf, &mut len, b":", false);
        }
        put(&mut buf, &mut len, b"//", false);
        put(&mut buf, &mut len, host.as_bytes(), true);
        let origin_len = len;
        put(&mut buf, &mut len, path.as_bytes(), false);
        Self {
            repr: Repr::Inline { buf, len },
            origin_len,
        }
    }

    #[cold]
    #[inline(never)]
    fn on_heap(parts: Parts<'_>) -> Self {
        let (text, origin_len) = parts.owned_text();
        Self {
            repr: Repr::Heap(text),
            origin_len,
        }
    }

    /// The whole key.
    pub(crate) fn as_str(&self) -> &str {
        match &self.repr {
            Repr::Inline { buf, len } => std::str::from_utf8(&buf[..*len])
                .expect("whole UTF-8 parts, ASCII-lowercased, concatenate to UTF-8"),
            Repr::Heap(text) => text,
        }
    }

    /// The origin part: `scheme://host`, lowercased.
    pub(crate) fn origin(&self) -> &str {
        &self.as_str()[..self.origin_len]
    }
}

/// Appends `bytes` (ASCII-lowercased when `lower`) at `buf[*len..]`; the caller checked the room.
fn put(buf: &mut [u8; INLINE], len: &mut usize, bytes: &[u8], lower: bool) {
    let dst = &mut buf[*len..*len + bytes.len()];
    if lower {
        copy_lowered(dst, bytes);
    } else {
        dst.copy_from_slice(bytes);
    }
    *len += bytes.len();
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(loggable(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The key as it was first defined, built as owned text: the reference the stack-built key
    /// must equal.
    fn reference(uri: &Uri, headers: &HeaderMap) -> (String, String) {
        let authority = uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()));
        let mut host = authority.map_or("", |a| a.rsplit_once('@').map_or(a, |(_, h)| h));
        let default = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        };
        if let (Some(default), Some((name, port))) = (default, host.rsplit_once(':'))
            && port.bytes().all(|b| b.is_ascii_digit())
            && (port.is_empty() || port.parse::<u32>() == Ok(default))
        {
            host = name;
        }
        let mut origin = String::new();
        if let Some(scheme) = uri.scheme_str() {
            origin.push_str(&scheme.to_ascii_lowercase());
            origin.push(':');
        }
        origin.push_str("//");
        origin.push_str(&host.to_ascii_lowercase());
        let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
        (format!("{origin}{pq}"), origin)
    }

    fn key(uri: &str, host: Option<&str>) -> String {
        let uri: Uri = uri.parse().unwrap();
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, host.parse().unwrap());
        }
        UriKey::new(&uri, &headers).text().as_str().to_owned()
    }

    #[test]
    fn equal_keys() {
        for (a, b) in [
            // Scheme and host ignore case; path and query do not.
            (
                "HTTP://API.Example.COM/a?q=1",
                "http://api.example.com/a?q=1",
            ),
            ("hTTpS://h.example/", "https://H.EXAMPLE/"),
            // Userinfo is not part of the key (the credential fingerprint is).
            ("http://user:pw@h.example/a", "http://h.example/a"),
            ("http://a@b@h.example/a", "http://h.example/a"),
            // The scheme's default port, written out or empty, is no port (RFC 9110 4.2.3).
            ("http://h.example:80/a", "http://h.example/a"),
            ("HTTP://h.example:080/a", "http://h.example/a"),
            ("http://h.example:/a", "http://h.example/a"),
            ("https://h.example:443/a", "https://h.example/a"),
            ("https://u@[::1]:443/a", "https://[::1]/a"),
        ] {
            assert_eq!(key(a, None), key(b, None), "{a} = {b}");
        }
        assert_eq!(
            key("/a?x", Some("Svc.Local:8080")),
            "//svc.local:8080/a?x",
            "the Host field stands in for a missing authority"
        );
        assert_eq!(
            key("http://Svc.Local:8080/a?x", Some("other.example")),
            "http://svc.local:8080/a?x",
            "the URI's authority wins over the Host field"
        );
        assert_eq!(key("/a", None), "///a");
        assert_eq!(
            key("/a", Some("h.example:80")),
            "//h.example:80/a",
            "without a scheme there is no default port"
        );
        assert_eq!(key("http://[::1]:80/a", None), "http://[::1]/a");
        assert_eq!(key("http://1.2.3.80/a", None), "http://1.2.3.80/a");
    }

    #[test]
    fn unequal_keys() {
        for (a, b) in [
            ("http://h.example/A", "http://h.example/a"),
            ("http://h.example/a?Q=1", "http://h.example/a?q=1"),
            ("http://h.example/a", "https://h.example/a"),
            // Another port, or the other scheme's default, is kept as written.
            ("http://h.example/a", "http://h.example:443/a"),
            ("https://h.example/a", "https://h.example:80/a"),
            ("http://h.example/a", "http://h.example:800/a"),
            ("http://h.example/a", "http://h.example:8/a"),
            ("http://h.example:8080/a", "http://h.example:080/a"),
            ("x-other://h.example/a", "x-other://h.example:80/a"),
            ("http://h.example:8080/a", "http://h.example:8081/a"),
            ("http://h.example/a", "http://h.example/a?"),
            ("http://h.example/a?x=1", "http://h.example/a?x=2"),
            ("http://h.example/", "http://g.example/"),
        ] {
            assert_ne!(key(a, None), key(b, None), "{a} != {b}");
        }
    }

    #[test]
    fn long_keys_spill_to_the_heap_and_stay_equal() {
        let path = "/p".repeat(INLINE);
        let a = format!("HTTP://User@H.Example{path}?Q");
        let uri: Uri = a.parse().unwrap();
        let text = KeyText::new(&uri, None);
        assert!(matches!(text.repr, Repr::Heap(_)));
        assert_eq!(text.as_str(), format!("http://h.example{path}?Q"));
        assert_eq!(text.origin(), "http://h.example");
        assert!(Parts::new(&uri, None).has_userinfo());
    }

    #[test]
    fn origin_and_loggable() {
        let uri: Uri = "https://u:p@API.example:8443/v1/x?token=secret"
            .parse()
            .unwrap();
        let key = UriKey::new(&uri, &HeaderMap::new());
        let text = key.text();
        assert_eq!(text.origin(), "https://api.example:8443");
        assert!(key.parts().has_userinfo());
        assert_eq!(key.loggable().to_string(), "https://api.example:8443/v1/x");
        assert!(!format!("{key:?}").contains("secret"));
        let plain: Uri = "http://h/".parse().unwrap();
        assert!(!Parts::new(&plain, None).has_userinfo());
    }

    proptest! {
        #[test]
        fn a_default_port_is_dropped_as_its_value_says(
            scheme in prop_oneof![Just("http"), Just("HTTPS"), Just("https"), Just("x-other")],
            name in prop_oneof![
                Just("h.example"), Just("[::1]"), Just("[::80]"), Just("1.2.3.80"), Just("a80"),
                Just("0"), Just(""),
            ],
            port in prop::option::of(prop_oneof![
                Just(String::new()), Just("80".to_owned()), Just("443".to_owned()),
                "0{0,3}(80|443|8|0|1443|8080|800|44)", "[0-9]{1,6}",
            ]),
        ) {
            let host = match &port {
                Some(port) => format!("{name}:{port}"),
                None => name.to_owned(),
            };
            let uri: Uri = format!("{scheme}://h.example/").parse().unwrap();
            let default = match scheme.to_ascii_lowercase().as_str() {
                "http" => Some(80),
                "https" => Some(443),
                _ => None,
            };
            // By the port's value: empty, or numerically the scheme's default.
            let want = match (default, &port) {
                (Some(default), Some(port))
                    if port.is_empty() || port.parse::<u64>().ok() == Some(default) => name,
                _ => host.as_str(),
            };
            // The scheme as `http` parses it, lowercase for the standard ones.
            prop_assert_eq!(without_default_port(uri.scheme_str(), &host), want);
        }

        #[test]
        fn word_helpers_match_the_plain_ones(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let mut lowered = vec![0; bytes.len()];
            copy_lowered(&mut lowered, &bytes);
            prop_assert_eq!(lowered, bytes.to_ascii_lowercase());
            for needle in [b'@', 0, 0x80, 0xff, b'A'] {
                prop_assert_eq!(has_byte(&bytes, needle), bytes.contains(&needle));
            }
        }
    }

    fn uri_text() -> impl Strategy<Value = String> {
        (
            prop::option::of(prop_oneof![
                Just("http"),
                Just("HTTPS"),
                Just("hTtP"),
                Just("x-Custom")
            ]),
            prop::option::of("([a-zA-Z0-9]{1,6}@)?[a-zA-Z0-9.-]{1,20}(:[0-9]{1,5})?"),
            "(/[a-zA-Z0-9%._~-]{0,12}){0,4}(\\?[a-zA-Z0-9=&%-]{0,20})?",
        )
            .prop_map(|(scheme, authority, path)| match (scheme, authority) {
                (Some(s), Some(a)) => format!("{s}://{a}{path}"),
                (_, _) if path.is_empty() => "/".to_owned(),
                (_, _) if !path.starts_with('/') => format!("/{path}"),
                _ => path,
            })
    }

    proptest! {
        #[test]
        fn the_stack_key_equals_the_reference(
            text in uri_text(),
            host in prop::option::of("[a-zA-Z0-9.-]{1,12}(:[0-9]{1,4})?"),
            long in 0usize..2,
        ) {
            let text = if long == 1 { format!("{text}{}", "x".repeat(INLINE)) } else { text };
            let Ok(uri) = text.parse::<Uri>() else { return Ok(()) };
            let mut headers = HeaderMap::new();
            if let Some(host) = &host {
                headers.insert(header::HOST, host.parse().unwrap());
            }
            let (want, want_origin) = reference(&uri, &headers);
            let got = UriKey::new(&uri, &headers).text();
            prop_assert_eq!(got.as_str(), want.as_str());
            prop_assert_eq!(got.origin(), want_origin.as_str());
        }
    }
}

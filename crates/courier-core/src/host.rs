//! The key that per-host state (buckets, breakers, budgets) is kept under, and the head of a
//! request that key functions look at.

use http::uri::{Authority, Scheme};
use std::fmt;
use std::hash::{Hash, Hasher};

/// Scheme and authority of a request: `https://api.example.com:8443`.
///
/// Comparison and hashing ignore ASCII case, as URIs do for these parts: a key keeps both in
/// lowercase, so that hashing and comparing are plain byte work. A port that is the scheme's
/// default (`:80` for `http`, `:443` for `https`) or empty is left out: `http://api:80` and
/// `http://api` are one host (RFC 9110 section 4.2.3). Building one from a request
/// whose host is in lowercase (the usual case) copies no bytes: `http`'s URI parts are
/// reference counted.
#[derive(Clone)]
pub struct HostKey {
    scheme: Option<Scheme>,
    authority: Option<Authority>,
}

impl HostKey {
    /// The key of a request: the URI's scheme and authority, else the `Host` header, else the
    /// empty key (every request without a host shares it).
    pub fn from_request<B>(req: &http::Request<B>) -> Self {
        Self::from_parts(req.uri(), req.headers())
    }

    /// The key of a URI and its headers (see [`HostKey::from_request`]).
    pub fn from_parts(uri: &http::Uri, headers: &http::HeaderMap) -> Self {
        let authority = uri.authority().cloned().or_else(|| {
            headers
                .get(http::header::HOST)
                .and_then(|h| Authority::try_from(h.as_bytes()).ok())
        });
        Self::new(uri.scheme().cloned(), authority)
    }

    /// A key for a scheme and authority.
    pub fn new(scheme: Option<Scheme>, authority: Option<Authority>) -> Self {
        // `http` and `https` are kept as constants, in lowercase already.
        let scheme = scheme.map(|s| {
            if s == Scheme::HTTP || s == Scheme::HTTPS {
                s
            } else {
                lowercase(s, Scheme::as_str)
            }
        });
        let authority = authority.map(|a| {
            let a = lowercase(a, Authority::as_str);
            let text = without_default_port(scheme.as_ref().map(Scheme::as_str), a.as_str());
            if text.len() == a.as_str().len() {
                a
            } else {
                text.parse().unwrap_or(a)
            }
        });
        Self { scheme, authority }
    }

    /// The scheme, when the request had one (in lowercase).
    pub fn scheme(&self) -> Option<&Scheme> {
        self.scheme.as_ref()
    }

    /// The authority (host and port), when the request had one (in lowercase).
    pub fn authority(&self) -> Option<&Authority> {
        self.authority.as_ref()
    }

    /// Whether `uri` names this host, told without building a key (for a layer that reuses
    /// the state of its previous request): `Some(equal)` when the URI has an authority, `None`
    /// when it has none (the key then comes from the `Host` header: build it).
    #[inline]
    pub fn matches(&self, uri: &http::Uri) -> Option<bool> {
        let authority = uri.authority()?.as_str();
        // The same bytes first (a clone of one URI), then equal bytes, then equal but for case:
        // each check is cheaper than the next, and the first decides the usual case.
        // Last, a port that is the scheme's default, which the key leaves out.
        let same_authority = self.authority.as_ref().is_some_and(|a| {
            let a = a.as_str();
            std::ptr::eq(a, authority)
                || a == authority
                || a.eq_ignore_ascii_case(authority)
                || a.eq_ignore_ascii_case(without_default_port(uri.scheme_str(), authority))
        });
        Some(same_authority && same_scheme(self.scheme.as_ref(), uri.scheme()))
    }

    fn texts(&self) -> (Option<&str>, Option<&str>) {
        (
            self.scheme.as_ref().map(Scheme::as_str),
            self.authority.as_ref().map(Authority::as_str),
        )
    }
}

/// Whether a key's scheme (kept in lowercase) is a URI's, ignoring ASCII case. `Scheme`'s own
/// comparison decides the usual case (two standard schemes compare as tags); it tells a
/// standard `http` from another kind's `HTTP`, which the text comparison then takes as equal.
#[inline]
fn same_scheme(key: Option<&Scheme>, uri: Option<&Scheme>) -> bool {
    match (key, uri) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || a.as_str().eq_ignore_ascii_case(b.as_str()),
        _ => false,
    }
}

/// `authority` without its port when that is the default port of `scheme` (80 for `http`,
/// 443 for `https`, leading zeros allowed) or empty (RFC 9110 section 4.2.3, RFC 3986 section
/// 6.2.3): `api.example:80` and `api.example` name one host.
///
/// `scheme` is as `http` gives it (`Uri::scheme_str`, `Scheme::as_str`): the standard schemes
/// come in lowercase, whatever their case in the URI. Userinfo, if any, is kept.
#[doc(hidden)]
#[inline]
pub fn without_default_port<'a>(scheme: Option<&str>, authority: &'a str) -> &'a str {
    let bytes = authority.as_bytes();
    // Read from the end, so that an authority without a port is decided by its last byte: the
    // port is the digits after the last `:` (an IPv6 literal's colons are inside brackets,
    // which end it with `]`).
    let rest = match (bytes.last(), scheme.map(str::as_bytes)) {
        (Some(b':'), Some(b"http" | b"https")) => return &authority[..bytes.len() - 1],
        (Some(b'0'), Some(b"http")) => bytes.strip_suffix(b"80"),
        (Some(b'3'), Some(b"https")) => bytes.strip_suffix(b"443"),
        _ => None,
    };
    let Some(rest) = rest else {
        return authority;
    };
    // Leading zeros before the default port's digits, then the colon.
    let zeros = rest.iter().rev().take_while(|&&b| b == b'0').count();
    match rest[..rest.len() - zeros].strip_suffix(b":") {
        Some(name) => &authority[..name.len()],
        None => authority,
    }
}

/// The parts of a request a key function may look at (everything but the body).
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    method: &'a http::Method,
    uri: &'a http::Uri,
    headers: &'a http::HeaderMap,
    extensions: &'a http::Extensions,
}

impl<'a> RequestHead<'a> {
    /// The head of `req`.
    pub fn new<B>(req: &'a http::Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The head of the request `parts` were taken from.
    pub fn from_parts(parts: &'a http::request::Parts) -> Self {
        Self {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            extensions: &parts.extensions,
        }
    }

    /// The method.
    pub fn method(&self) -> &'a http::Method {
        self.method
    }

    /// The URI.
    pub fn uri(&self) -> &'a http::Uri {
        self.uri
    }

    /// The headers.
    pub fn headers(&self) -> &'a http::HeaderMap {
        self.headers
    }

    /// The extensions.
    pub fn extensions(&self) -> &'a http::Extensions {
        self.extensions
    }

    /// The request's [`HostKey`]: the one its [`CallContext`](crate::CallContext) holds when
    /// the URI still names it (made and kept there by the first layer that asks), else made
    /// from the URI and headers.
    #[inline]
    pub fn host(&self) -> HostKey {
        match crate::CallContext::get(self.extensions) {
            Some(ctx) => ctx.host_of(self.uri, self.headers),
            None => HostKey::from_parts(self.uri, self.headers),
        }
    }
}

/// `part` in lowercase: itself when it has no capital, else parsed again from its lowercased
/// text (which parses whenever the original did).
fn lowercase<T>(part: T, text: fn(&T) -> &str) -> T
where
    T: std::str::FromStr,
{
    let s = text(&part);
    if !s.bytes().any(|b| b.is_ascii_uppercase()) {
        return part;
    }
    s.to_ascii_lowercase().parse().unwrap_or(part)
}

impl PartialEq for HostKey {
    fn eq(&self, other: &Self) -> bool {
        self.texts() == other.texts()
    }
}

impl Eq for HostKey {}

impl Hash for HostKey {
    /// Hashes the text a part per call. `http`'s own `Hash` for `Authority` feeds the hasher one
    /// byte per call (folding case as it goes), which made hashing the largest part of a
    /// per-host lookup.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (scheme, authority) = self.texts();
        state.write_u8(u8::from(scheme.is_some()) | (u8::from(authority.is_some()) << 1));
        for part in [scheme, authority].into_iter().flatten() {
            state.write(part.as_bytes());
            state.write_usize(part.len());
        }
    }
}

impl fmt::Display for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.scheme {
            write!(f, "{s}://")?;
        }
        match &self.authority {
            // The authority may carry userinfo; never print credentials.
            Some(a) => match a.as_str().rsplit_once('@') {
                Some((_, host)) => f.write_str(host),
                None => f.write_str(a.as_str()),
            },
            None => f.write_str("-"),
        }
    }
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(uri: &str, host: Option<&str>) -> HostKey {
        let mut headers = http::HeaderMap::new();
        if let Some(host) = host {
            headers.insert(http::header::HOST, host.parse().unwrap());
        }
        HostKey::from_parts(&uri.parse().unwrap(), &headers)
    }

    #[test]
    fn a_key_shows_its_parts_in_lowercase_and_hides_credentials() {
        let key = key_of("HTTP://User:Secret@API.Example:8080/a", None);
        assert_eq!(key.scheme().map(Scheme::as_str), Some("http"));
        assert_eq!(
            key.authority().map(Authority::as_str),
            Some("user:secret@api.example:8080")
        );
        assert_eq!(format!("{key:?}"), "HostKey(http://api.example:8080)");
        let from_host = key_of("/a", Some("Svc:9000"));
        assert_eq!(from_host.scheme(), None);
        assert_eq!(
            from_host.authority().map(Authority::as_str),
            Some("svc:9000")
        );
        assert_eq!(format!("{:?}", key_of("/a", None)), "HostKey(-)");
    }

    #[test]
    fn matches_tells_hosts_apart_in_place() {
        let key = key_of("http://api.example/a", None);
        let matches = |uri: &str| key.matches(&uri.parse().unwrap());
        assert_eq!(matches("http://api.example/b"), Some(true));
        assert_eq!(matches("http://API.EXAMPLE/b"), Some(true));
        assert_eq!(
            matches("http://api.example:80/b"),
            Some(true),
            "the default port"
        );
        assert_eq!(matches("HTTP://api.example/b"), Some(true));
        assert_eq!(matches("https://api.example/b"), Some(false));
        assert_eq!(matches("http://api.example:8080/b"), Some(false));
        assert_eq!(matches("http://other.example/b"), Some(false));
        assert_eq!(matches("/b"), None, "no authority: build the key from Host");
        // An authority-form request (CONNECT) has no scheme, and neither has its key.
        let bare = key_of("api.example:443", None);
        assert_eq!(bare.scheme(), None);
        assert_eq!(
            bare.matches(&"api.example:443".parse().unwrap()),
            Some(true)
        );
        assert_eq!(
            bare.matches(&"https://api.example:443/".parse().unwrap()),
            Some(false)
        );
    }

    #[test]
    fn a_request_head_shows_the_request() {
        let mut req = http::Request::post("http://api.example/a")
            .header("x-tenant", "acme")
            .body(())
            .unwrap();
        req.extensions_mut().insert(7_u32);
        let check = |head: RequestHead<'_>| {
            assert_eq!(head.method(), http::Method::POST);
            assert_eq!(head.uri(), "http://api.example/a");
            assert_eq!(head.headers()["x-tenant"], "acme");
            assert_eq!(head.extensions().get::<u32>(), Some(&7));
            assert_eq!(head.host(), key_of("http://api.example/", None));
        };
        check(RequestHead::new(&req));
        let (parts, ()) = req.into_parts();
        check(RequestHead::from_parts(&parts));
    }

    #[test]
    fn a_default_port_is_the_same_host() {
        let key = |uri: &str| HostKey::from_parts(&uri.parse().unwrap(), &http::HeaderMap::new());
        assert_eq!(key("http://api.example:80/a"), key("http://api.example/b"));
        assert_eq!(
            key("http://API.example:0080/a"),
            key("http://api.example/b")
        );
        assert_eq!(key("http://api.example:/a"), key("http://api.example/b"));
        assert_eq!(
            key("https://api.example:443/a"),
            key("https://api.example/b")
        );
        assert_eq!(key("http://[::1]:80/a"), key("http://[::1]/b"));
        assert_eq!(key("http://u:p@h:80/a"), key("http://u:p@h/b"));
        assert_ne!(key("http://api.example:443/a"), key("http://api.example/b"));
        assert_ne!(
            key("https://api.example:80/a"),
            key("https://api.example/b")
        );
        assert_ne!(
            key("http://api.example:8080/a"),
            key("http://api.example/b")
        );
        assert_ne!(key("ws://api.example:80/a"), key("ws://api.example/b"));
        assert_eq!(
            key("http://api.example:80/a").to_string(),
            "http://api.example"
        );
    }

    #[test]
    fn matches_agrees_with_the_key_it_would_make() {
        let uris = [
            "http://api.example:8080/a",
            "HTTP://API.example:8080/b",
            "https://api.example:8080/a",
            "HTTPS://api.example:8080/a",
            "ws://api.example:8080/a",
            "WS://api.example:8080/a",
            "git+ssh://api.example:8080/a",
            "GIT+SSH://api.example:8080/a",
            "http://api.example:80/a",
            "http://API.example:080/a",
            "http://api.example:/a",
            "https://api.example:443/a",
            "https://api.example/a",
            "http://api.example:443/a",
            "https://api.example:80/a",
            "git+ssh://api.example:80/a",
            "http://user:pw@api.example:80/a",
            "http://[::1]:80/a",
            "http://[::1]/a",
            "http://api.example/a",
            "http://other.example:8080/a",
        ];
        let headers = http::HeaderMap::new();
        for k in uris {
            let key = HostKey::from_parts(&k.parse().unwrap(), &headers);
            for u in uris {
                let uri: http::Uri = u.parse().unwrap();
                let expected = key == HostKey::from_parts(&uri, &headers);
                assert_eq!(key.matches(&uri), Some(expected), "{k} against {u}");
            }
        }
        let relative: http::Uri = "/a".parse().unwrap();
        let key = HostKey::from_parts(&uris[0].parse().unwrap(), &headers);
        assert_eq!(key.matches(&relative), None);
    }

    #[test]
    fn key_ignores_case_and_path() {
        let a = http::Request::get("https://API.example.com/a?x=1")
            .body(())
            .unwrap();
        let b = http::Request::get("https://api.example.com/b")
            .body(())
            .unwrap();
        assert_eq!(HostKey::from_request(&a), HostKey::from_request(&b));
        let c = http::Request::get("http://api.example.com/b")
            .body(())
            .unwrap();
        assert_ne!(HostKey::from_request(&a), HostKey::from_request(&c));
    }

    fn hash_of(key: &HostKey) -> u64 {
        use std::hash::BuildHasher;
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(key)
    }

    #[test]
    fn equal_keys_hash_alike_whatever_the_case() {
        let long = format!("{}.example:8443", "Sub".repeat(40));
        for (a, b) in [
            ("https://API.Example.com/a", "https://api.example.com/b"),
            ("HTTPS://h.example/", "https://H.EXAMPLE/"),
            (
                &*format!("http://{long}/"),
                &*format!("http://{}/", long.to_lowercase()),
            ),
        ] {
            let a = HostKey::from_request(&http::Request::get(a).body(()).unwrap());
            let b = HostKey::from_request(&http::Request::get(b).body(()).unwrap());
            assert_eq!(a, b);
            assert_eq!(hash_of(&a), hash_of(&b));
        }
        let plain =
            HostKey::from_request(&http::Request::get("http://a.example/").body(()).unwrap());
        let tls =
            HostKey::from_request(&http::Request::get("https://a.example/").body(()).unwrap());
        assert_ne!(hash_of(&plain), hash_of(&tls));
        let upper = HostKey::new(
            Some("WS+X".parse().unwrap()),
            Some("H.Example:81".parse().unwrap()),
        );
        let lower = HostKey::new(
            Some("ws+x".parse().unwrap()),
            Some("h.example:81".parse().unwrap()),
        );
        assert_eq!(upper, lower);
        assert_eq!(hash_of(&upper), hash_of(&lower));
        assert_eq!(upper.to_string(), "ws+x://h.example:81");
        let none = HostKey::new(None, None);
        let scheme_only = HostKey::new(Some(Scheme::HTTP), None);
        assert_ne!(hash_of(&none), hash_of(&scheme_only));
    }

    #[test]
    fn falls_back_to_host_header() {
        let a = http::Request::get("/a")
            .header("host", "svc:8080")
            .body(())
            .unwrap();
        assert_eq!(HostKey::from_request(&a).to_string(), "svc:8080");
    }

    #[test]
    fn display_hides_userinfo() {
        let a = http::Request::get("https://user:secret@h.example/")
            .body(())
            .unwrap();
        assert_eq!(HostKey::from_request(&a).to_string(), "https://h.example");
    }
}

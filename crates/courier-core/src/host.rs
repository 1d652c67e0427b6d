//! The key that per-host state (buckets, breakers, budgets) is kept under.

use http::uri::{Authority, Scheme};
use std::fmt;

/// Scheme and authority of a request: `https://api.example.com:8443`.
///
/// Comparison and hashing ignore ASCII case, as URIs do for these parts. Building one from a
/// request copies no bytes: `http`'s URI parts are reference counted.
#[derive(Clone, PartialEq, Eq, Hash)]
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
        Self {
            scheme: uri.scheme().cloned(),
            authority,
        }
    }

    /// A key for a scheme and authority.
    pub const fn new(scheme: Option<Scheme>, authority: Option<Authority>) -> Self {
        Self { scheme, authority }
    }

    /// The scheme, when the request had one.
    pub fn scheme(&self) -> Option<&Scheme> {
        self.scheme.as_ref()
    }

    /// The authority (host and port), when the request had one.
    pub fn authority(&self) -> Option<&Authority> {
        self.authority.as_ref()
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

//! Which breaker a request belongs to: its host (the default), one for everything, or a key of
//! your own.

use courier_core::HostKey;
use std::fmt;
use std::hash::Hash;

/// What a breaker key must be: hashable, comparable, cheap to clone, printable for logs.
pub trait BreakerKey: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static {}

impl<T: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static> BreakerKey for T {}

/// The parts of a request a key function can look at (everything but the body).
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    method: &'a http::Method,
    uri: &'a http::Uri,
    headers: &'a http::HeaderMap,
    extensions: &'a http::Extensions,
}

impl<'a> RequestParts<'a> {
    /// The parts of `req`.
    pub fn new<B>(req: &'a http::Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The request method.
    pub fn method(&self) -> &'a http::Method {
        self.method
    }

    /// The request URI.
    pub fn uri(&self) -> &'a http::Uri {
        self.uri
    }

    /// The request headers.
    pub fn headers(&self) -> &'a http::HeaderMap {
        self.headers
    }

    /// The request extensions.
    pub fn extensions(&self) -> &'a http::Extensions {
        self.extensions
    }
}

/// Picks the breaker a request belongs to.
///
/// Implemented by [`ByHost`], [`Global`] and every `Fn(&RequestParts<'_>) -> K`.
pub trait MakeKey {
    /// The key breakers are kept under.
    type Key: BreakerKey;

    /// Whether every request maps to the same key, so no map is needed.
    const SINGLE: bool = false;

    /// The key of one request.
    fn make_key(&self, req: &RequestParts<'_>) -> Self::Key;

    /// Whether `req`'s key is `key`, when that can be told without making the key; `None`
    /// when it cannot. The service uses it to reuse the breaker of the previous call. Defaults
    /// to `None`: the key is made and compared.
    #[inline]
    fn is_key(&self, req: &RequestParts<'_>, key: &Self::Key) -> Option<bool> {
        let _ = (req, key);
        None
    }
}

/// One breaker per host: scheme and authority ([`HostKey`]). The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByHost;

impl MakeKey for ByHost {
    type Key = HostKey;

    #[inline]
    fn make_key(&self, req: &RequestParts<'_>) -> HostKey {
        HostKey::from_parts(req.uri, req.headers)
    }

    /// Compares the URI's scheme and authority in place (both compare ignoring ASCII case, as
    /// [`HostKey`] does); a request without an authority in its URI makes the key.
    #[inline]
    fn is_key(&self, req: &RequestParts<'_>, key: &HostKey) -> Option<bool> {
        let authority = req.uri.authority()?.as_str();
        // The same bytes first (a clone of one URI), then equal bytes, then equal but for case:
        // each check is cheaper than the next, and the first decides the usual case.
        let same_authority = key.authority().is_some_and(|a| {
            let a = a.as_str();
            std::ptr::eq(a, authority) || a == authority || a.eq_ignore_ascii_case(authority)
        });
        Some(same_authority && same_scheme(key.scheme(), req.uri.scheme()))
    }
}

/// Whether a key's scheme (kept in lowercase) is the request's, ignoring ASCII case as
/// [`HostKey`] does. `Scheme`'s own comparison decides the usual case (two standard schemes
/// compare as tags); it tells a standard `http` from another kind's `HTTP`, which the text
/// comparison then takes as equal.
#[inline]
fn same_scheme(key: Option<&http::uri::Scheme>, uri: Option<&http::uri::Scheme>) -> bool {
    match (key, uri) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || a.as_str().eq_ignore_ascii_case(b.as_str()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_key_agrees_with_making_the_key() {
        let uris = [
            "http://api.example:8080/a",
            "Http://api.example:8080/a",
            "https://API.EXAMPLE:8080/a",
            "h2c://api.example:8080/a",
            "H2C://api.example:8080/a",
            "http://API.example:8080/b",
            "https://api.example:8080/a",
            "HTTP://api.example:8080/a",
            "ftp://api.example:8080/a",
            "FTP://API.EXAMPLE:8080/a",
            "http://api.example/a",
            "http://user@api.example:8080/a",
        ];
        let mut reqs: Vec<http::Request<()>> = uris
            .iter()
            .map(|u| http::Request::get(*u).body(()).unwrap())
            .collect();
        // Built by parts, `HTTP` is a scheme of another kind than the parsed `http`.
        for scheme in ["HTTP", "Https", "FTP"] {
            let uri = http::Uri::builder()
                .scheme(scheme)
                .authority("Api.Example:8080")
                .path_and_query("/a")
                .build()
                .unwrap();
            reqs.push(http::Request::get(uri).body(()).unwrap());
        }
        for a in &reqs {
            let key = ByHost.make_key(&RequestParts::new(a));
            for b in &reqs {
                let parts = RequestParts::new(b);
                assert_eq!(
                    ByHost.is_key(&parts, &key),
                    Some(ByHost.make_key(&parts) == key),
                    "{} {}",
                    a.uri(),
                    b.uri()
                );
            }
        }
    }
}

/// One breaker for every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl MakeKey for Global {
    type Key = ();

    const SINGLE: bool = true;

    #[inline]
    fn make_key(&self, _: &RequestParts<'_>) {}
}

impl<K, F> MakeKey for F
where
    K: BreakerKey,
    F: Fn(&RequestParts<'_>) -> K,
{
    type Key = K;

    #[inline]
    fn make_key(&self, req: &RequestParts<'_>) -> K {
        self(req)
    }
}

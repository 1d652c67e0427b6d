//! Which bucket a request draws from: per host (the default), one for everything, or a key of
//! your own.

use courier_core::HostKey;
use std::fmt;
use std::hash::Hash;

/// Picks the bucket key of a request.
///
/// Implemented by [`PerHost`] (scheme + authority), [`Global`] (one bucket) and [`KeyBy`] (a
/// function of the request head).
pub trait KeyFn: Send + Sync + 'static {
    /// The key buckets are kept under.
    type Key: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static;

    /// The key of `req`.
    fn key<B>(&self, req: &http::Request<B>) -> Self::Key;

    /// Whether `req`'s key is `key`, when that can be told without making the key; `None` when
    /// it cannot. The service uses it to reuse the bucket of its previous request. Defaults to
    /// `None`: the key is made and compared.
    #[inline]
    fn is_key<B>(&self, req: &http::Request<B>, key: &Self::Key) -> Option<bool> {
        let _ = (req, key);
        None
    }
}

/// One bucket per scheme + authority ([`HostKey`]). The default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerHost;

impl KeyFn for PerHost {
    type Key = HostKey;

    #[inline]
    fn key<B>(&self, req: &http::Request<B>) -> HostKey {
        HostKey::from_request(req)
    }

    /// Compares the URI's scheme and authority in place, ignoring ASCII case as [`HostKey`]
    /// does; a request without an authority in its URI makes the key.
    #[inline]
    fn is_key<B>(&self, req: &http::Request<B>, key: &HostKey) -> Option<bool> {
        let uri = req.uri();
        let authority = uri.authority()?;
        let same_authority = key.authority().is_some_and(|a| {
            let (a, b) = (a.as_str(), authority.as_str());
            // The same bytes (a clone of one URI), equal bytes, or equal but for case.
            std::ptr::eq(a, b) || a == b || a.eq_ignore_ascii_case(b)
        });
        Some(same_authority && same_scheme(key.scheme(), uri.scheme()))
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

/// One bucket for every request the layer sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyFn for Global {
    type Key = ();

    #[inline]
    fn key<B>(&self, _: &http::Request<B>) {}

    #[inline]
    fn is_key<B>(&self, _: &http::Request<B>, _: &()) -> Option<bool> {
        Some(true)
    }
}

/// A bucket per key your function returns, e.g. per API token or per tenant.
#[derive(Clone)]
pub struct KeyBy<F>(pub F);

impl<F> fmt::Debug for KeyBy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyBy(..)")
    }
}

impl<F, K> KeyFn for KeyBy<F>
where
    F: Fn(&RequestHead<'_>) -> K + Send + Sync + 'static,
    K: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static,
{
    type Key = K;

    fn key<B>(&self, req: &http::Request<B>) -> K {
        (self.0)(&RequestHead::new(req))
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

    /// The request's [`HostKey`].
    pub fn host(&self) -> HostKey {
        HostKey::from_parts(self.uri, self.headers)
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
            "http://API.example:8080/b",
            "https://api.example:8080/a",
            "h2c://api.example:8080/a",
            "H2C://api.example:8080/a",
            "http://api.example/a",
            "http://user@api.example:8080/a",
            "/relative",
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
            let key = PerHost.key(a);
            for b in &reqs {
                let told = PerHost.is_key(b, &key);
                if b.uri().authority().is_none() {
                    assert_eq!(told, None, "{}", b.uri());
                } else {
                    assert_eq!(told, Some(PerHost.key(b) == key), "{} {}", a.uri(), b.uri());
                }
            }
        }
        assert_eq!(Global.is_key(&reqs[0], &()), Some(true));
    }
}

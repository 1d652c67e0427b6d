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
        let authority = req.uri.authority()?;
        // Byte equality first: the usual case, and cheaper than comparing ignoring case.
        let same_authority = key
            .authority()
            .is_some_and(|a| a.as_str() == authority.as_str() || a == authority);
        // Scheme equality ignores case; the standard ones compare as a tag, not as text.
        Some(same_authority && key.scheme() == req.uri.scheme())
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

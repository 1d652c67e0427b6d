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

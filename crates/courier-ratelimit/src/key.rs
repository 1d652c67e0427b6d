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
}

/// One bucket for every request the layer sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyFn for Global {
    type Key = ();

    #[inline]
    fn key<B>(&self, _: &http::Request<B>) {}
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

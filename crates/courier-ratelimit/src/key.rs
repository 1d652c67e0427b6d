//! Which bucket a request draws from: per host (the default), one for everything, or a key of
//! your own.

use courier_core::HostKey;
pub use courier_core::RequestHead;
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

    /// Compares the URI's scheme and authority in place ([`HostKey::matches`]); a request
    /// without an authority in its URI makes the key.
    #[inline]
    fn is_key<B>(&self, req: &http::Request<B>, key: &HostKey) -> Option<bool> {
        key.matches(req.uri())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_key_tells_hosts_apart_as_their_keys_do() {
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        let key = PerHost.key(&get("http://api.example:8080/a"));
        assert_eq!(
            PerHost.is_key(&get("http://API.example:8080/b"), &key),
            Some(true)
        );
        assert_eq!(
            PerHost.is_key(&get("https://api.example:8080/a"), &key),
            Some(false)
        );
        assert_eq!(
            PerHost.is_key(&get("/relative"), &key),
            None,
            "made from Host instead"
        );
        assert_eq!(Global.is_key(&get("/relative"), &()), Some(true));
    }
}

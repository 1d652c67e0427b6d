//! Which breaker a request belongs to: its host (the default), one for everything, or a key of
//! your own.

use courier_core::HostKey;
pub use courier_core::RequestHead;
use std::fmt;
use std::hash::Hash;

/// What a breaker key must be: hashable, comparable, cheap to clone, printable for logs.
pub trait BreakerKey: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static {}

impl<T: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static> BreakerKey for T {}

/// Picks the breaker a request belongs to.
///
/// Implemented by [`ByHost`], [`Global`] and every `Fn(&RequestHead<'_>) -> K`.
pub trait MakeKey {
    /// The key breakers are kept under.
    type Key: BreakerKey;

    /// Whether every request maps to the same key, so no map is needed.
    const SINGLE: bool = false;

    /// The key of one request.
    fn make_key(&self, req: &RequestHead<'_>) -> Self::Key;

    /// Whether `req`'s key is `key`, when that can be told without making the key; `None`
    /// when it cannot. The service uses it to reuse the breaker of the previous call. Defaults
    /// to `None`: the key is made and compared.
    #[inline]
    fn is_key(&self, req: &RequestHead<'_>, key: &Self::Key) -> Option<bool> {
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
    fn make_key(&self, req: &RequestHead<'_>) -> HostKey {
        req.host()
    }

    /// Compares the URI's scheme and authority in place ([`HostKey::matches`]); a request
    /// without an authority in its URI makes the key.
    #[inline]
    fn is_key(&self, req: &RequestHead<'_>, key: &HostKey) -> Option<bool> {
        key.matches(req.uri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_key_tells_hosts_apart_as_their_keys_do() {
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        let key = ByHost.make_key(&RequestHead::new(&get("http://api.example:8080/a")));
        let is_key = |uri: &str| ByHost.is_key(&RequestHead::new(&get(uri)), &key);
        assert_eq!(is_key("http://API.example:8080/b"), Some(true));
        assert_eq!(is_key("https://api.example:8080/a"), Some(false));
        assert_eq!(is_key("/relative"), None, "made from Host instead");
    }
}

/// One breaker for every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl MakeKey for Global {
    type Key = ();

    const SINGLE: bool = true;

    #[inline]
    fn make_key(&self, _: &RequestHead<'_>) {}
}

impl<K, F> MakeKey for F
where
    K: BreakerKey,
    F: Fn(&RequestHead<'_>) -> K,
{
    type Key = K;

    #[inline]
    fn make_key(&self, req: &RequestHead<'_>) -> K {
        self(req)
    }
}

//! Which state a request belongs to ([`KeyFn`](crate::KeyFn)).

use crate::host::{HostKey, RequestHead};
use std::fmt;
use std::hash::Hash;

/// Picks the key a request's state (a breaker, a bucket) is kept under: its host (the
/// default), one for everything, or a key of your own.
///
/// Implemented by [`PerHost`] (scheme and authority, the default of every keyed layer),
/// [`Global`] (one key for everything) and [`KeyBy`] (a function of the request head). Every
/// keyed layer (the circuit breaker, the rate limiter, pacing, the concurrency limit) picks
/// its key with it, and offers the same three choices as `.per_host()`, `.global()` and
/// `.key_by(f)`.
///
/// ```
/// use courier_core::{Global, HostKey, KeyBy, KeyFn, PerHost, RequestHead};
///
/// let req = http::Request::get("http://api.example/items")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap();
/// let head = RequestHead::new(&req);
///
/// assert_eq!(PerHost.key(&head), HostKey::from_request(&req));
/// assert_eq!(Global.key(&head), ());
/// let by_tenant = KeyBy(|head: &RequestHead<'_>| head.headers().get("x-tenant").cloned());
/// assert_eq!(by_tenant.key(&head).unwrap(), "acme");
/// ```
pub trait KeyFn: Send + Sync + 'static {
    /// The key state is kept under: hashable, comparable, cheap to clone, printable for logs.
    type Key: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static;

    /// Whether every request has the same key, so that no map is needed. Defaults to `false`.
    const SINGLE: bool = false;

    /// The key of one request.
    fn key(&self, req: &RequestHead<'_>) -> Self::Key;

    /// Whether `req`'s key is `key`, when that can be told without making the key; `None` when
    /// it cannot. A layer uses it to reuse the state of its previous request. Defaults to
    /// `None`: the key is made and compared.
    #[inline]
    fn is_key(&self, req: &RequestHead<'_>, key: &Self::Key) -> Option<bool> {
        let _ = (req, key);
        None
    }
}

/// One key per host: scheme and authority ([`HostKey`]). The default of every keyed layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerHost;

impl KeyFn for PerHost {
    type Key = HostKey;

    #[inline]
    fn key(&self, req: &RequestHead<'_>) -> HostKey {
        req.host()
    }

    /// Compares the URI's scheme and authority in place ([`HostKey::matches`]); a request
    /// without an authority in its URI makes the key.
    // Always: the caller's fast path (the previous request's host again) is this one call,
    // and left to itself the compiler keeps it out of line once `matches` is inlined into it.
    #[inline(always)]
    fn is_key(&self, req: &RequestHead<'_>, key: &HostKey) -> Option<bool> {
        key.matches(req.uri())
    }
}

/// One key for every request the layer sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyFn for Global {
    type Key = ();

    const SINGLE: bool = true;

    #[inline]
    fn key(&self, _: &RequestHead<'_>) {}

    #[inline]
    fn is_key(&self, _: &RequestHead<'_>, _: &()) -> Option<bool> {
        Some(true)
    }
}

/// A key per value your function returns for the request head, e.g. per API token or per
/// tenant.
#[derive(Clone, Copy)]
pub struct KeyBy<F>(pub F);

impl<F> fmt::Debug for KeyBy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyBy(..)")
    }
}

impl<F, K> KeyFn for KeyBy<F>
where
    F: Fn(&RequestHead<'_>) -> K + Send + Sync + 'static,
    K: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static,
{
    type Key = K;

    #[inline]
    fn key(&self, req: &RequestHead<'_>) -> K {
        (self.0)(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> http::Request<()> {
        http::Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn per_host_is_key_tells_hosts_apart_as_their_keys_do() {
        let key = PerHost.key(&RequestHead::new(&get("http://api.example:8080/a")));
        let is_key = |uri: &str| PerHost.is_key(&RequestHead::new(&get(uri)), &key);
        assert_eq!(is_key("http://API.example:8080/b"), Some(true));
        assert_eq!(is_key("https://api.example:8080/a"), Some(false));
        assert_eq!(is_key("http://api.example:8081/a"), Some(false));
        assert_eq!(is_key("/relative"), None, "made from Host instead");
    }

    #[test]
    fn global_is_one_key() {
        const { assert!(Global::SINGLE) };
        const { assert!(!PerHost::SINGLE) };
        let req = get("/relative");
        assert_eq!(Global.is_key(&RequestHead::new(&req), &()), Some(true));
    }

    #[test]
    fn a_key_function_prints_without_its_closure() {
        let by_path = KeyBy(|head: &RequestHead<'_>| head.uri().path().to_owned());
        assert_eq!(format!("{by_path:?}"), "KeyBy(..)");
    }

    #[test]
    fn key_by_calls_the_function_and_compares_by_making_the_key() {
        let by_path = KeyBy(|head: &RequestHead<'_>| head.uri().path().to_owned());
        const { assert!(!KeyBy::<fn(&RequestHead<'_>) -> String>::SINGLE) };
        let req = get("http://api.example/items");
        let head = RequestHead::new(&req);
        assert_eq!(by_path.key(&head), "/items");
        assert_eq!(by_path.is_key(&head, &"/items".to_owned()), None);
    }
}

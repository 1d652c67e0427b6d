//! How a rate limit key becomes part of a Redis key name.

use courier_core::HostKey;
use std::fmt::Write;
use std::sync::Arc;

/// A rate limit key that can be written into a Redis key name.
///
/// Two keys that are equal (`Eq`) must write the same text, and two that differ should write
/// different text: replicas agree on a bucket only by its name. Implemented for
/// [`HostKey`] (the key of [`PerHost`](courier_core::PerHost), the layer's default: scheme and
/// authority in lowercase, without userinfo: `https://api.example.com`), for `()` (the key of
/// [`Global`](courier_core::Global), written `global`), and for strings and integers (for
/// [`KeyBy`](courier_core::KeyBy) keys such as a tenant id). These are courier-core's
/// [`KeyFn`](courier_core::KeyFn)s, which the rate limiter re-exports.
pub trait RedisKey {
    /// Appends the key's text to `out`.
    fn write_redis_key(&self, out: &mut String);
}

impl RedisKey for HostKey {
    /// Lowercase, because `HostKey` equality ignores ASCII case; credentials in the authority
    /// are never written (the `Display` of `HostKey` drops them).
    fn write_redis_key(&self, out: &mut String) {
        let start = out.len();
        let _ = write!(out, "{self}");
        out[start..].make_ascii_lowercase();
    }
}

impl RedisKey for () {
    fn write_redis_key(&self, out: &mut String) {
        out.push_str("global");
    }
}

impl RedisKey for str {
    fn write_redis_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl<T: RedisKey + ?Sized> RedisKey for &T {
    fn write_redis_key(&self, out: &mut String) {
        (**self).write_redis_key(out);
    }
}

impl<T: RedisKey + ?Sized> RedisKey for Box<T> {
    fn write_redis_key(&self, out: &mut String) {
        (**self).write_redis_key(out);
    }
}

impl<T: RedisKey + ?Sized> RedisKey for Arc<T> {
    fn write_redis_key(&self, out: &mut String) {
        (**self).write_redis_key(out);
    }
}

impl RedisKey for String {
    fn write_redis_key(&self, out: &mut String) {
        out.push_str(self);
    }
}

macro_rules! int_keys {
    ($($t:ty)*) => {$(
        impl RedisKey for $t {
            fn write_redis_key(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}

int_keys!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);

/// The two Redis keys of one bucket: its TAT and its park, `{prefix}{<key>}:tat` and
/// `{prefix}{<key>}:park`. The braces make both a Redis Cluster hash tag, so the one script
/// that reads both runs on one node.
pub(crate) fn key_names<K: RedisKey + ?Sized>(prefix: &str, key: &K) -> (String, String) {
    let mut tat = String::with_capacity(prefix.len() + 40);
    tat.push_str(prefix);
    tat.push('{');
    key.write_redis_key(&mut tat);
    tat.push('}');
    let mut park = String::with_capacity(tat.len() + 5);
    park.push_str(&tat);
    tat.push_str(":tat");
    park.push_str(":park");
    (tat, park)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(uri: &str) -> HostKey {
        HostKey::from_request(&http::Request::get(uri).body(()).unwrap())
    }

    #[test]
    fn host_keys_are_lowercase_and_hide_credentials() {
        let (tat, park) = key_names(
            "courier:rl:",
            &host("https://user:pw@API.Example.com:8443/x?q"),
        );
        assert_eq!(tat, "courier:rl:{https://api.example.com:8443}:tat");
        assert_eq!(park, "courier:rl:{https://api.example.com:8443}:park");
        assert_eq!(
            key_names("p:", &host("https://api.example.com/")).0,
            key_names("p:", &host("HTTPS://API.EXAMPLE.COM/b")).0,
            "equal HostKeys share one bucket"
        );
        assert_ne!(
            key_names("p:", &host("http://api.example.com/")).0,
            key_names("p:", &host("https://api.example.com/")).0,
        );
    }

    #[test]
    fn other_keys() {
        assert_eq!(key_names("x:", &()).0, "x:{global}:tat");
        assert_eq!(key_names("x:", &42u64).1, "x:{42}:park");
        assert_eq!(
            key_names("x:", &String::from("tenant-7")).0,
            "x:{tenant-7}:tat"
        );
        assert_eq!(key_names("x:", &Arc::<str>::from("t")).0, "x:{t}:tat");
    }
}

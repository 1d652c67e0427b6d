//! The key that per-host state (buckets, breakers, budgets) is kept under.

use http::uri::{Authority, Scheme};
use std::fmt;
use std::hash::{Hash, Hasher};

/// Scheme and authority of a request: `https://api.example.com:8443`.
///
/// Comparison and hashing ignore ASCII case, as URIs do for these parts. Building one from a
/// request copies no bytes: `http`'s URI parts are reference counted.
#[derive(Clone, PartialEq, Eq)]
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

impl Hash for HostKey {
    /// Hashes the lowercased text a chunk at a time. `http`'s own `Hash` for `Authority` feeds
    /// the hasher one byte per call, which makes hashing the largest part of a per-host lookup.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let scheme = self.scheme.as_ref().map(Scheme::as_str);
        let authority = self.authority.as_ref().map(Authority::as_str);
        state.write_u8(u8::from(scheme.is_some()) | (u8::from(authority.is_some()) << 1));
        for part in [scheme, authority].into_iter().flatten() {
            hash_lowercase(part.as_bytes(), state);
        }
    }
}

/// Feeds `bytes`, ASCII-lowercased, to `state` eight at a time, then its length (so that two
/// parts hashed one after the other cannot be confused with a different split of the same
/// text).
fn hash_lowercase<H: Hasher>(bytes: &[u8], state: &mut H) {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0_u8; 8];
        w.copy_from_slice(word);
        state.write_u64(lowercase_word(u64::from_le_bytes(w)));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0_u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        state.write_u64(lowercase_word(u64::from_le_bytes(w)));
    }
    state.write_usize(bytes.len());
}

/// `to_ascii_lowercase` on the eight bytes of `x` at once: sets bit 0x20 of every byte in
/// `A..=Z`, leaves every other byte (non-ASCII ones included) as it is.
const fn lowercase_word(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The low seven bits of each byte; adding below cannot carry into the next byte.
    let low = x & !HIGH;
    let at_least_a = low + ONES * (0x80 - b'A' as u64);
    let above_z = low + ONES * (0x7f - b'Z' as u64);
    let upper = at_least_a & !above_z & !x & HIGH;
    x | (upper >> 2)
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

    fn hash_of(key: &HostKey) -> u64 {
        use std::hash::BuildHasher;
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(key)
    }

    #[test]
    fn equal_keys_hash_alike_whatever_the_case() {
        let long = format!("{}.example:8443", "Sub".repeat(40));
        for (a, b) in [
            ("https://API.Example.com/a", "https://api.example.com/b"),
            ("HTTPS://h.example/", "https://H.EXAMPLE/"),
            (
                &*format!("http://{long}/"),
                &*format!("http://{}/", long.to_lowercase()),
            ),
        ] {
            let a = HostKey::from_request(&http::Request::get(a).body(()).unwrap());
            let b = HostKey::from_request(&http::Request::get(b).body(()).unwrap());
            assert_eq!(a, b);
            assert_eq!(hash_of(&a), hash_of(&b));
        }
        let plain =
            HostKey::from_request(&http::Request::get("http://a.example/").body(()).unwrap());
        let tls =
            HostKey::from_request(&http::Request::get("https://a.example/").body(()).unwrap());
        assert_ne!(hash_of(&plain), hash_of(&tls));
        let none = HostKey::new(None, None);
        let scheme_only = HostKey::new(Some(Scheme::HTTP), None);
        assert_ne!(hash_of(&none), hash_of(&scheme_only));
    }

    #[test]
    fn word_lowercasing_matches_std_for_every_byte_in_every_lane() {
        for lane in 0..8 {
            for b in 0..=255_u8 {
                let mut bytes = *b"aZ.9-Q\xffM";
                bytes[lane] = b;
                let want = u64::from_le_bytes(bytes.map(|c| c.to_ascii_lowercase()));
                assert_eq!(lowercase_word(u64::from_le_bytes(bytes)), want, "{bytes:?}");
            }
        }
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

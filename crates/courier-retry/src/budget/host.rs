//! A request's host as the budget keys it: hashed and compared in place, from the URI's
//! scheme and authority (or the `Host` field), ignoring ASCII case as [`HostKey`] does.

use courier_core::HostKey;
use http::uri::Authority;
use http::{HeaderMap, Uri};

/// A multiply-rotate hash (as in rustc's FxHash) over the host's text, a word at a time: host
/// keys come from our own requests and the map is bounded, so flooding is not a concern, and
/// SipHash over `HostKey` byte by byte was a large share of the no-retry path.
#[derive(Default)]
struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Lowercases the ASCII letters of eight bytes at once.
pub(super) fn ascii_lowercase(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = word & LOW7;
    // High bit set where the byte is >= 'A' (0x41), and where it is > 'Z' (0x5a).
    let ge_a = low + 0x3f3f_3f3f_3f3f_3f3f;
    let gt_z = low + 0x2525_2525_2525_2525;
    let upper = (ge_a ^ gt_z) & !word & HIGH;
    word | (upper >> 2)
}

/// A request's host as borrowed text: what [`HostKey::from_parts`] keys on, without copying.
pub(super) struct HostView<'a> {
    scheme: Option<&'a str>,
    authority: &'a str,
}

pub(super) fn with_view<R>(uri: &Uri, headers: &HeaderMap, f: impl FnOnce(HostView<'_>) -> R) -> R {
    let scheme = uri.scheme_str();
    if let Some(a) = uri.authority() {
        return f(HostView {
            scheme,
            authority: a.as_str(),
        });
    }
    let fallback = headers
        .get(http::header::HOST)
        .and_then(|h| Authority::try_from(h.as_bytes()).ok());
    f(HostView {
        scheme,
        authority: fallback.as_ref().map_or("", Authority::as_str),
    })
}

/// Whether the request's host is `key`: scheme and authority compared in place (bytes first,
/// then ignoring ASCII case) when the URI has an authority.
#[inline]
pub(super) fn is_host(uri: &Uri, headers: &HeaderMap, key: &HostKey) -> bool {
    match (uri.authority(), key.authority()) {
        (Some(a), Some(k)) => (a.as_str() == k.as_str() || a == k) && uri.scheme() == key.scheme(),
        _ => with_view(uri, headers, |v| v.matches(key)),
    }
}

impl HostView<'_> {
    /// A hash that ignores ASCII case, as [`HostKey`]'s equality does.
    pub(super) fn hash(&self) -> u64 {
        let mut h = FastHasher::default();
        let scheme = self.scheme.unwrap_or("");
        h.add(scheme.len() as u64 | u64::from(self.scheme.is_some()) << 32);
        for part in [scheme, self.authority] {
            let mut chunks = part.as_bytes().chunks_exact(8);
            for chunk in &mut chunks {
                let word = u64::from_le_bytes(chunk.try_into().expect("chunks of eight"));
                h.add(ascii_lowercase(word));
            }
            // The last bytes, zero-padded, little-endian; shifted in rather than copied.
            let tail = chunks
                .remainder()
                .iter()
                .rev()
                .fold(0u64, |acc, &b| acc << 8 | u64::from(b));
            h.add(ascii_lowercase(tail));
        }
        // Spread the bits: the map uses the top ones too.
        let mut x = h.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }

    pub(super) fn matches(&self, key: &HostKey) -> bool {
        let authority = key.authority().map_or("", Authority::as_str);
        let same = |a: &str, b: &str| a == b || a.eq_ignore_ascii_case(b);
        let scheme = match (key.scheme(), self.scheme) {
            (Some(a), Some(b)) => same(a.as_str(), b),
            (None, None) => true,
            _ => false,
        };
        scheme && same(authority, self.authority)
    }
}

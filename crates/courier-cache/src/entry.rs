//! One stored response, and the RFC 9111 arithmetic over it.

mod fields;
#[cfg(test)]
mod tests;

pub(crate) use fields::{Fields, normalized, vary_names};

use bytes::Bytes;
use courier_core::cache_control::{CacheControl, EntityTag, EntityTagRef};
use fields::{freshness, has_directive, is_hop_by_hop_str, strip_unstorable, vary_matches};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode, Version};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Bookkeeping bytes counted for every entry on top of its headers and body: what an entry
/// costs in memory beyond them (the entry and its variants behind `Arc`s, the header map's
/// tables, the store's node and table slot), measured by a counting allocator
/// (`cargo bench -p courier-bench --bench scale`): with it, a store filled far past its
/// capacity with 64-byte or 1 KiB bodies holds within 2 % of the capacity. At 256 it held 36 %
/// more with 1 KiB bodies.
const ENTRY_OVERHEAD: u64 = 800;

/// Bookkeeping bytes counted per header field.
const FIELD_OVERHEAD: u64 = 32;

/// At most this many variants (`Vary` combinations and credential fingerprints) are kept per
/// URI; storing one more drops the oldest.
pub(crate) const MAX_VARIANTS: usize = 8;

/// A stored response: status, headers and body, with what is needed to select, validate and age
/// it.
///
/// Entries are immutable; an update builds a new one that shares the body (`Bytes` is reference
/// counted, so serving or updating an entry copies no body bytes).
#[derive(Clone)]
pub struct Entry {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Fingerprint of the request's credential headers (0 when it had none).
    pub(crate) credentials: u64,
    /// The request's values of the fields named by the response's `Vary`, as bytes (see
    /// [`normalized`]).
    pub(crate) vary: Vec<(HeaderName, Option<Vec<u8>>)>,
    /// The tag of the first `ETag` field, when it is one (shared by the entries a 304 freshens
    /// with the same field). Validators are compared on the field's bytes, not on this.
    pub(crate) etag: Option<Arc<EntityTag>>,
    /// The first `ETag` field as it came, whether or not it parses.
    pub(crate) etag_value: Option<HeaderValue>,
    pub(crate) last_modified: Option<HeaderValue>,
    pub(crate) cache_control: CacheControl,
    /// The `Cache-Control` field, when there is exactly one.
    cache_control_value: Option<HeaderValue>,
    /// `proxy-revalidate` (RFC 9111 section 5.2.2.8), which [`CacheControl`] does not record.
    pub(crate) proxy_revalidate: bool,
    /// `None`: no explicit freshness; every use revalidates. The lifetime for a private cache:
    /// a shared one reads `s-maxage` first (see [`Entry::lifetime_for`]).
    pub(crate) lifetime: Option<Duration>,
    pub(crate) corrected_initial_age: Duration,
    /// When the response (or the 304 that last updated it) arrived.
    pub(crate) stored_at: Instant,
    pub(crate) weight: u64,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Headers may hold credentials (Set-Cookie); show only what identifies the entry.
        f.debug_struct("Entry")
            .field("status", &self.status)
            .field("etag", &self.etag)
            .field("body_len", &self.body.len())
            .field("lifetime", &self.lifetime)
            .field("weight", &self.weight)
            .finish_non_exhaustive()
    }
}

/// When a response was asked for and when it arrived, on both clocks (RFC 9111 section 4.2.3).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) request_time: Instant,
    pub(crate) response_time: Instant,
    pub(crate) response_wall: SystemTime,
}

impl Entry {
    /// Builds an entry; `vary` and `credentials` come from the request that produced it.
    pub(crate) fn new(
        status: StatusCode,
        version: Version,
        mut headers: HeaderMap,
        body: Bytes,
        credentials: u64,
        vary: Vec<(HeaderName, Option<Vec<u8>>)>,
        timing: Timing,
    ) -> Self {
        strip_unstorable(&mut headers);
        Self::assemble(
            status,
            version,
            headers,
            body,
            credentials,
            vary,
            timing,
            None,
            true,
        )
    }

    /// An entry read back from a store that keeps its fields as bytes: `headers` as they were
    /// stored, `lifetime` its freshness lifetime (for a private cache), `age` its current age
    /// at `at`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn restore(
        status: StatusCode,
        version: Version,
        headers: HeaderMap,
        body: Bytes,
        credentials: u64,
        vary: Vec<(HeaderName, Option<Vec<u8>>)>,
        lifetime: Option<Duration>,
        age: Duration,
        at: Instant,
    ) -> Self {
        let timing = Timing {
            request_time: at,
            response_time: at,
            response_wall: std::time::UNIX_EPOCH,
        };
        let mut entry = Self::assemble(
            status,
            version,
            headers,
            body,
            credentials,
            vary,
            timing,
            None,
            true,
        );
        entry.lifetime = lifetime;
        entry.corrected_initial_age = age;
        entry
    }

    /// Builds an entry from headers that hold no field a cache must not store. `previous`, the
    /// entry a 304 freshens, lends its parsed `ETag` and `Cache-Control` when the fields are
    /// the same bytes (`same_cache_control` says whether the `Cache-Control` fields are).
    /// Unless `dated`, the `Date` field is not the response's: it is aged from when it arrived.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        status: StatusCode,
        version: Version,
        headers: HeaderMap,
        body: Bytes,
        credentials: u64,
        vary: Vec<(HeaderName, Option<Vec<u8>>)>,
        timing: Timing,
        previous: Option<(&Self, bool)>,
        dated: bool,
    ) -> Self {
        let mut fields = Fields::scan(&headers);
        let etag = match previous {
            Some((previous, _)) if fields.etag == previous.etag_value.as_ref() => {
                previous.etag.clone()
            }
            _ => parse_tag(fields.etag),
        };
        let (cache_control, proxy_revalidate) = match previous {
            Some((previous, true)) => (previous.cache_control.clone(), previous.proxy_revalidate),
            _ if fields.has_cache_control() => (
                CacheControl::from_headers(&headers),
                has_directive(&headers, "proxy-revalidate"),
            ),
            _ => (CacheControl::default(), false),
        };
        if !dated {
            fields.date = None;
        }
        let (lifetime, corrected_initial_age) = freshness(&fields, &cache_control, timing);
        let etag_value = fields.etag.cloned();
        let cache_control_value = fields.single_cache_control().cloned();
        let last_modified = fields.last_modified.cloned();
        let mut entry = Self {
            status,
            version,
            headers,
            body,
            credentials,
            vary,
            etag,
            etag_value,
            last_modified,
            cache_control,
            cache_control_value,
            proxy_revalidate,
            lifetime,
            corrected_initial_age,
            stored_at: timing.response_time,
            weight: 0,
        };
        entry.weight = entry.compute_weight();
        entry
    }

    /// The stored status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored headers (hop-by-hop fields removed).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The stored body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The stored entity tag, if the response had one: quoted, or unquoted (kept as a weak
    /// tag, see the crate docs). An opaque part that is not UTF-8 is shown lossily; the cache
    /// compares validators on the field's bytes.
    pub fn etag(&self) -> Option<&EntityTag> {
        self.etag.as_deref()
    }

    /// How many bytes this entry counts against the cache's capacity: body, headers and a
    /// fixed overhead.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    fn compute_weight(&self) -> u64 {
        let headers: u64 = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().len() + v.len()) as u64 + FIELD_OVERHEAD)
            .sum();
        let vary: u64 = self
            .vary
            .iter()
            .map(|(n, v)| (n.as_str().len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum();
        ENTRY_OVERHEAD + self.body.len() as u64 + headers + vary
    }

    /// `current_age` of RFC 9111 section 4.2.3, the resident time read from tokio's clock.
    pub(crate) fn current_age(&self, now: Instant) -> Duration {
        self.corrected_initial_age
            .saturating_add(now.saturating_duration_since(self.stored_at))
    }

    /// Whether the entry may be served by a private cache without asking the server.
    #[cfg(test)]
    pub(crate) fn is_fresh(&self, now: Instant) -> bool {
        self.is_fresh_at(self.current_age(now), false)
    }

    /// The freshness lifetime: in a `shared` cache `s-maxage` overrides `max-age` and `Expires`
    /// (RFC 9111 section 5.2.2.10); a private cache ignores it.
    #[inline]
    pub(crate) fn lifetime_for(&self, shared: bool) -> Option<Duration> {
        match self.cache_control.s_maxage {
            Some(s_maxage) if shared => Some(s_maxage),
            _ => self.lifetime,
        }
    }

    /// Whether the entry may be served without asking the server, at this current age, by a
    /// `shared` cache or a private one.
    pub(crate) fn is_fresh_at(&self, age: Duration, shared: bool) -> bool {
        if self.cache_control.no_cache {
            return false;
        }
        match self.lifetime_for(shared) {
            Some(lifetime) => lifetime > age,
            None => false,
        }
    }

    /// How long past its freshness lifetime (for a `shared` cache or a private one) the entry
    /// is (zero while fresh).
    pub(crate) fn staleness(&self, now: Instant, shared: bool) -> Duration {
        self.current_age(now)
            .saturating_sub(self.lifetime_for(shared).unwrap_or(Duration::ZERO))
    }

    /// Whether, once stale, the entry must not be served before the server has validated it:
    /// `must-revalidate`, and in a `shared` cache `proxy-revalidate` and `s-maxage` too (RFC
    /// 9111 sections 5.2.2.2, 5.2.2.8 and 5.2.2.10).
    pub(crate) fn must_revalidate(&self, shared: bool) -> bool {
        let cc = &self.cache_control;
        cc.must_revalidate || (shared && (self.proxy_revalidate || cc.s_maxage.is_some()))
    }

    /// Whether a request with these credentials and headers selects this entry (RFC 9111
    /// section 4.1, with the credential fingerprint as an implicit `Vary`).
    pub(crate) fn matches(&self, credentials: u64, request: &HeaderMap) -> bool {
        self.credentials == credentials
            && self
                .vary
                .iter()
                .all(|(name, value)| vary_matches(request, name, value.as_deref()))
    }

    /// A copy with headers updated by a 304 (RFC 9111 section 3.2), aged from the 304.
    ///
    /// Every field of the 304 replaces the stored fields of its name, except `Content-Length`
    /// and the fields a cache must not store (hop-by-hop ones): those are skipped. A 304
    /// without `Date` is aged from when it arrived (RFC 9110 section 6.6.1), not from the
    /// stored `Date`, which is the first response's (the stored field is left as it is).
    pub(crate) fn freshened(&self, not_modified: &HeaderMap, timing: Timing) -> Self {
        let mut headers = self.headers.clone();
        // The 304's `Cache-Control` fields: how many, and the first.
        let mut cache_control = (0_usize, None);
        // The values of one name come one after another: the first replaces what is stored.
        let mut current: Option<(&HeaderName, Update)> = None;
        let mut dated = false;
        for (name, value) in not_modified {
            let update = match current {
                Some((previous, update)) if previous == name => update,
                _ => {
                    let update = match name.as_str() {
                        "content-length" => Update::Skip,
                        "cache-control" => Update::CacheControl,
                        "date" => {
                            dated = true;
                            Update::Replace
                        }
                        other if is_hop_by_hop_str(other) => Update::Skip,
                        _ => Update::Replace,
                    };
                    if update != Update::Skip {
                        headers.remove(name);
                    }
                    current = Some((name, update));
                    update
                }
            };
            if update == Update::CacheControl {
                cache_control.0 += 1;
                cache_control.1.get_or_insert(value);
            }
            if update != Update::Skip {
                headers.append(name.clone(), value.clone());
            }
        }
        let same_cache_control = match cache_control {
            (0, _) => true,
            (1, first) if self.cache_control_value.is_some() => {
                first == self.cache_control_value.as_ref()
            }
            _ => headers
                .get_all(header::CACHE_CONTROL)
                .iter()
                .eq(self.headers.get_all(header::CACHE_CONTROL).iter()),
        };
        // The stored fields hold nothing unstorable, and the 304's unstorable ones were
        // skipped: there is nothing to strip.
        Self::assemble(
            self.status,
            self.version,
            headers,
            self.body.clone(),
            self.credentials,
            self.vary.clone(),
            timing,
            Some((self, same_cache_control)),
            dated,
        )
    }

    /// Whether a 304 whose fields are `not_modified` selects this entry for update (RFC 9111
    /// section 4.3.4).
    ///
    /// A strong entity tag must match strongly; a weak one weakly. Without an entity tag, a
    /// `Last-Modified` must equal the stored one. A 304 with no validator at all updates the
    /// entry: the request nominated exactly this one.
    pub(crate) fn selected_by(&self, not_modified: &Fields<'_>) -> bool {
        let tag = match not_modified.etag {
            // The stored field again: it parses as the stored tag did, and matches it in
            // whichever comparison its tag calls for.
            Some(value) if self.etag_value.as_ref() == Some(value) => {
                if self.etag.is_some() {
                    return true;
                }
                None
            }
            value => value.and_then(tag_of),
        };
        if let Some(tag) = tag {
            // Compared on bytes: distinct obs-text tags stay distinct. A weak tag (an unquoted
            // one included) matches weakly; a strong one only a strong stored tag.
            return match self.etag_value.as_ref().and_then(tag_of) {
                Some(stored) if tag.is_weak() => stored.weak_eq(tag),
                Some(stored) => stored.strong_eq(tag),
                None => false,
            };
        }
        match not_modified.last_modified {
            Some(lm) => self.last_modified.as_ref() == Some(lm),
            None => true,
        }
    }
}

/// What a 304's field does to the stored ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Update {
    /// Not stored: `Content-Length` (the stored body's stays) and hop-by-hop fields.
    Skip,
    Replace,
    /// `Cache-Control`, replaced too.
    CacheControl,
}

/// The tag of an `ETag` field, when it is one (quoted, or unquoted: see the crate docs).
fn parse_tag(value: Option<&HeaderValue>) -> Option<Arc<EntityTag>> {
    tag_of(value?).map(|tag| Arc::new(EntityTag::from(tag)))
}

/// An `ETag` field's tag, read leniently on its bytes (RFC 9110 section 8.8.3: `etagc`
/// includes obs-text, bytes >= 0x80; an unquoted tag is kept as a weak one, see
/// [`EntityTagRef::parse_lenient`]); `None` when it is no entity tag.
fn tag_of(value: &HeaderValue) -> Option<EntityTagRef<'_>> {
    EntityTagRef::parse_lenient(value.as_bytes())
}

/// The entries of a URI: most URIs have one, kept inline.
pub(crate) type EntryList = SmallVec<[Arc<Entry>; 1]>;

/// Every stored variant of one URI.
#[derive(Debug, Clone, Default)]
pub struct Variants {
    entries: EntryList,
    weight: u64,
    /// Whether the URI is a pass: an answer to a request that selected none of the entries was
    /// not stored, and for a while such requests go upstream on their own rather than wait for
    /// each other. Kept by the in-memory store only.
    pass: Option<Pass>,
}

/// Until when a URI is a pass, and, when it holds no entry, its place in its store's count.
#[derive(Debug, Clone)]
struct Pass {
    until: Instant,
    /// Held for its `Drop`.
    _alone: Option<PassCount>,
}

/// One more pass holding no entry in a store's count, for as long as it lives: the store
/// counts such keys apart from those holding responses.
#[derive(Debug)]
struct PassCount(Arc<AtomicUsize>);

impl PassCount {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Clone for PassCount {
    fn clone(&self) -> Self {
        Self::new(&self.0)
    }
}

impl Drop for PassCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Variants {
    /// Variants holding `entries` (oldest first).
    pub fn new(entries: Vec<Arc<Entry>>) -> Self {
        Self::from_list(EntryList::from_vec(entries))
    }

    pub(crate) fn from_list(entries: EntryList) -> Self {
        let weight = entries.iter().map(|e| e.weight).sum();
        Self {
            entries,
            weight,
            pass: None,
        }
    }

    /// These entries, and the URI a pass until `until`; without entries, it counts in `count`
    /// for as long as it lives.
    pub(crate) fn with_pass(&self, until: Instant, count: &Arc<AtomicUsize>) -> Self {
        Self {
            entries: self.entries.clone(),
            weight: self.weight,
            pass: Some(Pass {
                until,
                _alone: self.entries.is_empty().then(|| PassCount::new(count)),
            }),
        }
    }

    /// Until when the URI is a pass, if it is one.
    pub(crate) fn pass_until(&self) -> Option<Instant> {
        self.pass.as_ref().map(|p| p.until)
    }

    /// Whether the URI is a pass at `now`.
    #[inline]
    pub(crate) fn passes_at(&self, now: Instant) -> bool {
        self.pass.as_ref().is_some_and(|p| now < p.until)
    }

    /// Whether this is a pass and nothing else: no entry.
    pub(crate) fn is_pass_only(&self) -> bool {
        self.entries.is_empty() && self.pass.is_some()
    }

    /// The stored entries, oldest first.
    pub fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }

    /// The sum of the entries' weights.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// Whether there is no entry.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest entry a request with these credentials and headers selects.
    pub(crate) fn select(&self, credentials: u64, request: &HeaderMap) -> Option<&Arc<Entry>> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.matches(credentials, request))
    }
}

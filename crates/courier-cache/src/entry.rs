//! One stored response, and the RFC 9111 arithmetic over it.

use bytes::Bytes;
use courier_core::cache_control::{CacheControl, EntityTag, EntityTagRef, delta_seconds};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode, Version};
use smallvec::SmallVec;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Bookkeeping bytes counted for every entry on top of its headers and body, so that many tiny
/// entries still weigh something.
const ENTRY_OVERHEAD: u64 = 256;

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

/// The first values of the response fields the cache reads, found in one pass.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a> {
    pub(crate) etag: Option<&'a HeaderValue>,
    pub(crate) last_modified: Option<&'a HeaderValue>,
    /// How many `Cache-Control` fields there are.
    cache_control_count: usize,
    cache_control: Option<&'a HeaderValue>,
    date: Option<&'a HeaderValue>,
    expires: Option<&'a HeaderValue>,
    age: Option<&'a HeaderValue>,
}

impl<'a> Fields<'a> {
    pub(crate) fn scan(headers: &'a HeaderMap) -> Self {
        let mut fields = Self::default();
        // A name's values come one after another, its first (what `get` returns) first.
        for (name, value) in headers {
            let slot = match name.as_str() {
                "etag" => &mut fields.etag,
                "cache-control" => {
                    fields.cache_control_count += 1;
                    &mut fields.cache_control
                }
                "date" => &mut fields.date,
                "last-modified" => &mut fields.last_modified,
                "expires" => &mut fields.expires,
                "age" => &mut fields.age,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        fields
    }

    /// Whether there is a `Cache-Control` field.
    pub(crate) fn has_cache_control(&self) -> bool {
        self.cache_control_count > 0
    }

    /// The `Cache-Control` field, when there is exactly one.
    fn single_cache_control(&self) -> Option<&'a HeaderValue> {
        self.cache_control.filter(|_| self.cache_control_count == 1)
    }
}

/// The values of `name` in `headers`, for `Vary` matching: their comma-separated members,
/// trimmed, the empty ones left out, joined by `", "`; `None` when there is no such field.
///
/// Bytes, not text: values that differ only in bytes that are not UTF-8 stay distinct.
pub(crate) fn normalized(headers: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for value in headers.get_all(name) {
        let out = out.get_or_insert_with(Vec::new);
        for part in members(value) {
            if !out.is_empty() {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(part);
        }
    }
    out
}

/// Whether the values of `name` in `request` normalize to `stored` (see [`normalized`]),
/// compared member by member, without building the normalized value.
fn vary_matches(request: &HeaderMap, name: &HeaderName, stored: Option<&[u8]>) -> bool {
    let mut values = request.get_all(name).iter().peekable();
    let (Some(mut rest), true) = (stored, values.peek().is_some()) else {
        return stored.is_none() && values.peek().is_none();
    };
    let mut first = true;
    for part in values.flat_map(members) {
        if !first {
            match rest.strip_prefix(b", ") {
                Some(after) => rest = after,
                None => return false,
            }
        }
        first = false;
        match rest.strip_prefix(part) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty()
}

/// The trimmed, non-empty comma-separated members of a field value. Members hold no comma,
/// so joined by `", "` they can be told apart again.
fn members(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|part| !part.is_empty())
}

/// What a response's `Vary` asks for: `None` for `Vary: *` (or a field name that cannot be
/// one), else the listed names.
pub(crate) fn vary_names(headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for value in headers.get_all(header::VARY) {
        let Ok(text) = value.to_str() else {
            return None;
        };
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if part == "*" {
                return None;
            }
            let name = HeaderName::from_bytes(part.as_bytes()).ok()?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Some(names)
}

/// Freshness lifetime and corrected initial age (RFC 9111 sections 4.2.1 and 4.2.3).
fn freshness(
    fields: &Fields<'_>,
    cc: &CacheControl,
    timing: Timing,
) -> (Option<Duration>, Duration) {
    let date = http_date(fields.date);
    let date_value = date.unwrap_or(timing.response_wall);
    let lifetime = match cc.max_age {
        Some(max_age) => Some(max_age),
        None if fields.expires.is_some() => Some(
            // An invalid Expires ("0", garbage) means already expired.
            http_date(fields.expires)
                .and_then(|expires| expires.duration_since(date_value).ok())
                .unwrap_or(Duration::ZERO),
        ),
        None => None,
    };
    let apparent_age = timing
        .response_wall
        .duration_since(date_value)
        .unwrap_or(Duration::ZERO);
    // An invalid `Age` counts as none; one too large for 2^31 seconds is 2^31 seconds
    // (RFC 9111 section 1.2.2), not none.
    let age_value = fields
        .age
        .and_then(|v| v.to_str().ok())
        .map_or(Duration::ZERO, delta_seconds);
    let response_delay = timing
        .response_time
        .saturating_duration_since(timing.request_time);
    let corrected_age_value = age_value.saturating_add(response_delay);
    (lifetime, apparent_age.max(corrected_age_value))
}

/// Whether a `Cache-Control` field of `headers` holds the directive `name` (lowercase), as a
/// directive: a quoted value that names it does not count.
fn has_directive(headers: &HeaderMap, name: &str) -> bool {
    headers.get_all(header::CACHE_CONTROL).iter().any(|value| {
        let bytes = value.as_bytes();
        let (mut start, mut quoted, mut escaped) = (0, false, false);
        for at in 0..=bytes.len() {
            let b = bytes.get(at).copied();
            if quoted {
                match b {
                    _ if escaped => escaped = false,
                    Some(b'\\') => escaped = true,
                    Some(b'"') => quoted = false,
                    _ => {}
                }
                if b.is_some() {
                    continue;
                }
            }
            match b {
                Some(b'"') => quoted = true,
                Some(b',') | None => {
                    let member = &bytes[start..at];
                    let directive = member
                        .split(|&b| b == b'=')
                        .next()
                        .unwrap_or_default()
                        .trim_ascii();
                    if directive.eq_ignore_ascii_case(name.as_bytes()) {
                        return true;
                    }
                    start = at + 1;
                }
                _ => {}
            }
        }
        false
    })
}

fn http_date(value: Option<&HeaderValue>) -> Option<SystemTime> {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|t| httpdate::parse_http_date(t.trim()).ok())
}

/// Removes the fields a cache must not store (RFC 9111 section 3.1): hop-by-hop fields and the
/// ones `Connection` names.
fn strip_unstorable(headers: &mut HeaderMap) {
    // `Connection` is hop-by-hop itself: without any hop-by-hop field there is nothing to do.
    if headers.keys().any(is_hop_by_hop) {
        strip_hop_by_hop(headers);
    }
}

#[cold]
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|t| t.split(','))
            .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        if headers.contains_key(name) {
            headers.remove(name);
        }
    }
}

static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_hop_by_hop_str(name.as_str())
}

/// Whether a (lowercase) field name is one of [`HOP_BY_HOP`].
fn is_hop_by_hop_str(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The entries of a URI: most URIs have one, kept inline.
pub(crate) type EntryList = SmallVec<[Arc<Entry>; 1]>;

/// Every stored variant of one URI.
#[derive(Debug, Clone, Default)]
pub struct Variants {
    entries: EntryList,
    weight: u64,
}

impl Variants {
    /// Variants holding `entries` (oldest first).
    pub fn new(entries: Vec<Arc<Entry>>) -> Self {
        Self::from_list(EntryList::from_vec(entries))
    }

    pub(crate) fn from_list(entries: EntryList) -> Self {
        let weight = entries.iter().map(|e| e.weight).sum();
        Self { entries, weight }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prop_oneof;
    use proptest::strategy::{Just, Strategy};
    use std::time::UNIX_EPOCH;

    fn timing(wall: u64) -> Timing {
        let now = Instant::now();
        Timing {
            request_time: now,
            response_time: now,
            response_wall: UNIX_EPOCH + Duration::from_secs(wall),
        }
    }

    fn entry(headers: &[(&str, &str)], wall: u64) -> Entry {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        Entry::new(
            StatusCode::OK,
            Version::HTTP_11,
            map,
            Bytes::from_static(b"body"),
            0,
            Vec::new(),
            timing(wall),
        )
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[tokio::test(start_paused = true)]
    async fn max_age_wins_over_expires() {
        let e = entry(
            &[
                ("cache-control", "max-age=10"),
                ("date", &date(1000)),
                ("expires", &date(2000)),
            ],
            1000,
        );
        assert_eq!(e.lifetime, Some(Duration::from_secs(10)));
    }

    #[tokio::test(start_paused = true)]
    async fn expires_minus_date_and_age() {
        // The server's clock is 500 s behind ours: Expires - Date still gives 100 s, and the
        // apparent age (500 s) makes it stale at once, as RFC 9111 section 4.2.3 says.
        let e = entry(
            &[
                ("date", &date(1000)),
                ("expires", &date(1100)),
                ("age", "30"),
            ],
            1000,
        );
        assert_eq!(e.lifetime, Some(Duration::from_secs(100)));
        assert_eq!(e.corrected_initial_age, Duration::from_secs(30));
        let skewed = entry(&[("date", &date(1000)), ("expires", &date(1100))], 1500);
        assert_eq!(skewed.corrected_initial_age, Duration::from_secs(500));
        assert!(!skewed.is_fresh(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn garbage_dates_and_ages_never_panic() {
        for (n, v) in [
            ("expires", "0"),
            ("expires", "tomorrow"),
            ("date", "garbage"),
            ("age", "-5"),
            ("age", "99999999999999999999999"),
            ("vary", "*, accept"),
            ("etag", "unquoted"),
        ] {
            let e = entry(&[(n, v)], 1000);
            let _ = e.is_fresh(Instant::now());
            let _ = e.staleness(Instant::now(), false);
            let _ = e.staleness(Instant::now(), true);
        }
        let e = entry(&[("expires", "0")], 1000);
        assert_eq!(e.lifetime, Some(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn hop_by_hop_fields_are_not_stored() {
        let e = entry(
            &[
                ("connection", "x-secret"),
                ("x-secret", "1"),
                ("transfer-encoding", "chunked"),
                ("etag", "\"a\""),
            ],
            1000,
        );
        assert!(e.headers.get("x-secret").is_none());
        assert!(e.headers.get("transfer-encoding").is_none());
        assert!(e.headers.get("etag").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn freshening_replaces_fields_but_not_content_length() {
        let e = entry(
            &[
                ("etag", "\"a\""),
                ("content-length", "4"),
                ("x-ratelimit-remaining", "59"),
                ("x-keep", "1"),
            ],
            1000,
        );
        let mut nm = HeaderMap::new();
        nm.insert("content-length", "0".parse().unwrap());
        nm.insert("x-ratelimit-remaining", "58".parse().unwrap());
        nm.append("x-multi", "a".parse().unwrap());
        nm.append("x-multi", "b".parse().unwrap());
        let f = e.freshened(&nm, timing(1000));
        assert_eq!(f.headers["content-length"], "4");
        assert_eq!(f.headers["x-ratelimit-remaining"], "58");
        assert_eq!(f.headers["x-keep"], "1");
        assert_eq!(f.headers.get_all("x-multi").iter().count(), 2);
        assert_eq!(f.body, e.body);
    }

    /// The entry's fields as first computed, field by field with `HeaderMap` lookups: what the
    /// one-pass scan and the 304 shortcuts must reproduce.
    mod reference {
        use super::*;

        pub(super) struct Derived {
            pub(super) headers: HeaderMap,
            pub(super) etag: Option<EntityTag>,
            pub(super) last_modified: Option<HeaderValue>,
            pub(super) cache_control: CacheControl,
            pub(super) lifetime: Option<Duration>,
            pub(super) corrected_initial_age: Duration,
        }

        fn date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|t| httpdate::parse_http_date(t.trim()).ok())
        }

        pub(super) fn new(mut headers: HeaderMap, timing: Timing) -> Derived {
            if headers.contains_key(header::CONNECTION) {
                let named: Vec<HeaderName> = headers
                    .get_all(header::CONNECTION)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .flat_map(|t| t.split(','))
                    .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
                    .collect();
                for name in named {
                    headers.remove(name);
                }
            }
            for name in &HOP_BY_HOP {
                headers.remove(name);
            }
            let etag = headers
                .get(header::ETAG)
                .and_then(|v| v.to_str().ok())
                .and_then(EntityTag::parse_lenient);
            let cc = CacheControl::from_headers(&headers);
            let date_value = date(&headers, header::DATE).unwrap_or(timing.response_wall);
            let lifetime = match cc.max_age {
                Some(max_age) => Some(max_age),
                None if headers.contains_key(header::EXPIRES) => Some(
                    date(&headers, header::EXPIRES)
                        .and_then(|e| e.duration_since(date_value).ok())
                        .unwrap_or(Duration::ZERO),
                ),
                None => None,
            };
            let apparent = timing
                .response_wall
                .duration_since(date_value)
                .unwrap_or(Duration::ZERO);
            let age = headers
                .get(header::AGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|t| t.trim().parse::<u64>().ok())
                .map_or(Duration::ZERO, |s| Duration::from_secs(s.min(1 << 31)));
            let delay = timing
                .response_time
                .saturating_duration_since(timing.request_time);
            Derived {
                last_modified: headers.get(header::LAST_MODIFIED).cloned(),
                headers,
                etag,
                cache_control: cc,
                lifetime,
                corrected_initial_age: apparent.max(age.saturating_add(delay)),
            }
        }

        pub(super) fn freshened(
            stored: &HeaderMap,
            not_modified: &HeaderMap,
            timing: Timing,
        ) -> Derived {
            let mut headers = stored.clone();
            let mut replaced: Vec<&HeaderName> = Vec::new();
            for (name, value) in not_modified {
                if name == header::CONTENT_LENGTH || HOP_BY_HOP.contains(name) {
                    continue;
                }
                if !replaced.contains(&name) {
                    headers.remove(name);
                    replaced.push(name);
                }
                headers.append(name.clone(), value.clone());
            }
            let mut derived = new(headers.clone(), timing);
            if !not_modified.contains_key(header::DATE) {
                // Aged as a response without `Date`: from when the 304 arrived.
                headers.remove(header::DATE);
                let undated = new(headers, timing);
                derived.lifetime = undated.lifetime;
                derived.corrected_initial_age = undated.corrected_initial_age;
            }
            derived
        }

        pub(super) fn selected_by(stored: &Derived, not_modified: &HeaderMap) -> bool {
            let tag = not_modified
                .get(header::ETAG)
                .and_then(|v| v.to_str().ok())
                .and_then(EntityTag::parse_lenient);
            if let Some(tag) = tag {
                return match &stored.etag {
                    Some(s) if tag.is_weak() => s.weak_eq(&tag),
                    Some(s) => s.strong_eq(&tag),
                    None => false,
                };
            }
            match not_modified.get(header::LAST_MODIFIED) {
                Some(lm) => stored.last_modified.as_ref() == Some(lm),
                None => true,
            }
        }
    }

    /// Fields drawn from a small pool, so that 304s and stored responses share names and values.
    fn fields() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
        let field = prop_oneof![
            Just(("etag", "\"a\"")),
            Just(("etag", "W/\"a\"")),
            Just(("etag", "\"b\"")),
            Just(("etag", "unquoted")),
            Just(("etag", " unquoted ")),
            Just(("etag", "\"unquoted\"")),
            Just(("etag", "W/\"unquoted\"")),
            Just(("etag", "W/unquoted")),
            Just(("etag", "a, b")),
            Just(("etag", "*")),
            Just(("cache-control", "no-cache")),
            Just(("cache-control", "max-age=60")),
            Just(("cache-control", "no-store")),
            Just(("cache-control", "max-age=5, stale-if-error=30")),
            Just(("content-length", "4")),
            Just(("connection", "x-hop, keep-alive")),
            Just(("x-hop", "1")),
            Just(("keep-alive", "timeout=5")),
            Just(("transfer-encoding", "chunked")),
            Just(("date", "Thu, 01 Jan 1970 00:16:40 GMT")),
            Just(("date", "garbage")),
            Just(("expires", "Thu, 01 Jan 1970 00:18:20 GMT")),
            Just(("expires", "0")),
            Just(("age", "30")),
            Just(("age", "-1")),
            Just(("last-modified", "Thu, 01 Jan 1970 00:00:01 GMT")),
            Just(("last-modified", "Thu, 01 Jan 1970 00:00:02 GMT")),
            Just(("x-ratelimit-remaining", "58")),
            Just(("x-ratelimit-remaining", "59")),
            Just(("content-type", "text/plain")),
        ];
        proptest::collection::vec(field, 0..8)
    }

    fn map(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in fields {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    fn in_order(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
        headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    }

    fn assert_same(got: &Entry, want: &reference::Derived) {
        assert_eq!(in_order(&got.headers), in_order(&want.headers));
        assert_eq!(got.etag(), want.etag.as_ref());
        assert_eq!(got.etag_value.as_ref(), want.headers.get(header::ETAG));
        assert_eq!(got.last_modified, want.last_modified);
        assert_eq!(got.cache_control, want.cache_control);
        assert_eq!(got.lifetime, want.lifetime);
        assert_eq!(got.corrected_initial_age, want.corrected_initial_age);
    }

    proptest::proptest! {
        #[test]
        fn entries_and_304_updates_match_the_field_by_field_reference(
            stored in fields(),
            not_modified in fields(),
            later in fields(),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let _guard = rt.enter();
            let e = entry(&stored, 1000);
            let want = reference::new(map(&stored), timing(1000));
            assert_same(&e, &want);

            let nm = map(&not_modified);
            let fields = Fields::scan(&nm);
            proptest::prop_assert_eq!(e.selected_by(&fields), reference::selected_by(&want, &nm));

            let f = e.freshened(&nm, timing(1500));
            let want_f = reference::freshened(&want.headers, &nm, timing(1500));
            assert_same(&f, &want_f);
            proptest::prop_assert_eq!(f.weight, f.compute_weight());

            // A second 304 on the freshened entry: the shortcuts hold across updates too.
            let nm = map(&later);
            let fields = Fields::scan(&nm);
            proptest::prop_assert_eq!(f.selected_by(&fields), reference::selected_by(&want_f, &nm));
            let g = f.freshened(&nm, timing(2000));
            assert_same(&g, &reference::freshened(&want_f.headers, &nm, timing(2000)));
        }
    }

    #[test]
    fn hop_by_hop_names_by_text_are_the_listed_ones() {
        for name in &HOP_BY_HOP {
            assert!(is_hop_by_hop(name), "{name}");
        }
        for name in [
            header::CONTENT_LENGTH,
            header::ETAG,
            header::CACHE_CONTROL,
            header::TRAILER,
            HeaderName::from_static("x-connection"),
            HeaderName::from_static("t"),
        ] {
            assert_eq!(is_hop_by_hop(&name), HOP_BY_HOP.contains(&name), "{name}");
        }
    }

    /// Field values for `Vary` matching: members, commas, whitespace and bytes >= 0x80.
    fn vary_values() -> impl Strategy<Value = Vec<Vec<u8>>> {
        let value = proptest::collection::vec(
            prop_oneof![
                Just(b"a".to_vec()),
                Just(b"b".to_vec()),
                Just(b"ab".to_vec()),
                Just(b",".to_vec()),
                Just(b", ".to_vec()),
                Just(b" ".to_vec()),
                Just(b"\t".to_vec()),
                Just(b"\xe4".to_vec()),
                Just(b"\xfc".to_vec()),
                Just("\u{fffd}".as_bytes().to_vec()),
            ],
            0..5,
        )
        .prop_map(|parts| parts.concat());
        proptest::collection::vec(value, 0..3)
    }

    fn with_values(values: &[Vec<u8>]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("x-v", HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    proptest::proptest! {
        #[test]
        fn vary_matching_agrees_with_comparing_normalized_bytes(
            stored in vary_values(),
            request in vary_values(),
        ) {
            let name = HeaderName::from_static("x-v");
            let (stored, request) = (with_values(&stored), with_values(&request));
            let want = normalized(&stored, &name);
            proptest::prop_assert_eq!(
                vary_matches(&request, &name, want.as_deref()),
                normalized(&request, &name) == want
            );
            proptest::prop_assert!(vary_matches(&stored, &name, want.as_deref()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn obs_text_tags_are_compared_on_their_bytes() {
        let stored = |tag: &[u8]| {
            let mut map = HeaderMap::new();
            map.insert(header::ETAG, HeaderValue::from_bytes(tag).unwrap());
            Entry::new(
                StatusCode::OK,
                Version::HTTP_11,
                map,
                Bytes::new(),
                0,
                Vec::new(),
                timing(1000),
            )
        };
        let selects = |entry: &Entry, tag: &[u8]| {
            let mut map = HeaderMap::new();
            map.insert(header::ETAG, HeaderValue::from_bytes(tag).unwrap());
            entry.selected_by(&Fields::scan(&map))
        };
        let strong = stored(b"\"caf\xe9\"");
        assert_eq!(strong.etag(), Some(&EntityTag::strong("caf\u{fffd}")));
        assert!(selects(&strong, b"\"caf\xe9\""));
        assert!(selects(&strong, b" W/\"caf\xe9\""));
        assert!(
            !selects(&strong, b"\"caf\xe8\""),
            "same lossy text, other bytes"
        );
        assert!(!selects(&strong, "\"caf\u{fffd}\"".as_bytes()));
        let weak = stored(b"W/\"caf\xe9\"");
        assert!(selects(&weak, b"W/\"caf\xe9\""));
        assert!(
            !selects(&weak, b"\"caf\xe9\""),
            "a strong tag matches strongly"
        );
        assert!(stored(b"\"a\"b\"").etag().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unquoted_tag_selects_only_the_same_unquoted_tag() {
        let selects =
            |entry: &Entry, tag: &str| entry.selected_by(&Fields::scan(&map(&[("etag", tag)])));
        let bare = entry(&[("etag", "abc")], 1000);
        let tag = bare.etag().expect("an unquoted tag is kept");
        assert!(tag.is_unquoted() && tag.is_weak());
        assert_eq!(tag.to_string(), "abc");
        assert!(selects(&bare, "abc"));
        assert!(
            selects(&bare, " abc\t"),
            "the field's whitespace is no part of the tag"
        );
        for other in ["\"abc\"", "W/\"abc\"", "W/abc", "abd", "ABC"] {
            assert!(!selects(&bare, other), "{other}");
        }
        // No tag at all: a 304 with a garbage field is one without a validator, which
        // selects the entry its request nominated (as for quoted tags).
        for garbage in ["a, b", "*", "a b", "\"abc"] {
            assert!(selects(&bare, garbage), "{garbage}");
        }
        // A stored quoted tag is never selected by the bare one.
        assert!(!selects(&entry(&[("etag", "\"abc\"")], 1000), "abc"));
        assert!(!selects(&entry(&[("etag", "W/\"abc\"")], 1000), "abc"));
        // Garbage is still no validator.
        for garbage in ["a, b", "*", "a b", "\"abc", "a\"b", ""] {
            assert!(
                entry(&[("etag", garbage)], 1000).etag().is_none(),
                "{garbage}"
            );
        }
    }

    #[test]
    fn directives_are_found_outside_quoted_values_only() {
        let cc = |values: &[&[u8]]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::CACHE_CONTROL, HeaderValue::from_bytes(v).unwrap());
            }
            has_directive(&h, "proxy-revalidate")
        };
        assert!(cc(&[b"proxy-revalidate"]));
        assert!(cc(&[b"max-age=60 , Proxy-Revalidate"]));
        assert!(cc(&[b"max-age=60", b"proxy-revalidate=\"x\""]));
        assert!(cc(&[b"ext=\"a\\\"b\", proxy-revalidate"]));
        assert!(cc(&[b"ext=\"caf\xe9\",proxy-revalidate"]));
        assert!(!cc(&[b"ext=\"proxy-revalidate\""]));
        assert!(!cc(&[b"ext=\"a, proxy-revalidate\""]));
        assert!(!cc(&[b"ext=\"a\\\", proxy-revalidate"]));
        assert!(!cc(&[b"must-revalidate, proxy-revalidated"]));
        assert!(!cc(&[]));
    }

    #[tokio::test(start_paused = true)]
    async fn s_maxage_is_the_lifetime_of_a_shared_cache_only() {
        let e = entry(&[("cache-control", "max-age=100, s-maxage=10")], 1000);
        assert_eq!(e.lifetime_for(false), Some(Duration::from_secs(100)));
        assert_eq!(e.lifetime_for(true), Some(Duration::from_secs(10)));
        assert!(!e.must_revalidate(false) && e.must_revalidate(true));
        let e = entry(&[("cache-control", "max-age=100, proxy-revalidate")], 1000);
        assert_eq!(e.lifetime_for(true), Some(Duration::from_secs(100)));
        assert!(!e.must_revalidate(false) && e.must_revalidate(true));
        let e = entry(&[("cache-control", "max-age=100, must-revalidate")], 1000);
        assert!(e.must_revalidate(false) && e.must_revalidate(true));
    }

    #[test]
    fn vary_parsing() {
        let mut h = HeaderMap::new();
        h.insert("vary", "Accept, accept-encoding,,".parse().unwrap());
        assert_eq!(vary_names(&h).unwrap().len(), 2);
        h.insert("vary", "accept, *".parse().unwrap());
        assert!(vary_names(&h).is_none());
        h.insert("vary", "bad name".parse().unwrap());
        assert!(vary_names(&h).is_none());
    }
}

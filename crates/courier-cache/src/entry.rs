//! One stored response, and the RFC 9111 arithmetic over it.

use bytes::Bytes;
use courier_core::cache_control::{CacheControl, EntityTag};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode, Version};
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
    /// The request's values of the fields named by the response's `Vary`.
    pub(crate) vary: Vec<(HeaderName, Option<String>)>,
    pub(crate) etag: Option<EntityTag>,
    pub(crate) last_modified: Option<HeaderValue>,
    pub(crate) cache_control: CacheControl,
    /// `None`: no explicit freshness; every use revalidates.
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
        vary: Vec<(HeaderName, Option<String>)>,
        timing: Timing,
    ) -> Self {
        strip_unstorable(&mut headers);
        let etag = headers
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse);
        let last_modified = headers.get(header::LAST_MODIFIED).cloned();
        let cache_control = CacheControl::from_headers(&headers);
        let (lifetime, corrected_initial_age) = freshness(&headers, &cache_control, timing);
        let mut entry = Self {
            status,
            version,
            headers,
            body,
            credentials,
            vary,
            etag,
            last_modified,
            cache_control,
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

    /// The stored entity tag, if the response had a valid one.
    pub fn etag(&self) -> Option<&EntityTag> {
        self.etag.as_ref()
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
            .map(|(n, v)| (n.as_str().len() + v.as_ref().map_or(0, String::len)) as u64)
            .sum();
        ENTRY_OVERHEAD + self.body.len() as u64 + headers + vary
    }

    /// `current_age` of RFC 9111 section 4.2.3, the resident time read from tokio's clock.
    pub(crate) fn current_age(&self, now: Instant) -> Duration {
        self.corrected_initial_age
            .saturating_add(now.saturating_duration_since(self.stored_at))
    }

    /// Whether the entry may be served without asking the server.
    #[cfg(test)]
    pub(crate) fn is_fresh(&self, now: Instant) -> bool {
        self.is_fresh_at(self.current_age(now))
    }

    /// Whether the entry may be served without asking the server, at this current age.
    pub(crate) fn is_fresh_at(&self, age: Duration) -> bool {
        if self.cache_control.no_cache {
            return false;
        }
        match self.lifetime {
            Some(lifetime) => lifetime > age,
            None => false,
        }
    }

    /// How long past its freshness lifetime the entry is (zero while fresh).
    pub(crate) fn staleness(&self, now: Instant) -> Duration {
        self.current_age(now)
            .saturating_sub(self.lifetime.unwrap_or(Duration::ZERO))
    }

    /// Whether a request with these credentials and headers selects this entry (RFC 9111
    /// section 4.1, with the credential fingerprint as an implicit `Vary`).
    pub(crate) fn matches(&self, credentials: u64, request: &HeaderMap) -> bool {
        self.credentials == credentials
            && self
                .vary
                .iter()
                .all(|(name, value)| normalized(request, name).as_deref() == value.as_deref())
    }

    /// A copy with headers updated by a 304 (RFC 9111 section 3.2), aged from the 304.
    pub(crate) fn freshened(&self, not_modified: &HeaderMap, timing: Timing) -> Self {
        let mut headers = self.headers.clone();
        let mut replaced: Vec<&HeaderName> = Vec::new();
        for (name, value) in not_modified {
            if name == header::CONTENT_LENGTH || is_hop_by_hop(name) {
                continue;
            }
            if !replaced.contains(&name) {
                headers.remove(name);
                replaced.push(name);
            }
            headers.append(name.clone(), value.clone());
        }
        Self::new(
            self.status,
            self.version,
            headers,
            self.body.clone(),
            self.credentials,
            self.vary.clone(),
            timing,
        )
    }

    /// Whether a 304's validators select this entry for update (RFC 9111 section 4.3.4).
    ///
    /// A strong entity tag must match strongly; a weak one weakly. Without an entity tag, a
    /// `Last-Modified` must equal the stored one. A 304 with no validator at all updates the
    /// entry: the request nominated exactly this one.
    pub(crate) fn selected_by(&self, not_modified: &HeaderMap) -> bool {
        let tag = not_modified
            .get(header::ETAG)
            .and_then(|v| v.to_str().ok())
            .and_then(EntityTag::parse);
        if let Some(tag) = tag {
            return match &self.etag {
                Some(stored) if tag.is_weak() => stored.weak_eq(&tag),
                Some(stored) => stored.strong_eq(&tag),
                None => false,
            };
        }
        match not_modified.get(header::LAST_MODIFIED) {
            Some(lm) => self.last_modified.as_ref() == Some(lm),
            None => true,
        }
    }
}

/// The values of `name` in `headers`, joined and trimmed, for `Vary` matching.
pub(crate) fn normalized(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for value in headers.get_all(name) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let out = out.get_or_insert_with(String::new);
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(part);
        }
    }
    out
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
    headers: &HeaderMap,
    cc: &CacheControl,
    timing: Timing,
) -> (Option<Duration>, Duration) {
    let date = http_date(headers, header::DATE);
    let date_value = date.unwrap_or(timing.response_wall);
    let lifetime = match cc.max_age {
        Some(max_age) => Some(max_age),
        None if headers.contains_key(header::EXPIRES) => Some(
            // An invalid Expires ("0", garbage) means already expired.
            http_date(headers, header::EXPIRES)
                .and_then(|expires| expires.duration_since(date_value).ok())
                .unwrap_or(Duration::ZERO),
        ),
        None => None,
    };
    let apparent_age = timing
        .response_wall
        .duration_since(date_value)
        .unwrap_or(Duration::ZERO);
    let age_value = headers
        .get(header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, |s| Duration::from_secs(s.min(1 << 31)));
    let response_delay = timing
        .response_time
        .saturating_duration_since(timing.request_time);
    let corrected_age_value = age_value.saturating_add(response_delay);
    (lifetime, apparent_age.max(corrected_age_value))
}

fn http_date(headers: &HeaderMap, name: HeaderName) -> Option<SystemTime> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| httpdate::parse_http_date(t.trim()).ok())
}

/// Removes the fields a cache must not store (RFC 9111 section 3.1): hop-by-hop fields and the
/// ones `Connection` names.
fn strip_unstorable(headers: &mut HeaderMap) {
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

const HOP_BY_HOP: [HeaderName; 9] = [
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
    HOP_BY_HOP.contains(name)
}

/// Every stored variant of one URI.
#[derive(Debug, Clone, Default)]
pub struct Variants {
    entries: Vec<Arc<Entry>>,
    weight: u64,
}

impl Variants {
    /// Variants holding `entries` (oldest first).
    pub fn new(entries: Vec<Arc<Entry>>) -> Self {
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
            let _ = e.staleness(Instant::now());
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

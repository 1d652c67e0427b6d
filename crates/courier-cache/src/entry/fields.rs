//! What the cache reads of a response's fields: the validators and the freshness fields in one
//! pass, `Vary`, `Cache-Control` directives the parser does not record, and the fields a cache
//! must not store.

use super::Timing;
use courier_core::cache_control::{CacheControl, delta_seconds};
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue};
use std::time::{Duration, SystemTime};

/// The first values of the response fields the cache reads, found in one pass.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a> {
    pub(crate) etag: Option<&'a HeaderValue>,
    pub(crate) last_modified: Option<&'a HeaderValue>,
    /// How many `Cache-Control` fields there are.
    cache_control_count: usize,
    cache_control: Option<&'a HeaderValue>,
    pub(super) date: Option<&'a HeaderValue>,
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
    pub(super) fn single_cache_control(&self) -> Option<&'a HeaderValue> {
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
pub(super) fn vary_matches(request: &HeaderMap, name: &HeaderName, stored: Option<&[u8]>) -> bool {
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
pub(super) fn freshness(
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
pub(super) fn has_directive(headers: &HeaderMap, name: &str) -> bool {
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
pub(super) fn strip_unstorable(headers: &mut HeaderMap) {
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

pub(super) static HOP_BY_HOP: [HeaderName; 9] = [
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

pub(super) fn is_hop_by_hop(name: &HeaderName) -> bool {
    is_hop_by_hop_str(name.as_str())
}

/// Whether a (lowercase) field name is one of [`HOP_BY_HOP`].
pub(super) fn is_hop_by_hop_str(name: &str) -> bool {
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

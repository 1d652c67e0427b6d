//! What becomes of the upstream's answer: a 304 merged into the stored entry, a full answer
//! stored as its body streams, a failure answered by a stale entry, an unsafe method's success
//! invalidating the URI; and the responses built from stored entries.

use crate::body::CacheBody;
use crate::entry::{Entry, Fields, Timing, normalized, vary_names};
use crate::flight::FlightGuard;
use crate::key::{KeyText, UriKey, loggable};
use crate::layer::Shared;
use crate::service::TARGET;
use crate::store::StoreFuture;
use bytes::Bytes;
use courier_core::Attempts;
use courier_core::cache_control::CacheControl;
use courier_core::extensions::CacheStatus;
use http::header::{self, HeaderName};
use http::{Extensions, HeaderMap, HeaderValue, Response, StatusCode, Uri};
use http_body::Body;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A response built from a stored entry.
///
/// `age`, when given, is sent as the `Age` field (hits and stale answers). `extensions` are
/// those of the answer from below it stands for (a 304, a 5xx), with the [`Attempts`] the
/// layers below put there; without one (a hit, a concurrent revalidation, a failure that came
/// up as an error) it carries an empty [`Attempts`]: no attempt of this call is on record.
pub(crate) fn cached_response(
    entry: &Entry,
    head: bool,
    status: CacheStatus,
    age: Option<Duration>,
    extensions: Option<Extensions>,
) -> Response<Bytes> {
    let mut response = Response::new(if head {
        Bytes::new()
    } else {
        entry.body.clone()
    });
    *response.status_mut() = entry.status;
    *response.version_mut() = entry.version;
    *response.headers_mut() = entry.headers.clone();
    if let Some(age) = age {
        response
            .headers_mut()
            .insert(header::AGE, age_value(age.as_secs()));
    }
    match extensions {
        Some(extensions) => *response.extensions_mut() = extensions,
        None => {
            response.extensions_mut().insert(Attempts::new());
        }
    }
    response.extensions_mut().insert(status);
    response
}

/// `Age` values below this many seconds (over an hour) are served from [`AGE_DIGITS`], without
/// allocating.
const STATIC_AGES: usize = 4096;

/// The decimal digits of every `n < STATIC_AGES`, left-aligned.
static AGE_DIGITS: [[u8; 4]; STATIC_AGES] = age_digits();

const fn digit_count(n: usize) -> usize {
    match n {
        0..10 => 1,
        10..100 => 2,
        100..1000 => 3,
        _ => 4,
    }
}

const fn age_digits() -> [[u8; 4]; STATIC_AGES] {
    let mut table = [[0_u8; 4]; STATIC_AGES];
    let mut n = 0;
    while n < STATIC_AGES {
        let mut i = digit_count(n);
        let mut rest = n;
        while i > 0 {
            i -= 1;
            table[n][i] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        n += 1;
    }
    table
}

/// The `Age` field for `secs`.
fn age_value(secs: u64) -> HeaderValue {
    if let Ok(n) = usize::try_from(secs)
        && n < STATIC_AGES
        && let Ok(value) =
            HeaderValue::from_maybe_shared(Bytes::from_static(&AGE_DIGITS[n][..digit_count(n)]))
    {
        return value;
    }
    HeaderValue::from(secs)
}

/// `response` as it came, marked with `status`, in a body that stores nothing.
#[inline(always)]
pub(crate) fn pass<RB>(mut response: Response<RB>, status: CacheStatus) -> Response<CacheBody<RB>> {
    response.extensions_mut().insert(status);
    response.map(CacheBody::upstream)
}

// === impl Pending ===

/// What the response future must do with the upstream's answer.
pub(crate) enum Pending {
    /// Pass it through, marked `Bypass`.
    Bypass,
    /// An unsafe method: a successful answer invalidates the URI.
    Invalidate { shared: Arc<Shared>, key: UriKey },
    /// A cacheable request: store, merge a 304, or fall back to a stale entry.
    Lookup(Lookup),
}

/// A GET or HEAD the cache looked up: what it selected, and what it takes to deal with the
/// answer.
pub(crate) struct Lookup {
    pub(crate) shared: Arc<Shared>,
    pub(crate) key: UriKey,
    /// The key's hash in the in-memory store, from the lookup.
    pub(crate) key_hash: Option<u64>,
    /// The entry this request selected, if any.
    pub(crate) entry: Option<Arc<Entry>>,
    /// Whether the cache added the conditionals (so a 304 is the cache's to answer).
    pub(crate) added_conditionals: bool,
    pub(crate) head: bool,
    pub(crate) credentials: u64,
    /// The request carried `Authorization` (fingerprinted or not); HEAD requests keep no
    /// copy of their fields, so this is recorded apart.
    pub(crate) authorization: bool,
    /// The caller's request headers, for `Vary` (`None` for HEAD, which is never stored, and
    /// when the request had none), without the conditionals the cache added.
    pub(crate) request_headers: Option<HeaderMap>,
    pub(crate) request_time: Instant,
    /// Held by the request that goes upstream for others (single-flight): one that
    /// revalidates their entry, or asks for the key they miss.
    pub(crate) flight: Option<FlightGuard>,
}

impl fmt::Debug for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bypass => f.write_str("Bypass"),
            Self::Invalidate { key, .. } => f.debug_struct("Invalidate").field("uri", key).finish(),
            Self::Lookup(l) => l.fmt(f),
        }
    }
}

impl fmt::Debug for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lookup")
            .field("uri", &self.key)
            .field("entry", &self.entry)
            .field("added_conditionals", &self.added_conditionals)
            .field("leads_flight", &self.flight.is_some())
            .finish_non_exhaustive()
    }
}

/// What becomes of the upstream's answer `R`.
pub(crate) enum Completion<T, R> {
    /// The answer to the caller.
    Done(T),
    /// A 304 that selects no stored response answered a request that was conditional only
    /// because the cache made it so: send it again without the conditionals.
    Resend,
    /// An unsafe method's success: hand it on (marked `Bypass`) once a store that can wait has
    /// removed what it invalidates.
    Removing(StoreFuture<'static, ()>, R),
}

impl Pending {
    /// The mark of an answer the cache has nothing else to do with, told from a look at it
    /// (it is not taken): a bypassed request's answer, or a full answer to a GET or HEAD that
    /// selected no stored entry and [says nothing](says_nothing) the cache acts on. The flight
    /// the request leads, if any, is then ended as [`complete`](Self::complete) ends it.
    /// `None`: the answer is for `complete`.
    #[inline]
    pub(crate) fn passes<RB, E>(
        &mut self,
        result: &Result<Response<RB>, E>,
    ) -> Option<CacheStatus> {
        match (self, result) {
            (Self::Bypass, _) => Some(CacheStatus::Bypass),
            (Self::Lookup(lookup), Ok(response)) if lookup.passes(response) => {
                lookup.pass_flight();
                Some(CacheStatus::Miss)
            }
            _ => None,
        }
    }

    /// The answer to the caller, made from the upstream's; called once, in place (the future
    /// drops `self` afterwards), unless it asks for the request to be sent again (`resendable`
    /// says whether it may), after which it is called once more with the new answer.
    pub(crate) fn complete<RB, E>(
        &mut self,
        result: Result<Response<RB>, E>,
        resendable: bool,
    ) -> Completion<Result<Response<CacheBody<RB>>, E>, Response<RB>>
    where
        RB: Body + Send + 'static,
        RB::Error: Send,
    {
        match self {
            Self::Bypass => Completion::Done(result.map(|r| pass(r, CacheStatus::Bypass))),
            Self::Invalidate { shared, key } => match result {
                Ok(response)
                    if response.status().is_success() || response.status().is_redirection() =>
                {
                    match invalidate(shared, key, response.headers()) {
                        None => Completion::Done(Ok(pass(response, CacheStatus::Bypass))),
                        Some(removal) => Completion::Removing(removal, response),
                    }
                }
                other => Completion::Done(other.map(|r| pass(r, CacheStatus::Bypass))),
            },
            Self::Lookup(lookup) => {
                // An answer that is no server error: when not stored, it says the key's answers
                // are not stored, and later requests for the key need not wait for each other.
                let answered = matches!(&result, Ok(r) if !r.status().is_server_error());
                let completion = lookup.complete(result, resendable);
                // Whatever the answer did not hand the flight to (an entry to store, a 304
                // merged), its followers ask on their own.
                if answered {
                    lookup.pass_flight();
                } else if let Some(flight) = lookup.flight.take() {
                    flight.release();
                }
                completion
            }
        }
    }
}

/// Removes the URI's entries, and those of its `Location` and `Content-Location` on the same
/// host: at once from the in-memory store; from a store that can wait, by the future returned.
fn invalidate(
    shared: &Shared,
    key: &UriKey,
    headers: &HeaderMap,
) -> Option<StoreFuture<'static, ()>> {
    let text = key.text();
    let origin = text.origin();
    let mut targets = Vec::new();
    if shared.invalidate_locations {
        for name in [header::LOCATION, header::CONTENT_LOCATION] {
            let Some(value) = headers.get(&name).and_then(|v| v.to_str().ok()) else {
                continue;
            };
            let Ok(uri) = value.trim().parse::<Uri>() else {
                continue;
            };
            let target = if uri.authority().is_some() {
                let target = KeyText::new(&uri, None);
                // Only the same host: another host's entries are not this response's to drop.
                (target.origin().eq_ignore_ascii_case(origin)).then(|| target.as_str().to_owned())
            } else if value.starts_with('/') {
                Some(format!(
                    "{origin}{}",
                    uri.path_and_query().map_or("/", |p| p.as_str())
                ))
            } else {
                None
            };
            if let Some(target) = target {
                targets.push(target);
            }
        }
    }
    let logged = |removed: bool, key: &str| {
        if removed {
            tracing::debug!(target: TARGET, event = "invalidate", uri = %loggable(key), "unsafe method invalidated stored entries");
        }
    };
    if let Some(memory) = &shared.memory {
        let mut removed = memory.remove(text.as_str());
        for target in &targets {
            removed |= memory.remove(target);
        }
        logged(removed, text.as_str());
        return None;
    }
    let store = shared.store.clone();
    let key = text.as_str().to_owned();
    Some(Box::pin(async move {
        let mut removed = store.remove(&key).await;
        for target in &targets {
            removed |= store.remove(target).await;
        }
        logged(removed, &key);
    }))
}

/// Whether a response's fields say nothing the cache acts on: no `Cache-Control` (so no
/// `no-store` and no lifetime), no `Expires` and no validator. Such an answer is stored for no
/// request (RFC 9111 section 3: neither fresh nor validatable) and removes nothing.
#[inline]
fn says_nothing(headers: &HeaderMap) -> bool {
    headers.is_empty()
        || !(headers.contains_key(header::CACHE_CONTROL)
            || headers.contains_key(header::ETAG)
            || headers.contains_key(header::LAST_MODIFIED)
            || headers.contains_key(header::EXPIRES))
}

impl Lookup {
    /// Ends the flight this request leads, if any, and sends its followers on their own; a
    /// missing key's is first remembered as a pass (its answer was not stored), so that the
    /// requests that come meanwhile go on their own too.
    fn pass_flight(&mut self) {
        if let Some(flight) = self.flight.take() {
            if flight.is_miss() {
                self.shared
                    .remember_pass(&self.key, self.key_hash, self.request_time);
            }
            flight.release();
        }
    }

    /// Whether `response` is a full answer that selected no stored entry and has nothing to
    /// store: what [`full`](Self::full) would pass on, marked `Miss`, without looking further.
    #[inline]
    fn passes<RB>(&self, response: &Response<RB>) -> bool {
        let status = response.status();
        self.entry.is_none()
            && !status.is_server_error()
            && status != StatusCode::NOT_MODIFIED
            && (self.head || says_nothing(response.headers()))
    }

    /// The answer of a request whose leader revalidated its entry (marked `Revalidated`), or
    /// stored the entry for the key it missed (marked `Miss`); `None` when that entry does not
    /// serve this request (its `Vary` selects another variant).
    pub(crate) fn followed<RB>(&self, entry: &Entry) -> Option<Response<CacheBody<RB>>> {
        let status = if self.added_conditionals {
            CacheStatus::Revalidated
        } else {
            let none = HeaderMap::new();
            let request = self.request_headers.as_ref().unwrap_or(&none);
            if !entry.matches(self.credentials, request) {
                return None;
            }
            CacheStatus::Miss
        };
        tracing::debug!(
            target: TARGET,
            event = if status == CacheStatus::Miss { "coalesced" } else { "revalidated" },
            uri = %self.key.loggable(),
            head = self.head,
            single_flight = true,
            "answered by a concurrent request"
        );
        let response = cached_response(entry, self.head, status, None, None);
        Some(response.map(CacheBody::stored))
    }

    fn complete<RB, E>(
        &mut self,
        result: Result<Response<RB>, E>,
        resendable: bool,
    ) -> Completion<Result<Response<CacheBody<RB>>, E>, Response<RB>>
    where
        RB: Body + Send + 'static,
        RB::Error: Send,
    {
        let response = match result {
            Ok(response) if !response.status().is_server_error() => response,
            failed => return Completion::Done(self.failed(failed)),
        };
        if response.status() == StatusCode::NOT_MODIFIED {
            return match self.not_modified(response, resendable) {
                Some(response) => Completion::Done(Ok(response)),
                None => Completion::Resend,
            };
        }
        Completion::Done(Ok(self.full(response)))
    }

    /// The request's (or HEAD's) full answer: stored when it may be.
    fn full<RB>(&mut self, response: Response<RB>) -> Response<CacheBody<RB>>
    where
        RB: Body + Send + 'static,
        RB::Error: Send,
    {
        let status = response.status();

        if self.head {
            // RFC 9111 section 4.3.5: a HEAD answer naming another representation outdates the
            // stored one.
            if let Some(entry) = &self.entry {
                let differs = response.headers().get(header::ETAG)
                    != entry.headers.get(header::ETAG)
                    || response.headers().get(header::LAST_MODIFIED)
                        != entry.headers.get(header::LAST_MODIFIED);
                if status.is_success() && differs {
                    self.shared.remove_entry(&self.key, self.key_hash, entry);
                }
            }
            return pass(response, CacheStatus::Miss);
        }

        if let Some(entry) = self.entry.as_ref().filter(|_| status.is_success()) {
            // A full answer replaces what was stored for this request.
            self.shared.remove_entry(&self.key, self.key_hash, entry);
        }
        if says_nothing(response.headers()) {
            // Neither a validator, nor a freshness lifetime, nor `no-store`: nothing to do.
            return pass(response, CacheStatus::Miss);
        }
        let cc = CacheControl::from_headers(response.headers());
        if cc.no_store {
            self.shared.remove_uri(&self.key, self.key_hash, "no-store");
            return pass(response, CacheStatus::Miss);
        }
        if self.forbidden_when_shared(&cc) {
            return pass(response, CacheStatus::Miss);
        }
        let Some((len, exact)) =
            self.storable_len(status, response.headers(), &cc, response.body())
        else {
            return pass(response, CacheStatus::Miss);
        };
        let Some(vary) = vary_names(response.headers()) else {
            return pass(response, CacheStatus::Miss);
        };
        let request_headers = self.sent_headers();
        let vary = vary
            .into_iter()
            .map(|name| {
                let value = request_headers
                    .as_ref()
                    .and_then(|headers| normalized(headers, &name));
                (name, value)
            })
            .collect();
        let timing = self.timing(Instant::now());
        // The followers of a missing key wait for the entry; those of a revalidation that got a
        // full answer ask on their own.
        let flight = match self.flight.take() {
            Some(flight) if flight.is_miss() => Some(flight),
            Some(flight) => {
                flight.release();
                None
            }
            None => None,
        };
        let storing = Storing {
            flight,
            shared: self.shared.clone(),
            key: self.key.clone(),
            key_hash: self.key_hash,
            status,
            version: response.version(),
            headers: response.headers().clone(),
            credentials: self.credentials,
            vary,
            request_headers: request_headers.unwrap_or_default(),
            timing,
        };
        let max = self.shared.max_entry_bytes;
        let mut response = response;
        response.extensions_mut().insert(CacheStatus::Miss);
        if len == 0 && response.body().is_end_stream() {
            storing.finish(Bytes::new());
            return response.map(CacheBody::upstream);
        }
        let Some(publisher) = storing.flight.as_ref().and_then(FlightGuard::publisher) else {
            return response.map(|body| CacheBody::teed(body, len, exact, max, storing));
        };
        // Others wait for it: they read it too, and are handed it to read as they come.
        let (parts, body) = response.into_parts();
        let (body, answer) = CacheBody::shared(body, len, exact, max, storing);
        publisher.publish(&answer);
        Response::from_parts(parts, body)
    }

    /// The request's headers as they were sent: the caller's, with the conditionals the cache
    /// added (`None` for HEAD, and when the request had none).
    fn sent_headers(&mut self) -> Option<HeaderMap> {
        let mut headers = self.request_headers.take();
        if let Some(entry) = self
            .entry
            .as_ref()
            .filter(|_| self.added_conditionals && !self.head)
        {
            // The caller sent no conditional (else the cache adds none): appending is inserting.
            let headers = headers.get_or_insert_with(HeaderMap::new);
            if entry.etag.is_some()
                && let Some(value) = &entry.etag_value
            {
                headers.append(header::IF_NONE_MATCH, value.clone());
            }
            if let Some(lm) = &entry.last_modified {
                headers.append(header::IF_MODIFIED_SINCE, lm.clone());
            }
        }
        headers
    }

    /// When the request was sent and its answer arrived (`now`), on both clocks.
    fn timing(&self, now: Instant) -> Timing {
        Timing {
            request_time: self.request_time,
            response_time: now,
            response_wall: self.shared.clock.now(),
        }
    }

    /// A transport error or a 5xx: a stored entry within its stale window answers instead.
    #[cold]
    fn failed<RB: Body, E>(
        &mut self,
        failed: Result<Response<RB>, E>,
    ) -> Result<Response<CacheBody<RB>>, E> {
        let now = Instant::now();
        let shared = self.shared.is_shared_for(self.authorization);
        if let Some(entry) = self
            .entry
            .as_ref()
            .filter(|e| self.shared.stale_allowed(e, now, shared))
        {
            tracing::info!(
                target: TARGET,
                event = "stale",
                uri = %self.key.loggable(),
                status = failed.as_ref().ok().map(|r| r.status().as_u16()),
                staleness_secs = entry.staleness(now, shared).as_secs(),
                "upstream failed; served a stored entry"
            );
            let extensions = failed.ok().map(|r| r.into_parts().0.extensions);
            let age = Some(entry.current_age(now));
            let response = cached_response(entry, self.head, CacheStatus::Stale, age, extensions);
            return Ok(response.map(CacheBody::stored));
        }
        failed.map(|r| pass(r, CacheStatus::Miss))
    }

    /// A 304: answered with the stored entry it selects, which it updates. `None` when it
    /// selects nothing and the request is to be sent again without the cache's conditionals
    /// (`resendable`: it may be).
    fn not_modified<RB: Body>(
        &mut self,
        response: Response<RB>,
        resendable: bool,
    ) -> Option<Response<CacheBody<RB>>> {
        let Some(entry) = self.entry.as_ref().filter(|_| self.added_conditionals) else {
            // The caller's own question (or no question at all): the 304 is its answer.
            return Some(pass(response, CacheStatus::Miss));
        };
        let fields = Fields::scan(response.headers());
        if !entry.selected_by(&fields) {
            // RFC 9111 section 4.3.4: no stored response is selected, so nothing is
            // updated, and the stored body is not ours to serve for it. Nor is the 304 an
            // answer to the caller, who asked no conditional question: ask again, once.
            tracing::debug!(
                target: TARGET,
                event = "validator_mismatch",
                uri = %self.key.loggable(),
                resent = resendable,
                "304 names a representation the cache does not hold"
            );
            if !resendable {
                return Some(pass(response, CacheStatus::Miss));
            }
            // The callers waiting on this revalidation ask on their own.
            if let Some(flight) = self.flight.take() {
                flight.release();
            }
            self.added_conditionals = false;
            self.request_time = Instant::now();
            return None;
        }
        // The updated entry's `Cache-Control` is the 304's when it has one.
        let has_cache_control = fields.has_cache_control();
        let (parts, _body) = response.into_parts();
        let timing = self.timing(Instant::now());
        let updated = Arc::new(entry.freshened(&parts.headers, timing));
        // Whether the update may be stored depends on the request too (its `Authorization`),
        // so a 304 without `Cache-Control` is checked against the directives it keeps.
        let refused = (has_cache_control && updated.cache_control.no_store)
            || self.forbidden_when_shared(&updated.cache_control);
        if refused {
            self.shared
                .remove_uri(&self.key, self.key_hash, "refused_update");
            // Not ours to share: the callers waiting on this revalidation ask on their own
            // (the flight is released once the answer is made).
        } else {
            self.shared
                .replace_entry(&self.key, self.key_hash, entry, updated.clone());
            if let Some(flight) = self.flight.take() {
                flight.complete(&updated);
            }
        }
        tracing::debug!(
            target: TARGET,
            event = "revalidated",
            uri = %self.key.loggable(),
            head = self.head,
            "304 answered with the stored body"
        );
        let response = cached_response(
            &updated,
            self.head,
            CacheStatus::Revalidated,
            None,
            Some(parts.extensions),
        );
        Some(response.map(CacheBody::stored))
    }

    /// Whether the request is a HEAD.
    pub(crate) fn is_head(&self) -> bool {
        self.head
    }

    /// The caller's fields, to send a GET again with (`None` when it had none).
    pub(crate) fn caller_headers(&self) -> Option<HeaderMap> {
        self.request_headers.clone()
    }

    /// Whether a response with these directives must not be stored because, for this request,
    /// the cache is a shared one (RFC 9111 sections 3.5 and 5.2.2.7).
    ///
    /// It is shared between all callers when it fingerprints no credential field, and between
    /// callers with different `Authorization` when the request has one that is not
    /// fingerprinted. A shared cache stores no `private` response, and no response to a request
    /// with `Authorization` unless `public`, `s-maxage` or `must-revalidate` allows it.
    fn forbidden_when_shared(&self, cc: &CacheControl) -> bool {
        let credentials = &self.shared.credential_headers;
        let unseparated_authorization =
            self.authorization && !credentials.contains(&header::AUTHORIZATION);
        let shared = self.shared.is_shared_for(self.authorization);
        (shared && cc.private)
            || (unseparated_authorization
                && !(cc.public || cc.must_revalidate || cc.s_maxage.is_some()))
    }

    /// The announced body length (an upper bound) and the exact length when it is known
    /// (`Content-Length`, else an exact size hint), when the response may be stored and its
    /// body fits.
    fn storable_len<RB: Body>(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        cc: &CacheControl,
        body: &RB,
    ) -> Option<(usize, Option<usize>)> {
        if !self.shared.statuses.contains(&status) {
            return None;
        }
        let validated =
            headers.contains_key(header::ETAG) || headers.contains_key(header::LAST_MODIFIED);
        // A shared cache takes the lifetime from `s-maxage` first (RFC 9111 section 5.2.2.10).
        let lifetime = match cc.s_maxage {
            Some(s_maxage) if self.shared.is_shared_for(self.authorization) => {
                s_maxage > Duration::ZERO
            }
            _ => {
                cc.max_age.is_some_and(|a| a > Duration::ZERO)
                    || (cc.max_age.is_none() && headers.contains_key(header::EXPIRES))
            }
        };
        if !validated && !lifetime {
            return None;
        }
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|t| t.trim().parse::<u64>().ok());
        let hint = body.size_hint();
        let len = declared.or(hint.upper())?;
        let len = usize::try_from(len).ok()?;
        // When the length is known exactly it is `len`: the declared one, or an exact hint
        // (which is its own upper bound).
        let exact = declared.or(hint.exact()).map(|_| len);
        (len <= self.shared.max_entry_bytes).then_some((len, exact))
    }
}

// === impl Storing ===

/// A response on its way into the store, waiting for its body to end.
///
/// Dropped before [`finish`](Self::finish) or [`abandon`](Self::abandon) (the caller let go of
/// the body), it hands the flight of a missing key it leads to one of the followers.
pub(crate) struct Storing {
    flight: Option<FlightGuard>,
    shared: Arc<Shared>,
    key: UriKey,
    key_hash: Option<u64>,
    status: StatusCode,
    version: http::Version,
    headers: HeaderMap,
    credentials: u64,
    vary: Vec<(HeaderName, Option<Vec<u8>>)>,
    request_headers: HeaderMap,
    timing: Timing,
}

impl Storing {
    /// Stores the entry with its complete body.
    pub(crate) fn finish(self, body: Bytes) {
        let len = body.len();
        let entry = Arc::new(Entry::new(
            self.status,
            self.version,
            self.headers,
            body,
            self.credentials,
            self.vary,
            self.timing,
        ));
        let weight = entry.weight();
        let (credentials, request) = (self.credentials, self.request_headers);
        // The new entry replaces every variant this request would have selected.
        self.shared.update_variants(
            &self.key,
            self.key_hash,
            move |e| !e.matches(credentials, &request),
            Some(entry.clone()),
        );
        if let Some(flight) = self.flight {
            flight.complete(&entry);
        }
        tracing::debug!(
            target: TARGET,
            event = "store",
            uri = %self.key.loggable(),
            body_len = len,
            weight,
            "response stored"
        );
    }

    /// Gives up storing: the body failed, or its length is not the one announced. The
    /// followers of a missing key ask on their own.
    pub(crate) fn abandon(self) {
        if let Some(flight) = self.flight {
            flight.release();
        }
    }
}

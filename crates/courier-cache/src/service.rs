use crate::body::CacheBody;
use crate::entry::{
    Entry, EntryList, Fields, MAX_VARIANTS, Timing, Variants, normalized, vary_names,
};
use crate::flight::{FlightGuard, Role};
use crate::future::{Follower, Resend, ResponseFuture};
use crate::key::{KeyText, Parts, UriKey, loggable};
use crate::layer::{EtagCacheLayer, Shared};
use crate::store::CacheStore;
use bytes::Bytes;
use courier_core::body::RetryBody;
use courier_core::cache_control::CacheControl;
use courier_core::extensions::CacheStatus;
use courier_core::{Attempts, Deadline};
use http::header::{self, HeaderName};
use http::{Extensions, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body::Body;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

const TARGET: &str = "courier::cache";

/// A private HTTP cache (RFC 9111) in front of an HTTP client service.
///
/// See the [crate docs](crate) for what is stored, when it is served and when it is
/// revalidated. Every response carries a [`CacheStatus`] extension.
///
/// # Request body
///
/// The request body is a [`RetryBody`] (every `Clone` body, and
/// `courier_retry::ReplayBody`): when a 304 to a revalidation the cache made
/// selects no stored response, the GET or HEAD is sent once more, with a copy of its body
/// ([`RetryBody::try_clone_aside`]: any `Clone` body, an empty `ReplayBody`). A request whose
/// body gives no such copy is not made conditional: a stale entry for it is refreshed by
/// sending the request as it is.
///
/// # Clone
///
/// Clones share the store of the layer that made them.
pub struct EtagCache<S> {
    inner: S,
    shared: Arc<Shared>,
}

// === impl EtagCache ===

impl<S> EtagCache<S> {
    /// Wraps `inner` with the defaults of [`EtagCacheLayer::new`].
    pub fn new(inner: S) -> Self {
        EtagCacheLayer::new().layer(inner)
    }

    /// A layer to configure.
    pub fn layer() -> EtagCacheLayer {
        EtagCacheLayer::new()
    }

    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the cache.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The store this cache shares with its clones.
    pub fn store(&self) -> &Arc<dyn CacheStore> {
        &self.shared.store
    }
}

impl<S: Clone> Clone for EtagCache<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for EtagCache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtagCache")
            .field("inner", &self.inner)
            .field("config", &*self.shared)
            .finish()
    }
}

impl<S, B, RB> Service<Request<B>> for EtagCache<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    B: RetryBody,
    RB: Body,
{
    type Response = Response<CacheBody<RB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let method = req.method();
        if is_invalidating(method) {
            let pending = Pending::Invalidate {
                shared: self.shared.clone(),
                key: UriKey::new(req.uri(), req.headers()),
            };
            return ResponseFuture::forwarded(self.forward(req), pending);
        }
        let head = *method == Method::HEAD;
        if !(head || *method == Method::GET) {
            return ResponseFuture::forwarded(self.forward(req), Pending::Bypass);
        }
        let fields = RequestFields::scan(req.headers(), &self.shared.credential_headers);
        let req_cc = if fields.cache_control {
            CacheControl::from_headers(req.headers())
        } else {
            CacheControl::default()
        };
        if req_cc.no_store || fields.range {
            return ResponseFuture::forwarded(self.forward(req), Pending::Bypass);
        }

        let shared = self.shared.clone();
        let parts = Parts::of_request(req.uri(), req.headers());
        let credentials = if fields.credentials || parts.has_userinfo() {
            shared.fingerprint(req.uri(), req.headers())
        } else {
            0
        };
        let (variants, key_hash) = shared.get(parts);
        let entry = variants.and_then(|v| v.select(credentials, req.headers()).cloned());
        let now = Instant::now();
        // The caller's fields, for `Vary`, taken before the conditionals are added (they are put
        // back when needed: see `Lookup::sent_headers`).
        let caller_headers =
            |req: &Request<B>| (!head && !req.headers().is_empty()).then(|| req.headers().clone());
        let mut request_headers = None;
        let mut added_conditionals = false;
        // What it takes to ask again without the conditionals, should the 304 select nothing.
        let mut resend = None;
        if let Some(entry) = entry.as_ref().filter(|_| !fields.conditional) {
            let age = entry.current_age(now);
            let request_allows = !req_cc.no_cache
                && req_cc
                    .max_age
                    .is_none_or(|max| !max.is_zero() && age <= max);
            let fresh = entry.is_fresh_at(age, shared.is_shared_for(fields.authorization));
            if !shared.always_revalidate && request_allows && fresh {
                tracing::debug!(
                    target: TARGET,
                    event = "hit",
                    uri = %parts.loggable(),
                    age_secs = age.as_secs(),
                    head,
                    "served from the cache"
                );
                let response = cached_response(entry, head, CacheStatus::Hit, Some(age), None);
                return ResponseFuture::ready(response);
            }
            request_headers = Some(caller_headers(&req));
            // The stored field as it came (it parsed as an entity tag), not a re-rendering.
            let etag = entry.etag_value.as_ref().filter(|_| entry.etag.is_some());
            // Made conditional only when it can be sent again without the conditionals: a 304
            // that selects nothing is no answer to a caller who asked no conditional question.
            // The copy is one to keep aside: it holds back no replay by a retry below, and it
            // stays whole whatever the first request reads.
            if (etag.is_some() || entry.last_modified.is_some())
                && let Some(body) = req.body().try_clone_aside()
            {
                resend = Some(Box::new(Resend {
                    inner: self.inner.clone(),
                    version: req.version(),
                    uri: req.uri().clone(),
                    // HEAD keeps no copy of the caller's fields (for `Vary`): one to send.
                    headers: head.then(|| req.headers().clone()),
                    extensions: req.extensions().clone(),
                    body,
                }));
                if let Some(value) = etag {
                    req.headers_mut()
                        .insert(header::IF_NONE_MATCH, value.clone());
                }
                if let Some(lm) = &entry.last_modified {
                    req.headers_mut()
                        .insert(header::IF_MODIFIED_SINCE, lm.clone());
                }
                added_conditionals = true;
            }
        }

        let role = match (&entry, shared.single_flight) {
            (Some(entry), Some(max_wait)) if added_conditionals => {
                Some((shared.flights.join(entry), max_wait))
            }
            _ => None,
        };
        let key = UriKey::new(req.uri(), req.headers());
        let mut lookup = Lookup {
            request_headers: request_headers.unwrap_or_else(|| caller_headers(&req)),
            shared,
            key,
            key_hash,
            entry,
            added_conditionals,
            head,
            credentials,
            authorization: fields.authorization,
            request_time: now,
            flight: None,
        };
        match role {
            Some((Role::Follower(leader), max_wait)) => {
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                // Never past the caller's deadline: then it asks on its own, and the layers
                // below (an attempt timeout) end the call by the deadline.
                let deadline = Deadline::get(req.extensions()).map(|d| d.instant());
                let timeout = match (now.checked_add(max_wait), deadline) {
                    (Some(end), Some(deadline)) => tokio::time::sleep_until(end.min(deadline)),
                    (None, Some(deadline)) => tokio::time::sleep_until(deadline),
                    (_, None) => tokio::time::sleep(max_wait),
                };
                ResponseFuture::following(Follower {
                    leader,
                    waiting: true,
                    timeout: Box::pin(timeout),
                    inner,
                    request: Some(req),
                    pending: Some(lookup),
                    resend,
                })
            }
            Some((Role::Leader(guard), _)) => {
                lookup.flight = Some(guard);
                ResponseFuture::resendable(self.forward(req), Pending::Lookup(lookup), resend)
            }
            None => ResponseFuture::resendable(self.forward(req), Pending::Lookup(lookup), resend),
        }
    }
}

impl<S> EtagCache<S> {
    /// Calls the instance that was made ready. It stays in place, with whatever it learnt from
    /// the call (the breaker or the bucket of the host): the response future does not need it.
    fn forward<B>(&mut self, req: Request<B>) -> S::Future
    where
        S: Service<Request<B>>,
    {
        self.inner.call(req)
    }
}

const CONDITIONALS: [HeaderName; 5] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
];

/// Whether an answer to `method` invalidates the URI: every unsafe method does, those whose
/// safety is unknown (extension methods) included (RFC 9111 section 4.4).
fn is_invalidating(method: &Method) -> bool {
    !method.is_safe()
}

/// What the cache needs to know of a request's fields, found in one pass over their names.
#[derive(Default)]
struct RequestFields {
    range: bool,
    /// A conditional the caller set (`If-None-Match`, `If-Modified-Since`, `If-Match`,
    /// `If-Unmodified-Since`, `If-Range`).
    conditional: bool,
    cache_control: bool,
    /// One of the credential fields.
    credentials: bool,
    /// `Authorization`, fingerprinted or not.
    authorization: bool,
}

impl RequestFields {
    fn scan(headers: &HeaderMap, credential_headers: &[HeaderName]) -> Self {
        let mut fields = Self::default();
        for name in headers.keys() {
            if name == header::RANGE {
                fields.range = true;
            } else if name == header::CACHE_CONTROL {
                fields.cache_control = true;
            } else if CONDITIONALS.contains(name) {
                fields.conditional = true;
            }
            if credential_headers.contains(name) {
                fields.credentials = true;
            }
            if name == header::AUTHORIZATION {
                fields.authorization = true;
            }
        }
        fields
    }
}

// === impl Shared ===

impl Shared {
    /// A fingerprint of the request's credentials; 0 when it has none.
    ///
    /// Seeded per layer at random, so fingerprints cannot be chosen from outside to collide.
    fn fingerprint(&self, uri: &Uri, headers: &HeaderMap) -> u64 {
        let userinfo = uri
            .authority()
            .and_then(|a| a.as_str().rsplit_once('@'))
            .map(|(u, _)| u);
        let mut any = userinfo.is_some();
        let mut hasher = self.hasher.build_hasher();
        userinfo.hash(&mut hasher);
        for name in &self.credential_headers {
            for value in headers.get_all(name) {
                any = true;
                name.as_str().hash(&mut hasher);
                value.as_bytes().hash(&mut hasher);
            }
        }
        if !any {
            return 0;
        }
        hasher.finish().max(1)
    }

    /// The variants stored for the key made of `parts`, and the key's hash in the in-memory
    /// store.
    fn get(&self, parts: Parts<'_>) -> (Option<Arc<Variants>>, Option<u64>) {
        match &self.memory {
            Some(memory) => {
                let (found, hash) = memory.get_key(parts);
                (found, Some(hash))
            }
            None => (self.store.get(KeyText::from_parts(parts).as_str()), None),
        }
    }

    /// Rewrites the variants of `key`: keeps those `keep` says, then adds `add` (dropping the
    /// oldest beyond the limit).
    ///
    /// `hash` is the key's hash in the in-memory store, when the lookup computed it already.
    fn update_variants(
        &self,
        key: &UriKey,
        hash: Option<u64>,
        keep: impl Fn(&Arc<Entry>) -> bool,
        add: Option<Arc<Entry>>,
    ) {
        self.modify_variants(key, hash, |current| next_variants(current, keep, add));
    }

    /// Replaces `entry` by `updated`, if `entry` is still stored: one invalidated or replaced
    /// meanwhile stays gone (RFC 9111 section 4.3.4 updates stored responses only).
    fn replace_entry(
        &self,
        key: &UriKey,
        hash: Option<u64>,
        entry: &Arc<Entry>,
        updated: Arc<Entry>,
    ) {
        self.modify_variants(key, hash, |current| {
            let stored = current
                .as_ref()
                .is_some_and(|c| c.entries().iter().any(|e| Arc::ptr_eq(e, entry)));
            if stored {
                next_variants(current, |e| !Arc::ptr_eq(e, entry), Some(updated))
            } else {
                Next::Unchanged
            }
        });
    }

    /// Rewrites the variants of `key` to what `next` makes of the current ones.
    fn modify_variants(
        &self,
        key: &UriKey,
        hash: Option<u64>,
        next: impl FnOnce(Option<Arc<Variants>>) -> Next,
    ) {
        match &self.memory {
            // Looked up by the key's parts; the text is built only for a key not stored yet.
            Some(memory) => {
                let parts = key.parts();
                let hash = hash.unwrap_or_else(|| memory.hash_parts(parts));
                let (text, current) = memory.get_hashed(hash, parts).unzip();
                match next(current) {
                    Next::Unchanged => {}
                    Next::Remove => {
                        memory.remove_hashed(hash, parts);
                    }
                    Next::Insert(variants) => {
                        let text =
                            text.unwrap_or_else(|| Arc::from(KeyText::from_parts(parts).as_str()));
                        memory.insert_hashed(hash, text, variants);
                    }
                }
            }
            None => {
                let key = key.text();
                let key = key.as_str();
                match next(self.store.get(key)) {
                    Next::Unchanged => {}
                    Next::Remove => {
                        self.store.remove(key);
                    }
                    Next::Insert(variants) => self.store.insert(key.to_owned(), variants),
                }
            }
        }
    }

    fn remove_entry(&self, key: &UriKey, hash: Option<u64>, entry: &Arc<Entry>) {
        self.update_variants(key, hash, |e| !Arc::ptr_eq(e, entry), None);
    }

    /// Whether, for a request that carries `Authorization` (`authorization`) or not, the cache
    /// is a shared one (RFC 9111 section 3.5): it is shared between all callers when it
    /// fingerprints no credential field, and between callers with different `Authorization`
    /// when the request has one that is not fingerprinted.
    #[inline]
    pub(crate) fn is_shared_for(&self, authorization: bool) -> bool {
        self.credential_headers.is_empty()
            || (authorization && !self.credential_headers.contains(&header::AUTHORIZATION))
    }

    /// Whether `entry` may be served because the upstream failed, by a `shared` cache or a
    /// private one.
    ///
    /// `must-revalidate`, `no-cache` and, where shared, `proxy-revalidate` and `s-maxage`
    /// forbid it whatever `stale-if-error` says (RFC 9111 section 4.2.4).
    fn stale_allowed(&self, entry: &Entry, now: Instant, shared: bool) -> bool {
        let cc = &entry.cache_control;
        if entry.must_revalidate(shared) || cc.no_cache {
            return false;
        }
        let Some(window) = cc.stale_if_error.or(self.stale_if_error) else {
            return false;
        };
        entry.staleness(now, shared) <= window
    }
}

/// What becomes of a URI's variants.
enum Next {
    Unchanged,
    Remove,
    Insert(Arc<Variants>),
}

/// The variants that follow `current`: those `keep` says, then `add` (dropping the oldest
/// beyond the limit).
fn next_variants(
    current: Option<Arc<Variants>>,
    keep: impl Fn(&Arc<Entry>) -> bool,
    add: Option<Arc<Entry>>,
) -> Next {
    let mut entries = EntryList::new();
    if let Some(current) = &current {
        entries.extend(current.entries().iter().filter(|e| keep(e)).cloned());
    }
    if add.is_none()
        && current
            .as_ref()
            .is_none_or(|c| c.entries().len() == entries.len())
    {
        return Next::Unchanged;
    }
    entries.extend(add);
    if entries.len() > MAX_VARIANTS {
        entries.drain(..entries.len() - MAX_VARIANTS);
    }
    if entries.is_empty() {
        Next::Remove
    } else {
        Next::Insert(Arc::new(Variants::from_list(entries)))
    }
}

/// A response built from a stored entry.
///
/// `age`, when given, is sent as the `Age` field (hits and stale answers). `extensions` are
/// those of the answer from below it stands for (a 304, a 5xx), with the [`Attempts`] the
/// layers below put there; without one (a hit, a concurrent revalidation, a failure that came
/// up as an error) it carries an empty [`Attempts`]: no attempt of this call is on record.
fn cached_response(
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

fn pass<RB>(mut response: Response<RB>, status: CacheStatus) -> Response<CacheBody<RB>> {
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

pub(crate) struct Lookup {
    shared: Arc<Shared>,
    key: UriKey,
    /// The key's hash in the in-memory store, from the lookup.
    key_hash: Option<u64>,
    /// The entry this request selected, if any.
    entry: Option<Arc<Entry>>,
    /// Whether the cache added the conditionals (so a 304 is the cache's to answer).
    added_conditionals: bool,
    head: bool,
    credentials: u64,
    /// The request carried `Authorization` (fingerprinted or not); HEAD requests keep no
    /// copy of their fields, so this is recorded apart.
    authorization: bool,
    /// The caller's request headers, for `Vary` (`None` for HEAD, which is never stored, and
    /// when the request had none), without the conditionals the cache added.
    request_headers: Option<HeaderMap>,
    request_time: Instant,
    /// Held by the request that revalidates for others (single-flight).
    flight: Option<FlightGuard>,
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

/// What becomes of the upstream's answer.
pub(crate) enum Completion<T> {
    /// The answer to the caller.
    Done(T),
    /// A 304 that selects no stored response answered a request that was conditional only
    /// because the cache made it so: send it again without the conditionals.
    Resend,
}

impl Pending {
    /// The answer to the caller, made from the upstream's; called once, in place (the future
    /// drops `self` afterwards), unless it asks for the request to be sent again (`resendable`
    /// says whether it may), after which it is called once more with the new answer.
    pub(crate) fn complete<RB: Body, E>(
        &mut self,
        result: Result<Response<RB>, E>,
        resendable: bool,
    ) -> Completion<Result<Response<CacheBody<RB>>, E>> {
        match self {
            Self::Bypass => Completion::Done(result.map(|r| pass(r, CacheStatus::Bypass))),
            Self::Invalidate { shared, key } => Completion::Done(result.map(|response| {
                let status = response.status();
                if status.is_success() || status.is_redirection() {
                    invalidate(shared, key, response.headers());
                }
                pass(response, CacheStatus::Bypass)
            })),
            Self::Lookup(lookup) => lookup.complete(result, resendable),
        }
    }
}

fn invalidate(shared: &Shared, key: &UriKey, headers: &HeaderMap) {
    let key = key.text();
    let origin = key.origin();
    let mut removed = shared.store.remove(key.as_str());
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
                removed |= shared.store.remove(&target);
            }
        }
    }
    if removed {
        tracing::debug!(target: TARGET, event = "invalidate", uri = %loggable(key.as_str()), "unsafe method invalidated stored entries");
    }
}

impl Lookup {
    /// The answer of a request whose leader revalidated the entry for it.
    pub(crate) fn followed<RB>(self, updated: &Entry) -> Response<CacheBody<RB>> {
        tracing::debug!(
            target: TARGET,
            event = "revalidated",
            uri = %self.key.loggable(),
            head = self.head,
            single_flight = true,
            "answered by a concurrent revalidation"
        );
        cached_response(updated, self.head, CacheStatus::Revalidated, None, None)
            .map(CacheBody::stored)
    }

    fn complete<RB: Body, E>(
        &mut self,
        result: Result<Response<RB>, E>,
        resendable: bool,
    ) -> Completion<Result<Response<CacheBody<RB>>, E>> {
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
    fn full<RB: Body>(&mut self, response: Response<RB>) -> Response<CacheBody<RB>> {
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
        if response.headers().is_empty() {
            // Neither a validator, nor a freshness lifetime, nor `no-store`: nothing to do.
            return pass(response, CacheStatus::Miss);
        }
        let cc = CacheControl::from_headers(response.headers());
        if cc.no_store {
            if self.shared.store.remove(self.key.text().as_str()) {
                tracing::debug!(target: TARGET, event = "remove", uri = %self.key.loggable(), "no-store removed the stored entries");
            }
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
        let storing = Storing {
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
        response.map(|body| CacheBody::teed(body, len, exact, max, storing))
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
            drop(self.flight.take());
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
            self.shared.store.remove(self.key.text().as_str());
            // Not ours to share: the callers waiting on this revalidation ask on their own.
            drop(self.flight.take());
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
pub(crate) struct Storing {
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
        let (credentials, request) = (self.credentials, &self.request_headers);
        // The new entry replaces every variant this request would have selected.
        self.shared.update_variants(
            &self.key,
            self.key_hash,
            |e| !e.matches(credentials, request),
            Some(entry),
        );
        tracing::debug!(
            target: TARGET,
            event = "store",
            uri = %self.key.loggable(),
            body_len = len,
            weight,
            "response stored"
        );
    }
}

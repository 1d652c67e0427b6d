//! [`EtagCache`]: the service, which answers a request from the store or sends it on, made
//! conditional when a stored entry can be revalidated; and the store operations it shares with
//! the response future.

use crate::body::CacheBody;
use crate::entry::{Entry, EntryList, MAX_VARIANTS, Variants};
use crate::flight::Role;
use crate::future::{Follower, Resend, ResponseFuture};
use crate::key::{KeyText, Parts, UriKey};
use crate::layer::{EtagCacheLayer, Shared};
use crate::response::{Lookup, Pending, cached_response};
use crate::store::CacheStore;
use courier_core::Deadline;
use courier_core::body::RetryBody;
use courier_core::cache_control::CacheControl;
use courier_core::extensions::CacheStatus;
use http::header::{self, HeaderName};
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body::Body;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

/// The target of the cache's `tracing` events.
pub(crate) const TARGET: &str = "courier::cache";

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
    /// `None` in a pass-through service.
    shared: Option<Arc<Shared>>,
}

// === impl EtagCache ===

impl<S> EtagCache<S> {
    /// Wraps `inner` in the cache `layer` describes, sharing its store with every other
    /// service `layer` (or a clone of it) makes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: EtagCacheLayer) -> Self {
        Self {
            inner,
            shared: Some(layer.shared),
        }
    }

    /// The layer switched off: every call goes straight to `inner`, looked up in no store and
    /// stored in none, with no validators added and no `CacheStatus`; the answer is `inner`'s,
    /// its body wrapped in [`CacheBody::upstream`]. The same type as an active
    /// `EtagCache<S>`, so a stack can switch it at run time.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            shared: None,
        }
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.shared.is_none()
    }

    /// A layer to configure.
    pub fn layer() -> EtagCacheLayer {
        EtagCacheLayer::new()
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

    /// The store this cache shares with its clones; `None` for a pass-through service, which
    /// has none.
    pub fn store(&self) -> Option<&Arc<dyn CacheStore>> {
        self.shared.as_deref().map(|shared| &shared.store)
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
            .field("config", &self.shared.as_deref())
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

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if self.shared.is_none() {
            return ResponseFuture::passing(self.inner.call(req));
        }
        let span = crate::telemetry::call_span(&req);
        if span.is_none() {
            // Nothing listens: the future is made in place, with no span to move in.
            return self.route(req);
        }
        let future = {
            let _entered = span.enter();
            self.route(req)
        };
        future.in_span(span)
    }
}

impl<S> EtagCache<S> {
    /// Answers from the store, or forwards the request with what to do with the answer.
    #[inline(always)]
    fn route<B, RB>(&mut self, mut req: Request<B>) -> ResponseFuture<S, B>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone,
        B: RetryBody,
        RB: Body,
    {
        let Some(shared) = &self.shared else {
            return ResponseFuture::passing(self.inner.call(req));
        };
        // The instance that was made ready is called in place and keeps whatever it learnt from
        // the call (the breaker or the bucket of the host): the response future does not need
        // it.
        let method = req.method();
        if is_invalidating(method) {
            let pending = Pending::Invalidate {
                shared: shared.clone(),
                key: UriKey::new(req.uri(), req.headers()),
            };
            return ResponseFuture::forwarded(self.inner.call(req), pending);
        }
        let head = *method == Method::HEAD;
        if !(head || *method == Method::GET) {
            return ResponseFuture::forwarded(self.inner.call(req), Pending::Bypass);
        }
        let fields = RequestFields::scan(req.headers(), &shared.credential_headers);
        let req_cc = if fields.cache_control {
            CacheControl::from_headers(req.headers())
        } else {
            CacheControl::default()
        };
        if req_cc.no_store || fields.range {
            return ResponseFuture::forwarded(self.inner.call(req), Pending::Bypass);
        }

        let shared = shared.clone();
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
                ResponseFuture::resendable(self.inner.call(req), Pending::Lookup(lookup), resend)
            }
            None => {
                ResponseFuture::resendable(self.inner.call(req), Pending::Lookup(lookup), resend)
            }
        }
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
    pub(crate) fn update_variants(
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
    pub(crate) fn replace_entry(
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

    pub(crate) fn remove_entry(&self, key: &UriKey, hash: Option<u64>, entry: &Arc<Entry>) {
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
    pub(crate) fn stale_allowed(&self, entry: &Entry, now: Instant, shared: bool) -> bool {
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

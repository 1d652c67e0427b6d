//! [`EtagCache`]: the service, which answers a request from the store or sends it on, made
//! conditional when a stored entry can be revalidated; and the store operations it shares with
//! the response future.

use crate::body::CacheBody;
use crate::entry::{Entry, EntryList, MAX_VARIANTS, Variants};
use crate::flight::{FlightKey, PASS_MEMORY, Role};
use crate::future::{Follower, Looking, Resend, ResponseFuture, State};
use crate::key::{KeyText, Parts, UriKey};
use crate::layer::{EtagCacheLayer, PASSES_APART_CAPACITY, Shared};
use crate::response::{Completion, Lookup, Pending, cached_response};
use crate::store::{CacheStore, MemoryStore, StoreFuture};
use courier_core::CallContext;
use courier_core::body::RetryBody;
use courier_core::cache_control::CacheControl;
use courier_core::extensions::CacheStatus;
use http::header::{self, HeaderName};
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body::Body;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;
use tracing::Instrument;

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
/// # Bounds
///
/// The inner service's future and response body are `Send + 'static`, and so is the body's
/// error `Send`: a revalidation within `stale-while-revalidate` runs in a tokio task of its
/// own, and the body of an answer other requests wait for is read by them too (see the crate's
/// **Concurrency**).
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
    // A revalidation within `stale-while-revalidate` runs in a task of its own.
    S::Future: Send + 'static,
    B: RetryBody,
    RB: Body + Send + 'static,
    RB::Error: Send,
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
        let state = {
            let _entered = span.enter();
            self.route(req)
        };
        ResponseFuture::new(state, span)
    }
}

impl<S> EtagCache<S> {
    /// Answers from the store, or forwards the request with what to do with the answer.
    #[inline(always)]
    fn route<B, RB>(&mut self, req: Request<B>) -> State<S, B, S::Future, S::Response>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone,
        S::Future: Send + 'static,
        B: RetryBody,
        RB: Body + Send + 'static,
        RB::Error: Send,
    {
        let Some(shared) = &self.shared else {
            return State::Passing {
                future: self.inner.call(req),
            };
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
            return State::forwarded(self.inner.call(req), pending, None);
        }
        let head = *method == Method::HEAD;
        if !(head || *method == Method::GET)
            || CallContext::get(req.extensions()).is_some_and(|c| c.options().bypasses_cache())
        {
            return State::forwarded(self.inner.call(req), Pending::Bypass, None);
        }
        let fields = RequestFields::scan(req.headers(), &shared.credential_headers);
        let req_cc = if fields.cache_control {
            CacheControl::from_headers(req.headers())
        } else {
            CacheControl::default()
        };
        if req_cc.no_store || fields.range {
            return State::forwarded(self.inner.call(req), Pending::Bypass, None);
        }

        let shared = shared.clone();
        let parts = Parts::of_request(req.uri(), req.headers());
        let credentials = if fields.credentials || parts.has_userinfo() {
            shared.fingerprint(req.uri(), req.headers())
        } else {
            0
        };
        let found = shared.memory.as_ref().map(|memory| memory.get_key(parts));
        let route = Route {
            shared,
            fields,
            req_cc,
            credentials,
            head,
        };
        match found {
            Some((variants, hash)) => route.decide(&mut self.inner, req, variants, Some(hash)),
            // A store that can wait: looked up in the response future.
            None => {
                let store = route.shared.store.clone();
                let key = KeyText::from_parts(parts).as_str().to_owned();
                let lookup: StoreFuture<'static, _> =
                    Box::pin(async move { store.get(&key).await });
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                State::looking(Looking {
                    lookup: Mutex::new(lookup),
                    route,
                    inner,
                    request: Some(req),
                })
            }
        }
    }
}

/// What the cache learnt of a GET or HEAD before looking its key up.
#[derive(Clone)]
pub(crate) struct Route {
    shared: Arc<Shared>,
    fields: RequestFields,
    req_cc: CacheControl,
    credentials: u64,
    head: bool,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// Answers from the `variants` stored for the request's key, or forwards the request
    /// through `inner` (made ready) with what to do with the answer. `key_hash` is the key's
    /// hash in the in-memory store.
    #[inline(always)]
    pub(crate) fn decide<S, B, RB>(
        self,
        inner: &mut S,
        mut req: Request<B>,
        variants: Option<Arc<Variants>>,
        key_hash: Option<u64>,
    ) -> State<S, B, S::Future, S::Response>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone,
        S::Future: Send + 'static,
        B: RetryBody,
        RB: Body + Send + 'static,
        RB::Error: Send,
    {
        let Self {
            shared,
            fields,
            req_cc,
            credentials,
            head,
        } = self;
        // A pass alone has no entry to select.
        let entry = variants
            .as_deref()
            .filter(|v| !v.is_empty())
            .and_then(|v| v.select(credentials, req.headers()).cloned());
        let now = Instant::now();
        // The caller's fields, for `Vary`, taken before the conditionals are added (they are put
        // back when needed: see `Lookup::sent_headers`).
        let caller_headers =
            |req: &Request<B>| (!head && !req.headers().is_empty()).then(|| req.headers().clone());
        let mut request_headers = None;
        let mut added_conditionals = false;
        // What it takes to ask again without the conditionals, should the 304 select nothing.
        let mut resend = None;
        // Within `stale-while-revalidate`: the caller is answered with the stale entry, and
        // the request, made conditional, revalidates it in the background.
        let mut background = false;
        if let Some(entry) = entry.as_ref().filter(|_| !fields.conditional) {
            let age = entry.current_age(now);
            let request_allows = !req_cc.no_cache
                && req_cc
                    .max_age
                    .is_none_or(|max| !max.is_zero() && age <= max);
            let shared_for = shared.is_shared_for(fields.authorization);
            let fresh = entry.is_fresh_at(age, shared_for);
            if !shared.always_revalidate && request_allows && fresh {
                tracing::debug!(
                    target: TARGET,
                    event = "hit",
                    uri = %Parts::of_request(req.uri(), req.headers()).loggable(),
                    age_secs = age.as_secs(),
                    head,
                    "served from the cache"
                );
                let response = cached_response(entry, head, CacheStatus::Hit, Some(age), None);
                return State::ready(response);
            }
            background = !shared.always_revalidate
                && request_allows
                && shared.revalidates_in_background(entry, now, shared_for);
            request_headers = Some(caller_headers(&req));
            // The stored field as it came (it parsed as an entity tag), not a re-rendering.
            let etag = entry.etag_value.as_ref().filter(|_| entry.etag.is_some());
            // Made conditional only when it can be sent again without the conditionals: a 304
            // that selects nothing is no answer to a caller who asked no conditional question.
            // The copy is one to keep aside: it holds back no replay by a retry below, and it
            // stays whole whatever the first request reads. A background revalidation answers
            // no caller: it keeps no copy, and a 304 that selects nothing is left at that.
            let body = match background {
                true => None,
                false => req.body().try_clone_aside(),
            };
            if (etag.is_some() || entry.last_modified.is_some()) && (background || body.is_some()) {
                if let Some(body) = body {
                    resend = Some(Box::new(Resend {
                        inner: inner.clone(),
                        version: req.version(),
                        uri: req.uri().clone(),
                        // HEAD keeps no copy of the caller's fields (for `Vary`): one to send.
                        headers: head.then(|| req.headers().clone()),
                        extensions: req.extensions().clone(),
                        body,
                    }));
                }
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

        let key = UriKey::new(req.uri(), req.headers());
        let request_headers = request_headers.unwrap_or_else(|| caller_headers(&req));
        // The lookup is made where it is kept, once its flight is known: it is large, and a
        // lookup made first and moved there afterwards is copied.
        let lookup = |shared, key, entry, request_headers, flight| Lookup {
            shared,
            key,
            key_hash,
            entry,
            added_conditionals,
            head,
            credentials,
            authorization: fields.authorization,
            request_headers,
            request_time: now,
            flight,
        };
        if background && let Some(stale) = entry.clone() {
            let lookup = lookup(shared, key, entry, request_headers, None);
            return revalidate_in_background(inner, req, lookup, &stale, now);
        }
        // Concurrent revalidations of one entry, and concurrent requests for one missing key
        // whose answer may be stored (a GET that is no question of the caller's own, for a key
        // that is no pass), go upstream once.
        let role = match (&entry, shared.single_flight) {
            (Some(entry), Some(max_wait)) if added_conditionals => {
                let key = FlightKey::revalidation(entry);
                Some((shared.flights.join(key, Some(entry), None), max_wait))
            }
            (_, Some(max_wait))
                if !added_conditionals
                    && !head
                    && !fields.conditional
                    && !shared.passes_at(variants.as_deref(), &key, now) =>
            {
                let flights = &shared.flights;
                let flight = flights.miss_key(&key, credentials, key_hash);
                Some((flights.join(flight, None, Some(&key)), max_wait))
            }
            _ => None,
        };
        match role {
            Some((Role::Follower(leader, answer), max_wait)) => {
                let clone = inner.clone();
                let inner = std::mem::replace(inner, clone);
                // Never past the caller's deadline: then it asks on its own, and the layers
                // below (an attempt timeout) end the call by the deadline.
                let deadline = CallContext::deadline_in(req.extensions());
                let timeout = match (now.checked_add(max_wait), deadline) {
                    (Some(end), Some(deadline)) => tokio::time::sleep_until(end.min(deadline)),
                    (None, Some(deadline)) => tokio::time::sleep_until(deadline),
                    (_, None) => tokio::time::sleep(max_wait),
                };
                State::following(Follower {
                    leader,
                    answer,
                    waiting: true,
                    timeout: Box::pin(timeout),
                    inner,
                    request: Some(req),
                    pending: Some(lookup(shared, key, entry, request_headers, None)),
                    resend,
                })
            }
            Some((Role::Leader(guard), _)) => State::forwarded(
                inner.call(req),
                Pending::Lookup(lookup(shared, key, entry, request_headers, Some(guard))),
                resend,
            ),
            Some((Role::Alone, _)) | None => State::forwarded(
                inner.call(req),
                Pending::Lookup(lookup(shared, key, entry, request_headers, None)),
                resend,
            ),
        }
    }
}

/// How long a revalidation within `stale-while-revalidate` may take: 10 s, the longest a
/// caller waits for another's revalidation by default ([`DEFAULT_SINGLE_FLIGHT_WAIT`]). No
/// caller waits on it, but while it runs no other background revalidation of the entry starts.
///
/// [`DEFAULT_SINGLE_FLIGHT_WAIT`]: crate::DEFAULT_SINGLE_FLIGHT_WAIT
pub const BACKGROUND_REVALIDATION_TIMEOUT: Duration = crate::layer::DEFAULT_SINGLE_FLIGHT_WAIT;

/// Answers with the `stale` entry at once, and sends `req` (made conditional when it could be)
/// through `inner` in a task of its own, unless a revalidation of that entry is under way
/// already. The request carries a [`CallContext`] of its own, with a deadline of
/// [`BACKGROUND_REVALIDATION_TIMEOUT`] in place of the caller's, and the task ends by then whatever the layers below do: its failure, or
/// its end, leaves the stale entry as it was.
#[cold]
#[inline(never)]
fn revalidate_in_background<S, B, RB>(
    inner: &mut S,
    mut req: Request<B>,
    mut lookup: Lookup,
    stale: &Arc<Entry>,
    now: Instant,
) -> State<S, B, S::Future, S::Response>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    RB: Body + Send + 'static,
    RB::Error: Send,
{
    let shared_for = lookup.shared.is_shared_for(lookup.authorization);
    tracing::debug!(
        target: TARGET,
        event = "stale",
        uri = %lookup.key.loggable(),
        staleness_secs = stale.staleness(now, shared_for).as_secs(),
        "served a stored entry within stale-while-revalidate"
    );
    let age = stale.current_age(now);
    let response = cached_response(stale, lookup.head, CacheStatus::Stale, Some(age), None);
    let guard = match tokio::runtime::Handle::try_current() {
        Ok(handle) => lookup
            .shared
            .flights
            .lead(FlightKey::revalidation(stale), Some(stale))
            .map(|guard| (handle, guard)),
        Err(_) => None,
    };
    let Some((handle, guard)) = guard else {
        // Under way already (or no runtime to run it on).
        return State::ready(response);
    };
    lookup.flight = Some(guard);
    // A call of its own: the caller's deadline gives way to its own.
    req.extensions_mut().remove::<CallContext>();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(BACKGROUND_REVALIDATION_TIMEOUT);
    // Its own span (no parent): the caller's call ends with this answer.
    let span = tracing::debug_span!(target: TARGET, parent: None, "courier.cache.revalidate");
    let future = {
        let _entered = span.enter();
        inner.call(req)
    };
    let task = async move {
        let Some(response) = revalidated(future.await, lookup) else {
            return;
        };
        // Read to its end, so that a full answer is stored.
        let mut body = std::pin::pin!(response.into_body());
        std::future::poll_fn(|cx| {
            loop {
                match ready!(body.as_mut().poll_frame(cx)) {
                    Some(Ok(_)) => {}
                    _ => return Poll::Ready(()),
                }
            }
        })
        .await;
    };
    handle.spawn(tokio::time::timeout(BACKGROUND_REVALIDATION_TIMEOUT, task).instrument(span));
    State::ready(response)
}

/// The answer to a background revalidation, to read to its end; `None` when there is nothing
/// to read. A failure leaves the entry as it was (no stale answer to make: the caller has
/// one), and the requests waiting on the revalidation ask on their own.
fn revalidated<RB, E>(
    result: Result<Response<RB>, E>,
    mut lookup: Lookup,
) -> Option<Response<CacheBody<RB>>>
where
    RB: Body + Send + 'static,
    RB::Error: Send,
{
    if result
        .as_ref()
        .map_or(true, |r| r.status().is_server_error())
    {
        if let Some(flight) = lookup.flight.take() {
            flight.release();
        }
        return None;
    }
    match Pending::Lookup(lookup).complete(result, false) {
        Completion::Done(Ok(response)) => Some(response),
        _ => None,
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
#[derive(Default, Clone, Copy)]
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
    /// Many calls carry no field of their own here (the client adds its defaults below): they
    /// are told without a call.
    #[inline(always)]
    fn scan(headers: &HeaderMap, credential_headers: &[HeaderName]) -> Self {
        if headers.is_empty() {
            return Self::default();
        }
        Self::scan_names(headers, credential_headers)
    }

    #[inline(never)]
    fn scan_names(headers: &HeaderMap, credential_headers: &[HeaderName]) -> Self {
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
    /// Where passes are kept: in the in-memory store, so that one look-up answers for a key's
    /// entries and its pass; beside a store that is not in memory, in a small in-memory store
    /// of their own.
    pub(crate) fn passes(&self) -> &MemoryStore {
        match &self.memory {
            Some(memory) => memory,
            None => self
                .passes_apart
                .get_or_init(|| MemoryStore::new(PASSES_APART_CAPACITY)),
        }
    }

    /// Remembers `key`, whose answer was not stored, as a pass from `now` for
    /// [`PASS_MEMORY`]. `hash` is the key's hash in the in-memory store, when the lookup
    /// computed it already.
    pub(crate) fn remember_pass(&self, key: &UriKey, hash: Option<u64>, now: Instant) {
        let Some(until) = now.checked_add(PASS_MEMORY) else {
            return;
        };
        let passes = self.passes();
        let parts = key.parts();
        let hash = hash.unwrap_or_else(|| passes.hash_parts(parts));
        passes.remember_pass(hash, parts, until);
    }

    /// Whether `key` is a pass at `now`: as its `variants` from the in-memory store say, or
    /// as the passes kept apart from any other store say.
    #[inline(always)]
    fn passes_at(&self, variants: Option<&Variants>, key: &UriKey, now: Instant) -> bool {
        match &self.memory {
            Some(_) => variants.is_some_and(|v| v.passes_at(now)),
            None => self.passes_apart_at(key, now),
        }
    }

    /// Whether `key` is a pass at `now` among the passes kept apart from a store that is not
    /// in memory.
    #[inline(never)]
    fn passes_apart_at(&self, key: &UriKey, now: Instant) -> bool {
        (self.passes().get_key(key.parts()).0).is_some_and(|v| v.passes_at(now))
    }

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

    /// Rewrites the variants of `key`: keeps those `keep` says, then adds `add` (dropping the
    /// oldest beyond the limit).
    ///
    /// `hash` is the key's hash in the in-memory store, when the lookup computed it already.
    pub(crate) fn update_variants(
        &self,
        key: &UriKey,
        hash: Option<u64>,
        keep: impl Fn(&Arc<Entry>) -> bool + Send + 'static,
        add: Option<Arc<Entry>>,
    ) {
        self.modify_variants(key, hash, move |current| next_variants(current, keep, add));
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
        let entry = entry.clone();
        self.modify_variants(key, hash, move |current| {
            let stored = current
                .as_ref()
                .is_some_and(|c| c.entries().iter().any(|e| Arc::ptr_eq(e, &entry)));
            if stored {
                next_variants(current, |e| !Arc::ptr_eq(e, &entry), Some(updated))
            } else {
                Next::Unchanged
            }
        });
    }

    /// Rewrites the variants of `key` to what `next` makes of the current ones: in place in
    /// the in-memory store, by [`finish_write`] in a store that can wait.
    fn modify_variants(
        &self,
        key: &UriKey,
        hash: Option<u64>,
        next: impl FnOnce(Option<Arc<Variants>>) -> Next + Send + 'static,
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
                let store = self.store.clone();
                let key = key.text().as_str().to_owned();
                finish_write(Box::pin(async move {
                    match next(store.get(&key).await) {
                        Next::Unchanged => {}
                        Next::Remove => {
                            store.remove(&key).await;
                        }
                        Next::Insert(variants) => store.insert(key, variants).await,
                    }
                }));
            }
        }
    }

    pub(crate) fn remove_entry(&self, key: &UriKey, hash: Option<u64>, entry: &Arc<Entry>) {
        let entry = entry.clone();
        self.update_variants(key, hash, move |e| !Arc::ptr_eq(e, &entry), None);
    }

    /// Removes every entry of `key` (`why`, for the log): in place in the in-memory store, by
    /// [`finish_write`] in a store that can wait.
    pub(crate) fn remove_uri(&self, key: &UriKey, hash: Option<u64>, why: &'static str) {
        let removed = move |key: &UriKey| {
            tracing::debug!(target: TARGET, event = "remove", uri = %key.loggable(), reason = why, "stored entries removed");
        };
        match &self.memory {
            Some(memory) => {
                let parts = key.parts();
                let hash = hash.unwrap_or_else(|| memory.hash_parts(parts));
                if memory.remove_hashed(hash, parts) {
                    removed(key);
                }
            }
            None => {
                let store = self.store.clone();
                let key = key.clone();
                finish_write(Box::pin(async move {
                    let text = key.text().as_str().to_owned();
                    if store.remove(&text).await {
                        removed(&key);
                    }
                }));
            }
        }
    }

    /// Whether the stale `entry` may be served while it is revalidated in the background, by a
    /// `shared` cache or a private one: within its `stale-while-revalidate` window (RFC 5861),
    /// and never when `must-revalidate`, `no-cache` or, where shared, `proxy-revalidate` or
    /// `s-maxage` forbid serving it stale (RFC 9111 section 4.2.4). Only where a tokio runtime
    /// can run the revalidation.
    fn revalidates_in_background(&self, entry: &Entry, now: Instant, shared: bool) -> bool {
        let cc = &entry.cache_control;
        let Some(window) = cc.stale_while_revalidate else {
            return false;
        };
        !entry.must_revalidate(shared)
            && !cc.no_cache
            && entry.staleness(now, shared) <= window
            && tokio::runtime::Handle::try_current().is_ok()
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

/// Finishes a write to a store that can wait: polled once in place, then, if it waits, in a
/// task of its own. Outside a tokio runtime such a write is dropped (the entry is missed
/// later, nothing else).
fn finish_write(mut write: StoreFuture<'static, ()>) {
    let mut cx = Context::from_waker(Waker::noop());
    if write.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn(write)),
        Err(_) => {
            tracing::debug!(target: TARGET, event = "write_dropped", "no tokio runtime to finish a store write");
        }
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

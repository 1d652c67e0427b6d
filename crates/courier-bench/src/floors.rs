//! The floors: for each layer, the least any layer doing its job and keeping its contract
//! does on the happy path, so that what courier adds above it is its own.
//!
//! | layer | floor |
//! | --- | --- |
//! | deadline | [`deadline_only`]: put the call's context (host and deadline) on the request, no timer |
//! | attempt timeout | tower's `Timeout`: read the clock and build a timer per call |
//! | retry | [`AttemptsFloor`]: keep the request's head, pay into a budget, read the clock, judge the answer (gRPC's status too), put the one-record `Attempts` extension on the response |
//! | breaker (global) | [`Floor`] over one shared state: read it, hand the future a reference, read it again with the outcome |
//! | breaker (per host) | [`FloorPerHost`]: the same, after telling that the request goes to the previous call's host |
//! | rate limiter, adaptive pacing | [`FloorPerHost::with_clock`]: the per-host floor plus a clock read and one compare-and-swap (a GCRA decision) |
//! | concurrency limit (the preset's, fixed) | [`BulkheadFloor`]: the per-host floor plus one atomic add each way, the attempt counted out when its body ends |
//! | cache (miss) | [`LookupFloor`]: hash the method and URI, probe a concurrent map, forward, put `CacheStatus` on the answer |
//! | the preset without its cache | [`preset_floor`]: the call's entry ([`DeadlineFloor`]: the context and the body under the deadline), retry's, the breaker's, pacing's and the concurrency limit's floors and tower's `Timeout`, stacked in the preset's order |
//! | the preset's transport | [`with_user_agent`]: the `User-Agent` the preset's hyper and reqwest transports send |

use courier::core::extensions::{AttemptOutcome, AttemptRecord, Attempts, Decision, Reason};
use courier::core::{BoxError, CacheStatus, CallContext, HostKey, Verdict};
use http::header::{AUTHORIZATION, CACHE_CONTROL, ETAG};
use http::{Request, Response};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tower::util::MapRequestLayer;
use tower::{Layer, Service};

/// The deadline's floor: the call's context (its host and deadline) every layer below reads,
/// with no timer.
pub fn deadline_only<S, B>(
    budget: Duration,
    inner: S,
) -> tower::util::MapRequest<S, impl FnMut(Request<B>) -> Request<B> + Clone> {
    MapRequestLayer::new(move |mut req: Request<B>| {
        CallContext::get_or_insert(&mut req).shrink_deadline_after(budget);
        req
    })
    .layer(inner)
}

/// The preset without its cache, at its floor: the floors of what it keeps over the peer
/// stack without theirs, stacked in the preset's order, with the preset's budgets and limit.
/// The call's context with its deadline, and the body read under it ([`DeadlineFloor`]); the
/// head kept, the retry budget paid, the answer judged and one record put on it
/// ([`AttemptsFloor`]); the breaker's state per host ([`FloorPerHost`]); pacing's decision
/// per host ([`FloorPerHost::with_clock`]); the attempts in flight per host
/// ([`BulkheadFloor`]); tower's `Timeout` for the attempt. Over a network transport, put the
/// preset's `User-Agent` on the transport with [`with_user_agent`], as the preset's
/// transports do.
///
/// It is below the preset's true floor, so that a goal it misses is below that floor too: no
/// copy of the body is kept for a retry, the attempt's bound does not shrink to the time the
/// deadline leaves, each per-host level keeps its own last host, and the body's timer is kept
/// in place (the preset's body is `Unpin`, this one is not).
pub fn preset_floor<S>(inner: S) -> DeadlineFloor<PresetFloorBelow<S>> {
    let attempt = tower::timeout::Timeout::new(inner, courier::preset::DEFAULT_ATTEMPT_TIMEOUT);
    let bulkhead = BulkheadFloor::new(courier::preset::DEFAULT_CONCURRENCY_LIMIT.get(), attempt);
    DeadlineFloor::new(
        courier::preset::DEFAULT_DEADLINE,
        AttemptsFloor::new(FloorPerHost::new(FloorPerHost::with_clock(bulkhead))),
    )
}

/// The preset's `User-Agent` on every request that has none, as its hyper and reqwest
/// transports put it (RFC 9110 asks it of a client; many APIs refuse a request without one).
pub fn with_user_agent<S, B>(
    inner: S,
) -> tower::util::MapRequest<S, impl FnMut(Request<B>) -> Request<B> + Clone> {
    let value = http::HeaderValue::from_static(courier::transport::DEFAULT_USER_AGENT);
    MapRequestLayer::new(move |mut req: Request<B>| {
        req.headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert_with(|| value.clone());
        req
    })
    .layer(inner)
}

/// The deadline's floor with its whole contract on the happy path: the call's context with its
/// deadline, and the answer's body read under that deadline. The body's timer is armed only
/// when a read has to wait, and kept in place, so a body that came with its head costs no
/// timer and no allocation; a frame that is ready is handed on without reading the clock. The
/// price, which the preset does not pay, is a body that is not `Unpin`: its reader pins it.
#[derive(Debug, Clone)]
pub struct DeadlineFloor<S> {
    inner: S,
    budget: Duration,
}

impl<S> DeadlineFloor<S> {
    /// The floor with `budget` per call over `inner`.
    pub fn new(budget: Duration, inner: S) -> Self {
        Self { inner, budget }
    }
}

impl<S, B, RB> Service<Request<B>> for DeadlineFloor<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<DeadlineFloorBody<RB>>;
    type Error = S::Error;
    type Future = DeadlineFloorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let at = CallContext::get_or_insert(&mut req).shrink_deadline_after(self.budget);
        DeadlineFloorFuture {
            fut: self.inner.call(req),
            at,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`DeadlineFloor`].
    #[derive(Debug)]
    pub struct DeadlineFloorFuture<F> {
        #[pin]
        fut: F,
        at: tokio::time::Instant,
    }
}

impl<F, RB, E> Future for DeadlineFloorFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = Result<Response<DeadlineFloorBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = ready!(this.fut.poll(cx))?;
        let at = *this.at;
        Poll::Ready(Ok(res.map(|inner| DeadlineFloorBody {
            inner,
            at,
            timer: None,
        })))
    }
}

pin_project_lite::pin_project! {
    /// The body of [`DeadlineFloor`]: fails once the call's deadline passes while it waits.
    #[derive(Debug)]
    pub struct DeadlineFloorBody<B> {
        #[pin]
        inner: B,
        at: tokio::time::Instant,
        #[pin]
        timer: Option<tokio::time::Sleep>,
    }
}

impl<B> http_body::Body for DeadlineFloorBody<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, BoxError>>> {
        let mut this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.timer.is_none() {
            this.timer.set(Some(tokio::time::sleep_until(*this.at)));
        }
        let timer = this.timer.as_pin_mut().expect("armed just above");
        ready!(timer.poll(cx));
        Poll::Ready(Some(Err("deadline exceeded".into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The levels of [`preset_floor`] below its [`DeadlineFloor`].
pub type PresetFloorBelow<S> =
    AttemptsFloor<FloorPerHost<FloorPerHost<BulkheadFloor<tower::timeout::Timeout<S>>>>>;

/// Retry's floor: what any retry layer keeping the contract does on a call that ends after
/// its first attempt. It keeps the request's head for a later attempt (method, URI, headers),
/// pays the call into a retry budget shared by its clones (one atomic add), reads the clock
/// before and after, checks the method, judges the answer (its status, or a trailers-only gRPC
/// answer's `grpc-status`), and puts the one-record `Attempts` extension on the response.
#[derive(Debug, Clone)]
pub struct AttemptsFloor<S> {
    inner: S,
    budget: Arc<AtomicU64>,
}

impl<S> AttemptsFloor<S> {
    /// The floor over `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            budget: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// What a retry keeps of a request to send it again.
type Head = (http::Method, http::Uri, http::HeaderMap);

impl<S, B, RB> Service<Request<B>> for AttemptsFloor<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = AttemptsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.budget.fetch_add(1, Ordering::Relaxed);
        let head = req.method().is_idempotent().then(|| {
            (
                req.method().clone(),
                req.uri().clone(),
                req.headers().clone(),
            )
        });
        AttemptsFuture {
            fut: self.inner.call(req),
            head,
            start: tokio::time::Instant::now(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`AttemptsFloor`].
    #[derive(Debug)]
    pub struct AttemptsFuture<F> {
        #[pin]
        fut: F,
        head: Option<Head>,
        start: tokio::time::Instant,
    }
}

impl<F, RB, E> Future for AttemptsFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let mut res = ready!(this.fut.poll(cx))?;
        let failed = match courier::core::grpc::status_in_headers(res.headers()) {
            Some(code) => code != courier::core::grpc::GrpcCode::OK,
            None => res.status().is_server_error(),
        };
        let retryable = this.head.is_some() && failed;
        let mut attempts = Attempts::new();
        attempts.push(AttemptRecord {
            attempt: 1,
            outcome: AttemptOutcome::Status(res.status()),
            verdict: if failed {
                Verdict::transient()
            } else {
                Verdict::success()
            },
            decision: Decision::Stop,
            reason: if retryable {
                Reason::AttemptsExhausted
            } else {
                Reason::FinalStatus
            },
            wait: Duration::ZERO,
            wait_source: None,
            elapsed: this.start.elapsed(),
        });
        res.extensions_mut().insert(attempts);
        Poll::Ready(Ok(res))
    }
}

/// The bucket floor's burst tolerance: a second of requests at one per nanosecond.
const TOLERANCE_NS: u64 = 1_000_000_000;

/// One host's shared state, for the floors.
#[derive(Debug)]
pub struct Entry {
    key: HostKey,
    /// Non-zero: open (the breaker floors).
    state: AtomicU64,
    /// The theoretical arrival time in nanoseconds (the clocked floor).
    tat: AtomicU64,
    /// Calls in flight (the bulkhead's floor).
    in_flight: AtomicUsize,
}

impl Entry {
    fn new(key: HostKey) -> Self {
        Self {
            key,
            state: AtomicU64::new(0),
            tat: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }
}

/// How the per-host floors find a host's state: they tell that the request goes to the
/// previous call's host (scheme and authority, as courier's per-host layers do) and that no
/// eviction ran since. The miss path, taken once here, stands in for the map. A clone shares
/// the hosts' states and keeps its own last host.
#[derive(Debug, Clone)]
struct Hosts {
    generation: Arc<AtomicU64>,
    last: Option<(u64, Arc<Entry>)>,
}

impl Hosts {
    fn new() -> Self {
        Self {
            generation: Arc::new(AtomicU64::new(0)),
            last: None,
        }
    }

    #[inline]
    fn entry<B>(&mut self, req: &Request<B>) -> Arc<Entry> {
        let generation = self.generation.load(Ordering::Acquire);
        match &self.last {
            Some((g, e)) if *g == generation && e.key.matches(req.uri()) == Some(true) => e.clone(),
            _ => self.lookup(req, generation),
        }
    }

    #[cold]
    #[inline(never)]
    fn lookup<B>(&mut self, req: &Request<B>, generation: u64) -> Arc<Entry> {
        let entry = Arc::new(Entry::new(HostKey::from_parts(req.uri(), req.headers())));
        self.last = Some((generation, entry.clone()));
        entry
    }
}

/// The least any breaker does on the closed path: read a shared state before the call, hand
/// the response future a reference to it (one `Arc` count each way), read the state again
/// with the outcome.
#[derive(Debug)]
pub struct Floor<S> {
    inner: S,
    state: Arc<Entry>,
}

impl<S> Floor<S> {
    /// The floor over `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            state: Arc::new(Entry::new(HostKey::new(None, None))),
        }
    }
}

impl<S, B, RB> Service<Request<B>> for Floor<S>
where
    S: Service<Request<B>, Response = Response<RB>, Error = BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = FloorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        FloorFuture::new(&mut self.inner, self.state.clone(), req)
    }
}

/// [`Floor`] per host: first find the host's state (see `Hosts`). With
/// [`with_clock`](Self::with_clock), a clock read and one compare-and-swap on the host's state
/// too: a bucket's decision. A clone shares the hosts' states and keeps its own last host.
#[derive(Debug, Clone)]
pub struct FloorPerHost<S> {
    inner: S,
    hosts: Hosts,
    clocked: Option<tokio::time::Instant>,
}

impl<S> FloorPerHost<S> {
    /// The breaker's per-host floor over `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            hosts: Hosts::new(),
            clocked: None,
        }
    }

    /// The bucket's floor over `inner`: a clock read and a compare-and-swap per call.
    pub fn with_clock(inner: S) -> Self {
        Self {
            clocked: Some(tokio::time::Instant::now()),
            ..Self::new(inner)
        }
    }
}

impl<S, B, RB> Service<Request<B>> for FloorPerHost<S>
where
    S: Service<Request<B>, Response = Response<RB>, Error = BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = FloorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let entry = self.hosts.entry(&req);
        if let Some(base) = self.clocked {
            // GCRA: allowed when the theoretical arrival time, one interval on, stays within
            // the burst's tolerance of now. One attempt: a lost race is a refusal in a real
            // bucket; here nothing races.
            let now = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let tat = entry.tat.load(Ordering::Acquire);
            let next = tat.max(now) + 1;
            if next <= now.saturating_add(TOLERANCE_NS) {
                let _ = entry
                    .tat
                    .compare_exchange(tat, next, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        FloorFuture::new(&mut self.inner, entry, req)
    }
}

pin_project_lite::pin_project! {
    /// The future of the breaker floors.
    #[derive(Debug)]
    pub struct FloorFuture<F> {
        #[pin]
        fut: Option<F>,
        state: Option<Arc<Entry>>,
    }
}

impl<F> FloorFuture<F> {
    /// Calls `inner` unless `entry`'s state is non-zero (open).
    #[inline]
    fn new<S, B>(inner: &mut S, entry: Arc<Entry>, req: Request<B>) -> Self
    where
        S: Service<Request<B>, Future = F>,
    {
        if entry.state.load(Ordering::Acquire) != 0 {
            return Self {
                fut: None,
                state: None,
            };
        }
        Self {
            fut: Some(inner.call(req)),
            state: Some(entry),
        }
    }
}

impl<F, T> Future for FloorFuture<F>
where
    F: Future<Output = Result<T, BoxError>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(fut) = this.fut.as_pin_mut() else {
            return Poll::Ready(Err("open".into()));
        };
        let out = ready!(fut.poll(cx));
        if let Some(entry) = this.state
            && (out.is_err() || entry.state.load(Ordering::Acquire) != 0)
        {
            entry.state.fetch_add(1, Ordering::AcqRel);
        }
        Poll::Ready(out)
    }
}

/// The concurrency limit's floor, as the preset sets it (a fixed number of attempts in flight
/// per host, no queue): find the host's state, count the attempt in (one atomic add, compared
/// with the limit), and count it out when the answer's body ends or is dropped, or at once
/// when the answer has no body to read or the call failed.
#[derive(Debug, Clone)]
pub struct BulkheadFloor<S> {
    inner: S,
    hosts: Hosts,
    limit: usize,
}

impl<S> BulkheadFloor<S> {
    /// At most `limit` attempts in flight per host over `inner`.
    pub fn new(limit: usize, inner: S) -> Self {
        Self {
            inner,
            hosts: Hosts::new(),
            limit,
        }
    }
}

impl<S, B, RB> Service<Request<B>> for BulkheadFloor<S>
where
    S: Service<Request<B>, Response = Response<RB>, Error = BoxError>,
    RB: http_body::Body,
{
    type Response = Response<BulkheadBody<RB>>;
    type Error = BoxError;
    type Future = BulkheadFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let entry = self.hosts.entry(&req);
        if entry.in_flight.fetch_add(1, Ordering::AcqRel) >= self.limit {
            entry.in_flight.fetch_sub(1, Ordering::AcqRel);
            return BulkheadFuture {
                fut: None,
                slot: None,
            };
        }
        BulkheadFuture {
            fut: Some(self.inner.call(req)),
            slot: Some(InFlight(entry)),
        }
    }
}

/// One attempt counted in flight on its host, counted out when dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Entry>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// The future of [`BulkheadFloor`].
    #[derive(Debug)]
    pub struct BulkheadFuture<F> {
        #[pin]
        fut: Option<F>,
        slot: Option<InFlight>,
    }
}

impl<F, RB> Future for BulkheadFuture<F>
where
    F: Future<Output = Result<Response<RB>, BoxError>>,
    RB: http_body::Body,
{
    type Output = Result<Response<BulkheadBody<RB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(fut) = this.fut.as_pin_mut() else {
            return Poll::Ready(Err("too many in flight".into()));
        };
        let res = ready!(fut.poll(cx))?;
        let slot = this.slot.take().filter(|_| !res.body().is_end_stream());
        Poll::Ready(Ok(res.map(|inner| BulkheadBody { inner, slot })))
    }
}

pin_project_lite::pin_project! {
    /// The body of [`BulkheadFloor`]: holds its attempt's slot until it ends.
    #[derive(Debug)]
    pub struct BulkheadBody<B> {
        #[pin]
        inner: B,
        slot: Option<InFlight>,
    }
}

impl<B: http_body::Body> http_body::Body for BulkheadBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            *this.slot = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The hash of a request's method and URI's parts, the key of the cache floors' maps.
#[inline(always)]
fn key_of<B>(hasher: &foldhash::fast::FixedState, req: &Request<B>) -> u64 {
    hasher.hash_one((
        req.method(),
        req.uri().scheme(),
        req.uri().authority(),
        req.uri().path_and_query().map(|p| p.as_str()),
    ))
}

/// The cache's floor on a miss: hash the method and the URI's parts, probe a concurrent map
/// (papaya, foldhash) holding other entries, find nothing, forward; on the answer, look at
/// whether it could be stored (`ETag`, `Cache-Control`) and put the `CacheStatus` extension
/// on it.
#[derive(Debug, Clone)]
pub struct LookupFloor<S> {
    inner: S,
    hasher: foldhash::fast::FixedState,
    map: Arc<papaya::HashMap<u64, Arc<Entry>>>,
}

impl<S> LookupFloor<S> {
    /// The floor over `inner`, with a map of 1 024 other entries.
    pub fn new(inner: S) -> Self {
        let map = papaya::HashMap::with_capacity(4_096);
        {
            let pinned = map.pin();
            for i in 0..1_024u64 {
                pinned.insert(
                    i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    Arc::new(Entry::new(HostKey::new(None, None))),
                );
            }
        }
        Self {
            inner,
            hasher: foldhash::fast::FixedState::default(),
            map: Arc::new(map),
        }
    }
}

impl<S, B, RB> Service<Request<B>> for LookupFloor<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = LookupFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let key = key_of(&self.hasher, &req);
        let found = self.map.pin().get(&key).cloned();
        drop(std::hint::black_box(found));
        LookupFuture {
            fut: self.inner.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`LookupFloor`].
    #[derive(Debug)]
    pub struct LookupFuture<F> {
        #[pin]
        fut: F,
    }
}

impl<F, RB, E> Future for LookupFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut res = ready!(self.project().fut.poll(cx))?;
        let headers = res.headers();
        let storable = headers.contains_key(ETAG) || headers.contains_key(CACHE_CONTROL);
        std::hint::black_box(storable);
        res.extensions_mut().insert(CacheStatus::Miss);
        Poll::Ready(Ok(res))
    }
}

/// The cache's floor on a miss, keeping the whole contract of a cache that stores answers and
/// serves crowds. Before it forwards a miss, it hashes the method and the URI's parts, reads
/// the request's `Cache-Control` and `Authorization` (a `no-store` request is not stored, an
/// authorized one only when its answer allows), reads the clock (the request time a stored
/// answer's age counts from), keeps the URI (the key a storable answer is stored under: its
/// hash alone would let two URIs share an entry), and probes one concurrent map (papaya, keyed
/// by the hash itself) whose values are stored entries, flights under way and passes, so that
/// one probe tells a hit, a crowd's miss that waits for the request under way, and a key
/// whose answers are not stored. The bench's key is such a pass after its first answer, as in
/// the cache, so the miss goes upstream on its own. On the answer, as [`LookupFloor`].
#[derive(Debug, Clone)]
pub struct MissFloor<S> {
    inner: S,
    hasher: foldhash::fast::FixedState,
    map: Arc<papaya::HashMap<u64, Slot, nohash_hasher::BuildNoHashHasher<u64>>>,
}

/// What [`MissFloor`]'s map holds for a key.
#[derive(Debug, Clone)]
pub enum Slot {
    /// A stored answer.
    Stored(Arc<Entry>),
    /// A request under way, which a crowd's misses wait for.
    Flight,
    /// A key whose answers are not stored: its misses go upstream on their own.
    Pass,
}

impl<S> MissFloor<S> {
    /// The floor over `inner`, with a map of 1 024 other entries.
    pub fn new(inner: S) -> Self {
        let map = papaya::HashMap::with_capacity_and_hasher(4_096, Default::default());
        {
            let pinned = map.pin();
            for i in 0..1_024u64 {
                pinned.insert(
                    i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    Slot::Stored(Arc::new(Entry::new(HostKey::new(None, None)))),
                );
            }
        }
        Self {
            inner,
            hasher: foldhash::fast::FixedState::default(),
            map: Arc::new(map),
        }
    }
}

impl<S, B, RB> Service<Request<B>> for MissFloor<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = MissFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let key = key_of(&self.hasher, &req);
        let headers = req.headers();
        let storable = !headers.contains_key(CACHE_CONTROL) && !headers.contains_key(AUTHORIZATION);
        let map = self.map.pin();
        if map.get(&key).is_none() {
            // The first miss: its answer is not stored, so the key is a pass from then on.
            map.insert(key, Slot::Pass);
        }
        drop(map);
        MissFuture {
            uri: storable.then(|| req.uri().clone()),
            requested: tokio::time::Instant::now(),
            fut: self.inner.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`MissFloor`].
    #[derive(Debug)]
    pub struct MissFuture<F> {
        #[pin]
        fut: F,
        uri: Option<http::Uri>,
        requested: tokio::time::Instant,
    }
}

impl<F, RB, E> Future for MissFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let mut res = ready!(this.fut.poll(cx))?;
        let headers = res.headers();
        let storable = headers.contains_key(ETAG) || headers.contains_key(CACHE_CONTROL);
        std::hint::black_box((storable, this.uri.take(), *this.requested));
        res.extensions_mut().insert(CacheStatus::Miss);
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier::core::extensions::Attempts;
    use http_body_util::Full;
    use tower::ServiceExt;

    type Body = Full<bytes::Bytes>;

    fn get() -> Request<Body> {
        Request::get("http://upstream.example/v1/items")
            .body(Body::default())
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_preset_floor_keeps_the_contracts_it_stands_for() {
        let start = tokio::time::Instant::now();
        let upstream = tower::service_fn(move |req: Request<Body>| async move {
            // The call's context reaches the transport with the preset's deadline.
            let deadline = CallContext::deadline_in(req.extensions());
            assert_eq!(deadline, Some(start + courier::preset::DEFAULT_DEADLINE));
            Ok::<_, BoxError>(Response::new(Body::default()))
        });
        let res = preset_floor(upstream).oneshot(get()).await.unwrap();
        // One record of the one attempt on the answer.
        let attempts = res.extensions().get::<Attempts>().expect("a record");
        assert_eq!(attempts.count(), 1);
        assert_eq!(attempts.last().unwrap().reason, Reason::FinalStatus);
    }

    #[tokio::test(start_paused = true)]
    async fn the_preset_floor_reads_the_body_under_the_deadline() {
        // Over the preset's transport floor: the request carries the preset's User-Agent, and
        // an answer whose body stalls fails at the call's deadline, not later.
        let upstream = tower::service_fn(|req: Request<Body>| async move {
            let agent = req.headers().get(http::header::USER_AGENT);
            assert_eq!(agent.unwrap(), courier::transport::DEFAULT_USER_AGENT);
            let body =
                courier_testkit::body::ScriptedBody::<std::convert::Infallible>::chunks(["x"])
                    .stall();
            Ok::<_, BoxError>(Response::new(body))
        });
        let start = tokio::time::Instant::now();
        let res = preset_floor(with_user_agent(upstream))
            .oneshot(get())
            .await
            .unwrap();
        // The body keeps its timer in place: it is read where it is pinned.
        let mut body = std::pin::pin!(res.into_body());
        let frame = http_body_util::BodyExt::frame(&mut body).await.unwrap();
        assert_eq!(frame.unwrap().into_data().unwrap(), "x");
        let err = http_body_util::BodyExt::frame(&mut body).await.unwrap();
        assert_eq!(err.unwrap_err().to_string(), "deadline exceeded");
        assert_eq!(start.elapsed(), courier::preset::DEFAULT_DEADLINE);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bulkhead_floor_holds_an_attempt_until_its_body_ends() {
        let upstream = tower::service_fn(|_: Request<Body>| async {
            let body =
                courier_testkit::body::ScriptedBody::<std::convert::Infallible>::chunks(["x"]);
            Ok::<_, BoxError>(Response::new(body))
        });
        let mut floor = BulkheadFloor::new(1, upstream);
        let held = floor.ready().await.unwrap().call(get()).await.unwrap();
        let err = floor.ready().await.unwrap().call(get()).await.unwrap_err();
        assert_eq!(err.to_string(), "too many in flight");
        // Read to its end, the body gives the attempt's place back.
        http_body_util::BodyExt::collect(held.into_body())
            .await
            .unwrap();
        let next = floor.ready().await.unwrap().call(get()).await.unwrap();
        // Dropped unread, too.
        drop(next);
        floor.ready().await.unwrap().call(get()).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_floor_judges_a_grpc_answer_by_its_status() {
        let upstream = tower::service_fn(|_: Request<Body>| async {
            let res = Response::builder()
                .header(http::header::CONTENT_TYPE, "application/grpc")
                .header("grpc-status", "14")
                .body(Body::default())
                .unwrap();
            Ok::<_, BoxError>(res)
        });
        let res = AttemptsFloor::new(upstream).oneshot(get()).await.unwrap();
        let record = res.extensions().get::<Attempts>().unwrap().last().unwrap();
        assert_eq!(record.verdict, Verdict::transient());
        assert_eq!(record.reason, Reason::AttemptsExhausted);
    }

    #[tokio::test(start_paused = true)]
    async fn the_preset_floor_bounds_an_attempt_and_keeps_a_host_apart() {
        let hang = tower::service_fn(|_: Request<Body>| async {
            std::future::pending::<Result<Response<Body>, BoxError>>().await
        });
        let mut floor = preset_floor(hang);
        let start = tokio::time::Instant::now();
        let err = floor.ready().await.unwrap().call(get()).await.unwrap_err();
        assert!(err.is::<tower::timeout::error::Elapsed>(), "{err}");
        assert_eq!(start.elapsed(), courier::preset::DEFAULT_ATTEMPT_TIMEOUT);
        // A clone keeps its own last host and shares the hosts' states: the failure above
        // counted against the host, so the next call is refused as an open circuit's.
        let err = floor.clone().oneshot(get()).await.unwrap_err();
        assert_eq!(err.to_string(), "open");
    }
}

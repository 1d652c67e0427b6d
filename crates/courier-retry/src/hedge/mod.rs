//! HedgeLayer: a second request against the slow tail, for what is safe to repeat, within a
//! budget.
//!
//! One answer in twenty may wait for a pause or a busy replica, and the caller's p99 is that
//! answer; a retry helps a failure, never a slow success. [`HedgeLayer`] sends the request
//! again when the first has not answered after a delay, takes the first acceptable answer and
//! drops the others.
//!
//! # What is hedged
//!
//! Only a request that may be repeated: retry-safe by the same rule as retry's
//! ([`Classifier::is_retry_safe`]: an idempotent method, an `Idempotency-Key`, a retry-safe
//! path or a [`RetrySafe`](courier_core::idempotency::RetrySafe) mark such as a gRPC method
//! marked safe), or by the call's own
//! [`CallOptions::retry_safe`](courier_core::CallOptions::retry_safe). A keyless POST or PATCH
//! is never hedged; a keyed one carries its key, unchanged, on every hedge. Its copies are
//! out together, and a server that keeps keys answers one that comes while another is under
//! way with 409 Conflict: such an answer to a request whose method is not idempotent does not
//! win while another copy is out, and no more copies go. The body must be
//! copyable whole when the hedge goes ([`RetryBody`]: any `Clone` body, or a [`ReplayBody`](crate::ReplayBody)
//! read to its end within its cap); otherwise the call is not hedged.
//!
//! # When
//!
//! After a delay counted from the first request: fixed ([`HedgeLayer::after`]), or learned
//! per host ([`HedgeLayer::percentile`], the default: the 95th percentile of the host's
//! latencies over the last 10 s, within [`bounds`](HedgeLayer::bounds) of 1 ms and 10 s). A
//! host with fewer than 20 latencies in its window is not hedged: the delay is learned first.
//! A call's own [`CallOptions::hedge_after`](courier_core::CallOptions::hedge_after) and
//! [`no_hedge`](courier_core::CallOptions::no_hedge) replace the layer's word for that call.
//! Up to [`attempts`](HedgeLayer::attempts) requests in all (2 by default, at most 5), each
//! one delay after the one before. No hedge goes once the call's deadline has passed.
//!
//! The learned latency of a request is the time to its answer's head. A request cancelled
//! after a later one overtook it counts as the wait before that later one went: it was at
//! least that slow. So a host's slow answers stay in its sketch even when hedges win in their
//! place, and the percentile neither drifts down to the fast answers alone nor climbs with
//! the winners' own time (counting a cancelled request at the moment the winner answered
//! would put the delay plus a fast answer in the sketch, and the percentile would rise to meet
//! it).
//!
//! Why the 95th: it hedges about one call in twenty on a host with a steady tail, half the
//! default budget, so the budget binds only when the tail grows; a lower percentile hedges
//! more calls than the budget allows and leaves the slowest unhedged when it runs out.
//!
//! # Which answer
//!
//! Each answer gets the [`Classifier`]'s verdict. An answer that asking again could not
//! change (a success, a final status such as a 404, a failure that is ours) wins: it is the
//! call's, and every other request still out is dropped. An answer that might change
//! (a 502, a reset; for gRPC a code the classifier calls retryable, or those of
//! [`non_fatal_grpc_codes`](HedgeLayer::non_fatal_grpc_codes)) is non-fatal: the next hedge
//! goes at once, without waiting its delay, and the answer is kept in case nothing better
//! comes. When no request is left out and no hedge may go, the last non-fatal answer is the
//! call's (a retry layer above then decides on it as on any attempt).
//!
//! Server pushback stops the hedges of the call: an answer with a wait (`Retry-After`,
//! `RateLimit`, `x-ratelimit-*`, gRPC's `grpc-retry-pushback-ms`) or an overload (a 429 or a
//! 503, by the classifier). So does a hedge refused below by the breaker, the rate limiter or
//! the concurrency limit: the host or our own bounds say no more load. Such a hedge, or one
//! the deadline cut, never wins over a request still out.
//!
//! # Extra load
//!
//! Every hedge is charged to the layer's budget: a [`RetryBudget`] of its own, by default
//! 10 % of the requests through the layer per host over 10 s, with no floor. Every request
//! that passes (hedged or not) earns a tenth of a hedge; a hedge that finds the budget empty
//! is not sent. A hedge is spent when it goes out: one refused below, or dropped while it
//! waited to be ready (the call ended first), is given back. With no floor, a fresh layer's first
//! nine requests to a host are never hedged: the default keeps to its 10 % from the first
//! request (a floor of `n` allows `n` hedges per window beyond it).
//!
//! Its own, not the retry layer's: a hedge is load on a host that answers, slowly; a retry is
//! load on one that fails. Shared, a slow but healthy host's hedges would spend the retries
//! of its next failing moment, and a failing host would leave no hedges for its slow tail.
//! Separate, each is bounded at 10 %, and a host that fails fast (a 503 to everything) gets no
//! hedges at all: its answers come before the delay.
//!
//! # Where in a stack
//!
//! Below retry and above the breaker, the rate limiter, pacing and the concurrency limit: each
//! hedge passes them like any attempt, and each retry attempt may be hedged. The layer needs a
//! `Clone` inner service; a hedge clones it and waits for its readiness. Under a retry layer,
//! [`Retry::with_hedge`](crate::Retry::with_hedge) does the same with one service fewer in the
//! stack's type, which is how courier's preset hedges.
//!
//! A breaker below judges each request it passes: a hedge of a call's first attempt carries no
//! retry records, so it is a call of its own there, its outcome counted in the host's window
//! beside the first request's. Hedges are at most a tenth of the requests, so the share of
//! failures the breaker weighs moves by no more than that.
//!
//! ```
//! use courier_retry::RetryLayer;
//! use courier_retry::hedge::HedgeLayer;
//! use tower::ServiceBuilder;
//!
//! let stack = ServiceBuilder::new()
//!     .layer(RetryLayer::new())
//!     .layer(HedgeLayer::new())
//!     // The breaker, the rate limiter, pacing, the concurrency limit, the transport.
//!     .service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
//!     });
//! # let _ = stack;
//! ```
//!
//! # Cancellation
//!
//! A losing request is dropped, with whatever the layers below hold for it: the
//! concurrency limit's permit, a half-open breaker's trial, pacing's slot are given back by
//! their own drop. What the server sees: over HTTP/1.1 the connection is closed (hyper does
//! not return a connection with a request half done to its pool), so a server notices when it
//! next reads or writes; over HTTP/2 the stream is reset with `CANCEL`, and the connection
//! serves on. Dropping the call's future drops every request it has out.
//!
//! # What it shows
//!
//! The answer carries a [`Hedged`] extension when a hedge was sent: every request of the
//! call, its start offset, how it ended (`won`, `cancelled`, `non_fatal`, `refused`).
//! When a `tracing` subscriber wants them, each request of a call that may be hedged is a span
//! `courier.hedge` (target `courier::retry`, under the current span: the retry layer's attempt
//! span when retry is above it) with `courier.hedge.attempt`, `courier.hedge.offset_ms` and
//! `courier.hedge.outcome`; the spans of one call overlap. With the `metrics` feature:
//! `courier.hedge.sent`, `courier.hedge.won` and `courier.hedge.budget_refusals`, by `host`.
//! A gRPC hedge carries `grpc-previous-rpc-attempts`, as gRPC's own hedging sends.
//!
//! ```
//! use courier_retry::RetryBudget;
//! use courier_retry::hedge::HedgeLayer;
//! use http::{Request, Response};
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let calls = Arc::new(AtomicU32::new(0));
//! let upstream = service_fn({
//!     let calls = calls.clone();
//!     move |_req: Request<String>| {
//!         // The first request is slow, the second quick.
//!         let slow = calls.fetch_add(1, Ordering::SeqCst) == 0;
//!         async move {
//!             let took = if slow { 2_000 } else { 10 };
//!             tokio::time::sleep(Duration::from_millis(took)).await;
//!             Ok::<_, Infallible>(Response::new(format!("after {took} ms")))
//!         }
//!     }
//! });
//! // A hedge is earned by ten requests; a floor of one lets this first call have one.
//! let hedge = HedgeLayer::new()
//!     .after(Duration::from_millis(50))
//!     .budget(RetryBudget::new().floor(1));
//! let mut svc = ServiceBuilder::new().layer(hedge).service(upstream);
//! let req = Request::get("http://api.example/items").body(String::new()).unwrap();
//! let res = svc.ready().await.unwrap().call(req).await.unwrap();
//! assert_eq!(res.body(), "after 10 ms");
//! let hedged = res.extensions().get::<courier_retry::hedge::Hedged>().unwrap();
//! assert_eq!(hedged.to_string(), "#1 at 0 ms: cancelled, #2 at 50 ms: won");
//! # }
//! ```

mod future;
mod sketch;

pub use future::ResponseFuture;

use crate::body::RetryBody;
use crate::budget::{BudgetState, RetryBudget};
use courier_core::grpc::GrpcCode;
use courier_core::{
    BoxError, CallContext, CallOptions, Classifier, Hedging, HintConfig, HostKey, RequestHead,
};
use future::Hedging as Call;
pub(crate) use future::refused_below;
use http::{Request, Response};
use sketch::Sketch;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

/// The most requests of one call, the first included: gRPC's own limit for hedging.
pub const MAX_ATTEMPTS: u32 = 5;

/// The latencies a host's window must hold before its delay is learned; until then its calls
/// are not hedged.
pub const MIN_LATENCIES: u32 = 20;

/// Sends a hedge of a retry-safe request that has not answered after a delay; see the
/// [module docs](self).
///
/// # Clone
///
/// The configuration, the budget and the hosts' latencies live behind an `Arc`: every
/// [`Hedge`] this layer makes, and every clone, shares them. Each setter returns a layer with
/// a fresh budget and fresh latencies.
#[derive(Clone)]
pub struct HedgeLayer {
    config: Arc<Config>,
}

/// When a hedge goes.
#[derive(Debug, Clone, Copy)]
enum Delay {
    Fixed(Duration),
    /// The quantile (0 < q < 1) of the host's recent latencies, within bounds.
    Learned {
        q: f64,
        min: Duration,
        max: Duration,
    },
}

pub(crate) struct Config {
    delay: Delay,
    window: Duration,
    pub(crate) attempts: u32,
    pub(crate) classifier: Classifier,
    pub(crate) hints: HintConfig,
    /// For a gRPC answer: its code is non-fatal when in here, whatever the classifier says.
    pub(crate) non_fatal_grpc: Option<Vec<GrpcCode>>,
    budget_settings: RetryBudget,
    pub(crate) budget: Arc<BudgetState>,
    sketches: Sketches,
}

/// Each host's latencies, at most [`Sketches::MAX_HOSTS`] of them.
struct Sketches {
    hosts: Mutex<HashMap<HostKey, Arc<Sketch>>>,
}

impl Sketches {
    const MAX_HOSTS: usize = 1024;

    fn new() -> Self {
        Self {
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// The sketch of `host`, made if it has none. Past the bound, idle hosts are forgotten
    /// first, then an arbitrary one.
    fn of(&self, host: HostKey, window: Duration, now: Instant) -> Arc<Sketch> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = hosts.get(&host) {
            return Arc::clone(s);
        }
        if hosts.len() >= Self::MAX_HOSTS {
            hosts.retain(|_, s| !s.is_idle(now));
            if hosts.len() >= Self::MAX_HOSTS
                && let Some(any) = hosts.keys().next().cloned()
            {
                hosts.remove(&any);
            }
        }
        Arc::clone(
            hosts
                .entry(host)
                .or_insert_with(|| Arc::new(Sketch::new(window, now))),
        )
    }
}

impl Config {
    fn new() -> Self {
        let budget_settings = RetryBudget::new().floor(0);
        Self {
            delay: Delay::Learned {
                q: 0.95,
                min: Duration::from_millis(1),
                max: Duration::from_secs(10),
            },
            window: Duration::from_secs(10),
            attempts: 2,
            classifier: Classifier::new(),
            hints: HintConfig::new(),
            non_fatal_grpc: None,
            budget: budget_settings.clone().build(),
            budget_settings,
            sketches: Sketches::new(),
        }
    }

    /// A copy with fresh state: a new budget, no latencies.
    ///
    /// The budget is made from `budget_settings` again after a setter has run.
    fn renewed(&self) -> Self {
        Self {
            delay: self.delay,
            window: self.window,
            attempts: self.attempts,
            classifier: self.classifier.clone(),
            hints: self.hints.clone(),
            non_fatal_grpc: self.non_fatal_grpc.clone(),
            budget: self.budget_settings.clone().build(),
            budget_settings: self.budget_settings.clone(),
            sketches: Sketches::new(),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeLayer")
            .field("delay", &self.delay)
            .field("window", &self.window)
            .field("attempts", &self.attempts)
            .field("classifier", &self.classifier)
            .field("non_fatal_grpc", &self.non_fatal_grpc)
            .field("budget", &self.budget_settings)
            .finish()
    }
}

impl fmt::Debug for HedgeLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

// === impl HedgeLayer ===

impl Default for HedgeLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl HedgeLayer {
    /// Hedges after each host's 95th percentile latency over 10 s (within 1 ms and 10 s),
    /// 2 requests at most, within 10 % extra load per host.
    pub fn new() -> Self {
        Self {
            config: Arc::new(Config::new()),
        }
    }

    fn with(self, f: impl FnOnce(&mut Config)) -> Self {
        let mut config = self.config.renewed();
        f(&mut config);
        // The budget as the settings now say.
        config.budget = config.budget_settings.clone().build();
        Self {
            config: Arc::new(config),
        }
    }

    /// A fixed delay, the same for every host, in place of a learned one. At most an hour
    /// ([`CallOptions::MAX_HEDGE_DELAY`]); a longer one is taken as an hour.
    pub fn after(self, delay: Duration) -> Self {
        let delay = delay.min(CallOptions::MAX_HEDGE_DELAY);
        self.with(|c| c.delay = Delay::Fixed(delay))
    }

    /// The delay learned per host: its `percentile` (between 0 and 100, exclusive; values
    /// outside are clamped to 1 and 99.9) latency over the [`window`](Self::window). Defaults
    /// to 95.
    pub fn percentile(self, percentile: f64) -> Self {
        let q = if percentile.is_nan() {
            0.95
        } else {
            (percentile / 100.0).clamp(0.01, 0.999)
        };
        self.with(|c| {
            c.delay = match c.delay {
                Delay::Learned { min, max, .. } => Delay::Learned { q, min, max },
                Delay::Fixed(_) => Delay::Learned {
                    q,
                    min: Duration::from_millis(1),
                    max: Duration::from_secs(10),
                },
            }
        })
    }

    /// The least and the most a learned delay may be. Defaults to 1 ms and 10 s; each at most
    /// an hour ([`CallOptions::MAX_HEDGE_DELAY`]). Sets the
    /// delay to be learned, as [`percentile`](Self::percentile) does.
    pub fn bounds(self, min: Duration, max: Duration) -> Self {
        let min = min.min(CallOptions::MAX_HEDGE_DELAY);
        let max = max.max(min).min(CallOptions::MAX_HEDGE_DELAY);
        self.with(|c| {
            let q = match c.delay {
                Delay::Learned { q, .. } => q,
                Delay::Fixed(_) => 0.95,
            };
            c.delay = Delay::Learned { q, min, max };
        })
    }

    /// How long a host's latencies count. At least 100 ms. Defaults to 10 s.
    pub fn window(self, window: Duration) -> Self {
        self.with(|c| c.window = window.max(Duration::from_millis(100)))
    }

    /// The most requests one call may send, the first included: 2 sends one hedge at most.
    /// Clamped to 1 (no hedge) ..= [`MAX_ATTEMPTS`]. Defaults to 2.
    pub fn attempts(self, attempts: u32) -> Self {
        self.with(|c| c.attempts = attempts.clamp(1, MAX_ATTEMPTS))
    }

    /// What each answer means, and which requests may be repeated. Defaults to
    /// [`Classifier::new`]; give it the one the other layers read.
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.with(|c| c.classifier = classifier)
    }

    /// Which server waits stop the hedges. Defaults to [`HintConfig::new`].
    pub fn hint_config(self, hints: HintConfig) -> Self {
        self.with(|c| c.hints = hints)
    }

    /// gRPC's `non_fatal_status_codes`: a gRPC answer with one of these codes sends the next
    /// hedge at once, and any other code wins. Without it, the classifier's retryable gRPC
    /// codes are the non-fatal ones.
    pub fn non_fatal_grpc_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        let codes: Vec<_> = codes.into_iter().collect();
        self.with(|c| c.non_fatal_grpc = Some(codes))
    }

    /// The budget hedges are charged to. Defaults to `RetryBudget::new().floor(0)`: 10 % of the
    /// requests per host over 10 s.
    pub fn budget(self, budget: RetryBudget) -> Self {
        self.with(|c| c.budget_settings = budget)
    }
}

impl HedgeLayer {
    /// The shared configuration, for the retry layer's own hedging.
    pub(crate) fn config(&self) -> &Arc<Config> {
        &self.config
    }
}

impl<S> Layer<S> for HedgeLayer {
    type Service = Hedge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Hedge {
            inner,
            config: Some(Arc::clone(&self.config)),
        }
    }
}

/// Sends hedges of slow retry-safe requests. Made by [`HedgeLayer`]; see the
/// [module docs](self).
#[derive(Clone)]
pub struct Hedge<S> {
    inner: S,
    config: Option<Arc<Config>>,
}

impl<S> Hedge<S> {
    /// The layer switched off: every request goes straight to `inner`, its future unchanged.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            config: None,
        }
    }

    /// Wraps `inner` as `layer` says; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: HedgeLayer) -> Self {
        layer.layer(inner)
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.config.is_none()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for Hedge<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hedge")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, B, RB> Service<Request<B>> for Hedge<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        call(self.config.as_ref(), &mut self.inner, req, None)
    }
}

/// The retry layer's word on a request it hedges: whether it may be repeated (decided
/// already), and the classifier and hints it reads answers with, which the hedges' answers
/// are read with too.
#[derive(Clone, Copy)]
pub(crate) struct FromRetry<'a> {
    pub(crate) safe: bool,
    pub(crate) classifier: &'a Classifier,
    pub(crate) hints: &'a HintConfig,
}

/// Sends `req` through `inner` (the instance `poll_ready` made ready), hedged as `config`
/// says; without a configuration, straight through. [`Hedge`] and the retry layer's
/// [`Retry::with_hedge`](crate::Retry::with_hedge) share it. `retry` is the retry layer's
/// word when it hedges its attempts; `None` leaves safety to the call's options and the
/// hedge's classifier, and the answers to the hedge's classifier.
pub(crate) fn call<S, B, RB>(
    config: Option<&Arc<Config>>,
    inner: &mut S,
    req: Request<B>,
    retry: Option<FromRetry<'_>>,
) -> ResponseFuture<S::Future, RB>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Send + 'static,
{
    let Some(config) = config else {
        return ResponseFuture::direct(inner.call(req), None);
    };
    let now = Instant::now();
    let (deadline, options) = match CallContext::get(req.extensions()) {
        Some(call) => (call.deadline(), *call.options()),
        None => (None, courier_core::CallOptions::new()),
    };
    let (parts, body) = req.into_parts();
    config.budget.deposit(&parts, now);
    let head = RequestHead::from_parts(&parts);
    let safe = retry
        .map(|r| r.safe)
        .or(options.retry_safety())
        .unwrap_or_else(|| config.classifier.is_retry_safe(&head));
    let sketch = match config.delay {
        Delay::Learned { .. } => Some(config.sketches.of(head.host(), config.window, now)),
        Delay::Fixed(_) => None,
    };
    let delay = match (options.hedging(), config.delay, &sketch) {
        (Some(Hedging::Off), ..) => None,
        (Some(Hedging::After(delay)), ..) | (None, Delay::Fixed(delay), _) => Some(delay),
        (None, Delay::Learned { q, min, max }, Some(sketch)) => sketch
            .quantile(q, now)
            .map(|learned| learned.clamp(min, max)),
        (None, Delay::Learned { .. }, None) => None,
    };
    let hedgeable = safe
        && config.attempts > 1
        && delay.is_some_and(|d| deadline.is_none_or(|end| now + d < end));
    let template = if hedgeable {
        body.try_clone_body()
    } else {
        None
    };
    let (Some(delay), Some(template)) = (delay.filter(|_| hedgeable), template) else {
        let req = Request::from_parts(parts, body);
        return ResponseFuture::direct(inner.call(req), sketch.map(|s| (s, now)));
    };
    let (classifier, hints) = match retry {
        Some(r) => (r.classifier.clone(), r.hints.clone()),
        None => (config.classifier.clone(), config.hints.clone()),
    };
    let call = Call::new(
        Arc::clone(config),
        classifier,
        hints,
        inner.clone(),
        parts,
        template,
        delay,
        deadline,
        sketch,
        now,
    );
    ResponseFuture::hedged(call.start(inner, body))
}

/// Every request of a call that sent a hedge, as a response extension: when each went and
/// how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hedged {
    requests: Vec<HedgeRecord>,
}

/// One request of a hedged call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HedgeRecord {
    /// 1 for the first request, 2 for the first hedge, and so on.
    pub attempt: u32,
    /// When it went, counted from the first.
    pub offset: Duration,
    /// How it ended.
    pub outcome: HedgeOutcome,
}

/// How one request of a hedged call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HedgeOutcome {
    /// Its answer is the call's.
    Won,
    /// Dropped while out, because another won or the call ended.
    Cancelled,
    /// Answered with what might change (a 502, a reset): the next hedge went at once.
    NonFatal,
    /// Refused below before it was sent (an open breaker, the rate limiter, the concurrency
    /// limit).
    Refused,
}

impl HedgeOutcome {
    /// `won`, `cancelled`, `non_fatal` or `refused`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Won => "won",
            Self::Cancelled => "cancelled",
            Self::NonFatal => "non_fatal",
            Self::Refused => "refused",
        }
    }
}

impl Hedged {
    /// Every request of the call, in the order they went.
    pub fn requests(&self) -> &[HedgeRecord] {
        &self.requests
    }

    /// The request whose answer is the call's, if one won.
    pub fn winner(&self) -> Option<&HedgeRecord> {
        self.requests
            .iter()
            .find(|r| r.outcome == HedgeOutcome::Won)
    }
}

impl fmt::Display for Hedged {
    /// `#1 at 0 ms: cancelled, #2 at 50 ms: won`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requests.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "#{} at {} ms: {}",
                r.attempt,
                r.offset.as_millis(),
                r.outcome.as_str()
            )?;
        }
        Ok(())
    }
}

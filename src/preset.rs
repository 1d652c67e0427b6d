//! The preset: every courier layer in the order that makes them work together.
//!
//! ```text
//! caller
//!  └ Deadline            total budget for the whole call, response body included
//!    └ EtagCache         fresh hit: answer at once; else add validators; 304: stored body
//!      └ Retry           the attempt loop, and its hedges; every attempt goes through everything below
//!        └ CircuitBreaker    per host: fail fast while open, trials judged together while half-open
//!          └ RateLimit       per host: pace every attempt, retries included
//!            └ AdaptivePacing   per host: pace an overloaded host at what it accepts
//!              └ ConcurrencyLimit  per host: bound the attempts in flight
//!                └ AttemptTimeout   bound one attempt; never longer than the deadline's rest
//!                  └ ClassifyBody     read an answer's first bytes for the classifier (opt-in)
//!                    └ transport      hyper-util or reqwest, with its own retries off
//! ```
//!
//! - The deadline is outermost so that it covers retries, backoff and rate-limit waits, and the
//!   body: one budget, whatever happens inside.
//! - The cache sits outside retry so that every attempt carries the same validators and a 304
//!   is merged once; a fresh hit spends no attempt, no token and no breaker trial.
//! - The breaker is outside the limiter so that an open circuit spends no token.
//! - Adaptive pacing is inside retry and the breaker, beside the limiter: every attempt of every
//!   caller is paced together, and it learns from each attempt's own answer.
//! - The limiter is inside retry so that a retry costs a token like a first try: a retry costs
//!   the server exactly as much.
//! - The concurrency limit holds a permit per attempt, not per call: below retry, so that a
//!   call asleep between attempts is not counted in flight; below the breaker, the rate limiter
//!   and pacing, so that an attempt refused or waiting for its slot holds no permit, and its
//!   wait is not in the latency an adaptive limit learns from; above the attempt timeout, so
//!   that an attempt cut off by it reaches the limit as a timeout and its permit covers the
//!   whole attempt. The permit is held until the answer's body ends or is dropped.
//! - Hedging ([`CourierLayer::hedge`]) is done by the retry service itself
//!   ([`Retry::with_hedge`]), as a [`HedgeLayer`] just below it would: each attempt may be
//!   hedged, and each hedge passes the breaker, the limiter, pacing and the concurrency limit
//!   like any attempt. Not a service of its own, measured on the `courier` CLI binary (`cargo
//!   check`, the preset named in many of its futures): with retry's own hedging it checks in
//!   203 s at a 7.7 GB peak, as it did with no hedging; with one more level that only passes
//!   calls through, 264 s and 7.7 GB; with one more level bounded as hedging needs (its
//!   service `Clone`, `Send` and `'static`, its error `Into<BoxError>`), it was stopped at
//!   11 GB after 4 minutes
//!   (an earlier try passed 20 GB). It is off by default: a hedge is extra load on the host,
//!   which its owner decides on, as gRPC's hedging policy and tower's `Hedge` are opt-in.
//! - The attempt timeout is innermost so that it bounds one attempt, never the waits between.
//! - The body's classification ([`ClassifyBody`], a pass-through unless the
//!   [`classifier`](CourierLayer::classifier) has a body rule) is under the attempt timeout,
//!   so that the bytes it waits for are bounded like the attempt's head, and under every layer
//!   that decides, so that all of them read the verdict it puts on the answer.
//! - Retry happens in one place: the transports built here have their own retries off.
//!
//! # How the preset judges a host
//!
//! One rule, for every layer that judges: **a host is judged by its calls, not by attempts,
//! and by what a failure says about the host.** Retry, the breaker and pacing read the same
//! verdict on each attempt, from one [`Classifier`] ([`CourierLayer::classifier`]; its
//! default verdicts are the table in [`courier_core::classifier`]): a connect failure means
//! nothing was sent and the host is not there; a timeout or a read failure came after the
//! request went out; tls and local failures are ours and say nothing about the host; an
//! overload without a hint is pacing's signal; answers that count against the host are the
//! breaker's failing answers. Overloaded
//! is not down: a host that refuses part of its load, or has a broken path among working
//! ones, is up, and cutting every caller off would turn a slow service into a dead one.
//!
//! - **Retry** ([`RetryLayer`]) tries each call up to 3 times, and puts the records of the
//!   attempts so far on each retry, so that the layers below tell a retry from a new call. It
//!   backs off from 2 s after a bare 503 or 429 (0.5 s after a glitch), so that a crowd of
//!   strangers, each with a client of its own, spreads its retries over the time the host
//!   needs; a server's hint is obeyed exactly; the retry budget caps an outage's extra load.
//! - **The breaker** ([`preset_breaker`]) counts each call once, however many attempts it
//!   takes, and opens a host's circuit for one of three reasons:
//!   - the host is not there: 5 connections in a row found nothing listening (refused, a
//!     name that does not resolve, a network out of reach). Here every attempt counts, a
//!     retry's too: nothing was sent, and each one found the host absent anew;
//!   - it fails most calls that reach it: at least half of its calls over the last 30 s
//!     (and at least 100 calls) failed after the request went out (a reset, a timeout). Such a
//!     failure is that call's, weighed into the rate: by itself it never opens a host that
//!     answers other calls; a retry that succeeds makes its call a success;
//!   - it answers nothing but failing answers: 5xx with no success in between for 30 s.
//!
//!   Open, it refuses calls at once (`CircuitOpen`) for 30 s, doubling on each trip in a row
//!   up to 5 minutes, less a random share of up to half (so that many clients do not probe
//!   together); then half-open lets 5 trials through and judges them together: 3 successes
//!   close the circuit, 3 failures open it again. One trial that meets a broken path does not
//!   keep a serving host out. The state is per host; to isolate a broken route, key a breaker
//!   by route (`CircuitBreakerLayer::new().key_by(|head| (head.host(), head.uri().path().to_owned()))`).
//! - **Adaptive pacing** ([`AdaptivePacingLayer`]) slows every caller to the rate the host
//!   accepts once half of at least 10 answers in a second are overload signals: only the path
//!   they come from while they all come from one path (a path that always answers 503 slows
//!   at most itself), the whole host once they come from more than one. It lets the rate grow
//!   back when the signals stop, and stops pacing where pacing does not help. Its waits are
//!   named pacing (`courier.pacing.wait_ms`), not the rate limiter's.
//! - **The concurrency limit** ([`preset_concurrency_limit`]) bounds the attempts in flight to
//!   each host at 1000, fixed, with no queue: an attempt over the bound fails at once with
//!   `ConcurrencyLimited`, a local refusal that says nothing about the host (retry does not
//!   repeat it and gives the retry back to its budget; the breaker and pacing do not count
//!   it). It never binds on ordinary traffic; what it stops is a host that slows from 5 ms to
//!   5 s holding every caller's calls (at 1 000 calls a second, 5 000 in flight). The
//!   adaptive limit (`ConcurrencyLimitLayer::new()`) is not the default: it learns each
//!   host's capacity from its latency and keeps a queueing host at its unloaded latency, but
//!   a fresh host starts at 20 calls, so a caller that opens 100 at once is refused in its
//!   first hundreds of milliseconds (courier-bench's `concurrency` simulations).
//!
//! The three that slow a caller down each answer one question, and none answers another's:
//! pacing, **how often** (a rate, learned from overload answers); the concurrency limit, **how
//! many at once** (learned, when adaptive, from latency: a host that queues without refusing);
//! the breaker, **whether at all** (a host that is down or fails most calls). A refusal by
//! one is never a signal to the others.
//!
//! Why these numbers: the soak's broken-paths mix (courier-chaos: one shared preset with
//! these defaults, 32 callers, one host, every call its own path, one in six resetting or
//! stalling past the attempt timeout on every attempt) fails 17 % of the host's calls. Counting
//! failed calls in a row instead of the rate (5, retries once) opens the circuit in the first
//! seconds: 99.8 % of the calls to answering paths refused over hyper, 99.8 % over reqwest. The
//! rate at half refuses none of them (0 of 8 974 and 0 of 9 238, RELIABILITY.md); a fifth
//! refuses none either, but sits three points above the share the broken paths fail, where
//! half leaves room and still opens a host where 60 % of the calls fail, after about 100
//! calls. Five trials judged together reopen such a host with a chance of 3.5 % (one trial:
//! 17 %). The growing open time is Envoy's outlier ejection (30 s times the ejections, up to
//! 300 s). courier-bench's `overload` simulations check the rule through the whole preset.
//!
//! Each layer can be switched off, or replaced by one configured by hand. A layer switched off
//! is its service's pass-through mode (`Retry::pass_through(inner)` and so on): the stack keeps
//! one concrete type, [`Stack`], that names each layer once, and nothing is boxed per call.
//!
//! ```no_run
//! use courier::CourierLayer;
//! use http_body_util::Full;
//! use bytes::Bytes;
//! use std::time::Duration;
//! use tower::ServiceExt;
//!
//! # async fn run() -> Result<(), courier::core::BoxError> {
//! let client = CourierLayer::new()
//!     .deadline(Duration::from_secs(10))
//!     .hyper::<Full<Bytes>>();
//! let resp = client
//!     .oneshot(http::Request::get("http://127.0.0.1:8080/items").body(Full::default())?)
//!     .await?;
//! println!("{}", resp.status());
//! # Ok(()) }
//! ```

use crate::routes::{Route, RouteFuture, RouteSource, Routed, Rules};
use courier_breaker::{CircuitBreaker, CircuitBreakerLayer, FailureRate, OpenBackoff};
use courier_cache::{CacheBody, EtagCache, EtagCacheLayer};
use courier_concurrency::{ConcurrencyBody, ConcurrencyLimit, ConcurrencyLimitLayer};
use courier_core::{BoxError, Classifier, HostKey, PerHost};
use courier_deadline::{
    AttemptTimeout, AttemptTimeoutLayer, Deadline, DeadlineBody, DeadlineLayer,
};
use courier_ratelimit::{
    AdaptivePacing, AdaptivePacingLayer, TokenBucketRateLimit, TokenBucketRateLimitLayer,
};
#[cfg(feature = "redis")]
use courier_redis::{LocalOrRedis, RedisStore};
use courier_retry::hedge::HedgeLayer;
use courier_retry::{ClassifiedBody, ClassifyBody, Retry, RetryLayer};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_layer::Layer;
use tower_service::Service;

/// The preset's default total budget per call: room for three attempts and a server-requested
/// wait of up to the retry layer's 60 s `max_wait`.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(90);

/// The preset's default bound on one attempt (to response headers).
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the preset's [`deadline`](CourierLayer::deadline) and
/// [`attempt_timeout`](CourierLayer::attempt_timeout) take: the layer `L`, anything it is made
/// from (a [`Duration`]), or `None` for none. Sealed.
pub trait Setting<L>: sealed::Sealed<L> {
    /// The layer, or `None`.
    fn into_layer(self) -> Option<L>;
}

mod sealed {
    pub trait Sealed<L> {}
}

macro_rules! setting {
    ($($layer:ty),*) => {$(
        impl sealed::Sealed<$layer> for $layer {}
        impl Setting<$layer> for $layer {
            fn into_layer(self) -> Option<$layer> {
                Some(self)
            }
        }
        impl sealed::Sealed<$layer> for Duration {}
        impl Setting<$layer> for Duration {
            fn into_layer(self) -> Option<$layer> {
                Some(self.into())
            }
        }
        impl sealed::Sealed<$layer> for Option<$layer> {}
        impl Setting<$layer> for Option<$layer> {
            fn into_layer(self) -> Option<$layer> {
                self
            }
        }
    )*};
}

setting!(DeadlineLayer, AttemptTimeoutLayer);

/// Where the preset's rate limiter keeps its buckets: in process, or (feature `redis`) in
/// process or in Redis, chosen at run time.
#[cfg(feature = "redis")]
pub type PresetStore = LocalOrRedis<HostKey>;
/// Where the preset's rate limiter keeps its buckets: in process, or (feature `redis`) in
/// process or in Redis, chosen at run time.
#[cfg(not(feature = "redis"))]
pub type PresetStore = courier_ratelimit::InMemoryStore<HostKey>;

/// The breaker the preset starts with: [`CircuitBreakerLayer::new`] (5 failures in a row,
/// 30 s open), with failing answers opening the circuit only after 30 s without a success
/// ([`failing_answers_for`](CircuitBreakerLayer::failing_answers_for)), failures after the
/// request went out weighed by their rate (half of at least 100 calls over 30 s,
/// [`failure_rate`](CircuitBreakerLayer::failure_rate)), 5 half-open trials judged together,
/// and an open time that doubles up to 5 minutes ([`open_backoff`](CircuitBreakerLayer::open_backoff)).
///
/// The [module docs](self) give the rule and the measurements behind each number.
pub fn preset_breaker() -> CircuitBreakerLayer {
    let rate = FailureRate::new(
        DEFAULT_FAILURE_THRESHOLD,
        DEFAULT_FAILURE_WINDOW,
        DEFAULT_FAILURE_MIN_CALLS,
    )
    .expect("the preset's failure rate is valid");
    CircuitBreakerLayer::new()
        .failing_answers_for(DEFAULT_FAILING_ANSWERS_FOR)
        .failure_rate(rate)
        .half_open_trials(DEFAULT_HALF_OPEN_TRIALS)
        .open_backoff(OpenBackoff::new(DEFAULT_OPEN_BACKOFF_CAP))
}

/// The concurrency limit the preset starts with: [`DEFAULT_CONCURRENCY_LIMIT`] attempts in
/// flight per host, fixed, no queue: a bulkhead that never binds on ordinary traffic and stops
/// a host that slows down from holding an unbounded number of the caller's calls.
///
/// The [module docs](self) give the reasons, and why the adaptive limit is not the default.
pub fn preset_concurrency_limit() -> ConcurrencyLimitLayer {
    ConcurrencyLimitLayer::new().fixed(DEFAULT_CONCURRENCY_LIMIT)
}

/// The attempts in flight per host the preset allows.
pub const DEFAULT_CONCURRENCY_LIMIT: NonZeroUsize = NonZeroUsize::new(1000).expect("1000 > 0");

/// How long failing answers must come, with no success, before the preset's breaker opens.
pub const DEFAULT_FAILING_ANSWERS_FOR: Duration = Duration::from_secs(30);

/// The share of a host's calls that failed after the request went out which opens the
/// preset's breaker.
pub const DEFAULT_FAILURE_THRESHOLD: f64 = 0.5;

/// The window the preset's breaker weighs that share over.
pub const DEFAULT_FAILURE_WINDOW: Duration = Duration::from_secs(30);

/// The fewest calls in the window before the share counts.
pub const DEFAULT_FAILURE_MIN_CALLS: NonZeroU32 = NonZeroU32::new(100).expect("100 > 0");

/// The trials the preset's half-open breaker judges together.
pub const DEFAULT_HALF_OPEN_TRIALS: NonZeroU32 = NonZeroU32::new(5).expect("5 > 0");

/// The longest the preset's breaker stays open after trips in a row (doubling from 30 s).
pub const DEFAULT_OPEN_BACKOFF_CAP: Duration = Duration::from_secs(300);

/// The preset's stack over the transport `S`, outermost first: each layer once, each one on or
/// passing through as [`CourierLayer`] says.
pub type Stack<S> = Deadline<
    EtagCache<
        Retry<
            CircuitBreaker<
                TokenBucketRateLimit<
                    AdaptivePacing<ConcurrencyLimit<AttemptTimeout<ClassifyBody<S>>>>,
                    PerHost,
                    PresetStore,
                >,
            >,
        >,
    >,
>;

/// The preset's response body over a transport whose body is `B`: the deadline's bound, the
/// cache's stored or upstream body, the attempt's permit, the attempt's bound, the bytes read
/// for the classifier.
pub type PresetBody<B> = DeadlineBody<CacheBody<ConcurrencyBody<DeadlineBody<ClassifiedBody<B>>>>>;

/// The preset as a `tower::Layer`: the order and defaults of docs/ARCHITECTURE.md, each layer
/// optional.
///
/// Defaults: a 90 s total deadline, a 30 s attempt timeout, the ETag cache (64 MiB), retry
/// (3 attempts, full jitter from 0.5 s, or 2 s after a bare 503 or 429, 60 s max wait, 10 %
/// budget), the circuit breaker ([`preset_breaker`]), adaptive pacing per host. The rate limiter is off until
/// [`rate_limit`](Self::rate_limit) gives it the host's quota; its buckets live in process, or
/// in Redis, shared by every replica, with `shared_rate_limit` (feature `redis`). See the
/// [module docs](self) for how the breaker, retry and pacing share the work under overload.
///
/// # Clone
///
/// Each layer keeps its state (buckets, breakers, budgets, the cache) behind an `Arc`, so every
/// service this layer makes, and every clone of those, shares the same limits and the same
/// cache.
#[derive(Debug, Clone)]
pub struct CourierLayer {
    pub(crate) deadline: Option<DeadlineLayer>,
    pub(crate) cache: Option<EtagCacheLayer>,
    pub(crate) retry: Option<RetryLayer>,
    pub(crate) hedge: Option<HedgeLayer>,
    pub(crate) breaker: Option<CircuitBreakerLayer>,
    pub(crate) rate_limit: Option<TokenBucketRateLimitLayer>,
    pub(crate) pacing: Option<AdaptivePacingLayer>,
    pub(crate) concurrency: Option<ConcurrencyLimitLayer>,
    #[cfg(feature = "redis")]
    shared_store: Option<RedisStore<HostKey>>,
    pub(crate) attempt_timeout: Option<AttemptTimeoutLayer>,
    /// The classifier set with [`CourierLayer::classifier`], given to every layer that reads
    /// answers, now and when it is set later.
    pub(crate) classifier: Option<Classifier>,
    /// The rules per destination, if any ([`route`](CourierLayer::route), a configuration).
    pub(crate) routes: Option<Arc<RouteSource>>,
    #[cfg(any(feature = "hyper-client", feature = "reqwest"))]
    pub(crate) user_agent: Option<http::HeaderValue>,
}

impl Default for CourierLayer {
    fn default() -> Self {
        Self::new()
    }
}

// === impl CourierLayer ===

impl CourierLayer {
    /// Every layer with its defaults (the rate limiter off).
    pub fn new() -> Self {
        Self {
            deadline: Some(DeadlineLayer::new(DEFAULT_DEADLINE)),
            cache: Some(EtagCacheLayer::new()),
            retry: Some(RetryLayer::new()),
            breaker: Some(preset_breaker()),
            pacing: Some(AdaptivePacingLayer::new()),
            concurrency: Some(preset_concurrency_limit()),
            attempt_timeout: Some(AttemptTimeoutLayer::new(DEFAULT_ATTEMPT_TIMEOUT)),
            ..Self::bare()
        }
    }

    /// Every layer off: the stack passes calls straight through. Switch on what you need.
    pub fn bare() -> Self {
        Self {
            deadline: None,
            cache: None,
            retry: None,
            hedge: None,
            breaker: None,
            rate_limit: None,
            pacing: None,
            concurrency: None,
            #[cfg(feature = "redis")]
            shared_store: None,
            attempt_timeout: None,
            classifier: None,
            routes: None,
            #[cfg(any(feature = "hyper-client", feature = "reqwest"))]
            user_agent: crate::transport::default_user_agent(),
        }
    }

    /// The total budget per call: a [`Duration`], a [`DeadlineLayer`] configured by hand (e.g.
    /// with propagation to the server), or `None` for no deadline. Defaults to 90 s.
    pub fn deadline(mut self, deadline: impl Setting<DeadlineLayer>) -> Self {
        self.deadline = deadline.into_layer();
        self
    }

    /// The bound on one attempt: a [`Duration`], an [`AttemptTimeoutLayer`] configured by
    /// hand, or `None` for no bound. Defaults to 30 s.
    pub fn attempt_timeout(mut self, per_attempt: impl Setting<AttemptTimeoutLayer>) -> Self {
        self.attempt_timeout = per_attempt.into_layer();
        self
    }

    /// The cache, or `None` for no cache. Defaults to [`EtagCacheLayer::new`].
    pub fn cache(mut self, layer: impl Into<Option<EtagCacheLayer>>) -> Self {
        self.cache = layer.into();
        self
    }

    /// The retry policy, or `None` for a single attempt. Defaults to [`RetryLayer::new`].
    /// It reads answers with the preset's [`classifier`](Self::classifier) when one is set.
    pub fn retry(mut self, layer: impl Into<Option<RetryLayer>>) -> Self {
        self.retry = layer.into();
        self.share_classifier()
    }

    /// Hedging against the slow tail, or `None` for none. Defaults to `None`: a hedge is extra
    /// load on the host (at most 10 % with [`HedgeLayer::new`]), which its owner decides on.
    /// [`HedgeLayer::new`] hedges a retry-safe request after the host's 95th percentile
    /// latency; see [`courier_retry::hedge`]. It reads answers with the preset's
    /// [`classifier`](Self::classifier) when one is set.
    ///
    /// The retry service hedges its own attempts ([`Retry::with_hedge`]), so one rule says
    /// what may be repeated: an attempt is hedged when retry would repeat it (its classifier's
    /// retry-safe paths, such as the gRPC methods of a `courier::grpc::GrpcSafe`,
    /// included); with retry off, when the hedge layer's own classifier (the preset's, when
    /// one is set) says so.
    ///
    /// ```
    /// use courier::CourierLayer;
    /// use courier::retry::hedge::HedgeLayer;
    ///
    /// let layer = CourierLayer::new().hedge(HedgeLayer::new());
    /// # let _ = layer;
    /// ```
    pub fn hedge(mut self, layer: impl Into<Option<HedgeLayer>>) -> Self {
        self.hedge = layer.into();
        self.share_classifier()
    }

    /// The circuit breaker, or `None` for none. Defaults to [`preset_breaker`]: a layer you
    /// give here is used as it is (but for the preset's [`classifier`](Self::classifier), when
    /// one is set), so start from `preset_breaker()` to keep its rule.
    pub fn circuit_breaker(mut self, layer: impl Into<Option<CircuitBreakerLayer>>) -> Self {
        self.breaker = layer.into();
        self.share_classifier()
    }

    /// The adaptive pacing, or `None` for none. Defaults to [`AdaptivePacingLayer::new`]: a
    /// host that signals overload (an overload verdict without a hint, a 503 or 429 by
    /// default; timeouts) is paced at what it accepts, every caller of this layer together.
    /// It reads answers with the preset's [`classifier`](Self::classifier) when one is set.
    pub fn adaptive_pacing(mut self, layer: impl Into<Option<AdaptivePacingLayer>>) -> Self {
        self.pacing = layer.into();
        self.share_classifier()
    }

    /// The bound on attempts in flight per host, or `None` for none. Defaults to
    /// [`preset_concurrency_limit`]: a fixed bulkhead of
    /// [`DEFAULT_CONCURRENCY_LIMIT`] attempts per host, no queue. Give
    /// `ConcurrencyLimitLayer::new()` for a limit learned from each host's latency. It reads
    /// answers with the preset's [`classifier`](Self::classifier) when one is set. See the
    /// [module docs](self) for where it sits and why.
    pub fn concurrency_limit(mut self, layer: impl Into<Option<ConcurrencyLimitLayer>>) -> Self {
        self.concurrency = layer.into();
        self.share_classifier()
    }

    /// The one place that decides what an answer means, for every layer of the preset: retry
    /// (may asking again change it? may the request be repeated?), the breaker (does it count
    /// against the host?), adaptive pacing (is it an overload signal?), the body's reading
    /// ([`Classifier::classify_body`]) and the spans' `error.type`. Given to the layers set
    /// now and to those set later. Defaults to each layer's own, which is
    /// [`Classifier::new`] unless you configured that layer by hand.
    ///
    /// Setting it gives each of those layers state of its own (a layer is a value): set it
    /// before you make services that should share their state.
    ///
    /// ```
    /// use courier::CourierLayer;
    /// use courier::core::{Classifier, Verdict};
    /// use http::StatusCode;
    ///
    /// // For this API a 409 is transient, and a 200 with `x-throttled` is an overload.
    /// let layer = CourierLayer::new().classifier(Classifier::new().reclassify(|head, verdict| {
    ///     if head.status() == StatusCode::CONFLICT {
    ///         Verdict::transient()
    ///     } else if head.headers().contains_key("x-throttled") {
    ///         Verdict::overload(false).against_host(true)
    ///     } else {
    ///         verdict
    ///     }
    /// }));
    /// # let _ = layer;
    /// ```
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.classifier = Some(classifier);
        self.share_classifier()
    }

    /// Gives the preset's classifier, if one is set, to every layer that reads answers.
    fn share_classifier(mut self) -> Self {
        if let Some(c) = &self.classifier {
            self.retry = self.retry.map(|l| l.classifier(c.clone()));
            self.hedge = self.hedge.map(|l| l.classifier(c.clone()));
            self.breaker = self.breaker.map(|l| l.classifier(c.clone()));
            self.pacing = self.pacing.map(|l| l.classifier(c.clone()));
            self.concurrency = self.concurrency.map(|l| l.classifier(c.clone()));
        }
        self
    }

    /// The rate limiter, or `None` for none. Defaults to `None`: pacing needs the host's quota.
    pub fn rate_limit(mut self, layer: impl Into<Option<TokenBucketRateLimitLayer>>) -> Self {
        self.rate_limit = layer.into();
        self
    }

    /// Keeps the rate limiter's buckets (and the servers' parks) in Redis, shared by every
    /// replica that uses the same Redis and key prefix, instead of in this process; `None`
    /// keeps them in process. Applies to the limiter set with [`rate_limit`](Self::rate_limit)
    /// (in either order); without one there is nothing to share. Defaults to `None`.
    ///
    /// ```no_run
    /// use courier::CourierLayer;
    /// use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
    /// use courier::redis::RedisStore;
    /// use std::num::NonZeroU32;
    ///
    /// # async fn run() -> Result<(), courier::core::BoxError> {
    /// let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
    /// let layer = CourierLayer::new()
    ///     .rate_limit(TokenBucketRateLimitLayer::new(
    ///         Rate::per_second(10.0)?,
    ///         NonZeroU32::new(5).unwrap(),
    ///     ))
    ///     .shared_rate_limit(store);
    /// # let _ = layer; Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    pub fn shared_rate_limit(mut self, store: impl Into<Option<RedisStore<HostKey>>>) -> Self {
        self.shared_store = store.into();
        self
    }

    /// The rate limit layer the stack uses: the one set with `rate_limit`, its buckets in
    /// Redis when a shared store is set. Its clones share the buckets either way.
    fn rate_limit_layer(&self) -> Option<TokenBucketRateLimitLayer<PerHost, PresetStore>> {
        let layer = self.rate_limit.clone()?;
        #[cfg(feature = "redis")]
        let layer = {
            let store = match &self.shared_store {
                Some(shared) => LocalOrRedis::Redis(shared.clone()),
                None => LocalOrRedis::Local(layer.store().clone()),
            };
            layer.store_in(store)
        };
        Some(layer)
    }

    /// The deadline layer the stack uses. Below it, the attempt timeout ends each attempt by
    /// the deadline, and retry and the in-process rate limiter never wait past it: with both
    /// true, the deadline layer needs no timer of its own for the headers (one timer per call
    /// saved). A Redis-backed limiter waits on the network before the attempt timeout starts,
    /// so with one the deadline layer keeps its timer.
    fn deadline_layer_in_stack(&self) -> Option<DeadlineLayer> {
        let layer = self.deadline.clone()?;
        #[cfg(feature = "redis")]
        let shared = self.shared_store.is_some();
        #[cfg(not(feature = "redis"))]
        let shared = false;
        Some(layer.headers_bounded_below(self.attempt_timeout.is_some() && !shared))
    }

    /// The circuit breaker layer, to reach its control handle.
    pub fn breaker_layer(&self) -> Option<&CircuitBreakerLayer> {
        self.breaker.as_ref()
    }

    /// The adaptive pacing layer, to read what it learned
    /// ([`learned_rate`](AdaptivePacingLayer::learned_rate)).
    pub fn pacing_layer(&self) -> Option<&AdaptivePacingLayer> {
        self.pacing.as_ref()
    }

    /// The concurrency limit layer, to read each host's calls in flight and limit
    /// ([`handle`](ConcurrencyLimitLayer::handle)).
    pub fn concurrency_layer(&self) -> Option<&ConcurrencyLimitLayer> {
        self.concurrency.as_ref()
    }

    /// A rule for the calls `route` takes: `policy` is given this layer as it stands (call
    /// `route` after the default's settings) and returns the rule's layer. Rules are tried in
    /// the order they were added, and the first that takes a call sends it through its own
    /// stack; a call no rule takes goes through this layer's. A layer the rule keeps (one it
    /// does not replace) is this layer's, with its state: a rule that sets only the attempts
    /// shares this layer's buckets, breakers and cache.
    ///
    /// ```
    /// use courier::CourierLayer;
    /// use courier::retry::RetryLayer;
    /// use courier::routes::Route;
    /// use std::time::Duration;
    ///
    /// let layer = CourierLayer::new()
    ///     .route(Route::new().host("*.internal.example"), |l| {
    ///         l.deadline(Duration::from_millis(200))
    ///     })
    ///     .route(Route::new().path_prefix("/payments"), |l| l.retry(RetryLayer::new().attempts(1)));
    /// # let _ = layer;
    /// ```
    pub fn route(
        mut self,
        route: Route,
        policy: impl FnOnce(CourierLayer) -> CourierLayer,
    ) -> Self {
        let mut base = self.clone();
        base.routes = None;
        let rule = policy(base);
        let mut rules = match &self.routes {
            Some(source) => Rules::clone(&source.rules()),
            None => Rules {
                default: None,
                routes: Vec::new(),
            },
        };
        rules.routes.push((route, rule));
        self.routes = Some(Arc::new(RouteSource::new(rules)));
        self
    }

    /// The preset a [`Config`](crate::config::Config) describes: its default policy and its
    /// routes (see [`crate::config`]).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::config::ConfigError) naming every bad field; nothing is built.
    pub fn from_config(config: &crate::config::Config) -> Result<Self, crate::config::ConfigError> {
        crate::config::build(config, false).map(|(layer, _)| layer)
    }

    /// As [`from_config`](Self::from_config), with a handle that applies a new configuration
    /// to every service the layer makes, keeping the state of what did not change
    /// ([`ReloadHandle`](crate::config::ReloadHandle)). Each call goes through the rules, even
    /// with none (a reload may add some).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`](crate::config::ConfigError) naming every bad field; nothing is built.
    pub fn from_config_reloadable(
        config: &crate::config::Config,
    ) -> Result<(Self, crate::config::ReloadHandle), crate::config::ConfigError> {
        let (layer, handle) = crate::config::build(config, true)?;
        let handle = handle.ok_or_else(|| {
            crate::config::ConfigError::one("", "a reloadable build gave no handle")
        })?;
        Ok((layer, handle))
    }

    /// Wraps `inner`, any `Service<http::Request<B>>`, as it is.
    ///
    /// A transport's own settings stay as `inner` has them: the layer's
    /// [`user_agent`](Self::user_agent) does not reach it, and a
    /// [`HyperService`](crate::transport::HyperService) or
    /// [`ReqwestService`](crate::transport::ReqwestService) made by hand sends its own agent
    /// (`courier/<version>` unless set on it). Over courier's transports, build with
    /// [`hyper`](Self::hyper), [`hyper_with`](Self::hyper_with) or [`reqwest`](Self::reqwest),
    /// which apply every setting of the layer.
    pub fn service<S: Clone>(&self, inner: S) -> Courier<S> {
        self.layer(inner)
    }

    /// The `User-Agent` that the transports of [`hyper`](Self::hyper),
    /// [`hyper_with`](Self::hyper_with) and [`reqwest`](Self::reqwest) put on a request that
    /// carries none, or `None` to add none (a reqwest client's own `user_agent` then applies).
    /// A transport given to [`service`](Self::service) keeps its own agent: set it there.
    /// Defaults to [`DEFAULT_USER_AGENT`](crate::transport::DEFAULT_USER_AGENT),
    /// `courier/<version>`, in [`new`](Self::new) and [`bare`](Self::bare) alike.
    #[cfg(any(feature = "hyper-client", feature = "reqwest"))]
    pub fn user_agent(mut self, user_agent: impl Into<Option<http::HeaderValue>>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Wraps a pooled hyper-util client built by [`crate::transport::hyper_client`] (HTTPS with
    /// the system's trust store under the default `rustls` feature), shared behind an `Arc`
    /// ([`HyperService`](crate::transport::HyperService)).
    #[cfg(feature = "hyper-client")]
    pub fn hyper<B>(&self) -> Courier<crate::transport::HyperService<B>>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send,
    {
        self.hyper_with(crate::transport::hyper_client())
    }

    /// Wraps a hyper-util client of your own making, applying every setting of this layer
    /// ([`user_agent`](Self::user_agent) included): the way to use a hyper client with TLS
    /// settings of your own, a private CA or a client identity
    /// ([HTTPS](crate::transport#https)). Switch its retry of canceled requests off, as
    /// [`crate::transport::hyper_client`] does.
    #[cfg(feature = "hyper-client")]
    pub fn hyper_with<B>(
        &self,
        client: crate::transport::HyperClient<B>,
    ) -> Courier<crate::transport::HyperService<B>> {
        self.layer(crate::transport::HyperService::new(client).user_agent(self.user_agent.clone()))
    }

    /// Wraps a `reqwest::Client` (build it with [`crate::transport::reqwest_client_builder`] so
    /// that its own retries are off).
    #[cfg(feature = "reqwest")]
    pub fn reqwest<B>(
        &self,
        client: reqwest::Client,
    ) -> Courier<crate::transport::ReqwestService<B>> {
        self.layer(
            crate::transport::ReqwestService::new(client).user_agent(self.user_agent.clone()),
        )
    }
}

/// `Some(layer)` wraps `inner` in its service, `None` in the same service passing through.
fn on_or_pass<L, S, T>(
    layer: Option<L>,
    inner: S,
    on: impl FnOnce(S, L) -> T,
    pass: impl FnOnce(S) -> T,
) -> T {
    match layer {
        Some(layer) => on(inner, layer),
        None => pass(inner),
    }
}

impl<S: Clone> Layer<S> for CourierLayer {
    type Service = Courier<S>;

    fn layer(&self, inner: S) -> Self::Service {
        match &self.routes {
            None => Courier {
                inner: self.stack(inner),
                routes: None,
            },
            Some(source) => {
                let (routed, default) = Routed::new(inner, Arc::clone(source), self);
                Courier {
                    inner: default,
                    routes: Some(Box::new(routed)),
                }
            }
        }
    }
}

impl CourierLayer {
    /// The stack of this layer's own settings over `inner`, its rules aside.
    pub(crate) fn stack<S>(&self, inner: S) -> Stack<S> {
        let inner = on_or_pass(
            self.classifier.clone(),
            inner,
            ClassifyBody::new,
            ClassifyBody::pass_through,
        );
        let inner = on_or_pass(
            self.attempt_timeout.clone(),
            inner,
            AttemptTimeout::new,
            AttemptTimeout::pass_through,
        );
        let inner = on_or_pass(
            self.concurrency.clone(),
            inner,
            ConcurrencyLimit::new,
            ConcurrencyLimit::pass_through,
        );
        let inner = on_or_pass(
            self.pacing.clone(),
            inner,
            AdaptivePacing::new,
            AdaptivePacing::pass_through,
        );
        let inner = on_or_pass(
            self.rate_limit_layer(),
            inner,
            TokenBucketRateLimit::new,
            TokenBucketRateLimit::pass_through,
        );
        let inner = on_or_pass(
            self.breaker.clone(),
            inner,
            CircuitBreaker::new,
            CircuitBreaker::pass_through,
        );
        let inner = on_or_pass(self.retry.clone(), inner, Retry::new, Retry::pass_through);
        // Hedging is the retry service's own: no service level of its own (see the module
        // docs).
        let inner = match self.hedge.clone() {
            Some(hedge) => inner.with_hedge(hedge),
            None => inner,
        };
        let inner = on_or_pass(
            self.cache.clone(),
            inner,
            EtagCache::new,
            EtagCache::pass_through,
        );
        on_or_pass(
            self.deadline_layer_in_stack(),
            inner,
            Deadline::new,
            Deadline::pass_through,
        )
    }
}

/// The preset's service: the whole [`Stack`] over `S`. Made by [`CourierLayer`].
///
/// `Clone + Send + Sync + 'static` whenever `S` is; needs no `Buffer`. Over a transport that
/// answers `Response<B>`, it answers `Response<`[`PresetBody<B>`]`>`; its error is
/// [`BoxError`], which [`crate::Error::from`] turns into an enum to match on.
#[derive(Debug, Clone)]
pub struct Courier<S> {
    /// The default policy's stack.
    inner: Stack<S>,
    /// With rules: a stack per rule, the default's among them.
    routes: Option<Box<Routed<S>>>,
}

// === impl Courier ===

impl<S> Courier<S> {
    /// The stack, to reach a layer's service (`get_ref` on each goes one layer down).
    pub fn get_ref(&self) -> &Stack<S> {
        &self.inner
    }

    /// The stack, unwrapped.
    pub fn into_inner(self) -> Stack<S> {
        self.inner
    }

    /// Boxes the service and its response body, for a type that names no layer:
    /// `BoxCloneSyncService<Request<B>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>`.
    /// Costs an allocation per call and per body.
    pub fn boxed<B, RB>(
        self,
    ) -> tower::util::BoxCloneSyncService<
        http::Request<B>,
        http::Response<http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>>,
        BoxError,
    >
    where
        Self: Service<http::Request<B>, Response = http::Response<RB>, Error = BoxError>
            + Clone
            + Send
            + Sync
            + 'static,
        <Self as Service<http::Request<B>>>::Future: Send + 'static,
        RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        tower::util::BoxCloneSyncService::new(self.map_response(|resp: http::Response<RB>| {
            resp.map(|b| b.map_err(Into::into).boxed_unsync())
        }))
    }
}

// The bounds are what the layers need of the transport, not `Stack<S>: Service<..>`. With that
// bound, a caller whose request body type was still to be inferred (`.hyper()` then `.oneshot`)
// had the trait solver prove the nine nested layers' where-clauses again and again: a test file
// of 100 lines took 7 minutes and almost 5 GB to build, 2.6 seconds with these bounds
// (tests/call_options.rs leaves its body type to inference on purpose).
impl<S, B, RB> Service<http::Request<B>> for Courier<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: courier_retry::RetryBody + Send + 'static,
    RB: http_body::Body + Send + 'static,
    RB::Data: Send,
    RB::Error: Into<BoxError> + Send,
{
    type Response = http::Response<PresetBody<RB>>;
    type Error = BoxError;
    type Future = RouteFuture<Stack<S>, http::Request<B>>;

    /// Without rules, the stack's readiness (the transport's). With rules, always ready: the
    /// call's stack is known only from the request, so each call's future waits for it.
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self.routes {
            None => self.inner.poll_ready(cx),
            Some(_) => Poll::Ready(Ok(())),
        }
    }

    #[inline]
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match &mut self.routes {
            None => RouteFuture::called(self.inner.call(req)),
            Some(routed) => routed.call(req),
        }
    }
}

// The preset with its buckets in Redis: two replicas share a server's park; an unreachable
// Redis under fail-closed refuses through the whole stack. The tests that need a Redis start
// their own (or use COURIER_REDIS_URL), and say that they were skipped where neither is there.

#[cfg(all(test, feature = "redis"))]
mod shared_rate_limit_tests {
    use crate::CourierLayer;
    use crate::core::{BoxError, RateLimited};
    use crate::ratelimit::{Mode, Rate, TokenBucketRateLimitLayer};
    use crate::redis::{FailurePolicy, RedisStore};
    use bytes::Bytes;
    use http_body_util::Full;
    use std::num::NonZeroU32;
    use std::time::Duration;
    use tower::{ServiceExt, service_fn};

    type Req = http::Request<Full<Bytes>>;
    type Resp = http::Response<Full<Bytes>>;

    fn limiter() -> TokenBucketRateLimitLayer {
        TokenBucketRateLimitLayer::new(
            Rate::per_second(100.0).unwrap(),
            NonZeroU32::new(10).unwrap(),
        )
        .mode(Mode::Reject)
    }

    fn request() -> Req {
        http::Request::get("https://api.example/x")
            .body(Full::default())
            .unwrap()
    }

    type Answer = std::future::Ready<Result<Resp, BoxError>>;

    fn answer_ok(_req: Req) -> Answer {
        std::future::ready(Ok(http::Response::new(Full::default())))
    }

    fn ok() -> tower::util::ServiceFn<fn(Req) -> Answer> {
        service_fn(answer_ok)
    }

    /// Nothing listens on port 1: under fail-closed the preset refuses with `RateLimited`,
    /// within the command timeout. (Proves the preset decides through the shared store; needs no
    /// Redis.)
    #[tokio::test]
    async fn the_preset_decides_through_the_shared_store() {
        let store = RedisStore::builder("redis://127.0.0.1:1")
            .policy(FailurePolicy::FailClosed)
            .command_timeout(Duration::from_millis(50))
            .connect_lazy()
            .expect("a valid url, inside a runtime");
        // Either order of the two setters works.
        let layer = CourierLayer::bare()
            .shared_rate_limit(store)
            .rate_limit(limiter());
        let err = tokio::time::timeout(
            Duration::from_secs(2),
            layer.service(ok()).oneshot(request()),
        )
        .await
        .expect("never held")
        .unwrap_err();
        assert!(crate::core::is_caused_by::<RateLimited>(&*err), "{err}");

        // The same stack without the shared store decides in process and admits.
        let layer = CourierLayer::bare()
            .rate_limit(limiter())
            .shared_rate_limit(None);
        layer
            .service(ok())
            .oneshot(request())
            .await
            .expect("admitted");
    }

    /// Two replicas (separate layers, stores and connections, one Redis): a 429 with
    /// Retry-After seen by one holds the other.
    #[tokio::test]
    async fn replicas_of_the_preset_share_a_park() {
        let Some(redis) =
            courier_testkit::redis::redis("replicas_of_the_preset_share_a_park").await
        else {
            return;
        };
        let url = redis.url();
        let prefix = courier_testkit::redis::unique_prefix("preset");
        let connect = || async {
            RedisStore::builder(url.as_str())
                .prefix(prefix.as_str())
                .command_timeout(Duration::from_millis(500))
                .connect()
                .await
                .expect("redis answers")
        };
        let a = CourierLayer::bare()
            .rate_limit(limiter())
            .shared_rate_limit(connect().await);
        let b_store = connect().await;
        let b = CourierLayer::bare()
            .rate_limit(limiter())
            .shared_rate_limit(b_store.clone());

        b.service(ok())
            .oneshot(request())
            .await
            .expect("nothing parked yet");
        let limited = service_fn(|_req: Req| async {
            let resp: Resp = http::Response::builder()
                .status(429)
                .header("retry-after", "30")
                .body(Full::default())
                .unwrap();
            Ok::<_, BoxError>(resp)
        });
        let resp = a.service(limited).oneshot(request()).await.unwrap();
        assert_eq!(resp.status(), 429);

        // The park reaches Redis in the background; give it a moment (bounded).
        let mut refused = None;
        for _ in 0..100 {
            match b.service(ok()).oneshot(request()).await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            }
        }
        let err = refused.expect("replica b is held by a's park");
        let limited = crate::core::cause_ref::<RateLimited>(&*err).expect("RateLimited");
        assert!(limited.retry_in() > Duration::from_secs(25), "{limited:?}");
        assert_eq!(
            b_store
                .fallback()
                .parked_until(&crate::core::HostKey::from_request(&request())),
            None
        );
        assert_eq!(b_store.outages(), 0);
    }
}

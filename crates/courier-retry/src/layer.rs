use crate::budget::{BudgetState, RetryBudget};
use crate::policy::Jitter;
use crate::service::Retry;
use courier_core::grpc::GrpcCode;
use courier_core::{Classifier, HintConfig, InvalidConfig, RequestHead};
use http::{Method, StatusCode};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tower_layer::Layer;

/// Applies [`Retry`] to a service: the attempt loop of courier.
///
/// See the [crate docs](crate) for what it decides and in which order.
///
/// # Clone
///
/// The configuration and the [`RetryBudget`] live behind an `Arc`: every [`Retry`] this layer
/// makes, and every clone of those, shares one budget.
///
/// # Setters
///
/// A layer is a value: each setter returns a layer with a budget of its own (fresh, with the
/// same settings). The services it makes share it with each other, never with services made
/// by the layer before the setter, which keep their settings and their budget.
#[derive(Clone)]
pub struct RetryLayer {
    config: Arc<Config>,
}

/// Everything a [`Retry`] reads; shared by the layer and every service it makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) attempts: u32,
    pub(crate) base: Duration,
    pub(crate) overload_base: Duration,
    pub(crate) cap: Duration,
    pub(crate) max_wait: Duration,
    pub(crate) jitter: Jitter,
    /// What each answer means, and which requests may be repeated.
    pub(crate) classifier: Classifier,
    pub(crate) generate_keys: bool,
    pub(crate) seed: Option<u64>,
    pub(crate) hints: HintConfig,
    pub(crate) budget: Option<Arc<BudgetState>>,
    /// Whether spans show the query in `url.full`.
    pub(crate) url_query: bool,
    /// The handles of the request-duration series seen so far.
    #[cfg(feature = "metrics")]
    pub(crate) durations: Arc<crate::metrics::Durations>,
    /// Numbers the calls, so that a seeded layer gives each call its own reproducible RNG.
    pub(crate) calls: Arc<AtomicU64>,
}

// === impl Config ===

impl Config {
    /// This layer's word to the hedges of an attempt it counts `safe` to repeat: that, and
    /// its classifier and hints to read their answers with.
    pub(crate) fn to_hedges(&self, safe: bool) -> crate::hedge::FromRetry<'_> {
        crate::hedge::FromRetry {
            safe,
            classifier: &self.classifier,
            hints: &self.hints,
        }
    }

    fn new() -> Self {
        Self {
            attempts: 3,
            base: Duration::from_millis(500),
            overload_base: Duration::from_secs(2),
            cap: Duration::from_secs(30),
            max_wait: Duration::from_secs(60),
            jitter: Jitter::Full,
            classifier: Classifier::new(),
            generate_keys: false,
            seed: None,
            hints: HintConfig::new(),
            budget: Some(RetryBudget::new().build()),
            url_query: false,
            #[cfg(feature = "metrics")]
            durations: Arc::default(),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Whether the request may be repeated after it may have reached the server.
    #[inline]
    pub(crate) fn is_retry_safe(&self, parts: &http::request::Parts) -> bool {
        self.classifier
            .is_retry_safe(&RequestHead::from_parts(parts))
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("attempts", &self.attempts)
            .field("base", &self.base)
            .field("overload_base", &self.overload_base)
            .field("cap", &self.cap)
            .field("max_wait", &self.max_wait)
            .field("jitter", &self.jitter)
            .field("classifier", &self.classifier)
            .field("generate_keys", &self.generate_keys)
            .field("seed", &self.seed)
            .field("hints", &self.hints)
            .field("budget", &self.budget)
            .field("url_query", &self.url_query)
            .finish()
    }
}

// === impl RetryLayer ===

impl Default for RetryLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryLayer {
    /// A layer with the defaults of docs/ARCHITECTURE.md: 3 attempts, full jitter from 0.5 s
    /// (2 s after an overload answer) capped at 30 s, server waits up to 60 s, a 10 % per-host
    /// budget.
    pub fn new() -> Self {
        Self {
            config: Arc::new(Config::new()),
        }
    }

    /// A layer with state of its own: a fresh budget with the same settings, and calls
    /// numbered from zero again.
    fn with(self, f: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::clone(&self.config);
        f(&mut config);
        config.budget = config.budget.map(|budget| budget.renewed());
        config.calls = Arc::new(AtomicU64::new(0));
        Self {
            config: Arc::new(config),
        }
    }

    /// How many attempts in all, the first included; 0 counts as 1. Defaults to 3.
    pub fn attempts(self, attempts: u32) -> Self {
        self.with(|c| c.attempts = attempts.max(1))
    }

    /// The backoff base: the first retry waits up to this long. Defaults to 500 ms.
    pub fn base(self, base: Duration) -> Self {
        self.with(|c| c.base = base)
    }

    /// The backoff base after an overload answer: a 503 or 429 with no server hint (a hint is
    /// obeyed exactly instead). Such a host is refusing work because it has too much: a crowd
    /// of clients that each know nothing else must spread its retries wider than after a
    /// glitch (a 500, a reset, a timeout), which `base` covers. Defaults to 2 s.
    pub fn overload_base(self, base: Duration) -> Self {
        self.with(|c| c.overload_base = base)
    }

    /// The longest backoff between two attempts. Defaults to 30 s.
    pub fn cap(self, cap: Duration) -> Self {
        self.with(|c| c.cap = cap)
    }

    /// The longest server-requested wait (`Retry-After`, quota reset) the layer honours; a
    /// response asking for more is returned at once. Defaults to 60 s.
    pub fn max_wait(self, max_wait: Duration) -> Self {
        self.with(|c| c.max_wait = max_wait)
    }

    /// Whether backoff waits are randomised. Defaults to [`Jitter::Full`].
    pub fn jitter(self, jitter: Jitter) -> Self {
        self.with(|c| c.jitter = jitter)
    }

    /// The one place that decides what an answer means and which requests may be repeated
    /// ([`courier_core::classifier`]): retry asks again when the verdict says asking again may
    /// change the answer, waits `overload_base` after an overload without a hint, and records
    /// each attempt's verdict. Defaults to [`Classifier::new`]; the preset gives its own
    /// (`CourierLayer::classifier`).
    ///
    /// It replaces the whole classifier, settings made earlier through this layer's delegates
    /// ([`retryable_statuses`](Self::retryable_statuses) and the others) included: set it
    /// first.
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.with(|c| c.classifier = classifier)
    }

    /// The statuses that may change if asked again: the same as
    /// [`Classifier::retryable_statuses`] on this layer's classifier.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for a status below 400: a success or a redirect is an answer, and
    /// retrying it would only repeat it until the attempts run out.
    pub fn retryable_statuses(
        self,
        statuses: impl IntoIterator<Item = StatusCode>,
    ) -> Result<Self, InvalidConfig> {
        let classifier = self
            .config
            .classifier
            .clone()
            .retryable_statuses(statuses)?;
        Ok(self.with(|c| c.classifier = classifier))
    }

    /// The methods that may be repeated after the request may have reached the server; others
    /// need an `Idempotency-Key`: the same as [`Classifier::idempotent_methods`] on this
    /// layer's classifier.
    pub fn idempotent_methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.with(|c| c.classifier = c.classifier.clone().idempotent_methods(methods))
    }

    /// Paths that may be repeated whatever their method: the same as
    /// [`Classifier::retry_safe_paths`] on this layer's classifier. For gRPC, a method is
    /// `/package.Service/Method` and a whole service `/package.Service/`: gRPC calls are POSTs,
    /// and only the caller knows which of its methods are safe to repeat. A request can also
    /// say so itself with the [`RetrySafe`](courier_core::idempotency::RetrySafe) extension.
    pub fn retry_safe_paths<P: Into<String>>(self, paths: impl IntoIterator<Item = P>) -> Self {
        self.with(|c| c.classifier = c.classifier.clone().retry_safe_paths(paths))
    }

    /// The gRPC codes that may change if asked again, read from a trailers-only answer's
    /// `grpc-status`: the same as [`Classifier::grpc_retryable_codes`] on this layer's
    /// classifier. An answer that sends its headers without a status has committed the call:
    /// it is never retried.
    pub fn grpc_retryable_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        self.with(|c| c.classifier = c.classifier.clone().grpc_retryable_codes(codes))
    }

    /// Whether a 403 with `Retry-After` or a spent quota counts as a rate limit (and may be
    /// retried after the server's wait): the same as [`Classifier::rate_limit_403`] on this
    /// layer's classifier.
    pub fn rate_limit_403(self, enabled: bool) -> Self {
        self.with(|c| c.classifier = c.classifier.clone().rate_limit_403(enabled))
    }

    /// Whether to add a UUID v4 `Idempotency-Key` to POST and PATCH requests that have none,
    /// before the first attempt, so that they can be retried; a key the caller set is never
    /// replaced. Defaults to `false`.
    pub fn generate_idempotency_keys(self, enabled: bool) -> Self {
        self.with(|c| c.generate_keys = enabled)
    }

    /// Seeds the backoff RNG: the same seed and the same order of calls give the same waits.
    /// Defaults to a thread-local RNG seeded by the OS.
    pub fn seed(self, seed: u64) -> Self {
        self.with(|c| c.seed = Some(seed))
    }

    /// How server hints are read (reset format, wall clock), for the waits retry obeys and for
    /// its classifier's ([`Classifier::hint_config`]). Defaults to [`HintConfig::new`].
    pub fn hint_config(self, hints: HintConfig) -> Self {
        self.with(|c| {
            c.classifier = c.classifier.clone().hint_config(hints.clone());
            c.hints = hints;
        })
    }

    /// A fresh retry budget, shared by every service the returned layer makes. Defaults to
    /// [`RetryBudget::new`]: 10 % over 10 s plus 10 retries per window, per host.
    pub fn budget(self, budget: RetryBudget) -> Self {
        let state = budget.build();
        self.with(|c| c.budget = Some(state))
    }

    /// No retry budget: only the attempt count bounds retries. Defaults to a budget
    /// ([`RetryLayer::budget`]).
    pub fn without_budget(self) -> Self {
        self.with(|c| c.budget = None)
    }

    /// Whether the spans' `url.full` keeps the query string. A query may hold tokens or
    /// personal data, so it is left out unless asked; userinfo is always left out. Defaults
    /// to `false`.
    pub fn record_url_query(self, enabled: bool) -> Self {
        self.with(|c| c.url_query = enabled)
    }

    /// What a [`Retry`] keeps: the shared configuration and budget.
    pub(crate) fn into_config(self) -> Arc<Config> {
        self.config
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, self.clone())
    }
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("config", &self.config)
            .finish()
    }
}

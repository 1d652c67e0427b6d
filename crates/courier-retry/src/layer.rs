use crate::budget::{BudgetState, RetryBudget};
use crate::policy::Jitter;
use crate::service::Retry;
use courier_core::classify::{RETRYABLE_STATUSES, is_rate_limit_403};
use courier_core::grpc::GrpcCode;
use courier_core::idempotency::{RetrySafe, has_idempotency_key};
use courier_core::{HintConfig, InvalidConfig};
use http::{HeaderMap, Method, StatusCode};
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
    pub(crate) statuses: Vec<StatusCode>,
    pub(crate) methods: Vec<Method>,
    /// Paths that may be repeated whatever the method; one ending in `/` covers every path
    /// under it (a whole gRPC service).
    pub(crate) safe_paths: Vec<String>,
    /// gRPC codes (in a trailers-only answer) that may change if asked again.
    pub(crate) grpc_codes: Vec<GrpcCode>,
    pub(crate) rate_limit_403: bool,
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
    fn new() -> Self {
        Self {
            attempts: 3,
            base: Duration::from_millis(500),
            overload_base: Duration::from_secs(2),
            cap: Duration::from_secs(30),
            max_wait: Duration::from_secs(60),
            jitter: Jitter::Full,
            statuses: RETRYABLE_STATUSES.to_vec(),
            methods: vec![
                Method::GET,
                Method::HEAD,
                Method::OPTIONS,
                Method::TRACE,
                Method::PUT,
                Method::DELETE,
            ],
            safe_paths: Vec::new(),
            grpc_codes: vec![GrpcCode::UNAVAILABLE],
            rate_limit_403: true,
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

    /// Whether asking again may change a response with this status and these headers.
    pub(crate) fn may_change(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        self.statuses.contains(&status)
            || (self.rate_limit_403 && is_rate_limit_403(status, headers))
    }

    /// Whether the request may be repeated after it may have reached the server.
    pub(crate) fn is_retry_safe(&self, parts: &http::request::Parts) -> bool {
        self.methods.contains(&parts.method)
            || has_idempotency_key(&parts.headers)
            || RetrySafe::is_marked(&parts.extensions)
            || (!self.safe_paths.is_empty() && self.is_safe_path(parts.uri.path()))
    }

    fn is_safe_path(&self, path: &str) -> bool {
        self.safe_paths.iter().any(|safe| {
            if safe.ends_with('/') {
                path.starts_with(safe.as_str())
            } else {
                path == safe
            }
        })
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
            .field("statuses", &self.statuses)
            .field("methods", &self.methods)
            .field("safe_paths", &self.safe_paths)
            .field("grpc_codes", &self.grpc_codes)
            .field("rate_limit_403", &self.rate_limit_403)
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

    /// The statuses that may change if asked again. Defaults to 408, 429, 500, 502, 503, 504
    /// ([`RETRYABLE_STATUSES`]).
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for a status below 400: a success or a redirect is an answer, and
    /// retrying it would only repeat it until the attempts run out.
    pub fn retryable_statuses(
        self,
        statuses: impl IntoIterator<Item = StatusCode>,
    ) -> Result<Self, InvalidConfig> {
        let statuses: Vec<StatusCode> = statuses.into_iter().collect();
        if let Some(bad) = statuses.iter().find(|s| !(400..=599).contains(&s.as_u16())) {
            return Err(InvalidConfig::new(
                "a retryable status must be an error status (400 to 599)",
                bad,
                "only the statuses that may change if asked again, such as 503",
            ));
        }
        Ok(self.with(|c| c.statuses = statuses))
    }

    /// The methods that may be repeated after the request may have reached the server; others
    /// need an `Idempotency-Key`. Defaults to GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
    pub fn idempotent_methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// Paths that may be repeated whatever their method, as an idempotent method may: an exact
    /// path, or one ending in `/` for every path under it. For gRPC, a method is
    /// `/package.Service/Method` and a whole service `/package.Service/`: gRPC calls are POSTs,
    /// and only the caller knows which of its methods are safe to repeat (gRFC A6's
    /// per-method policy). A request can also say so itself with the
    /// [`RetrySafe`](courier_core::idempotency::RetrySafe) extension. Defaults to none.
    pub fn retry_safe_paths<P: Into<String>>(self, paths: impl IntoIterator<Item = P>) -> Self {
        let paths = paths.into_iter().map(Into::into).collect();
        self.with(|c| c.safe_paths = paths)
    }

    /// The gRPC codes that may change if asked again, read from a trailers-only answer's
    /// `grpc-status` (gRFC A6's `retryableStatusCodes`). An answer that sends its headers
    /// without a status has committed the call: it is never retried. Defaults to
    /// UNAVAILABLE.
    pub fn grpc_retryable_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        let codes = codes.into_iter().collect();
        self.with(|c| c.grpc_codes = codes)
    }

    /// Whether a 403 with `Retry-After` or a spent quota counts as a rate limit (and may be
    /// retried after the server's wait). Defaults to `true`.
    pub fn rate_limit_403(self, enabled: bool) -> Self {
        self.with(|c| c.rate_limit_403 = enabled)
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

    /// How server hints are read (reset format, wall clock). Defaults to [`HintConfig::new`].
    pub fn hint_config(self, hints: HintConfig) -> Self {
        self.with(|c| c.hints = hints)
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

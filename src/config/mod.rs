//! The preset's configuration as data: a default policy and rules per destination, read from a
//! file, checked whole, applied to a running client without losing its state.
//!
//! A [`Config`] is a [`default`](Config::default) [`Policy`] and an ordered list of
//! [`routes`](Config::routes), each a policy with a [`Match`]. A call takes the policy of the
//! first route that matches it, and the default when none does; a route's policy overrides the
//! default's field by field, and a section it leaves out (or a field of a section) is the
//! default's. Every field left out everywhere is the preset's default (README, "Options and
//! defaults").
//!
//! [`CourierLayer::from_config`](crate::CourierLayer::from_config) builds the preset;
//! [`CourierLayer::from_config_reloadable`](crate::CourierLayer::from_config_reloadable) also
//! gives a [`ReloadHandle`] that applies a new configuration to the running client.
//!
//! # State
//!
//! A route whose section (its retry, hedge, breaker, rate limit, pacing, cache or concurrency
//! settings) is the default's uses the default's layer: its calls share the default's state,
//! kept per host as always (one bucket per host, one breaker per host). A route with settings
//! of its own has state of its own, per host, for that section: a partner host's bucket at
//! `25/s` is not the default's bucket. A breaker with `key = "route"` is always the route's
//! own: the paths the route matches are judged apart from the rest of their host, so a broken
//! `/reports` opens its circuit without cutting the host's other paths off. No rule ever merges
//! the state of two hosts.
//!
//! # Reload
//!
//! [`ReloadHandle::reload`] checks the whole new configuration first: one bad field and
//! nothing changes, the error names every bad field. Then each section of each policy whose
//! settings did not change keeps its layer, and so its state (bucket levels, breaker states,
//! budgets, what pacing learned, the cache's entries). A rate limit whose quota changed keeps
//! its buckets at their levels under the new rate (no refill burst;
//! [`TokenBucketRateLimitLayer::requota`](crate::ratelimit::TokenBucketRateLimitLayer::requota)); another section whose settings changed starts
//! afresh. A route is known across reloads by its `name`, or by its `match` when it has none.
//! Calls in flight finish under the policy they started with; each service picks the new
//! policies up at its next call.
//!
//! # From a file
//!
//! With the `serde` feature every type here is `Deserialize` and `Serialize`. Durations are
//! written `"250ms"`, `"30s"`, `"5m"`, `"1h"`; rates `"25/s"`, `"600/m"`, `"5/100ms"`; statuses
//! as a list of codes and ranges, `[429, "500-599"]`. A section is switched off with `false`
//! (`cache = false`, `retry = false`, `deadline = false`). Unknown keys are errors.
//! `Config::from_deserializer` reads any serde format (TOML, YAML, JSON: pick the crate) and
//! names the path of a bad field; `Config::env_overrides` applies environment variables (both
//! with the `serde` feature).
//!
//! ```toml
//! [default]
//! deadline = "10s"
//! attempt_timeout = "2s"
//! retry = { attempts = 3, max_wait = "5s" }
//!
//! [[routes]]
//! name = "internal"
//! match = { host = "*.internal.example" }
//! deadline = "200ms"
//! retry = { attempts = 2 }
//!
//! [[routes]]
//! name = "partner"
//! match = { scheme = "https", host = "api.partner.example" }
//! deadline = "30s"
//! rate_limit = { rate = "25/s", burst = 25 }
//!
//! [[routes]]
//! name = "payments"
//! match = { host = "pay.example", path_prefix = "/payments", methods = ["POST"] }
//! retry = { attempts = 1 }
//! breaker = { key = "route" }
//! ```
//!
//! # gRPC
//!
//! A gRPC call is a POST to `/package.Service/Method`: a route matches a service with
//! `grpc_service = "package.Service"` and one method with `grpc_method = "Method"` beside it.
//! A service config's `methodConfig` maps onto routes one to one: each `name` entry
//! (`service`, `method`) is a route's match, its `timeout` the route's `deadline`, its
//! `retryPolicy`'s `maxAttempts` the route's `retry.attempts`, its
//! `initialBackoff` and `maxBackoff` the retry's backoff, and its `retryableStatusCodes` the
//! classifier's gRPC codes. A `hedgingPolicy` is the route's `hedge`: its `hedgingDelay` is
//! `hedge.delay`, its `maxAttempts` `hedge.attempts`, its `nonFatalStatusCodes`
//! `hedge.non_fatal_grpc_codes`; a method is hedged only when it is safe to repeat (the
//! route's `retry.retry_safe_paths`), as gRPC's own hedging applies only to the methods its
//! config names. Service-config JSON is not read as such: its
//! throttling and load-balancing parts have no counterpart here, and one format keeps one
//! meaning per key.

mod build;
mod error;
#[cfg(feature = "serde")]
mod serde_impl;
mod values;

pub use build::ReloadHandle;
pub(crate) use build::build;
pub use error::{ConfigError, FieldError};
pub use values::{Dur, RateSpec, StatusRange, Statuses};

/// The whole configuration: a default policy and the routes, in order.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Config {
    /// The policy of every call no route matches, and the base every route overrides.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Policy::is_empty")
    )]
    pub default: Policy,
    /// The routes, first match wins.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub routes: Vec<Policy>,
}

/// One policy: the default's, or a route's with its [`Match`]. Every field left out is the
/// default's (for a route) or the preset's (for the default).
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Policy {
    /// A route's name: how a reload knows it (its `match` when it has none), and what errors
    /// call it.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub name: Option<String>,
    /// Which calls a route takes. Required on a route, refused on the default.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "match", default, skip_serializing_if = "Option::is_none")
    )]
    pub matches: Option<Match>,
    /// The total budget per call, or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub deadline: Option<OrOff<Dur>>,
    /// The bound on one attempt, or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub attempt_timeout: Option<OrOff<Dur>>,
    /// Retry, or off (one attempt).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub retry: Option<OrOff<RetryConfig>>,
    /// The token bucket, or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub rate_limit: Option<OrOff<RateLimitConfig>>,
    /// The circuit breaker, or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub breaker: Option<OrOff<BreakerConfig>>,
    /// Adaptive pacing on or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub pacing: Option<bool>,
    /// The cache on or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub cache: Option<bool>,
    /// The bound on attempts in flight per host, or off.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub concurrency: Option<OrOff<ConcurrencyConfig>>,
    /// Hedging against the slow tail, or off (the default).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub hedge: Option<OrOff<HedgeConfig>>,
}

/// A setting, or `false` for off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OrOff<T> {
    /// Switched off (`false` in a file).
    Off,
    /// On, with these settings.
    On(T),
}

/// Which calls a route takes: every field given must match; a route with an empty match takes
/// every call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Match {
    /// `http` or `https`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub scheme: Option<String>,
    /// A host, exact (`api.example`, any case) or every subdomain of one (`*.example`, which
    /// does not match `example` itself).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub host: Option<String>,
    /// The port, the scheme's default when the URL names none.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub port: Option<u16>,
    /// Methods, any of which matches (`["GET", "HEAD"]`).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub methods: Vec<String>,
    /// A path prefix, whole segments only: `/payments` matches `/payments` and
    /// `/payments/7`, not `/paymentsfoo`; `/v1/` matches everything under `/v1/`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub path_prefix: Option<String>,
    /// A gRPC service's full name, `package.Service`: its methods' paths.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub grpc_service: Option<String>,
    /// One method of `grpc_service`, `Method`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub grpc_method: Option<String>,
}

/// Retry's settings.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RetryConfig {
    /// Attempts in all, the first included: at least 1, at most 100. Defaults to 3.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub attempts: Option<u32>,
    /// The statuses that may change if asked again (each 400 to 599). Defaults to the
    /// classifier's: 408, 429, 500, 502, 503, 504.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub statuses: Option<Statuses>,
    /// Paths that may be repeated whatever their method (`/search`, or a gRPC method
    /// `/package.Service/Method`). Defaults to none.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub retry_safe_paths: Option<Vec<String>>,
    /// The first backoff's ceiling (full jitter). Defaults to 0.5 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub base: Option<Dur>,
    /// The longest wait a server may ask for and be obeyed. Defaults to 60 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub max_wait: Option<Dur>,
    /// The retry budget: retries at most this share of the calls (0 to 1), or `false` for no
    /// budget. Defaults to 0.1.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub budget: Option<OrOff<f64>>,
}

/// Hedging's settings (`courier::retry::hedge`): a hedge of a slow retry-safe call after a
/// delay, fixed or learned per host, within a budget of its own. `hedge = {}` hedges with
/// every default.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct HedgeConfig {
    /// A fixed delay before each hedge, at least 1 ms (gRPC's `hedgingDelay`). Without it the
    /// delay is learned per host.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub delay: Option<Dur>,
    /// The percentile of each host's latencies a learned delay is: above 0, below 100.
    /// Defaults to 95. Not with `delay`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub percentile: Option<f64>,
    /// Requests per call in all, the first included: 2 to 5 (gRPC's `maxAttempts`). Defaults
    /// to 2.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub attempts: Option<u32>,
    /// The hedge budget: hedges at most this share of the requests per host (0 to 1).
    /// Defaults to 0.1.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub budget: Option<f64>,
    /// gRPC's `nonFatalStatusCodes`, by name (`["UNAVAILABLE"]`): an answer with one of them
    /// sends the next hedge at once, any other code ends the call. Defaults to the
    /// classifier's retryable gRPC codes.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub non_fatal_grpc_codes: Option<Vec<String>>,
}

/// The token bucket's settings (per host).
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RateLimitConfig {
    /// The rate, `"25/s"`. Required where the rate limit is switched on.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub rate: Option<RateSpec>,
    /// The bucket's size: at least 1. Defaults to 1.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub burst: Option<u32>,
    /// `"wait"` for the slot (the default) or `"reject"` at once.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub mode: Option<String>,
    /// The longest wait for a slot. Defaults to 60 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub max_wait: Option<Dur>,
}

/// The circuit breaker's settings. Defaults are the preset's breaker
/// ([`preset_breaker`](crate::preset::preset_breaker)).
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct BreakerConfig {
    /// `"host"` (the default): one breaker per host; `"route"`: the route's own breakers, per
    /// host, apart from the rest of the host (see the [module docs](self)).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub key: Option<String>,
    /// Connect failures in a row that open the circuit: at least 1. Defaults to 5.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub consecutive_failures: Option<u32>,
    /// The share of calls failing after the request went out that opens it: above 0, at most
    /// 1. Defaults to 0.5.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub failure_rate: Option<f64>,
    /// The fewest calls in the window before the share counts: at least 1. Defaults to 100.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub min_calls: Option<u32>,
    /// The window the share is weighed over: at least 10 ms. Defaults to 30 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub window: Option<Dur>,
    /// How long failing answers, with no success, open it. Defaults to 30 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub failing_answers_for: Option<Dur>,
    /// The first open time, doubling on each trip in a row. Defaults to 30 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub open_for: Option<Dur>,
    /// The longest open time. Defaults to 5 minutes.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub max_open_for: Option<Dur>,
    /// Trials half-open judges together: at least 1. Defaults to 5.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub half_open_trials: Option<u32>,
}

/// The concurrency limit's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct ConcurrencyConfig {
    /// A fixed bound on attempts in flight per host (at least 1), or, when left out, the
    /// preset's 1000. Refused together with `adaptive = true`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub limit: Option<u32>,
    /// A limit learned from each host's latency instead of a fixed one.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub adaptive: Option<bool>,
}

// === impl Config ===

impl Config {
    /// Checks every field of every policy, and answers every bad one.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing each bad field by its path, with its value and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        build::check(self).map(|_| ())
    }
}

// === impl Policy ===

impl Policy {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The policy with every field `self` leaves out taken from `base`, section by section and
    /// field by field.
    pub(crate) fn over(&self, base: &Policy) -> Policy {
        Policy {
            name: self.name.clone(),
            matches: self.matches.clone(),
            deadline: self.deadline.or(base.deadline),
            attempt_timeout: self.attempt_timeout.or(base.attempt_timeout),
            retry: merge(&self.retry, &base.retry, RetryConfig::over),
            rate_limit: merge(&self.rate_limit, &base.rate_limit, RateLimitConfig::over),
            breaker: merge(&self.breaker, &base.breaker, BreakerConfig::over),
            pacing: self.pacing.or(base.pacing),
            cache: self.cache.or(base.cache),
            concurrency: merge(
                &self.concurrency,
                &base.concurrency,
                ConcurrencyConfig::over,
            ),
            hedge: merge(&self.hedge, &base.hedge, HedgeConfig::over),
        }
    }
}

impl HedgeConfig {
    fn over(&self, base: &Self) -> Self {
        // `delay` and `percentile` are one choice: a route that makes it replaces the base's.
        let (delay, percentile) = if self.delay.is_some() || self.percentile.is_some() {
            (self.delay, self.percentile)
        } else {
            (base.delay, base.percentile)
        };
        Self {
            delay,
            percentile,
            attempts: self.attempts.or(base.attempts),
            budget: self.budget.or(base.budget),
            non_fatal_grpc_codes: self
                .non_fatal_grpc_codes
                .clone()
                .or_else(|| base.non_fatal_grpc_codes.clone()),
        }
    }
}

fn merge<T: Clone>(
    top: &Option<OrOff<T>>,
    base: &Option<OrOff<T>>,
    over: impl FnOnce(&T, &T) -> T,
) -> Option<OrOff<T>> {
    match (top, base) {
        (Some(OrOff::On(t)), Some(OrOff::On(b))) => Some(OrOff::On(over(t, b))),
        (Some(top), _) => Some(top.clone()),
        (None, base) => base.clone(),
    }
}

impl RetryConfig {
    fn over(&self, base: &Self) -> Self {
        Self {
            attempts: self.attempts.or(base.attempts),
            statuses: self.statuses.clone().or_else(|| base.statuses.clone()),
            retry_safe_paths: self
                .retry_safe_paths
                .clone()
                .or_else(|| base.retry_safe_paths.clone()),
            base: self.base.or(base.base),
            max_wait: self.max_wait.or(base.max_wait),
            budget: self.budget.or(base.budget),
        }
    }
}

impl RateLimitConfig {
    fn over(&self, base: &Self) -> Self {
        Self {
            rate: self.rate.or(base.rate),
            burst: self.burst.or(base.burst),
            mode: self.mode.clone().or_else(|| base.mode.clone()),
            max_wait: self.max_wait.or(base.max_wait),
        }
    }
}

impl BreakerConfig {
    fn over(&self, base: &Self) -> Self {
        Self {
            key: self.key.clone().or_else(|| base.key.clone()),
            consecutive_failures: self.consecutive_failures.or(base.consecutive_failures),
            failure_rate: self.failure_rate.or(base.failure_rate),
            min_calls: self.min_calls.or(base.min_calls),
            window: self.window.or(base.window),
            failing_answers_for: self.failing_answers_for.or(base.failing_answers_for),
            open_for: self.open_for.or(base.open_for),
            max_open_for: self.max_open_for.or(base.max_open_for),
            half_open_trials: self.half_open_trials.or(base.half_open_trials),
        }
    }
}

impl ConcurrencyConfig {
    fn over(&self, base: &Self) -> Self {
        // `limit` and `adaptive` are one choice: a route that makes it replaces the base's.
        if self.limit.is_some() || self.adaptive.is_some() {
            self.clone()
        } else {
            base.clone()
        }
    }
}

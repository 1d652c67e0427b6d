//! From a configuration to the preset: check every field, then build each policy's layers,
//! keeping the layers (and so the state) of a previous build where settings did not change.

use super::{
    BreakerConfig, ConcurrencyConfig, Config, ConfigError, FieldError, HedgeConfig, Match, OrOff,
    Policy, RateLimitConfig, RetryConfig,
};
use crate::CourierLayer;
use crate::preset::{
    DEFAULT_CONCURRENCY_LIMIT, DEFAULT_FAILING_ANSWERS_FOR, DEFAULT_FAILURE_MIN_CALLS,
    DEFAULT_FAILURE_THRESHOLD, DEFAULT_FAILURE_WINDOW, DEFAULT_HALF_OPEN_TRIALS,
    DEFAULT_OPEN_BACKOFF_CAP,
};
use crate::routes::{Route, RouteSource, Rules};
use courier_breaker::{CircuitBreakerLayer, FailureRate, OpenBackoff};
use courier_cache::EtagCacheLayer;
use courier_concurrency::{AdaptiveLimit, ConcurrencyLimitLayer};
use courier_core::grpc::GrpcCode;
use courier_deadline::{AttemptTimeoutLayer, DeadlineLayer};
use courier_ratelimit::{AdaptivePacingLayer, Mode, Quota, Rate, TokenBucketRateLimitLayer};
use courier_retry::hedge::HedgeLayer;
use courier_retry::{RetryBudget, RetryLayer};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most attempts a configuration may ask for.
const MAX_ATTEMPTS: u32 = 100;

/// A checked configuration: each policy resolved over the default (every field it leaves out
/// taken from there) and every value made into what the layers take.
pub(crate) struct Checked {
    config: Config,
    default: Resolved,
    routes: Vec<(Route, String, Resolved)>,
}

/// One policy, resolved and checked.
struct Resolved {
    policy: Policy,
    spec: Spec,
}

/// What the layers of one policy are made from: every value checked.
struct Spec {
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    retry: Option<RetryLayer>,
    hedge: Option<HedgeLayer>,
    rate_limit: Option<(Quota, Mode, Option<Duration>)>,
    breaker: Option<(bool, CircuitBreakerLayer)>,
    pacing: bool,
    cache: bool,
    concurrency: Option<ConcurrencyLimitLayer>,
}

/// What a build made: the layers of the default and of each route, with the policies they
/// came from, so that the next build can keep what did not change.
pub(crate) struct Built {
    checked: Checked,
    default: CourierLayer,
    routes: Vec<CourierLayer>,
}

/// Applies a new configuration to a running client built by
/// [`CourierLayer::from_config_reloadable`]: what did not change keeps its state. See the
/// [module docs](super#reload). Cheap to clone; every clone reloads the same client.
#[derive(Clone)]
pub struct ReloadHandle {
    source: Arc<RouteSource>,
    built: Arc<Mutex<Built>>,
}

impl std::fmt::Debug for ReloadHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadHandle").finish_non_exhaustive()
    }
}

impl ReloadHandle {
    /// Checks `config` whole and applies it: each service of the client picks it up at its
    /// next call; calls in flight finish under the policy they started with.
    ///
    /// # Errors
    ///
    /// When any field is bad: nothing is applied, the running configuration stays.
    pub fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        let checked = check(config)?;
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        let next = make(checked, Some(&built));
        self.source.replace(rules_of(&next));
        *built = next;
        Ok(())
    }

    /// The configuration running now.
    pub fn config(&self) -> Config {
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        built.checked.config.clone()
    }

    /// How many configurations were applied since the client was built.
    pub fn reloads(&self) -> u64 {
        self.source.generation()
    }
}

fn rules_of(built: &Built) -> Rules {
    Rules {
        default: Some(built.default.clone()),
        routes: built
            .checked
            .routes
            .iter()
            .zip(&built.routes)
            .map(|((route, _, _), layer)| (route.clone(), layer.clone()))
            .collect(),
    }
}

/// Builds the preset from `config`: reloadable or not.
pub(crate) fn build(
    config: &Config,
    reloadable: bool,
) -> Result<(CourierLayer, Option<ReloadHandle>), ConfigError> {
    let built = make(check(config)?, None);
    if !reloadable {
        let mut layer = built.default.clone();
        if !built.routes.is_empty() {
            let mut rules = rules_of(&built);
            rules.default = None;
            layer.routes = Some(Arc::new(RouteSource::new(rules)));
        }
        return Ok((layer, None));
    }
    let source = Arc::new(RouteSource::new(rules_of(&built)));
    let mut layer = built.default.clone();
    layer.routes = Some(Arc::clone(&source));
    let handle = ReloadHandle {
        source,
        built: Arc::new(Mutex::new(built)),
    };
    Ok((layer, Some(handle)))
}

// === checking ===

/// Collects the errors of one configuration.
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: &str, field: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            path: if field.is_empty() {
                path.to_owned()
            } else {
                format!("{path}.{field}")
            },
            message: message.into(),
        });
    }
}

pub(crate) fn check(config: &Config) -> Result<Checked, ConfigError> {
    let mut errors = Errors(Vec::new());
    if config.default.matches.is_some() {
        errors.push(
            "default",
            "match",
            "the default policy takes every call no route takes: give the match to a route",
        );
    }
    let default_policy = config.default.over(&Policy::default());
    let default_spec = spec(&default_policy, "default", &mut errors);
    let mut routes = Vec::with_capacity(config.routes.len());
    let mut ids = std::collections::HashSet::new();
    for (i, route) in config.routes.iter().enumerate() {
        let path = format!("routes[{i}]");
        let matcher = match &route.matches {
            Some(m) => compile_match(m, &format!("{path}.match"), &mut errors),
            None => {
                errors.push(
                    &path,
                    "match",
                    "a route needs a match (an empty one takes every call)",
                );
                None
            }
        };
        let id = match (&route.name, &route.matches) {
            (Some(name), _) => format!("name {name}"),
            (None, m) => format!("match {m:?}"),
        };
        if !ids.insert(id.clone()) {
            let what = match &route.name {
                Some(name) => format!("the name {name:?} is given to an earlier route too"),
                None => "an earlier route has the same match and no name: it takes every call this one would".to_owned(),
            };
            errors.push(
                &path,
                if route.name.is_some() {
                    "name"
                } else {
                    "match"
                },
                what,
            );
        }
        let policy = route.over(&default_policy);
        let spec = spec(&policy, &path, &mut errors);
        if let (Some(matcher), Some(spec)) = (matcher, spec) {
            routes.push((matcher, id, Resolved { policy, spec }));
        }
    }
    match default_spec {
        Some(spec) if errors.0.is_empty() => Ok(Checked {
            config: config.clone(),
            default: Resolved {
                policy: default_policy,
                spec,
            },
            routes,
        }),
        _ => Err(ConfigError::new(errors.0)),
    }
}

fn compile_match(m: &Match, path: &str, errors: &mut Errors) -> Option<Route> {
    let before = errors.0.len();
    let mut route = Route::new();
    if let Some(scheme) = &m.scheme {
        match scheme.to_ascii_lowercase().as_str() {
            "http" => route = route.scheme(http::uri::Scheme::HTTP),
            "https" => route = route.scheme(http::uri::Scheme::HTTPS),
            _ => errors.push(
                path,
                "scheme",
                format!("must be \"http\" or \"https\", got {scheme:?}"),
            ),
        }
    }
    if let Some(host) = &m.host {
        match crate::routes::HostPattern::parse(host) {
            Ok(_) => route = route.host(host),
            Err(why) => errors.push(path, "host", why),
        }
    }
    if let Some(port) = m.port {
        if port == 0 {
            errors.push(path, "port", "must be 1 to 65535, got 0");
        }
        route = route.port(port);
    }
    for (i, method) in m.methods.iter().enumerate() {
        match http::Method::from_bytes(method.to_ascii_uppercase().as_bytes()) {
            Ok(method) if !method.as_str().is_empty() => route = route.method(method),
            _ => errors.push(
                path,
                &format!("methods[{i}]"),
                format!("is not a method, got {method:?}"),
            ),
        }
    }
    if let Some(prefix) = &m.path_prefix {
        if !prefix.starts_with('/') {
            errors.push(
                path,
                "path_prefix",
                format!("must start with '/', got {prefix:?}"),
            );
        } else if prefix.contains(['?', '#']) || prefix.chars().any(char::is_control) {
            errors.push(
                path,
                "path_prefix",
                format!("must be a path, without a query, got {prefix:?}"),
            );
        }
        if m.grpc_service.is_some() {
            errors.push(
                path,
                "path_prefix",
                "give a path prefix or a gRPC service, not both",
            );
        }
        route = route.path_prefix(prefix);
    }
    let grpc_name_ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    match (&m.grpc_service, &m.grpc_method) {
        (Some(service), method) => {
            if !grpc_name_ok(service) || service.starts_with('.') || service.ends_with('.') {
                errors.push(
                    path,
                    "grpc_service",
                    format!("must be a full service name, package.Service, got {service:?}"),
                );
            }
            match method {
                Some(method) if !grpc_name_ok(method) || method.contains('.') => errors.push(
                    path,
                    "grpc_method",
                    format!("must be a method's name, Method, got {method:?}"),
                ),
                Some(method) => route = route.grpc_method(service, method),
                None => route = route.grpc_service(service),
            }
        }
        (None, Some(method)) => errors.push(
            path,
            "grpc_method",
            format!("names a method of no service: give grpc_service too (for {method:?})"),
        ),
        (None, None) => {}
    }
    (errors.0.len() == before).then_some(route)
}

fn duration_at_least(
    d: Duration,
    min: Duration,
    path: &str,
    field: &str,
    errors: &mut Errors,
) -> Duration {
    if d < min {
        errors.push(
            path,
            field,
            format!(
                "must be at least {}, got {}",
                super::Dur(min),
                super::Dur(d)
            ),
        );
    }
    d
}

/// Checks one resolved policy and makes its spec; `None` (with errors pushed) when a field is
/// bad.
fn spec(policy: &Policy, path: &str, errors: &mut Errors) -> Option<Spec> {
    let before = errors.0.len();
    let ms = Duration::from_millis(1);
    let deadline = match policy.deadline {
        None => Some(crate::preset::DEFAULT_DEADLINE),
        Some(OrOff::Off) => None,
        Some(OrOff::On(d)) => Some(duration_at_least(d.0, ms, path, "deadline", errors)),
    };
    let attempt_timeout = match policy.attempt_timeout {
        None => Some(crate::preset::DEFAULT_ATTEMPT_TIMEOUT),
        Some(OrOff::Off) => None,
        Some(OrOff::On(d)) => Some(duration_at_least(d.0, ms, path, "attempt_timeout", errors)),
    };
    let retry = match &policy.retry {
        None => Some(RetryLayer::new()),
        Some(OrOff::Off) => None,
        Some(OrOff::On(r)) => retry_layer(r, &format!("{path}.retry"), errors),
    };
    let hedge = match &policy.hedge {
        None | Some(OrOff::Off) => None,
        Some(OrOff::On(h)) => hedge_layer(h, &format!("{path}.hedge"), errors),
    };
    let rate_limit = match &policy.rate_limit {
        None | Some(OrOff::Off) => None,
        Some(OrOff::On(r)) => rate_limit(r, &format!("{path}.rate_limit"), errors),
    };
    let breaker = match &policy.breaker {
        None => Some((false, crate::preset::preset_breaker())),
        Some(OrOff::Off) => None,
        Some(OrOff::On(b)) => breaker(b, &format!("{path}.breaker"), errors),
    };
    let concurrency = match &policy.concurrency {
        None => Some(crate::preset::preset_concurrency_limit()),
        Some(OrOff::Off) => None,
        Some(OrOff::On(c)) => concurrency(c, &format!("{path}.concurrency"), errors),
    };
    (errors.0.len() == before).then(|| Spec {
        deadline,
        attempt_timeout,
        retry,
        hedge,
        rate_limit,
        breaker,
        pacing: policy.pacing.unwrap_or(true),
        cache: policy.cache.unwrap_or(true),
        concurrency,
    })
}

fn hedge_layer(h: &HedgeConfig, path: &str, errors: &mut Errors) -> Option<HedgeLayer> {
    let mut layer = HedgeLayer::new();
    match (h.delay, h.percentile) {
        (Some(_), Some(_)) => errors.push(
            path,
            "percentile",
            "a fixed delay and a learned one exclude each other: give delay or percentile",
        ),
        (Some(delay), None) => {
            let delay = duration_at_least(delay.0, Duration::from_millis(1), path, "delay", errors);
            let max = courier_core::CallOptions::MAX_HEDGE_DELAY;
            if delay > max {
                errors.push(
                    path,
                    "delay",
                    format!(
                        "must be at most {}, got {}",
                        super::Dur(max),
                        super::Dur(delay)
                    ),
                );
            }
            layer = layer.after(delay);
        }
        (None, Some(p)) if !(p > 0.0 && p < 100.0) => errors.push(
            path,
            "percentile",
            format!("must be above 0 and below 100, got {p}"),
        ),
        (None, Some(p)) => layer = layer.percentile(p),
        (None, None) => {}
    }
    if let Some(attempts) = h.attempts {
        let max = courier_retry::hedge::MAX_ATTEMPTS;
        if !(2..=max).contains(&attempts) {
            let why = if attempts < 2 {
                "at least 2 (the first and a hedge; hedge = false for none)".to_owned()
            } else {
                format!("at most {max}")
            };
            errors.push(path, "attempts", format!("must be {why}, got {attempts}"));
        }
        layer = layer.attempts(attempts);
    }
    if let Some(share) = h.budget {
        if !(0.0..=1.0).contains(&share) {
            errors.push(
                path,
                "budget",
                format!("must be a share of the requests, 0 to 1, got {share}"),
            );
        }
        layer = layer.budget(RetryBudget::new().floor(0).ratio(share));
    }
    if let Some(names) = &h.non_fatal_grpc_codes {
        let mut codes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match (0..=16u16)
                .map(GrpcCode::new)
                .find(|c| c.name() == Some(name.as_str()))
            {
                Some(GrpcCode::OK) | None => errors.push(
                    path,
                    &format!("non_fatal_grpc_codes[{i}]"),
                    format!(
                        "must name a gRPC code other than OK, such as \"UNAVAILABLE\", got {name:?}"
                    ),
                ),
                Some(code) => codes.push(code),
            }
        }
        layer = layer.non_fatal_grpc_codes(codes);
    }
    Some(layer)
}

fn retry_layer(r: &RetryConfig, path: &str, errors: &mut Errors) -> Option<RetryLayer> {
    let mut layer = RetryLayer::new();
    if let Some(attempts) = r.attempts {
        if !(1..=MAX_ATTEMPTS).contains(&attempts) {
            let bound = if attempts == 0 {
                "at least 1"
            } else {
                "at most 100"
            };
            errors.push(path, "attempts", format!("must be {bound}, got {attempts}"));
        }
        layer = layer.attempts(attempts);
    }
    if let Some(statuses) = &r.statuses {
        let mut codes = Vec::new();
        for (i, range) in statuses.0.iter().enumerate() {
            match range.statuses() {
                Ok(c) if range.from >= 400 && range.to <= 599 => codes.extend(c),
                Ok(_) => errors.push(
                    path,
                    &format!("statuses[{i}]"),
                    format!(
                        "must be within 400-599 (a success or a redirect is an answer), got {range}"
                    ),
                ),
                Err(why) => errors.push(path, &format!("statuses[{i}]"), why),
            }
        }
        match layer.clone().retryable_statuses(codes) {
            Ok(l) => layer = l,
            Err(e) => errors.push(path, "statuses", e.to_string()),
        }
    }
    if let Some(paths) = &r.retry_safe_paths {
        for (i, p) in paths.iter().enumerate() {
            if !p.starts_with('/') {
                errors.push(
                    path,
                    &format!("retry_safe_paths[{i}]"),
                    format!("must start with '/', got {p:?}"),
                );
            }
        }
        layer = layer.retry_safe_paths(paths.iter().cloned());
    }
    if let Some(base) = r.base {
        layer = layer.base(duration_at_least(
            base.0,
            Duration::from_millis(1),
            path,
            "base",
            errors,
        ));
    }
    if let Some(max_wait) = r.max_wait {
        layer = layer.max_wait(max_wait.0);
    }
    match r.budget {
        None => {}
        Some(OrOff::Off) => layer = layer.without_budget(),
        Some(OrOff::On(ratio)) => {
            if !(0.0..=1.0).contains(&ratio) {
                errors.push(
                    path,
                    "budget",
                    format!("must be a share from 0 to 1 (or false), got {ratio}"),
                );
            } else {
                layer = layer.budget(RetryBudget::new().ratio(ratio));
            }
        }
    }
    Some(layer)
}

fn rate_limit(
    r: &RateLimitConfig,
    path: &str,
    errors: &mut Errors,
) -> Option<(Quota, Mode, Option<Duration>)> {
    let burst = match r.burst {
        None => NonZeroU32::MIN,
        Some(b) => NonZeroU32::new(b).unwrap_or_else(|| {
            errors.push(path, "burst", "must be at least 1, got 0");
            NonZeroU32::MIN
        }),
    };
    let rate = match r.rate {
        None => {
            errors.push(
                path,
                "rate",
                "is required where the rate limit is on: \"25/s\"",
            );
            None
        }
        Some(spec) => {
            let made = NonZeroU32::new(spec.count)
                .ok_or_else(|| "must be at least 1 per period, got 0".to_owned())
                .and_then(|count| Rate::new(count, spec.per).map_err(|e| e.to_string()));
            match made {
                Ok(rate) => Some(rate),
                Err(why) => {
                    errors.push(path, "rate", format!("{why} (got {spec})"));
                    None
                }
            }
        }
    };
    let mode = match r.mode.as_deref() {
        None | Some("wait") => Mode::Wait,
        Some("reject") => Mode::Reject,
        Some(other) => {
            errors.push(
                path,
                "mode",
                format!("must be \"wait\" or \"reject\", got {other:?}"),
            );
            Mode::Wait
        }
    };
    Some((Quota::new(rate?, burst), mode, r.max_wait.map(|d| d.0)))
}

fn breaker(
    b: &BreakerConfig,
    path: &str,
    errors: &mut Errors,
) -> Option<(bool, CircuitBreakerLayer)> {
    let own = match b.key.as_deref() {
        None | Some("host") => false,
        Some("route") => true,
        Some(other) => {
            errors.push(
                path,
                "key",
                format!("must be \"host\" or \"route\", got {other:?}"),
            );
            false
        }
    };
    let nonzero = |v: Option<u32>, default: NonZeroU32, field: &str, errors: &mut Errors| match v {
        None => default,
        Some(n) => NonZeroU32::new(n).unwrap_or_else(|| {
            errors.push(path, field, "must be at least 1, got 0");
            default
        }),
    };
    let consecutive = nonzero(
        b.consecutive_failures,
        NonZeroU32::new(5).expect("5 > 0"),
        "consecutive_failures",
        errors,
    );
    let min_calls = nonzero(b.min_calls, DEFAULT_FAILURE_MIN_CALLS, "min_calls", errors);
    let trials = nonzero(
        b.half_open_trials,
        DEFAULT_HALF_OPEN_TRIALS,
        "half_open_trials",
        errors,
    );
    let threshold = b.failure_rate.unwrap_or(DEFAULT_FAILURE_THRESHOLD);
    let window = b.window.map_or(DEFAULT_FAILURE_WINDOW, |d| d.0);
    let rate = match FailureRate::new(threshold, window, min_calls) {
        Ok(rate) => Some(rate),
        Err(e) => {
            let field = if !(threshold > 0.0 && threshold <= 1.0) {
                "failure_rate"
            } else {
                "window"
            };
            errors.push(path, field, e.to_string());
            None
        }
    };
    let open_for = b.open_for.map_or(Duration::from_secs(30), |d| d.0);
    let max_open = b.max_open_for.map_or(DEFAULT_OPEN_BACKOFF_CAP, |d| d.0);
    if open_for.is_zero() {
        errors.push(path, "open_for", "must be at least 1ms, got 0s");
    }
    if max_open < open_for {
        errors.push(
            path,
            "max_open_for",
            format!(
                "must be at least open_for ({}), got {}",
                super::Dur(open_for),
                super::Dur(max_open)
            ),
        );
    }
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(consecutive)
        .failing_answers_for(
            b.failing_answers_for
                .map_or(DEFAULT_FAILING_ANSWERS_FOR, |d| d.0),
        )
        .failure_rate(rate?)
        .half_open_trials(trials)
        .open_duration(open_for)
        .open_backoff(OpenBackoff::new(max_open));
    Some((own, layer))
}

fn concurrency(
    c: &ConcurrencyConfig,
    path: &str,
    errors: &mut Errors,
) -> Option<ConcurrencyLimitLayer> {
    match (c.limit, c.adaptive) {
        (Some(_), Some(true)) => {
            errors.push(
                path,
                "adaptive",
                "a fixed limit and a learned one exclude each other: give limit or adaptive = true",
            );
            None
        }
        (_, Some(true)) => Some(ConcurrencyLimitLayer::new().adaptive(AdaptiveLimit::new())),
        (Some(n), _) => match usize::try_from(n).ok().and_then(NonZeroUsize::new) {
            Some(n) => Some(ConcurrencyLimitLayer::new().fixed(n)),
            None => {
                errors.push(path, "limit", "must be at least 1, got 0");
                None
            }
        },
        (None, _) => Some(ConcurrencyLimitLayer::new().fixed(DEFAULT_CONCURRENCY_LIMIT)),
    }
}

// === building ===

/// Where a section's layer comes from for one policy.
enum Owner<'a> {
    /// The default policy: `old` is the previous default, if any.
    Default {
        old: Option<(&'a Policy, &'a CourierLayer)>,
    },
    /// A route: `shared` is this build's default when the section is the default's; `old` the
    /// same route (by name or match) in the previous build, with the previous default.
    Route {
        default: (&'a Policy, &'a CourierLayer),
        old: Option<(&'a Policy, &'a CourierLayer, &'a Policy)>,
    },
}

fn make(checked: Checked, old: Option<&Built>) -> Built {
    let default = make_one(
        &checked.default,
        Owner::Default {
            old: old.map(|o| (&o.checked.default.policy, &o.default)),
        },
    );
    let routes = checked
        .routes
        .iter()
        .map(|(_, id, resolved)| {
            let previous = old.and_then(|o| {
                o.checked
                    .routes
                    .iter()
                    .zip(&o.routes)
                    .find(|((_, old_id, _), _)| old_id == id)
                    .map(|((_, _, r), layer)| (&r.policy, layer, &o.checked.default.policy))
            });
            make_one(
                resolved,
                Owner::Route {
                    default: (&checked.default.policy, &default),
                    old: previous,
                },
            )
        })
        .collect();
    Built {
        checked,
        default,
        routes,
    }
}

/// The layer a section takes: the default's when a route's section is the default's; the
/// previous build's when the same owner had the same settings (state kept); else made afresh
/// (`made`), or, for the rate limit, the previous buckets under the new quota.
fn make_one(resolved: &Resolved, owner: Owner<'_>) -> CourierLayer {
    let p = &resolved.policy;
    let s = &resolved.spec;
    let mut layer = CourierLayer::new();
    layer.deadline = s.deadline.map(DeadlineLayer::new);
    layer.attempt_timeout = s.attempt_timeout.map(AttemptTimeoutLayer::new);

    // For each stateful section: is it the default's (shared), the previous build's (kept),
    // or new?
    macro_rules! section {
        ($field:ident, $same:expr, $own:expr, $fresh:expr) => {{
            let same: fn(&Policy, &Policy) -> bool = $same;
            match &owner {
                Owner::Route {
                    default: (dp, dl), ..
                } if same(p, dp) && !$own => dl.$field.clone(),
                Owner::Route {
                    old: Some((op, ol, odp)),
                    ..
                } if same(p, op) && (!same(op, odp) || $own) => ol.$field.clone(),
                Owner::Default {
                    old: Some((op, ol)),
                } if same(p, op) => ol.$field.clone(),
                _ => $fresh,
            }
        }};
    }

    let breaker_own = matches!(s.breaker, Some((true, _)));
    layer.retry = section!(retry, |a, b| a.retry == b.retry, false, s.retry.clone());
    layer.hedge = section!(hedge, |a, b| a.hedge == b.hedge, false, s.hedge.clone());
    layer.breaker = section!(
        breaker,
        |a, b| a.breaker == b.breaker,
        breaker_own,
        s.breaker.as_ref().map(|(_, l)| l.clone())
    );
    layer.pacing = section!(
        pacing,
        |a, b| a.pacing == b.pacing,
        false,
        s.pacing.then(AdaptivePacingLayer::new)
    );
    layer.cache = section!(
        cache,
        |a, b| a.cache == b.cache,
        false,
        s.cache.then(EtagCacheLayer::new)
    );
    layer.concurrency = section!(
        concurrency,
        |a, b| a.concurrency == b.concurrency,
        false,
        s.concurrency.clone()
    );
    // The rate limit: a changed quota keeps the previous buckets at their levels.
    let previous_limiter = match &owner {
        Owner::Route {
            old: Some((op, ol, odp)),
            ..
        } if op.rate_limit != odp.rate_limit => ol.rate_limit.clone(),
        Owner::Default { old: Some((_, ol)) } => ol.rate_limit.clone(),
        _ => None,
    };
    let fresh_limiter = s.rate_limit.map(|(quota, mode, max_wait)| {
        let made = TokenBucketRateLimitLayer::with_quota(quota).mode(mode);
        let made = match max_wait {
            Some(w) => made.max_wait(w),
            None => made,
        };
        match &previous_limiter {
            Some(previous) => made.store_in(previous.requota(quota).store().clone()),
            None => made,
        }
    });
    layer.rate_limit = section!(
        rate_limit,
        |a, b| a.rate_limit == b.rate_limit,
        false,
        fresh_limiter
    );
    layer
}

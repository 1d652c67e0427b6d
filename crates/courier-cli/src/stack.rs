//! The preset's options, shared by `request` and `batch`: retries, deadlines, pacing.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;
use courier::CourierLayer;
use courier::config::{Config, Dur, OrOff, RateLimitConfig, RateSpec, RetryConfig};
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;

use crate::parse;

/// The backoff base the CLI sets on the retry layer (the layer's own default too).
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The backoff base after a bare 503 or 429 the CLI sets on the retry layer (the layer's own
/// default too).
pub(crate) const OVERLOAD_BASE: Duration = Duration::from_secs(2);
/// The backoff cap the CLI sets on the retry layer (the layer's own default too).
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// The default longest server-requested wait.
pub(crate) const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);
/// The retries after the first attempt when --retries is not given.
pub(crate) const DEFAULT_RETRIES: u32 = 2;

/// Options of the preset.
#[derive(Debug, Clone, Args)]
pub(crate) struct StackArgs {
    /// Retries after the first attempt [default: 2].
    #[arg(
        long,
        value_name = "N",
        value_parser = parse::checked(parse::retries),
        allow_negative_numbers = true
    )]
    pub(crate) retries: Option<u32>,
    /// The total budget of a call in seconds, waits and body included [default: 90].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::checked(parse::positive_seconds),
        allow_negative_numbers = true
    )]
    pub(crate) deadline: Option<Duration>,
    /// The bound on one attempt in seconds [default: 30].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::checked(parse::positive_seconds),
        allow_negative_numbers = true
    )]
    pub(crate) attempt_timeout: Option<Duration>,
    /// The longest server-requested wait honoured, in seconds; a server asking longer gets its
    /// answer back at once [default: 60].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::checked(parse::seconds),
        allow_negative_numbers = true
    )]
    pub(crate) max_wait: Option<Duration>,
    /// Pace attempts to each host at R requests per second (needs --burst).
    #[arg(
        long,
        value_name = "R",
        value_parser = parse::checked(parse::rate),
        requires = "burst",
        allow_negative_numbers = true
    )]
    pub(crate) rate: Option<Rate>,
    /// How many attempts may start at once on a full bucket (needs --rate).
    #[arg(
        long,
        value_name = "B",
        value_parser = parse::checked(parse::burst),
        requires = "rate",
        allow_negative_numbers = true
    )]
    pub(crate) burst: Option<NonZeroU32>,
    /// Keep the --rate buckets in this Redis (`redis://[user:password@]host[:port][/db]`), so
    /// that every courier pointing at it shares one limit per host: several batches, or
    /// replicas of a job, together start at most burst + rate × t. When Redis is away each
    /// paces itself (fail open).
    #[arg(long, value_name = "URL", requires = "rate", conflicts_with = "config")]
    pub(crate) redis: Option<String>,
    /// The prefix of the Redis keys: runs share a limit when they share Redis, prefix and host
    /// [default: courier:rl:].
    #[arg(long, value_name = "PREFIX", requires = "redis")]
    pub(crate) redis_prefix: Option<String>,
    /// Add a UUID v4 Idempotency-Key to a POST or PATCH that has none, so that it may be
    /// retried.
    #[arg(long, conflicts_with = "config")]
    pub(crate) auto_idempotency_key: bool,
    /// Seed the backoff jitter, for reproducible waits.
    #[arg(long, value_name = "N", conflicts_with = "config")]
    pub(crate) seed: Option<u64>,
}

// === impl StackArgs ===

impl StackArgs {
    /// Puts the flags given that set a layer over `config`'s default policy: --retries,
    /// --deadline, --attempt-timeout, --max-wait (retry's, and the rate limit's when one is
    /// on), --rate and --burst. Each replaces the file's value; the rest of the file stays.
    pub(crate) fn apply(&self, config: &mut Config) {
        let default = &mut config.default;
        if let Some(deadline) = self.deadline {
            default.deadline = Some(OrOff::On(Dur(deadline)));
        }
        if let Some(timeout) = self.attempt_timeout {
            default.attempt_timeout = Some(OrOff::On(Dur(timeout)));
        }
        if self.retries.is_some() || self.max_wait.is_some() {
            let mut retry = match default.retry.take() {
                Some(OrOff::On(retry)) => retry,
                _ => RetryConfig::default(),
            };
            if let Some(retries) = self.retries {
                retry.attempts = Some(retries.saturating_add(1));
            }
            if let Some(wait) = self.max_wait {
                retry.max_wait = Some(Dur(wait));
            }
            default.retry = Some(OrOff::On(retry));
        }
        if let Some((rate, burst)) = self.rate.zip(self.burst) {
            let mut limit = match default.rate_limit.take() {
                Some(OrOff::On(limit)) => limit,
                _ => RateLimitConfig::default(),
            };
            limit.rate = Some(RateSpec::new(1, rate.interval()));
            limit.burst = Some(burst.get());
            default.rate_limit = Some(OrOff::On(limit));
        }
        if let (Some(wait), Some(OrOff::On(limit))) = (self.max_wait, &mut default.rate_limit) {
            limit.max_wait = Some(Dur(wait));
        }
    }
}

/// The preset's settings, resolved from [`StackArgs`] and the defaults.
#[derive(Debug, Clone)]
pub(crate) struct Stack {
    /// Attempts in all, the first included.
    pub(crate) attempts: u32,
    pub(crate) max_wait: Duration,
    pub(crate) deadline: Duration,
    pub(crate) attempt_timeout: Duration,
    pub(crate) rate: Option<(Rate, NonZeroU32)>,
    pub(crate) auto_key: bool,
    pub(crate) seed: Option<u64>,
    /// The Redis that holds the buckets, and the key prefix.
    pub(crate) redis: Option<(String, Option<String>)>,
}

// === impl Stack ===

impl Stack {
    pub(crate) fn from_args(args: &StackArgs) -> Self {
        Self {
            attempts: args.retries.unwrap_or(DEFAULT_RETRIES).saturating_add(1),
            max_wait: args.max_wait.unwrap_or(DEFAULT_MAX_WAIT),
            deadline: args.deadline.unwrap_or(courier::preset::DEFAULT_DEADLINE),
            attempt_timeout: args
                .attempt_timeout
                .unwrap_or(courier::preset::DEFAULT_ATTEMPT_TIMEOUT),
            rate: args.rate.zip(args.burst),
            auto_key: args.auto_idempotency_key,
            seed: args.seed,
            redis: args
                .redis
                .clone()
                .map(|url| (url, args.redis_prefix.clone())),
        }
    }

    /// The preset, configured as these settings say. Every service it makes shares one set of
    /// buckets, breakers, retry budgets and one cache. Must run inside a tokio runtime when a
    /// Redis is named (its connection's task is spawned there; it connects on first use).
    ///
    /// # Errors
    ///
    /// A message when the Redis URL is not one.
    pub(crate) fn layer(&self) -> Result<CourierLayer, String> {
        let mut retry = RetryLayer::new()
            .attempts(self.attempts)
            .base(BACKOFF_BASE)
            .overload_base(OVERLOAD_BASE)
            .cap(BACKOFF_CAP)
            .max_wait(self.max_wait)
            .generate_idempotency_keys(self.auto_key);
        if let Some(seed) = self.seed {
            retry = retry.seed(seed);
        }
        let layer = CourierLayer::new()
            .retry(retry)
            .deadline(self.deadline)
            .attempt_timeout(self.attempt_timeout)
            .rate_limit(self.rate.map(|(rate, burst)| {
                TokenBucketRateLimitLayer::new(rate, burst).max_wait(self.max_wait)
            }));
        let Some((url, prefix)) = &self.redis else {
            return Ok(layer);
        };
        let mut store = courier::redis::RedisStore::builder(url.as_str());
        if let Some(prefix) = prefix {
            store = store.prefix(prefix.as_str());
        }
        let store = store.connect_lazy().map_err(|e| {
            format!(
                "--redis \"{}\": {e}",
                courier::core::excerpt::Excerpt::new(&redacted(url))
            )
        })?;
        Ok(layer.shared_rate_limit(store))
    }
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

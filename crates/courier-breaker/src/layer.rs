//! [`CircuitBreakerLayer`]: the settings, and the state every service it makes shares.

use crate::config::{Config, FailureRate, OpenBackoff};
use crate::handle::BreakerHandle;
use crate::registry::Shared;
use crate::service::CircuitBreaker;
use courier_core::grpc::GrpcCode;
use courier_core::{Classifier, Global, KeyBy, KeyFn, PerHost, RequestHead};
use http::StatusCode;
use std::fmt;
use std::hash::Hash;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Wraps a service in a [`CircuitBreaker`]: one breaker per host by default.
///
/// Every service this layer makes, and every clone of those, shares the same breakers
/// (behind an `Arc`), and so does the [`handle`](Self::handle).
///
/// # Setters
///
/// A layer is a value: each setter returns a layer with breakers of its own. The services it
/// makes share them with each other, never with services made by the layer before the setter,
/// which keep their settings and their breakers. A handle sees the breakers of the services
/// made by the layer it was taken from, so take it after the last setter.
pub struct CircuitBreakerLayer<K: KeyFn = PerHost> {
    config: Config,
    key_fn: K,
    shared: Arc<Shared<K::Key>>,
}

impl CircuitBreakerLayer {
    /// A breaker per host with the defaults: open after 5 consecutive failures, stay open
    /// 30 s, then let 1 trial through; failures are judged by [`Classifier::new`].
    pub fn new() -> Self {
        Self::with(Config::default(), PerHost)
    }
}

impl Default for CircuitBreakerLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: KeyFn> CircuitBreakerLayer<K> {
    fn with(config: Config, key_fn: K) -> Self {
        let single = K::SINGLE.then(|| key_fn.key(&RequestHead::new(&http::Request::new(()))));
        Self {
            shared: Arc::new(Shared::new(config.clone(), single)),
            config,
            key_fn,
        }
    }

    fn set(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut self.config);
        Self::with(self.config, self.key_fn)
    }

    /// How breakers are keyed: [`PerHost`](courier_core::PerHost), [`Global`](courier_core::Global) or [`KeyBy`](courier_core::KeyBy).
    pub fn key_fn(&self) -> &K {
        &self.key_fn
    }

    /// One breaker per host: scheme and authority ([`HostKey`](courier_core::HostKey)).
    ///
    /// Defaults to one per host.
    pub fn per_host(self) -> CircuitBreakerLayer<PerHost> {
        CircuitBreakerLayer::with(self.config, PerHost)
    }

    /// One breaker for every request, whatever its host.
    ///
    /// Defaults to one per host.
    pub fn global(self) -> CircuitBreakerLayer<Global> {
        CircuitBreakerLayer::with(self.config, Global)
    }

    /// A breaker per key `f` returns for the request's head (method, URI, headers,
    /// extensions), e.g. per host and tenant.
    ///
    /// Defaults to one per host.
    pub fn key_by<F, Key>(self, f: F) -> CircuitBreakerLayer<KeyBy<F>>
    where
        F: Fn(&RequestHead<'_>) -> Key + Clone + Send + Sync + 'static,
        Key: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static,
    {
        CircuitBreakerLayer::with(self.config, KeyBy(f))
    }

    /// Opens after this many calls in a row failed. Calls, not attempts: under courier's
    /// retry layer, the retries of one call count with it, except that every attempt that
    /// finds nothing listening counts (nothing was sent, and the host was absent anew). Which
    /// failure opens at the count:
    /// any, with no [`failure_rate`](Self::failure_rate); with one, only a host that is not
    /// there (a connect failure: refused, unresolvable, unreachable, nothing sent), the rate
    /// judging failures after the request went out. Failing answers open at the count once
    /// they have lasted [`failing_answers_for`](Self::failing_answers_for).
    ///
    /// Defaults to 5.
    pub fn consecutive_failures(self, n: NonZeroU32) -> Self {
        self.set(|c| c.consecutive_failures = n)
    }

    /// Opens on the share of failed calls over a sliding window: failures after the request
    /// went out (a reset, a timeout, a slow call) and, unless they must last
    /// ([`failing_answers_for`](Self::failing_answers_for)), failing answers. A call counts
    /// once: a retry that fails makes its call a failed one, a retry that succeeds makes it a
    /// successful one. A host that is not there still opens at
    /// [`consecutive_failures`](Self::consecutive_failures).
    ///
    /// Defaults to off.
    pub fn failure_rate(self, rate: FailureRate) -> Self {
        self.set(|c| c.failure_rate = Some(rate))
    }

    /// How long the circuit stays open before a trial may go (at least 1 ms).
    ///
    /// Defaults to 30 s.
    pub fn open_duration(self, d: Duration) -> Self {
        self.set(|c| c.open_duration = d)
    }

    /// Lets the open duration grow with consecutive trips, with jitter.
    ///
    /// Defaults to off: every trip stays open for the same [`open_duration`](Self::open_duration).
    pub fn open_backoff(self, backoff: OpenBackoff) -> Self {
        self.set(|c| c.open_backoff = Some(backoff))
    }

    /// How many trial calls half-open lets through (the rest fail fast), judged together: the
    /// circuit closes once more than half of them succeeded, and opens again once half of
    /// them failed, so that one trial that meets a broken path does not keep a serving host
    /// out. A trial that is cancelled or refused below gives its place to the next call. At
    /// most 8191.
    ///
    /// Defaults to 1: the first verdict decides.
    pub fn half_open_trials(self, n: NonZeroU32) -> Self {
        self.set(|c| c.half_open_trials = n)
    }

    /// The one place that decides what an answer means ([`courier_core::classifier`]): an
    /// answer whose verdict counts against the host is a failing answer, any other answer a
    /// success, and a failure with no answer counts as its verdict says. Defaults to
    /// [`Classifier::new`]; the preset gives its own (`CourierLayer::classifier`), so that
    /// retry and the breaker judge every answer alike.
    ///
    /// It replaces the whole classifier, settings made earlier through this layer's delegates
    /// ([`failure_statuses`](Self::failure_statuses),
    /// [`grpc_failure_codes`](Self::grpc_failure_codes)) included: set it first.
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.set(|c| c.classifier = classifier)
    }

    /// The response statuses that count as failing answers: the same as
    /// [`Classifier::failure_statuses`] on this layer's [`classifier`](Self::classifier).
    pub fn failure_statuses(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.set(|c| c.classifier = c.classifier.clone().failure_statuses(statuses))
    }

    /// Lets failing answers (those whose [verdict](Self::classifier) counts against the
    /// host) open the circuit only once they have come for `d` with no success in between;
    /// transport failures still open it at the count alone (with a
    /// [`failure_rate`](Self::failure_rate), only a host that is not there), and so does such
    /// a failure that ends a run of failing answers.
    ///
    /// A host that answers is up: a few broken paths among working ones, or an overloaded
    /// host that serves some and refuses the rest, never goes this long without a success, so
    /// its calls are not cut off. A host that answers nothing but 5xx for `d` is down, and
    /// opens at the next failure. With a [`failure_rate`](Self::failure_rate) the rate leaves
    /// failing answers to this rule and counts them as calls the host answered. Whole
    /// milliseconds.
    ///
    /// Defaults to zero: the count alone decides. The `courier` preset sets 30 s.
    pub fn failing_answers_for(self, d: Duration) -> Self {
        let ms = d.as_millis().min(u128::from(u64::MAX)) as u64;
        self.set(|c| c.answers_for_ms = ms)
    }

    /// The gRPC codes (in a trailers-only answer's `grpc-status`) that count as failing
    /// answers: the same as [`Classifier::grpc_failure_codes`] on this layer's
    /// [`classifier`](Self::classifier).
    pub fn grpc_failure_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        self.set(|c| c.classifier = c.classifier.clone().grpc_failure_codes(codes))
    }

    /// Counts a call whose response headers took longer than `limit` as a failure, whatever
    /// its status. Measured in whole milliseconds; costs a clock read at the start and end of
    /// every call.
    ///
    /// Defaults to off.
    pub fn slow_call_threshold(self, limit: Duration) -> Self {
        self.set(|c| c.slow_call = Some(limit))
    }

    /// The most keys kept. When a new key would pass it, the least recently used breakers
    /// are dropped first, healthy closed ones before those that are open, until a quarter of
    /// the room is free. A breaker forced open or closed through the handle is never dropped.
    ///
    /// Defaults to 4096.
    pub fn max_keys(self, n: NonZeroUsize) -> Self {
        self.set(|c| c.max_hosts = n)
    }

    /// Seeds the jitter of the growing open duration, for reproducible runs.
    ///
    /// Defaults to a random seed.
    pub fn seed(self, seed: u64) -> Self {
        self.set(|c| c.seed = Some(seed))
    }

    /// What a service keeps: the key function and the shared breakers.
    pub(crate) fn into_parts(self) -> (K, Arc<Shared<K::Key>>) {
        (self.key_fn, self.shared)
    }

    /// A handle on the breakers this layer's services share: read states, force open or
    /// closed, reset.
    pub fn handle(&self) -> BreakerHandle<K::Key> {
        BreakerHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<K: KeyFn + Clone> Clone for CircuitBreakerLayer<K> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            key_fn: self.key_fn.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<K: KeyFn + fmt::Debug> fmt::Debug for CircuitBreakerLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("config", &self.config)
            .field("key_fn", &self.key_fn)
            .finish()
    }
}

impl<S, K: KeyFn + Clone> Layer<S> for CircuitBreakerLayer<K> {
    type Service = CircuitBreaker<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, self.clone())
    }
}

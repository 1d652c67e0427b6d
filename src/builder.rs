//! [`ServiceBuilderExt`]: one method per courier layer on `tower::ServiceBuilder`, so an
//! a-la-carte stack reads like tower-http's.
//!
//! ```
//! use courier::ServiceBuilderExt;
//! use courier::retry::RetryLayer;
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//!
//! let stack = ServiceBuilder::new()
//!     .deadline(Duration::from_secs(10))
//!     .courier_retry(RetryLayer::new().attempts(4))
//!     .attempt_timeout(Duration::from_secs(2))
//!     .concurrency_limit(64)
//!     .service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
//!     });
//! # let _ = stack;
//! ```

use tower::ServiceBuilder;
#[cfg(any(
    feature = "deadline",
    feature = "cache",
    feature = "retry",
    feature = "breaker",
    feature = "ratelimit",
    feature = "concurrency"
))]
use tower::layer::util::Stack;

mod sealed {
    pub trait Sealed<T> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

/// courier's layers as `ServiceBuilder` methods. Sealed: implemented for `ServiceBuilder` only.
///
/// # Names
///
/// Each method is named as the preset's setter for the same layer
/// ([`CourierLayer`](crate::CourierLayer): `deadline`, `attempt_timeout`, `cache`,
/// `circuit_breaker`, `adaptive_pacing`), or after the layer where the preset has no setter
/// (`deadline_scope`, `classify_body`). Where `ServiceBuilder` has a method of that name
/// already (`retry`, `rate_limit`, `concurrency_limit`), which an extension trait cannot
/// replace, the name takes the prefix `courier_`: `courier_retry`, `courier_rate_limit`,
/// `courier_concurrency_limit`. Each takes its layer (the
/// deadline layers also a [`Duration`](std::time::Duration), as the preset does).
///
/// # Compile time
///
/// Name the transport's request body type in a deep stack
/// (`hyper_client::<Full<Bytes>>()`): each layer's `Service` impl asks for the one below, and
/// while the body type is still to be inferred the compiler proves them over and over. All
/// nine layers over `hyper_client()` then a `oneshot`: 17 s and 1.2 GB to type-check with the
/// body inferred, a third of a second with it named. [`CourierLayer`](crate::CourierLayer)'s service
/// asks only for the transport, so the preset needs no name.
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds the whole preset ([`CourierLayer`](crate::CourierLayer)).
    #[cfg(feature = "preset")]
    fn courier(self, preset: crate::CourierLayer) -> ServiceBuilder<Stack<crate::CourierLayer, L>>;

    /// Adds a [`DeadlineLayer`](courier_deadline::DeadlineLayer): one, or a budget.
    #[cfg(feature = "deadline")]
    fn deadline(
        self,
        deadline: impl Into<courier_deadline::DeadlineLayer>,
    ) -> ServiceBuilder<Stack<courier_deadline::DeadlineLayer, L>>;

    /// Adds an [`AttemptTimeoutLayer`](courier_deadline::AttemptTimeoutLayer): one, or the
    /// bound of each attempt.
    #[cfg(feature = "deadline")]
    fn attempt_timeout(
        self,
        per_attempt: impl Into<courier_deadline::AttemptTimeoutLayer>,
    ) -> ServiceBuilder<Stack<courier_deadline::AttemptTimeoutLayer, L>>;

    /// Adds a [`DeadlineScopeLayer`](courier_deadline::DeadlineScopeLayer) (server side).
    #[cfg(feature = "deadline")]
    fn deadline_scope(
        self,
        layer: courier_deadline::DeadlineScopeLayer,
    ) -> ServiceBuilder<Stack<courier_deadline::DeadlineScopeLayer, L>>;

    /// Adds an [`EtagCacheLayer`](courier_cache::EtagCacheLayer).
    #[cfg(feature = "cache")]
    fn cache(
        self,
        layer: courier_cache::EtagCacheLayer,
    ) -> ServiceBuilder<Stack<courier_cache::EtagCacheLayer, L>>;

    /// Adds a [`RetryLayer`](courier_retry::RetryLayer).
    #[cfg(feature = "retry")]
    fn courier_retry(
        self,
        layer: courier_retry::RetryLayer,
    ) -> ServiceBuilder<Stack<courier_retry::RetryLayer, L>>;

    /// Adds a [`HedgeLayer`](courier_retry::hedge::HedgeLayer).
    #[cfg(feature = "retry")]
    fn hedge(
        self,
        layer: courier_retry::hedge::HedgeLayer,
    ) -> ServiceBuilder<Stack<courier_retry::hedge::HedgeLayer, L>>;

    /// Adds a [`ClassifyBodyLayer`](courier_retry::ClassifyBodyLayer).
    #[cfg(feature = "retry")]
    fn classify_body(
        self,
        layer: courier_retry::ClassifyBodyLayer,
    ) -> ServiceBuilder<Stack<courier_retry::ClassifyBodyLayer, L>>;

    /// Adds a [`CircuitBreakerLayer`](courier_breaker::CircuitBreakerLayer).
    #[cfg(feature = "breaker")]
    fn circuit_breaker<M>(
        self,
        layer: courier_breaker::CircuitBreakerLayer<M>,
    ) -> ServiceBuilder<Stack<courier_breaker::CircuitBreakerLayer<M>, L>>
    where
        M: courier_core::KeyFn;

    /// Adds a [`TokenBucketRateLimitLayer`](courier_ratelimit::TokenBucketRateLimitLayer).
    #[cfg(feature = "ratelimit")]
    fn courier_rate_limit<KF, St>(
        self,
        layer: courier_ratelimit::TokenBucketRateLimitLayer<KF, St>,
    ) -> ServiceBuilder<Stack<courier_ratelimit::TokenBucketRateLimitLayer<KF, St>, L>>;

    /// Adds an [`AdaptivePacingLayer`](courier_ratelimit::AdaptivePacingLayer).
    #[cfg(feature = "ratelimit")]
    fn adaptive_pacing<KF, St>(
        self,
        layer: courier_ratelimit::AdaptivePacingLayer<KF, St>,
    ) -> ServiceBuilder<Stack<courier_ratelimit::AdaptivePacingLayer<KF, St>, L>>
    where
        KF: courier_core::KeyFn;

    /// Adds a [`ConcurrencyLimitLayer`](courier_concurrency::ConcurrencyLimitLayer).
    #[cfg(feature = "concurrency")]
    fn courier_concurrency_limit<K>(
        self,
        layer: courier_concurrency::ConcurrencyLimitLayer<K>,
    ) -> ServiceBuilder<Stack<courier_concurrency::ConcurrencyLimitLayer<K>, L>>
    where
        K: courier_core::KeyFn;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    #[cfg(feature = "preset")]
    fn courier(self, preset: crate::CourierLayer) -> ServiceBuilder<Stack<crate::CourierLayer, L>> {
        self.layer(preset)
    }

    #[cfg(feature = "deadline")]
    fn deadline(
        self,
        deadline: impl Into<courier_deadline::DeadlineLayer>,
    ) -> ServiceBuilder<Stack<courier_deadline::DeadlineLayer, L>> {
        self.layer(deadline.into())
    }

    #[cfg(feature = "deadline")]
    fn attempt_timeout(
        self,
        per_attempt: impl Into<courier_deadline::AttemptTimeoutLayer>,
    ) -> ServiceBuilder<Stack<courier_deadline::AttemptTimeoutLayer, L>> {
        self.layer(per_attempt.into())
    }

    #[cfg(feature = "deadline")]
    fn deadline_scope(
        self,
        layer: courier_deadline::DeadlineScopeLayer,
    ) -> ServiceBuilder<Stack<courier_deadline::DeadlineScopeLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "cache")]
    fn cache(
        self,
        layer: courier_cache::EtagCacheLayer,
    ) -> ServiceBuilder<Stack<courier_cache::EtagCacheLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "retry")]
    fn courier_retry(
        self,
        layer: courier_retry::RetryLayer,
    ) -> ServiceBuilder<Stack<courier_retry::RetryLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "retry")]
    fn hedge(
        self,
        layer: courier_retry::hedge::HedgeLayer,
    ) -> ServiceBuilder<Stack<courier_retry::hedge::HedgeLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "retry")]
    fn classify_body(
        self,
        layer: courier_retry::ClassifyBodyLayer,
    ) -> ServiceBuilder<Stack<courier_retry::ClassifyBodyLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "breaker")]
    fn circuit_breaker<M>(
        self,
        layer: courier_breaker::CircuitBreakerLayer<M>,
    ) -> ServiceBuilder<Stack<courier_breaker::CircuitBreakerLayer<M>, L>>
    where
        M: courier_core::KeyFn,
    {
        self.layer(layer)
    }

    #[cfg(feature = "ratelimit")]
    fn courier_rate_limit<KF, St>(
        self,
        layer: courier_ratelimit::TokenBucketRateLimitLayer<KF, St>,
    ) -> ServiceBuilder<Stack<courier_ratelimit::TokenBucketRateLimitLayer<KF, St>, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "ratelimit")]
    fn adaptive_pacing<KF, St>(
        self,
        layer: courier_ratelimit::AdaptivePacingLayer<KF, St>,
    ) -> ServiceBuilder<Stack<courier_ratelimit::AdaptivePacingLayer<KF, St>, L>>
    where
        KF: courier_core::KeyFn,
    {
        self.layer(layer)
    }

    #[cfg(feature = "concurrency")]
    fn courier_concurrency_limit<K>(
        self,
        layer: courier_concurrency::ConcurrencyLimitLayer<K>,
    ) -> ServiceBuilder<Stack<courier_concurrency::ConcurrencyLimitLayer<K>, L>>
    where
        K: courier_core::KeyFn,
    {
        self.layer(layer)
    }
}

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
//!
//! The retry and rate-limit methods are named `courier_retry` and `token_bucket_rate_limit`
//! so that they never clash with tower's own `retry` and `rate_limit`.

use tower::ServiceBuilder;

mod sealed {
    pub trait Sealed<T> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

/// courier's layers as `ServiceBuilder` methods. Sealed: implemented for `ServiceBuilder` only.
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds the whole preset ([`CourierLayer`](crate::CourierLayer)).
    #[cfg(feature = "preset")]
    fn courier(
        self,
        preset: crate::CourierLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<crate::CourierLayer, L>>;

    /// Adds a [`DeadlineLayer`](courier_deadline::DeadlineLayer) with `budget`.
    #[cfg(feature = "deadline")]
    fn deadline(
        self,
        budget: std::time::Duration,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_deadline::DeadlineLayer, L>>;

    /// Adds an [`AttemptTimeoutLayer`](courier_deadline::AttemptTimeoutLayer) bounding each
    /// attempt to `per_attempt`.
    #[cfg(feature = "deadline")]
    fn attempt_timeout(
        self,
        per_attempt: std::time::Duration,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_deadline::AttemptTimeoutLayer, L>>;

    /// Adds an [`EtagCacheLayer`](courier_cache::EtagCacheLayer).
    #[cfg(feature = "cache")]
    fn etag_cache(
        self,
        layer: courier_cache::EtagCacheLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_cache::EtagCacheLayer, L>>;

    /// Adds a [`RetryLayer`](courier_retry::RetryLayer).
    #[cfg(feature = "retry")]
    fn courier_retry(
        self,
        layer: courier_retry::RetryLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_retry::RetryLayer, L>>;

    /// Adds a [`CircuitBreakerLayer`](courier_breaker::CircuitBreakerLayer).
    #[cfg(feature = "breaker")]
    fn circuit_breaker<M>(
        self,
        layer: courier_breaker::CircuitBreakerLayer<M>,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_breaker::CircuitBreakerLayer<M>, L>>
    where
        M: courier_breaker::KeyFn;

    /// Adds a [`TokenBucketRateLimitLayer`](courier_ratelimit::TokenBucketRateLimitLayer).
    #[cfg(feature = "ratelimit")]
    fn token_bucket_rate_limit<KF, St>(
        self,
        layer: courier_ratelimit::TokenBucketRateLimitLayer<KF, St>,
    ) -> ServiceBuilder<
        tower::layer::util::Stack<courier_ratelimit::TokenBucketRateLimitLayer<KF, St>, L>,
    >;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    #[cfg(feature = "preset")]
    fn courier(
        self,
        preset: crate::CourierLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<crate::CourierLayer, L>> {
        self.layer(preset)
    }

    #[cfg(feature = "deadline")]
    fn deadline(
        self,
        budget: std::time::Duration,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_deadline::DeadlineLayer, L>> {
        self.layer(courier_deadline::DeadlineLayer::new(budget))
    }

    #[cfg(feature = "deadline")]
    fn attempt_timeout(
        self,
        per_attempt: std::time::Duration,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_deadline::AttemptTimeoutLayer, L>> {
        self.layer(courier_deadline::AttemptTimeoutLayer::new(per_attempt))
    }

    #[cfg(feature = "cache")]
    fn etag_cache(
        self,
        layer: courier_cache::EtagCacheLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_cache::EtagCacheLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "retry")]
    fn courier_retry(
        self,
        layer: courier_retry::RetryLayer,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_retry::RetryLayer, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "breaker")]
    fn circuit_breaker<M>(
        self,
        layer: courier_breaker::CircuitBreakerLayer<M>,
    ) -> ServiceBuilder<tower::layer::util::Stack<courier_breaker::CircuitBreakerLayer<M>, L>>
    where
        M: courier_breaker::KeyFn,
    {
        self.layer(layer)
    }

    #[cfg(feature = "ratelimit")]
    fn token_bucket_rate_limit<KF, St>(
        self,
        layer: courier_ratelimit::TokenBucketRateLimitLayer<KF, St>,
    ) -> ServiceBuilder<
        tower::layer::util::Stack<courier_ratelimit::TokenBucketRateLimitLayer<KF, St>, L>,
    > {
        self.layer(layer)
    }
}

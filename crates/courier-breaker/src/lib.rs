//! `CircuitBreakerLayer`: stop calling a host that is down.
//!
//! After repeated failures a host's circuit opens and calls to it fail at once with
//! [`CircuitOpen`](courier_core::CircuitOpen), without calling the inner service, so a dead host costs nothing below
//! this layer (no rate-limit token, no connection, no timeout). When the open duration has
//! passed, a bounded number of trial calls go through (half-open), judged together: a
//! majority of successes closes the circuit, half of them failed opens it again.
//!
//! ```text
//!         N calls in a row failed              open duration passed
//!   Closed ─────────────────────────▶ Open ──────────────────────────▶ HalfOpen
//!     ▲      (or failure rate ≥ x)     ▲                                  │
//!     │                                └──── half the trials failed ──────┤
//!     └────────────────────────────────────── most trials succeeded ─────┘
//! ```
//!
//! - **Keys**: one breaker per host (scheme and authority, [`HostKey`](courier_core::HostKey)) by default
//!   ([`CircuitBreakerLayer::per_host`]); one for everything with
//!   [`CircuitBreakerLayer::global`]; or a key of your own with
//!   [`CircuitBreakerLayer::key_by`]. The keys are courier-core's [`KeyFn`](courier_core::KeyFn)s ([`PerHost`](courier_core::PerHost),
//!   [`Global`](courier_core::Global), [`KeyBy`](courier_core::KeyBy)), as the rate limiter's are.
//! - **Calls, not attempts**: courier's retry layer, above this one, puts the records of a
//!   call's earlier attempts on each retry ([`Attempts`](courier_core::Attempts) as a request
//!   extension), each with the verdict on its attempt. The breaker reads those verdicts and
//!   counts a call's failures once: its retries add nothing to the run of failures (but a
//!   connect failure, which sent nothing, counts at every attempt), and in the failure-rate
//!   window a retry only changes whether its call failed. A request without the records is a
//!   call of its own.
//! - **Transport faults told apart**: a connect failure (refused, a name that does not resolve,
//!   a network out of reach: nothing was sent) says the host is not there and counts towards
//!   [`consecutive_failures`](CircuitBreakerLayer::consecutive_failures) always; a failure after
//!   the request went out (a reset, a timeout) is this call's, and with a
//!   [`failure_rate`](CircuitBreakerLayer::failure_rate) only the rate weighs it.
//! - **What counts as a failure**: the verdict of the layer's
//!   [`Classifier`](courier_core::Classifier) ([`CircuitBreakerLayer::classifier`]; the
//!   [`courier_core::classifier`] module has the default verdicts), the one every layer
//!   reads. An answer whose verdict counts against the host is a failing answer; any other
//!   answer is a healthy server answering on purpose and counts as success. A failure with no
//!   answer whose verdict does not count against the host counts as neither: our own refusals
//!   from layers below (rate limited, deadline exceeded:
//!   [`FailureKind::Local`](courier_core::FailureKind::Local)), and a failed certificate check
//!   ([`FailureKind::Tls`](courier_core::FailureKind::Tls)), a matter of trust settings that no
//!   wait mends and that an open circuit would hide. Optionally, calls slower than a threshold
//!   count as failures.
//! - **Overloaded is not down**: with
//!   [`failing_answers_for`](CircuitBreakerLayer::failing_answers_for), failing answers open
//!   the circuit only once they have come for that long with no success in between, while
//!   transport failures still open it at the count. A host with one broken path, or one that
//!   serves at its capacity and refuses the rest, answers some calls well, and keeps its
//!   circuit closed; a host that refuses connections, or answers nothing but 5xx for that
//!   long, is down. The `courier` preset sets 30 s.
//! - **Cancellation**: dropping a call's future reports nothing; a half-open trial gives its
//!   permit back, so the next call becomes the trial and the breaker never stays stuck in
//!   half-open.
//! - **Control**: a [`BreakerHandle`] reads each key's state, forces a circuit open or
//!   closed, and resets it. Every state change is a `tracing` event with target
//!   `courier::breaker` and the fields `host`, `from`, `to` and `why`.
//! - **Telemetry**: a refusal records `courier.breaker.state` on the current span (inside
//!   courier's retry layer, the refused attempt's); with the `metrics` feature, transitions,
//!   states and refusals per host are metrics. See [`telemetry`].
//!
//! ```
//! use courier_breaker::{CircuitBreakerLayer, CircuitState};
//! use courier_core::CircuitOpen;
//! use courier_core::{BoxError, HostKey};
//! use http::{Request, Response, StatusCode};
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let layer = CircuitBreakerLayer::new()
//!     .consecutive_failures(NonZeroU32::new(2).unwrap())
//!     .open_duration(Duration::from_secs(10));
//! let handle = layer.handle();
//! let svc = ServiceBuilder::new().layer(layer).service(service_fn(|_req: Request<()>| async {
//!     Ok::<_, BoxError>(Response::builder().status(StatusCode::SERVICE_UNAVAILABLE).body(())?)
//! }));
//!
//! for _ in 0..2 {
//!     let res = svc.clone().oneshot(Request::get("http://down.example/").body(())?).await?;
//!     assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
//! }
//! let err = svc.oneshot(Request::get("http://down.example/").body(())?).await.unwrap_err();
//! assert!(err.is::<CircuitOpen>());
//! let host = HostKey::from_request(&Request::get("http://down.example/").body(())?);
//! assert_eq!(handle.state(&host), Some(CircuitState::Open));
//! # Ok(())
//! # }
//! ```
//!
//! # Hot path
//!
//! A breaker's whole state is one `AtomicU64` (phase, generation, trip count, and the
//! failure count, the reopening deadline or the trials' counts). While closed, admitting a
//! call is one load and, once the classifier has judged the answer, a success is one load
//! (and one atomic add with a failure-rate window, which reads the clock once per 64
//! successes); no lock is taken and the clock is read only on a failure or while open (and on
//! every call with the slow-call threshold on). A request with extensions costs one look for
//! the retry's records. Breakers live in a concurrent map (`papaya`), bounded by
//! [`max_keys`](CircuitBreakerLayer::max_keys).
//!
//! # Errors
//!
//! The service's error is [`BoxError`](courier_core::BoxError):
//! [`CircuitOpen`](courier_core::CircuitOpen) when the circuit refused the call (test for it
//! with [`is_caused_by`](courier_core::is_caused_by)), else the inner service's error,
//! unchanged. A setting that cannot work (a failure rate out of range) is refused when it is
//! built, with [`InvalidConfig`](courier_core::InvalidConfig). Each is defined in
//! `courier-core`, where every layer and the facade find it.
//!
//! # Differences from other breakers
//!
//! Unlike most, this one never turns a status into an error: a 503 that trips the circuit is
//! still returned as a response. It refuses in the response future, never in `poll_ready`, and
//! needs no `Buffer`: clones share the state.
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
pub mod future;
mod handle;
mod key;
mod layer;
mod outcome;
mod registry;
mod service;
mod state;
pub mod telemetry;
mod window;

pub use config::{FailureRate, OpenBackoff};
pub use handle::{BreakerHandle, CircuitState, CircuitStatus};
pub use key::BreakerKey;
pub use layer::CircuitBreakerLayer;
pub use service::CircuitBreaker;

#[cfg(test)]
mod send_sync {
    use super::*;
    use courier_core::{BoxError, CircuitOpen, Global, HostKey, InvalidConfig};

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    type Svc = tower::util::BoxCloneSyncService<http::Request<()>, http::Response<()>, BoxError>;

    #[test]
    fn everything_is_send_sync_static() {
        assert_send_sync_static::<CircuitBreakerLayer>();
        assert_send_sync_static::<CircuitBreakerLayer<Global>>();
        assert_send_sync_static::<CircuitBreaker<Svc>>();
        assert_send_sync_static::<BreakerHandle>();
        assert_send_sync_static::<future::ResponseFuture<std::future::Ready<()>, HostKey>>();
        assert_send_sync_static::<CircuitOpen>();
        assert_send_sync_static::<InvalidConfig>();
    }
}

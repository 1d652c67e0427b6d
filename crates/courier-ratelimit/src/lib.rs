//! `TokenBucketRateLimitLayer`: paces every request per host, and obeys the server's quota.
//!
//! A client that paces itself a margin below the server's limit never sees a 429. This layer
//! keeps one token bucket per host (scheme + authority) by default
//! ([`TokenBucketRateLimitLayer::per_host`]), per key of your own
//! ([`TokenBucketRateLimitLayer::key_by`]), or one for everything
//! ([`TokenBucketRateLimitLayer::global`]); the keys are courier-core's [`KeyFn`](courier_core::KeyFn)s
//! ([`PerHost`](courier_core::PerHost), [`KeyBy`](courier_core::KeyBy), [`Global`](courier_core::Global)), as the circuit breaker's are. `burst` requests may
//! start at once; after that one every `1 / rate`. In any window of length `d`, at most
//! `burst + rate * d` requests start.
//!
//! ```
//! use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
//! use std::num::NonZeroU32;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let limit = TokenBucketRateLimitLayer::new(
//!     Rate::per_second(5.0).unwrap(),
//!     NonZeroU32::new(2).unwrap(),
//! );
//! let svc = ServiceBuilder::new().layer(limit).service(service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(()))
//! }));
//!
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     let req = http::Request::get("http://api.example/").body(()).unwrap();
//!     svc.clone().oneshot(req).await.unwrap();
//! }
//! // Two start at once (the burst), the third one interval (0.2 s) later.
//! assert_eq!(start.elapsed(), std::time::Duration::from_millis(200));
//! # }
//! ```
//!
//! # Adaptive pacing
//!
//! When nobody knows the host's quota, [`AdaptivePacingLayer`] (module [`adaptive`]) learns
//! it: an overload signal ([by default](adaptive#signals-and-accepts) a 503 or 429 without a
//! hint, or a timeout) paces the host at what it accepted over the last second, every caller
//! together, and the pace grows back once the signals stop ([the ramp](adaptive#the-ramp)).
//! It takes its slots from the same [`RateLimitStore`] seam as the bucket. A host that never
//! signals is never paced.
//!
//! # Modes
//!
//! - [`Mode::Wait`] (default): the response future reserves the next free slot and sleeps until
//!   it, then calls the inner service. Reservation means concurrent callers get slots one
//!   interval apart: a burst of callers is spread out, not woken together. A wait longer than
//!   `max_wait` (default 60 s), or one that would end past the request's
//!   deadline ([`CallContext`](courier_core::CallContext)), fails at once with [`RateLimited`](courier_core::RateLimited) and takes no slot;
//!   its `retry_in` is the wait it would have had (when a slot is free), not the time left to
//!   the deadline. A request whose timer wakes it just past its deadline (tokio's timer ticks
//!   in whole milliseconds) is not sent either: it fails with [`RateLimited`](courier_core::RateLimited), gives its slot
//!   back, and `retry_in` says when a slot is free after that (zero when its own slot went
//!   back). A store that answers through a future (not [`InMemoryStore`]) cannot be asked that
//!   without reserving a slot: with one, `retry_in` is zero there, as it is when such a store
//!   has not answered by the deadline: nothing is known then of when a slot is free.
//! - [`Mode::Reject`]: a request without a free slot now fails at once with
//!   `RateLimited { retry_in }`.
//!
//! # Server feedback
//!
//! Every response is read with [`HintConfig::parse`](courier_core::HintConfig::parse): a 429,
//! 503 (or 403) with `Retry-After`, `x-ratelimit-remaining: 0` with a reset, or the IETF
//! `RateLimit` fields with nothing remaining park that host's bucket until the moment named.
//! Requests drawing from a parked bucket wait until then (or are rejected, in Reject mode, or
//! when the park is longer than `max_wait`); other buckets are not affected. A park belongs to
//! the bucket's key: per host by default, every host under `global()`, and the key a `key_by`
//! function names (so a 429 parks that key's bucket, not the host for other keys). A response marked by the cache layer as
//! served from the cache ([`CacheStatus::is_from_cache`](courier_core::CacheStatus)) is old
//! news: its hints are ignored.
//!
//! # Cancellation
//!
//! A slot reserved for a request that is never sent goes back to the bucket: when the caller
//! drops the future before it called the inner service (even once the slot's moment has come),
//! and when the request is refused after its wait (it woke past its deadline, by one timer
//! tick, or a server's park that came meanwhile lasts longer than it accepts to wait). The slot
//! goes back when no later request reserved a slot after it (the bucket is then exactly as if
//! the request never came); when a later one did, its slot stays spent, which only lowers the
//! rate for a moment. Either way no other request waits longer because of it. A slot goes back
//! at most once, and never once the inner service was called: from then on it is spent.
//!
//! # Clone
//!
//! The buckets are shared state owned by the layer, behind an `Arc`: every service the layer
//! makes and every clone of them draw from the same buckets. The services are `Clone + Send +
//! Sync` (when the inner service is); no `Buffer` is needed.
//!
//! # Errors
//!
//! The service's error is [`BoxError`](courier_core::BoxError):
//! [`RateLimited`](courier_core::RateLimited) when no slot was free soon enough, the inner
//! service's error otherwise. HTTP statuses stay responses. A bad rate is refused when it is
//! built, with [`InvalidConfig`](courier_core::InvalidConfig). Both are defined in
//! `courier-core`, where every layer and the facade find them.
//!
//! # State and eviction
//!
//! Each bucket is one `AtomicU64` (GCRA's theoretical arrival time) updated with a
//! compare-and-swap loop, plus one for the server's park, in a lock-free map ([`papaya`]).
//! Idle keys (bucket full again, not parked) are evicted when the map reaches `max_keys`
//! (default 10 000); evicting only full buckets means eviction never lets a host burst beyond
//! its burst. The state sits behind the [`RateLimitStore`] seam, so a store shared between
//! processes can take the in-process store's place.
//!
//! # Logging
//!
//! An `info` event when a request waits longer than `log_waits_over` (default 1 s), with the
//! host and the wait; an `info` event when a host is parked, with the host, until when (an HTTP
//! date on the wall clock), the wait and why (`retry_after`, `ratelimit`, `quota_reset`); a
//! `debug` event for each refusal.
//!
//! A wait for a slot is recorded as `courier.ratelimit.wait_ms` on the current span (inside
//! courier's retry layer, the waiting attempt's), and a wait of adaptive pacing as
//! `courier.pacing.wait_ms`; with the `metrics` feature, waits and refusals per host are
//! metrics. See [`telemetry`].
//!
//! # Differences from `tower::limit::RateLimit`
//!
//! tower's limiter is one fixed window per service instance, waits in `poll_ready` (so it needs
//! a `Buffer` to be shared), and knows nothing of hosts or servers. This one is keyed, shared
//! across clones, waits inside the response future, spreads concurrent callers, fails fast
//! against deadlines, and obeys the server's quota headers.
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod config;
pub mod future;
mod gcra;
mod layer;
mod service;
mod slot;
pub mod store;
pub mod telemetry;

pub use adaptive::{AdaptivePacing, AdaptivePacingLayer};
pub use config::{MAX_INTERVAL, Mode, Quota, Rate};
pub use layer::{DEFAULT_LOG_WAITS_OVER, DEFAULT_MAX_WAIT, TokenBucketRateLimitLayer};
pub use service::TokenBucketRateLimit;
pub use store::{Decision, Denial, Grant, InMemoryStore, RateLimitStore};

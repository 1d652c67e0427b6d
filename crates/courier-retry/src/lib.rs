//! RetryLayer: retry only what is safe, wait as long as the server asks.
//!
//! [`RetryLayer`] wraps any `Clone` service from `http::Request<B>` to `http::Response<RB>` and
//! runs the attempt loop. Each attempt's answer, or its failure, gets a
//! [`Verdict`](courier_core::Verdict) from the layer's [`Classifier`](courier_core::Classifier)
//! ([`RetryLayer::classifier`]; its module, [`courier_core::classifier`], has the table of
//! default verdicts). Then retry decides, in this order, each decision with a
//! [`Reason`](courier_core::extensions::Reason):
//!
//! 1. An answer whose verdict says asking again cannot change it ends the call as it is
//!    (`final_status`). A gRPC answer whose `grpc-status` came with its headers
//!    (trailers-only) is judged by its code; one that sent its headers without a status has
//!    committed the call: it is final.
//! 2. A failure with no answer that asking again cannot change (tls, local: our own refusals,
//!    unknown) is never retried (`never_retried`).
//! 3. A request that is not retry-safe ([`Classifier::is_retry_safe`](courier_core::Classifier::is_retry_safe):
//!    no idempotent method, no `Idempotency-Key`, not one of the
//!    [`retry_safe_paths`](RetryLayer::retry_safe_paths), no
//!    [`RetrySafe`](courier_core::idempotency::RetrySafe) extension) is not retried
//!    (`not_retry_safe`), unless the failure is connect: then nothing was sent.
//! 4. Attempts used up (3 in all by default): stop (`attempts_exhausted`). A body that cannot be
//!    replayed whole stops the call here too (`body_not_replayable`); one an earlier attempt
//!    may still be sending is decided before the retry goes out (see [Bodies](#bodies)).
//! 5. A server hint (`Retry-After` as seconds or as a date counted by the response's own `Date`,
//!    `RateLimit`, `x-ratelimit-*`; see [`courier_core::hints`]) is waited exactly. A hint
//!    longer than `max_wait` (60 s) stops the call at once with that response
//!    (`hint_exceeds_max_wait`); one that would end past the request's
//!    deadline ([`CallContext`](courier_core::CallContext)) does too (`past_deadline`).
//!    For gRPC, the hint is `grpc-retry-pushback-ms`; a negative or unreadable one stops the
//!    call (`pushback_refused`).
//! 6. Otherwise full jitter: uniform in `[0, min(cap, base * 2^(n-1))]` before retry `n`, base
//!    0.5 s, cap 30 s ([`policy`]); past the deadline: stop (`past_deadline`). After an HTTP
//!    answer judged an overload without a hint (a 503 or 429 by default) the base is
//!    [`overload_base`](RetryLayer::overload_base), 2 s: such a host refuses work because it
//!    has too much, and a crowd of clients that know nothing else must spread its retries over
//!    the seconds the host needs to serve it.
//! 7. The [`RetryBudget`], shared by every clone and scoped per host, has the last word
//!    (`retry_budget_exhausted`).
//!
//! A call's own [`CallOptions`](courier_core::CallOptions) replace, for that call, the
//! attempts of 4. and the classifier's word on retry-safety in 3. (a connect failure is still
//! retried).
//!
//! The returned response carries [`Attempts`](courier_core::Attempts), one
//! [`AttemptRecord`](courier_core::AttemptRecord) per attempt, the last with the reason the
//! call stopped. Every attempt after the first carries the records of the attempts before it
//! as a request extension (the same [`Attempts`](courier_core::Attempts)): the layers below
//! tell a retry from a new call by it, as the circuit breaker does to count a call's failures
//! once. Each attempt is also one `tracing` event, target `courier::retry`, with the
//! fields `attempt`, `method`, `host` (scheme and authority, never userinfo), `path` (never
//! the query), `outcome` (status or failure kind), `decision`, `reason`, `wait_ms`,
//! `wait_source`, `elapsed_ms`; a first attempt that ends the call with a final status logs at
//! `DEBUG`, every other at `INFO`.
//!
//! ```
//! use courier_retry::RetryLayer;
//! use http::{Request, Response, StatusCode};
//! use std::convert::Infallible;
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let calls = Arc::new(AtomicU32::new(0));
//! let upstream = service_fn({
//!     let calls = calls.clone();
//!     move |_req: Request<String>| {
//!         let n = calls.fetch_add(1, Ordering::SeqCst);
//!         let status = if n == 0 { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
//!         async move {
//!             Ok::<_, Infallible>(Response::builder().status(status).body(String::new()).unwrap())
//!         }
//!     }
//! });
//! let mut svc = ServiceBuilder::new()
//!     .layer(RetryLayer::new().attempts(3).base(Duration::from_millis(100)))
//!     .service(upstream);
//! let req = Request::get("http://api.example/items").body(String::new()).unwrap();
//! let res = svc.ready().await.unwrap().call(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! let attempts = res.extensions().get::<courier_core::Attempts>().unwrap();
//! assert_eq!(attempts.count(), 2);
//! # }
//! ```
//!
//! # Telemetry
//!
//! Each call is one span, `courier.call`, a child of the caller's current span (or, when the
//! current span is the call span of an outer courier layer, as an active cache makes, that
//! one), and each attempt one span under it, `courier.attempt`, at `INFO` on target
//! `courier::retry`,
//! shaped by the OpenTelemetry HTTP client semantic conventions: the attempt span is exported
//! by `tracing-opentelemetry` under the method's name (`otel.name`), of kind client, with
//! `http.request.method`, `server.address`, `server.port`, `url.full` (never userinfo; the
//! query only with [`RetryLayer::record_url_query`]), `http.request.resend_count` (absent on
//! the first attempt, then 1, 2, ...), `http.response.status_code`, `error.type` (the status of
//! a 4xx or 5xx; the verdict's class, such as `overload`, for a lower status the classifier
//! judged no success; or the failure: `circuit_open`, `rate_limited`, `deadline_exceeded`,
//! `attempt_timeout`, or its kind) with `otel.status_code = "ERROR"`, and courier's fields
//! `courier.attempt`, `courier.retry.decision`, `courier.retry.reason`, `courier.retry.wait_ms`,
//! `courier.retry.wait_source`. The layers below record on the attempt span they run in: the
//! breaker `courier.breaker.state` when it refused, the rate limiter `courier.ratelimit.wait_ms`
//! and adaptive pacing `courier.pacing.wait_ms` when they held the attempt for a slot. The call span ends with the call's
//! `http.response.status_code` or `error.type`, `courier.attempts` and the reason it stopped.
//!
//! Waits are no spans: an attempt span ends once its answer's head has come and the next step
//! is decided, the next attempt's span starts when that attempt is handed on, and the gap
//! between them is the wait, whose length and source the span before it carries. One
//! exception: a gRPC answer that sent its headers without a `grpc-status`, to a caller that
//! reads its trailers ([`future::ReadsGrpcTrailers`] on the request, as `courier::grpc`'s
//! channel does), carries its last attempt's span and this layer's call span on the response
//! ([`future::GrpcStatusSpans`]), open until the trailers' code is recorded on them (`rpc.system`,
//! `rpc.grpc.status_code`, and a code other than OK by its name as `error.type`). Integers are
//! recorded as `i64`. Until a `tracing` subscriber is set no span is made, and one that does not
//! want them has them disabled where they are made: nothing is formatted or allocated.
//!
//! Features: `opentelemetry` makes each attempt send the W3C trace context of its own span
//! (`traceparent`, `tracestate`) through the `opentelemetry` global propagator; `metrics`
//! records `http.client.request.duration` per attempt and the retries and budget refusals
//! through the `metrics` facade (the `metrics` module lists names and labels; with the
//! feature on, an attempt looks its duration's handle up whether or not a recorder is
//! installed, without allocating once its series is known).
//!
//! # Idempotency keys
//!
//! With [`RetryLayer::generate_idempotency_keys`], a POST or PATCH without an
//! `Idempotency-Key` gets a UUID v4 one before the first attempt, the same on every attempt. A
//! key the caller set is never replaced.
//!
//! # Bodies
//!
//! The request body must implement [`RetryBody`]: every `Clone` body does, and [`ReplayBody`]
//! makes a streaming body replayable up to a byte cap (64 KiB by default). Over the cap the
//! request is sent once and not retried (`body_not_replayable`); a retry never sends a partial
//! or empty body in place of the original. The body of a failed response is drained (up to
//! 16 KiB) during the wait, then dropped, so the connection can be reused.
//!
//! A server may answer (a 503, say) before it has read the whole body, while the transport
//! goes on sending it. A retry is sent only once the body has been read to its end within
//! the cap, or the attempt before it has let go of the body (failed or dropped it) and
//! everything it read fit the cap: only then is the replay known to be whole. The rule:
//!
//! - the layer waits for that at most until the end of the wait before the retry (backoff or
//!   server hint). That wait itself ends before the request's
//!   deadline ([`CallContext`](courier_core::CallContext)), so waiting for the body never extends a call and
//!   never hangs on a transport that keeps the body (hyper's HTTP/1 client keeps it until the
//!   peer has read it or the connection is done). The retry keeps its planned time;
//! - meanwhile the answer is kept as it is, its body unread; it is drained only once the
//!   retry is sure to go;
//! - a body that passes the cap (or fails) ends the call at once, and one still held when
//!   the wait is over ends it then: the caller gets that last answer (or error), the attempt
//!   record says `body_not_replayable`, nothing more is sent, and the retry it would have
//!   spent goes back to the budget.
//!
//! A body sent whole before the answer (the usual case) is decided at once, as before.
//!
//! # Errors
//!
//! The layer adds no failures of its own: a call that ends with an error comes back as that
//! attempt's error in a [`CallFailed`](courier_core::CallFailed) with every attempt's record
//! (transparent: the attempt's error is its `source()` and its text; find it with
//! [`cause_ref`](courier_core::cause_ref), the records with
//! [`attempts_of`](courier_core::attempts_of)), and statuses come back as responses. A call
//! ended from outside (dropped by a deadline layer above at its deadline, or by its caller)
//! hands its records, the attempt under way included, to whoever drops it and asks
//! ([`Attempts::of_dropped`](courier_core::Attempts::of_dropped)).
//!
//! # Clone
//!
//! Configuration and budget live behind an `Arc` in the layer: every service it makes and every
//! clone shares them. The first attempt goes to the inner service that `poll_ready` made ready.
//! A call that retries clones the inner service once for its later attempts, which drive its
//! readiness themselves; it clones it from a copy the service keeps aside, made at its first
//! call (and again after [`Retry::get_mut`]), so a call that does not retry clones nothing.
//!
//! # Cancellation
//!
//! Waiting happens inside the response future, never in `poll_ready`. Dropping the future
//! during a wait stops every further attempt, and the retry it would have spent is given back
//! to the budget. So is a retry that a layer below refused before sending it (an open circuit,
//! the rate limiter). A retry that was handed on and then dropped, or cut by a spent deadline,
//! stays spent: it may have reached the server.
//!
//! # Differences from `tower::retry::Retry`
//!
//! tower's `Retry` leaves every decision to a `Policy` and its budget (`TpsBudget`) is global
//! and float-based. This layer has the HTTP decisions built in (status classes, idempotency,
//! server hints, deadlines), an exact per-host budget, attempt records, and bodies that know
//! whether they can be replayed.
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
pub mod budget;
pub mod classify_body;
pub mod error;
pub mod future;
pub mod hedge;
mod layer;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod policy;
mod service;
mod telemetry;

pub use body::{ReplayBody, RetryBody};
pub use budget::RetryBudget;
pub use classify_body::{ClassifiedBody, ClassifyBody, ClassifyBodyLayer};
pub use layer::RetryLayer;
pub use policy::Jitter;
pub use service::Retry;

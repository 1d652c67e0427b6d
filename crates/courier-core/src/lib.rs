//! The shared vocabulary of courier's layers.
//!
//! Every courier layer depends on this crate and on nothing of the others, so the contracts
//! between layers live here:
//!
//! - [`hints`]: what the server asks for (`Retry-After`, `x-ratelimit-*`, the IETF `RateLimit`
//!   fields), turned into one wait. Retry and the rate limiter read the same parsed hint.
//! - [`classifier`]: one [`Classifier`] that decides what every answer means for every layer
//!   (a [`Verdict`]: may asking again change it, does it count against the host, is it an
//!   overload), and whether a request may be repeated. Set once, read by retry, the breaker,
//!   adaptive pacing and telemetry alike.
//! - [`classify`]: what kind of failure an error chain is (connect, timeout, read, tls, local,
//!   other), by type.
//! - [`idempotency`]: which requests may be sent again.
//! - [`body`]: request bodies a layer can send again ([`RetryBody`](body::RetryBody)), for
//!   retry and for the cache's second request.
//! - [`cache_control`]: `Cache-Control` directives and entity tags.
//! - [`extensions`]: the request and response extensions layers pass to each other: the
//!   [`CallContext`] (the host, the deadline, the earlier attempts), the attempt records and
//!   the cache status.
//! - [`options`]: what one call asks in place of the layers' settings ([`CallOptions`]: its
//!   deadline, attempts, retry-safety, cache use), carried in its [`CallContext`].
//! - Errors: the refusals every layer and the facade agree on ([`DeadlineExceeded`],
//!   [`AttemptTimedOut`], [`CircuitOpen`], [`RateLimited`], [`ConcurrencyLimited`]), the
//!   attempts of a failed call ([`CallFailed`], [`attempts_of`]), the one [`InvalidConfig`] of
//!   every fallible setting, and helpers that walk `source()` chains ([`cause_ref`],
//!   [`is_caused_by`], [`next_cause`]). Layers that can fail on their own return
//!   [`BoxError`]; an HTTP status is never turned into an error.
//! - The wall clock ([`WallClock`]), the one place `SystemTime` is read: every duration is
//!   measured with `tokio::time`, so tests can pause time, and an HTTP date, the one thing
//!   compared with the calendar, goes through it so that tests can set the calendar too.
//! - Keys: [`HostKey`], the per-host key the stateful layers use; [`RequestHead`], the request
//!   head key functions see; [`KeyFn`], the one way every keyed layer picks a request's key:
//!   [`PerHost`] (the default), [`Global`] or [`KeyBy`] a function of your own.
//! - [`telemetry`]: how spans and metrics name a method, a host, a URL and a failure.
//! - [`excerpt`]: input quoted in a message, bounded and with its control characters escaped.
//!
//! Nothing here panics on header input: garbage counts as absent.
//!
//! # No features
//!
//! The crate carries no HTTP client and has no features: a failure is classified the same way
//! whatever else is built. A transport's own error types are the transport's to know; the
//! `courier` facade's transports hand up their failures already classified
//! ([`TransportError`](classify::TransportError)). [`classify`] says what to do over a client of
//! your own.
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
pub mod cache_control;
pub mod classifier;
pub mod classify;
mod clock;
mod error;
pub mod excerpt;
pub mod extensions;
pub mod grpc;
pub mod hints;
mod host;
pub mod idempotency;
mod key;
pub mod options;
pub mod telemetry;

pub use classifier::{Class, Classifier, ResponseHead, StatusSet, Verdict};
pub use classify::FailureKind;
pub use clock::{ManualClock, SystemClock, WallClock};
pub use error::{
    AttemptTimedOut, BoxError, CallFailed, CircuitOpen, ConcurrencyLimited, DeadlineExceeded,
    InvalidConfig, RateLimited, attempts_of, cause_ref, is_caused_by, next_cause,
};
pub use extensions::{AttemptRecord, Attempts, CacheStatus, CallContext, WaitSource};
pub use hints::{HintConfig, ResetFormat, ServerHint};
pub use host::{HostKey, RequestHead, without_default_port};
pub use key::{Global, KeyBy, KeyFn, PerHost};
pub use options::{CallOptions, Hedging};

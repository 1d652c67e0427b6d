//! One time budget for the whole call, body included, carried across services.
//!
//! A retry loop must end inside the caller's window, and a server that sends one byte every 29
//! seconds must not hold a caller forever. A per-read timeout catches neither; a total deadline
//! catches both. This crate has three layers:
//!
//! - [`DeadlineLayer`] (outermost): the total budget. It sets the deadline of the request's
//!   [`CallContext`](courier_core::CallContext) (shrinking one already there, never extending
//!   it) for the layers below,
//!   fails the call with [`DeadlineExceeded`](courier_core::DeadlineExceeded) when the budget is
//!   spent, and wraps the response body so that reading past the deadline fails the same way
//!   instead of hanging. A call's own
//!   [`CallOptions::deadline`](courier_core::CallOptions::deadline) replaces the layer's budget.
//! - [`AttemptTimeoutLayer`] (innermost, above the transport): bounds one attempt to
//!   `min(per_attempt, time left)`, failing with [`AttemptTimedOut`](courier_core::AttemptTimedOut),
//!   which a retry layer may retry, or with `DeadlineExceeded` when the deadline was the tighter
//!   bound, which it must not.
//! - [`DeadlineScopeLayer`] (server side, works as axum or tower-http middleware): reads the
//!   deadline a caller sent in a header and makes it the deadline of the calls made while
//!   handling the request, so service A's budget flows into its calls to B and on to C.
//!
//! On a gRPC call (HTTP/2, `content-type: application/grpc`) the deadline and attempt layers
//! also send the time left as `grpc-timeout` (the finest unit that fits gRPC's eight digits,
//! rounded up; a shorter one the caller set stays), and the scope reads an incoming
//! `grpc-timeout` when no deadline header of ours came. A failure that reaches a layer at or
//! past its bound (a transport enforcing the same `grpc-timeout` by its own timer) is reported
//! as the bound's error, so the deadline stays the caller's and never counts against a host.
//!
//! Only `tokio::time` is used, so everything here runs on paused time in tests. Each call arms
//! at most one timer, only once its inner future is pending, and the timer moves from the
//! response future into the body.
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! use courier_deadline::{AttemptTimeoutLayer, DeadlineLayer, propagate::DEFAULT_HEADER};
//! use courier_core::AttemptTimedOut;
//! use http::{Request, Response};
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let upstream = service_fn(|req: Request<()>| async move {
//!     // The time left was sent along, in milliseconds.
//!     assert_eq!(req.headers()[&DEFAULT_HEADER], "1000");
//!     tokio::time::sleep(Duration::from_secs(5)).await;
//!     Ok::<_, std::convert::Infallible>(Response::new(String::from("late")))
//! });
//! let client = ServiceBuilder::new()
//!     .layer(DeadlineLayer::new(Duration::from_secs(2)))
//!     // (a retry layer goes here)
//!     .layer(AttemptTimeoutLayer::new(Duration::from_secs(1)).propagate(DEFAULT_HEADER))
//!     .service(upstream);
//!
//! let err = client.oneshot(Request::new(())).await.unwrap_err();
//! assert!(err.is::<AttemptTimedOut>(), "the attempt's own second ran out first");
//! # }
//! ```
//!
//! # Across services
//!
//! ```text
//! A: DeadlineLayer(2 s) --x-request-deadline-ms: 2000--> B: DeadlineScopeLayer
//!                                                          handler (scope: now + 2000 ms)
//!                                                            └ client DeadlineLayer(10 s)
//!                                                                --x-request-deadline-ms: 1950--> C
//! ```
//!
//! The server side reads the header into the incoming request's
//! [`CallContext`](courier_core::CallContext) and a [task-local scope](scope). A handler passes
//! it on implicitly (calls made from its own task through `DeadlineLayer` or
//! `AttemptTimeoutLayer` read the scope) or explicitly (put it, or [`current_deadline`], into
//! the outgoing request's context; needed in spawned tasks).
//! See [`propagate`] for the header's format and why it was chosen.
//!
//! # Telemetry
//!
//! With the `metrics` feature, `courier.deadline.expiries` counts the calls a deadline or an
//! attempt timeout failed, by kind. See [`telemetry`].
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod bound;
pub mod future;
mod layer;
pub mod propagate;
pub mod scope;
mod service;
pub mod telemetry;

pub use body::DeadlineBody;
pub use layer::{AttemptTimeoutLayer, DeadlineLayer, DeadlineScopeLayer};
pub use scope::current_deadline;
pub use service::{AttemptTimeout, Deadline, DeadlineScope};

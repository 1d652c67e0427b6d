//! A Tower middleware stack for service-to-service HTTP calls.
//!
//! On every call courier answers four questions: may I send this now, did it work, may I send
//! it again (and when), and is there more to read. Each concern is its own [`tower::Layer`] in
//! its own crate, usable a la carte with any tower middleware; this crate composes them into one
//! preset, [`CourierLayer`], over a hyper or reqwest client, and into `Client` (feature
//! `client`, on by default), a client in reqwest's shape over that preset.
//!
//! # Quick start
//!
//! ```no_run
//! use courier::Client;
//! use serde_json::Value;
//! use std::time::Duration;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), courier::Error> {
//!     let client = Client::new(); // clones share its breakers, buckets, budgets and cache
//!     let item: Value = client
//!         .get("https://example.com/items/1")
//!         .timeout(Duration::from_secs(2)) // this call's deadline, retries and body included
//!         .send()
//!         .await?
//!         .json()
//!         .await?;
//!     println!("{item}");
//!     Ok(())
//! }
//! ```
//!
//! The same preset as a [`tower::Service`] over hyper, for code written against
//! `http::Request`:
//!
//! ```no_run
//! use bytes::Bytes;
//! use courier::CourierLayer;
//! use http_body_util::Full;
//! use std::time::Duration;
//! use tower::ServiceExt;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), courier::core::BoxError> {
//!     let client = CourierLayer::new()
//!         .deadline(Duration::from_secs(10))
//!         .hyper::<Full<Bytes>>();
//!     let resp = client
//!         .oneshot(http::Request::get("https://example.com/").body(Full::default())?)
//!         .await?;
//!     println!("{}", resp.status());
//!     Ok(())
//! }
//! ```
//!
//! # The layers
//!
//! Outermost first, as the preset stacks them ([`preset`] has the drawing, the reason for each
//! place, and the rule by which they judge a host):
//!
//! | layer | what it does | module |
//! | --- | --- | --- |
//! | `DeadlineLayer` | one budget for the whole call: attempts, waits and the response body | [`deadline`] |
//! | `EtagCacheLayer` | an RFC 9111 cache: revalidation, a 304 served from the stored answer, one request for a crowd's misses | [`cache`] |
//! | `RetryLayer` | repeats only what is safe to repeat, waits as long as the server asks, within a budget per host; hedges a slow call on request | [`retry`] |
//! | `CircuitBreakerLayer` | closed, open and half-open per host, judging calls, not attempts | [`breaker`] |
//! | `TokenBucketRateLimitLayer` | per-host pacing that waits or refuses, parked by the server's quota headers | [`ratelimit`] |
//! | `AdaptivePacingLayer` | paces an overloaded host at the rate it accepts | [`ratelimit`] |
//! | `ConcurrencyLimitLayer` | attempts in flight per host, fixed or learned from latency | [`concurrency`] |
//! | `AttemptTimeoutLayer` | a budget for each attempt | [`deadline`] |
//!
//! What the layers share (the classifier that decides what an answer means, the call context,
//! server hints, attempt records, errors) is in [`core`]. The transports, TLS included, are in
//! [`transport`]; rules per destination in [`routes`], and the whole configuration as data in
//! [`config`].
//!
//! # Features
//!
#![doc = document_features::document_features!()]
//!
//! # More
//!
//! The repository's `README.md` walks through every way to use courier (axum handlers, one
//! layer a la carte, gRPC over tonic, limits shared through Redis, telemetry, the command
//! line), and `docs/ARCHITECTURE.md` maps its crates and the contracts between its layers.
//! `BENCHMARKS.md` has what each layer costs, side by side with the crates it replaces.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use courier_core as core;

/// The README's Rust blocks, compiled as doc tests (`cargo test --doc -p courier
/// --all-features`): the README is the repository's page, not the crate's.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(feature = "breaker")]
pub use courier_breaker as breaker;
#[cfg(feature = "cache")]
pub use courier_cache as cache;
#[cfg(feature = "concurrency")]
pub use courier_concurrency as concurrency;
#[cfg(feature = "deadline")]
pub use courier_deadline as deadline;
#[cfg(feature = "ratelimit")]
pub use courier_ratelimit as ratelimit;
#[cfg(feature = "redis")]
pub use courier_redis as redis;
#[cfg(feature = "retry")]
pub use courier_retry as retry;

/// The hyper crate both transports run on, so that its types (a response's `Incoming` body)
/// can be named at the version courier uses.
#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
pub use hyper;
/// The hyper-util crate the hyper transport is built on, so that its types can be named at the
/// version courier uses.
#[cfg(feature = "hyper-client")]
pub use hyper_util;
/// The reqwest crate [`transport::ReqwestService`] wraps: build clients through it (or check
/// that yours is this version) so that two versions never meet.
#[cfg(feature = "reqwest")]
pub use reqwest;
/// The rustls crate of [`transport::tls`].
#[cfg(feature = "rustls")]
pub use rustls;

mod builder;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "preset")]
pub mod config;
mod error;
#[cfg(feature = "grpc")]
pub mod grpc;
#[cfg(feature = "paginate")]
pub mod paginate;
#[cfg(feature = "preset")]
pub mod preset;
#[cfg(feature = "preset")]
pub mod routes;
pub mod telemetry;
pub mod transport;

pub use builder::ServiceBuilderExt;
#[cfg(feature = "client")]
pub use client::{Client, ClientBuilder, RequestBuilder, Response};
pub use error::{Attempted, Error};
#[cfg(feature = "preset")]
pub use preset::{Courier, CourierLayer};

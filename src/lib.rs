#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use courier_core as core;

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

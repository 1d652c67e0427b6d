#![doc = include_str!("../README.md")]

pub use courier_core as core;

#[cfg(feature = "breaker")]
pub use courier_breaker as breaker;
#[cfg(feature = "cache")]
pub use courier_cache as cache;
#[cfg(feature = "deadline")]
pub use courier_deadline as deadline;
#[cfg(feature = "ratelimit")]
pub use courier_ratelimit as ratelimit;
#[cfg(feature = "redis")]
pub use courier_redis as redis;
#[cfg(feature = "retry")]
pub use courier_retry as retry;

mod builder;
mod error;
pub mod maybe;
#[cfg(feature = "paginate")]
pub mod paginate;
pub mod preset;
pub mod transport;

pub use builder::ServiceBuilderExt;
pub use error::Error;
pub use preset::{Courier, CourierLayer};

//! The errors of the rate limit layer.
//!
//! A refused call fails with [`RateLimited`] (from `courier-core`, so every layer and the facade
//! agree on it) inside a [`BoxError`](courier_core::BoxError); test it with
//! `err.is::<RateLimited>()` or [`is_caused_by`](courier_core::is_caused_by). A bad rate is
//! refused when it is built, with [`InvalidConfig`] (also from `courier-core`, the one every
//! layer's settings answer).

pub use courier_core::{InvalidConfig, RateLimited};

//! Test support shared by courier's crates (dev-only, never published).
//!
//! - [`contract`]: the tower readiness contract, one checker for every layer: an inner service
//!   whose clones start unready, and a driver that fails when a layer calls an instance it did
//!   not make ready.
//! - [`pass_through`]: the contract of a layer switched off, one checker for every layer: the
//!   request and the answer pass untouched, and nothing is kept between calls.
//! - [`body`]: bodies that follow a script (frames, errors, a size hint that lies, a stall, a
//!   pause before each frame) and a body fed through a channel.
//! - [`redis`]: a `redis-server` of a test's own on a free loopback port (or the one at
//!   `COURIER_REDIS_URL`), and key prefixes no other test uses.
//! - [`redis_topology`]: a Redis Cluster (masters and replicas) and a primary watched by three
//!   sentinels, each of a test's own, to kill a node of.
//! - `tls` (feature `tls`): a certificate authority made per test, and an HTTPS server on 127.0.0.1 that
//!   presents a certificate from it (valid, for another host name, or expired) and counts the
//!   connections and the requests that reach it.
//!
//! It depends on no courier crate, so that any of them can take it as a dev-dependency without
//! a second copy of itself in its tests.

pub mod body;
pub mod contract;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod pass_through;
pub mod redis;
pub mod redis_topology;
#[cfg(feature = "tls")]
pub mod tls;

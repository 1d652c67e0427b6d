//! Test support shared by courier's crates (dev-only, never published).
//!
//! - [`tls`]: a certificate authority made per test, and an HTTPS server on 127.0.0.1 that
//!   presents a certificate from it (valid, for another host name, or expired) and counts the
//!   connections and the requests that reach it.

pub mod tls;

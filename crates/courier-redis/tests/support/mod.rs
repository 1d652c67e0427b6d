//! The Redis test support lives in `courier_testkit::redis`; this file only re-exports it for
//! the facade's tests that still include it by path, until they name the testkit directly.

#![allow(unreachable_pub)]

pub use courier_testkit::redis::*;

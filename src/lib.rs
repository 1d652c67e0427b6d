//! courier: a Tower middleware stack for service-to-service HTTP calls.
//!
//! For now the facade re-exports the shared vocabulary of [`courier_core`].

pub use courier_core as core;

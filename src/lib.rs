//! courier: a Tower middleware stack for service-to-service HTTP calls.

pub use courier_core as core;

mod error;
#[cfg(feature = "paginate")]
pub mod paginate;
pub mod transport;

pub use error::Error;

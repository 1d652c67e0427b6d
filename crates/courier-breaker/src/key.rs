//! The bounds of a breaker key. Which breaker a request belongs to is picked by courier-core's
//! [`KeyFn`](courier_core::KeyFn): [`PerHost`](courier_core::PerHost) (the default),
//! [`Global`](courier_core::Global) or [`KeyBy`](courier_core::KeyBy).

use std::fmt;
use std::hash::Hash;

/// What a breaker key must be: hashable, comparable, cheap to clone, printable for logs (the
/// bounds of [`KeyFn::Key`](courier_core::KeyFn::Key)).
pub trait BreakerKey: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static {}

impl<T: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static> BreakerKey for T {}

//! A Redis-backed store for courier's token bucket: one rate limit shared by many replicas.
//!
//! Four replicas of a job that share one API key allowed 10 requests a second must not each
//! pace themselves at 10 a second. [`RedisStore`] keeps the buckets of
//! [`TokenBucketRateLimitLayer`](courier_ratelimit::TokenBucketRateLimitLayer) in Redis, so
//! every replica draws from the same bucket and obeys the same server parks. Plug it in with
//! [`store_in`](courier_ratelimit::TokenBucketRateLimitLayer::store_in):
//!
//! ```no_run
//! use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
//! use courier_redis::{FailurePolicy, RedisStore};
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), courier_redis::ConnectError> {
//! let store = RedisStore::builder("redis://127.0.0.1:6379")
//!     .prefix("myjob:rl:")
//!     .command_timeout(Duration::from_millis(50))
//!     .policy(FailurePolicy::FailOpen)
//!     .connect()
//!     .await?;
//! let layer = TokenBucketRateLimitLayer::new(Rate::per_second(10.0).unwrap(), NonZeroU32::new(5).unwrap())
//!     .store_in(store);
//! # let _ = layer; Ok(()) }
//! ```
//!
//! The facade's preset takes it with `CourierLayer::shared_rate_limit` (feature `redis`).
//!
//! # One node, a Cluster, or Sentinel
//!
//! - [`RedisStore::builder`]`(url)`: one Redis node, over the `redis` crate's connection
//!   manager (it reconnects by itself).
//! - [`RedisStore::cluster_builder`]`(seeds)`: a Redis Cluster (or a managed cluster mode),
//!   found from any of its nodes, over the `redis` crate's cluster connection, which follows
//!   `MOVED` and `ASK` and refreshes its slot map after a failover. A key's two entries share a
//!   hash tag, so each script runs on one node. After a failed decision the outage's probe runs
//!   beside that key, in the same slot: a master that died is one outage, which ends once its
//!   replica has taken over, not as soon as another master answers.
//! - [`RedisStore::sentinel_builder`]`(master, sentinels)`: the master a set of sentinels names.
//!   After a failed command the sentinels are asked again, so the store follows a failover once
//!   they have promoted a replica (their `down-after-milliseconds` plus an election); until
//!   then the [`FailurePolicy`] decides, as in any outage. The sentinels' password goes in
//!   their URLs, the master's in [`RedisStoreBuilder::master_credentials`].
//!
//! The settings below (timeouts, policy, fallback) are the same for the three.
//!
//! # Why a crate of its own
//!
//! The Redis client and its dependencies are compiled only by builds that ask for them (the
//! facade's `redis` feature, off by default and not part of `full`), and the layer crate
//! `courier-ratelimit` stays free of networking: the store plugs in behind its
//! [`RateLimitStore`](courier_ratelimit::RateLimitStore) seam.
//!
//! # One round trip per decision
//!
//! Each decision is one `EVALSHA` of a Lua script (loaded once, called by its SHA; reloaded by
//! the client if Redis lost it) that runs atomically on the server: it reads the server's clock
//! (`TIME`), reads the key's park and the bucket's theoretical arrival time (GCRA), reserves the
//! slot and sets the key's TTL, and answers with the wait. The semantics are the in-process
//! store's: a request whose slot comes within its `max_wait` is admitted with the time to
//! sleep (concurrent callers across all replicas are spread one interval apart); one whose slot
//! is further away is refused and takes nothing. The `max_wait` counts from the moment the
//! decision was asked for (the layer bounds it by the request's deadline): a slot Redis
//! granted on its own clock that would start past it on ours (the reply was slow) is given back
//! and refused, while a slot free at once is taken however slow the reply. The rate limiter
//! layer never waits on Redis past the request's deadline: it refuses the request then, and
//! Redis is not counted as down for it.
//!
//! **Clocks.** Every moment inside Redis is on Redis's clock; what travels is relative (the
//! interval, the burst tolerance, the longest wait in; the wait out), and the caller lays the
//! wait on its own clock from the moment the answer came. Replicas whose clocks disagree still
//! agree on the bucket. A slot is only ever taken later than Redis reserved it (by the answer's
//! travel time), never earlier.
//!
//! **Keys.** A key `k` (see [`RedisKey`]) lives at `{prefix}{k}:tat` and `{prefix}{k}:park`
//! (the braces are a Redis Cluster hash tag). The prefix defaults to `courier:rl:`. Both keys
//! expire when they stop mattering (the bucket when it is full again, the park when it ends),
//! so idle hosts cost nothing. Times are kept in microseconds; intervals are rounded up to a
//! whole microsecond (a rate is never made faster; rates above a million per second count as
//! a million).
//!
//! # Shared parking
//!
//! When a response parks a host (a 429 with `Retry-After`, a quota reset), the layer calls
//! [`park`](courier_ratelimit::RateLimitStore::park): the park is recorded in process at once
//! (this replica obeys it on its very next request, even before Redis has it) and written to
//! Redis in a spawned task; every replica's next decision for that host then waits until that
//! moment (or is refused, past its `max_wait`). A park never shortens a longer one. A park
//! heard during an outage, or whose write failed, is kept and written (with the time it has
//! left) when Redis answers again, before decisions are shared again.
//!
//! # Reset
//!
//! When adaptive pacing starts a new stretch it calls
//! [`reset`](courier_ratelimit::RateLimitStore::reset): the store deletes the bucket in Redis
//! in a spawned task when the last reservation in it is still this replica's (the park stays),
//! so that the next decision does not queue behind the slots the last stretch booked, while a
//! bucket other replicas are reserving in is left to them. During an outage only the
//! in-process bucket is reset.
//!
//! # When Redis is slow or down
//!
//! A caller never waits on Redis longer than the command timeout (default 50 ms). A failed or
//! timed-out command starts an outage: one `warn` event, then every decision is taken at once
//! by the [`FailurePolicy`] without asking Redis (after a timeout, with what is left of the
//! caller's `max_wait`), while a background probe tries Redis every `retry_backoff` (default
//! 500 ms). The probe runs the decision script itself, on a key of its own
//! (`{prefix}{courier-probe}`), so a Redis that answers but refuses the script's writes (a
//! read-only replica after a failover, a full memory, an ACL) is still down: one outage, not
//! one per probe. When Redis runs it (the `redis` crate's connection manager reconnects by
//! itself), one `info` event, and decisions are shared again.
//!
//! - [`FailurePolicy::FailOpen`] (default): decide in process with an
//!   [`InMemoryStore`](courier_ratelimit::InMemoryStore) under the same quota, so requests keep
//!   flowing; each replica then paces itself alone (set
//!   [`fallback_replicas`](RedisStoreBuilder::fallback_replicas) to divide the quota between
//!   them).
//! - [`FailurePolicy::FailClosed`]: refuse; the layer fails the request with
//!   [`RateLimited`](courier_core::RateLimited) whose `retry_in` is the backoff (or, for a host
//!   this replica knows to be parked for longer, the time the park has left).
//!
//! # Connecting
//!
//! [`RedisStoreBuilder::connect`] waits, at most the connect timeout (default 1 s), until
//! Redis answers, and fails otherwise: for a service that wants to know at start.
//! [`RedisStoreBuilder::connect_lazy`] returns at once; the first decision connects, and an
//! unreachable Redis is then an outage like any other. Both must run inside a tokio runtime.
//!
//! # Clone
//!
//! A store is cheap to clone; clones share the connection, the fallback buckets and the outage
//! state, behind `Arc`s. The layer keeps its store behind an `Arc` too: every service and clone
//! shares it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod either;
pub mod error;
pub mod future;
mod key;
mod script;
mod store;

pub use either::LocalOrRedis;
pub use error::ConnectError;
pub use key::RedisKey;
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_RETRY_BACKOFF,
    FailurePolicy, RedisStore, RedisStoreBuilder,
};

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::HostKey;

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn types_are_send_sync_static() {
        assert_send_sync_static::<RedisStore<HostKey>>();
        assert_send_sync_static::<LocalOrRedis<HostKey>>();
        fn assert_send_static<T: Send + 'static>() {}
        assert_send_static::<future::AcquireFuture<HostKey>>();
        assert_send_sync_static::<RedisStoreBuilder>();
        assert_send_sync_static::<ConnectError>();
    }
}

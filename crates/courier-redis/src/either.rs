//! [`LocalOrRedis`]: one store type that is either in process or in Redis, chosen at run time.

use crate::future::AcquireFuture;
use crate::key::RedisKey;
use crate::store::RedisStore;
use courier_ratelimit::{Grant, InMemoryStore, Quota, RateLimitStore};
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

/// A store that is either the in-process [`InMemoryStore`] or a [`RedisStore`], so that a
/// stack can switch between them at run time while keeping one type (the facade's preset
/// does). The in-process side answers without allocating, as the bare `InMemoryStore` does.
///
/// # Clone
///
/// Cloning shares the buckets, as cloning either store does.
pub enum LocalOrRedis<K> {
    /// Buckets in this process.
    Local(InMemoryStore<K>),
    /// Buckets in Redis, shared by every replica.
    Redis(RedisStore<K>),
}

impl<K> LocalOrRedis<K> {
    /// Whether the buckets are in Redis.
    pub const fn is_redis(&self) -> bool {
        matches!(self, Self::Redis(_))
    }
}

impl<K> Clone for LocalOrRedis<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Local(s) => Self::Local(s.clone()),
            Self::Redis(s) => Self::Redis(s.clone()),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for LocalOrRedis<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(s) => f.debug_tuple("Local").field(s).finish(),
            Self::Redis(s) => f.debug_tuple("Redis").field(s).finish(),
        }
    }
}

impl<K> From<InMemoryStore<K>> for LocalOrRedis<K> {
    fn from(store: InMemoryStore<K>) -> Self {
        Self::Local(store)
    }
}

impl<K> From<RedisStore<K>> for LocalOrRedis<K> {
    fn from(store: RedisStore<K>) -> Self {
        Self::Redis(store)
    }
}

impl<K> RateLimitStore<K> for LocalOrRedis<K>
where
    K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
{
    type Acquire = AcquireFuture<K>;

    #[inline]
    fn acquire(&self, key: &K, quota: Quota, max_wait: Duration) -> AcquireFuture<K> {
        match self {
            Self::Local(s) => AcquireFuture::ready(s.decide(key, quota, max_wait)),
            Self::Redis(s) => s.acquire(key, quota, max_wait),
        }
    }

    fn park(&self, key: &K, wait: Duration) {
        match self {
            Self::Local(s) => s.park(key, wait),
            Self::Redis(s) => s.park(key, wait),
        }
    }

    fn cancel(&self, key: &K, quota: Quota, grant: &Grant) {
        match self {
            Self::Local(s) => s.cancel(key, quota, grant),
            Self::Redis(s) => s.cancel(key, quota, grant),
        }
    }

    fn reset(&self, key: &K) {
        match self {
            Self::Local(s) => s.reset(key),
            Self::Redis(s) => s.reset(key),
        }
    }

    /// The local store, so that the layer decides in `call` on it; `None` for Redis.
    #[inline]
    fn in_process(&self) -> Option<&InMemoryStore<K>> {
        match self {
            Self::Local(s) => Some(s),
            Self::Redis(_) => None,
        }
    }

    fn parked_until(&self, key: &K) -> Option<tokio::time::Instant> {
        match self {
            Self::Local(s) => s.parked_until(key),
            Self::Redis(s) => s.parked_until(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::HostKey;
    use courier_ratelimit::{Decision, Rate};
    use std::num::NonZeroU32;

    #[tokio::test(start_paused = true)]
    async fn a_local_store_decides_in_process_on_the_same_buckets() {
        let local = InMemoryStore::<HostKey>::new();
        let either = LocalOrRedis::from(local.clone());
        let quota = Quota::new(Rate::per_second(1.0).unwrap(), NonZeroU32::MIN);
        let key = HostKey::from_request(&http::Request::get("http://a.example/").body(()).unwrap());
        let fast = either
            .in_process()
            .expect("a local store answers in process");
        assert!(matches!(
            fast.decide(&key, quota, Duration::ZERO),
            Decision::Admit(_)
        ));
        assert!(
            matches!(local.decide(&key, quota, Duration::ZERO), Decision::Deny(_)),
            "the burst of one was spent through the in-process path, on the same bucket"
        );
        either.reset(&key);
        assert!(
            matches!(
                local.decide(&key, quota, Duration::ZERO),
                Decision::Admit(_)
            ),
            "a reset reaches the local store"
        );
    }
}

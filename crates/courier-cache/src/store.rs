//! Where entries live: the [`CacheStore`] seam and the bounded in-memory [`MemoryStore`].

use crate::entry::Variants;
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};
use std::fmt;
use std::sync::Arc;

/// Bookkeeping bytes counted per URI on top of its key and entries.
const KEY_OVERHEAD: u64 = 64;

/// A store of responses, keyed by URI, each holding the [`Variants`] of that URI.
///
/// The cache reads a URI's variants, builds a new set and writes it back; two concurrent writes
/// to one URI may lose one of them, which costs a later miss and nothing else. The in-process
/// [`MemoryStore`] is the default; a store shared between processes implements this trait.
pub trait CacheStore: fmt::Debug + Send + Sync + 'static {
    /// The variants stored for `key`.
    fn get(&self, key: &str) -> Option<Arc<Variants>>;

    /// Stores `variants` under `key`, replacing what was there. A store may evict other keys to
    /// make room, or refuse a value too large to hold.
    fn insert(&self, key: String, variants: Arc<Variants>);

    /// Removes `key`; returns whether it was there.
    fn remove(&self, key: &str) -> bool;

    /// The bytes held, as counted against the capacity.
    fn weight(&self) -> u64;

    /// How many keys are held.
    fn len(&self) -> usize;

    /// Whether the store is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The in-memory store: at most `capacity` bytes (bodies, headers and a fixed overhead per
/// entry), evicting by S3-FIFO (the `quick_cache` crate) when full.
///
/// Bodies are held as `Bytes`, so a hit hands out the stored buffer without copying it.
/// Clones share the same store.
#[derive(Clone)]
pub struct MemoryStore {
    cache: Arc<Cache<String, Arc<Variants>, ByWeight, DefaultHashBuilder, LogEvictions>>,
}

impl MemoryStore {
    /// A store holding at most `capacity` bytes.
    ///
    /// The store is split into shards of at least 4 MiB (one shard below that), so a single
    /// value may use at most a shard's share of the capacity.
    pub fn new(capacity: u64) -> Self {
        let capacity = capacity.max(1);
        let mut shards = 1usize;
        while shards < 16 && capacity / (shards as u64 * 2) >= 4 * 1024 * 1024 {
            shards *= 2;
        }
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(
                usize::try_from(capacity / 4096)
                    .unwrap_or(usize::MAX)
                    .max(64),
            )
            .weight_capacity(capacity)
            .shards(shards)
            .build()
            .expect("estimated items and weight capacity are both set");
        Self {
            cache: Arc::new(Cache::with_options(
                options,
                ByWeight,
                DefaultHashBuilder::default(),
                LogEvictions,
            )),
        }
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.cache.capacity()
    }
}

impl Default for MemoryStore {
    /// 64 MiB.
    fn default() -> Self {
        Self::new(crate::layer::DEFAULT_CAPACITY)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("len", &self.cache.len())
            .field("weight", &self.cache.weight())
            .field("capacity", &self.cache.capacity())
            .finish()
    }
}

impl CacheStore for MemoryStore {
    fn get(&self, key: &str) -> Option<Arc<Variants>> {
        self.cache.get(key)
    }

    fn insert(&self, key: String, variants: Arc<Variants>) {
        self.cache.insert(key, variants);
    }

    fn remove(&self, key: &str) -> bool {
        self.cache.remove(key).is_some()
    }

    fn weight(&self) -> u64 {
        self.cache.weight()
    }

    fn len(&self) -> usize {
        self.cache.len()
    }
}

// === impl ByWeight ===

#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl Weighter<String, Arc<Variants>> for ByWeight {
    fn weight(&self, key: &String, val: &Arc<Variants>) -> u64 {
        KEY_OVERHEAD + key.len() as u64 + val.weight()
    }
}

// === impl LogEvictions ===

#[derive(Debug, Clone, Copy)]
struct LogEvictions;

impl Lifecycle<String, Arc<Variants>> for LogEvictions {
    type RequestState = ();

    fn on_evict(&self, _state: &mut (), key: String, val: Arc<Variants>) {
        tracing::debug!(
            target: "courier::cache",
            event = "evict",
            uri = %crate::service::loggable(&key),
            weight = val.weight(),
            "cache entry evicted"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_stay_large_enough_for_one_entry() {
        assert_eq!(MemoryStore::new(1024).cache.num_shards(), 1);
        assert_eq!(MemoryStore::new(64 * 1024 * 1024).cache.num_shards(), 16);
        assert!(MemoryStore::new(u64::MAX).cache.num_shards() <= 16);
        assert_eq!(MemoryStore::new(0).capacity(), 1);
    }
}

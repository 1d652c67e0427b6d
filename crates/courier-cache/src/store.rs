//! Where entries live: the [`CacheStore`] seam and the bounded in-memory [`MemoryStore`].

use crate::entry::Variants;
use crate::key::{KeyHasher, KeyText, Parts};
use quick_cache::sync::Cache;
use quick_cache::{Equivalent, Lifecycle, Weighter};
use std::cell::RefCell;
use std::fmt;
use std::future::{Future, ready};
use std::hash::{BuildHasher, Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::time::Instant;

/// Bookkeeping bytes counted per URI on top of its key and entries.
const KEY_OVERHEAD: u64 = 64;

/// Bytes counted for a URI that is only a pass, on top of [`KEY_OVERHEAD`] and its key: its
/// variants, which an entry's own overhead counts otherwise (about 80 bytes and the
/// allocator's share).
const PASS_OVERHEAD: u64 = 96;

/// The future of a [`CacheStore`] operation.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store of responses, keyed by URI, each holding the [`Variants`] of that URI.
///
/// Reads and writes return futures, so that a store may wait (on a disk, on the network). The
/// cache looks a request's key up before it decides what to do with it, and writes after an
/// answer: the removals an unsafe method's answer makes are awaited before that answer is
/// handed on, so that a request sent after it never reads what it removed; the other writes
/// (a body that ended, a 304 merged, what `no-store` forbids removed) are polled once in place
/// and, when they wait, finished in a tokio task of their own (dropped outside a runtime). A
/// write reads the URI's variants, builds a new set and writes it back; two concurrent writes
/// to one URI may lose one of them, which costs a later miss and nothing else.
///
/// The in-process [`MemoryStore`] is the default: the cache reads and writes it in place,
/// without these futures. [`DiskStore`](crate::DiskStore) keeps entries across restarts.
pub trait CacheStore: fmt::Debug + Send + Sync + 'static {
    /// The variants stored for `key`.
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Arc<Variants>>>;

    /// Stores `variants` under `key`, replacing what was there. A store may evict other keys to
    /// make room, or refuse a value too large to hold. Once the future is ready, `get` finds
    /// what it stored.
    fn insert(&self, key: String, variants: Arc<Variants>) -> StoreFuture<'_, ()>;

    /// Removes `key`; the future says whether it was there. Once it is ready, `get` no longer
    /// finds it.
    fn remove<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool>;

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
/// Clones share the same store. Its own `get`, `insert` and `remove` work at once; those of
/// [`CacheStore`] wrap them in ready futures.
///
/// The cache also keeps here, for a minute, the URIs whose last answer it did not store (a
/// *pass*: meanwhile their requests go upstream on their own, without waiting for each other),
/// so that one look-up answers for both. A pass weighs its key and a fixed overhead in
/// [`weight`](CacheStore::weight) and is evicted like any entry; it is no key of
/// [`len`](CacheStore::len), [`get`](Self::get) does not return it, and storing responses for
/// the URI ends it.
#[derive(Clone)]
pub struct MemoryStore {
    cache: Arc<Cache<StoreKey, Arc<Variants>, ByWeight, PassThrough, LogEvictions>>,
    /// Hashes key texts (seeded at random per store; clones share the seed).
    hasher: foldhash::fast::RandomState,
    /// The heaviest value a shard takes (with a margin under quick_cache's own limit, a share
    /// of one shard): heavier, it would refuse the value and drop what the key held.
    max_value_weight: u64,
    /// How many keys hold a pass and no entry: held, or in the hands of a look-up that found
    /// one just before it was replaced.
    passes_alone: Arc<AtomicUsize>,
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
            // Each shard gets an equal share, rounded up: round the whole down to a multiple
            // of the shards so the store never holds more than `capacity`.
            .weight_capacity(capacity - capacity % shards as u64)
            .shards(shards)
            .build()
            .expect("estimated items and weight capacity are both set");
        Self {
            cache: Arc::new(Cache::with_options(
                options,
                ByWeight,
                PassThrough,
                LogEvictions,
            )),
            hasher: foldhash::fast::RandomState::default(),
            max_value_weight: capacity / shards as u64 / 10 * 9,
            passes_alone: Arc::default(),
        }
    }

    fn hash_text(&self, text: &str) -> u64 {
        KeyHasher::new(self.hasher.build_hasher()).text(text)
    }

    /// The variants stored for the key of a request, found without building the key's text,
    /// and the key's hash.
    pub(crate) fn get_key(&self, parts: Parts<'_>) -> (Option<Arc<Variants>>, u64) {
        let mut hasher = KeyHasher::new(self.hasher.build_hasher());
        parts.hash(&mut hasher);
        let hash = hasher.finish();
        let by = ByParts {
            hash,
            parts,
            pass_by_hash: true,
        };
        (self.cache.get(&by), hash)
    }

    /// The hash of the key made of `parts`: the hash of its text.
    pub(crate) fn hash_parts(&self, parts: Parts<'_>) -> u64 {
        let mut hasher = KeyHasher::new(self.hasher.build_hasher());
        parts.hash(&mut hasher);
        hasher.finish()
    }

    /// The variants stored for the key made of `parts`, whose hash is `hash`, with the key
    /// text they are stored under (to store their successor under without building it again).
    pub(crate) fn get_hashed(
        &self,
        hash: u64,
        parts: Parts<'_>,
    ) -> Option<(Arc<str>, Arc<Variants>)> {
        let stored = RefCell::new(None);
        let found = self.cache.get(&KeepingText {
            by: ByParts::strict(hash, parts),
            stored: &stored,
        })?;
        // Set by the comparison that found the entry.
        let text = stored.into_inner()?;
        Some((text, found))
    }

    /// Makes the key made of `parts`, whose hash is `hash`, a pass until `until`, keeping the
    /// variants it holds.
    pub(crate) fn remember_pass(&self, hash: u64, parts: Parts<'_>, until: Instant) {
        let (text, variants) = match self.get_hashed(hash, parts) {
            Some((text, variants)) => (text, variants.with_pass(until, &self.passes_alone)),
            None => (
                Arc::from(KeyText::from_parts(parts).as_str()),
                self.pass_alone(until),
            ),
        };
        self.insert_hashed(hash, text, Arc::new(variants));
    }

    /// Variants that are a pass until `until` and hold no entry, counted apart from `len`.
    fn pass_alone(&self, until: Instant) -> Variants {
        Variants::default().with_pass(until, &self.passes_alone)
    }

    /// Stores `variants` under `text`, whose hash is `hash`.
    pub(crate) fn insert_hashed(&self, hash: u64, text: Arc<str>, variants: Arc<Variants>) {
        debug_assert_eq!(hash, self.hash_text(&text));
        if let Some(variants) = self.admissible(&text, variants) {
            self.cache
                .insert(StoreKey::new(hash, text, &variants), variants);
        }
    }

    /// `variants`, less its oldest entries while the whole would outweigh what one shard takes
    /// (all the variants of a URI are one value: refused whole, they would all be lost).
    /// `None` when even the newest alone is too heavy: what the key holds then stays.
    fn admissible(&self, text: &str, variants: Arc<Variants>) -> Option<Arc<Variants>> {
        let room = self
            .max_value_weight
            .saturating_sub(KEY_OVERHEAD + text.len() as u64);
        if variants.weight() <= room {
            return Some(variants);
        }
        // Drop the oldest until the rest fits; not even the newest alone: store nothing.
        let entries = variants.entries();
        let mut weight = variants.weight();
        let skip = entries.iter().position(|e| {
            let fits = weight <= room;
            weight -= e.weight;
            fits
        })?;
        Some(Arc::new(Variants::new(entries[skip..].to_vec())))
    }

    /// Removes the variants of the key made of `parts`, whose hash is `hash` (its pass stays);
    /// returns whether it held responses.
    pub(crate) fn remove_hashed(&self, hash: u64, parts: Parts<'_>) -> bool {
        let Some((text, variants)) = self.get_hashed(hash, parts) else {
            return false;
        };
        if variants.is_pass_only() {
            return false;
        }
        match variants.pass_until() {
            Some(until) => self.insert_hashed(hash, text, Arc::new(self.pass_alone(until))),
            None => {
                self.cache.remove(&ByParts::strict(hash, parts));
            }
        }
        true
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.cache.capacity()
    }

    /// The variants stored for `key`, at once ([`CacheStore::get`] without the future).
    pub fn get(&self, key: &str) -> Option<Arc<Variants>> {
        let hash = self.hash_text(key);
        self.cache
            .get(&ByText { hash, text: key })
            .filter(|v| !v.is_pass_only())
    }

    /// Stores `variants` under `key`, at once ([`CacheStore::insert`] without the future).
    pub fn insert(&self, key: String, variants: Arc<Variants>) {
        let hash = self.hash_text(&key);
        let Some(variants) = self.admissible(&key, variants) else {
            return;
        };
        self.cache
            .insert(StoreKey::new(hash, Arc::from(key), &variants), variants);
    }

    /// Removes `key`, at once ([`CacheStore::remove`] without the future); returns whether it
    /// held responses.
    pub fn remove(&self, key: &str) -> bool {
        let hash = self.hash_text(key);
        held_responses(self.cache.remove(&ByText { hash, text: key }))
    }
}

/// Whether what was removed held responses (not a pass alone).
fn held_responses(removed: Option<(StoreKey, Arc<Variants>)>) -> bool {
    removed.is_some_and(|(_, v)| !v.is_pass_only())
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
            .field("len", &CacheStore::len(self))
            .field("weight", &self.cache.weight())
            .field("capacity", &self.cache.capacity())
            .finish()
    }
}

impl CacheStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<Arc<Variants>>> {
        Box::pin(ready(MemoryStore::get(self, key)))
    }

    fn insert(&self, key: String, variants: Arc<Variants>) -> StoreFuture<'_, ()> {
        MemoryStore::insert(self, key, variants);
        Box::pin(ready(()))
    }

    fn remove<'a>(&'a self, key: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(ready(MemoryStore::remove(self, key)))
    }

    fn weight(&self) -> u64 {
        self.cache.weight()
    }

    /// The keys holding responses: a key that is only a pass is not one. Exact whenever no
    /// look-up is under way; meanwhile a pass that was just replaced, still in a look-up's
    /// hands, may make it one lower.
    fn len(&self) -> usize {
        self.cache
            .len()
            .saturating_sub(self.passes_alone.load(Ordering::Relaxed))
    }
}

// === impl StoreKey ===

/// A key as the in-memory store holds it: its text, and the hash of that text. Two keys are
/// equal only when their texts are.
#[derive(Clone)]
struct StoreKey {
    hash: u64,
    /// Shared, so that replacing a key's variants reuses its text.
    text: Arc<str>,
    /// The key holds a pass and no entry: the cache's look-up takes it by its hash alone. Two
    /// keys whose (seeded, 64-bit) hashes collide may then share a pass, which serves nothing:
    /// it only sends a request upstream on its own while it lasts. Every write compares whole
    /// keys.
    pass_only: bool,
}

impl StoreKey {
    fn new(hash: u64, text: Arc<str>, variants: &Variants) -> Self {
        Self {
            hash,
            text,
            pass_only: variants.is_pass_only(),
        }
    }
}

impl PartialEq for StoreKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.text == other.text
    }
}

impl Eq for StoreKey {}

impl Hash for StoreKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A lookup by key text.
struct ByText<'a> {
    hash: u64,
    text: &'a str,
}

impl Hash for ByText<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<StoreKey> for ByText<'_> {
    fn equivalent(&self, key: &StoreKey) -> bool {
        self.hash == key.hash && self.text == &*key.text
    }
}

/// A lookup by the parts of a request's key, compared with the stored text part by part.
struct ByParts<'a> {
    hash: u64,
    parts: Parts<'a>,
    /// Whether a key that only holds a pass is taken by its hash alone.
    pass_by_hash: bool,
}

impl<'a> ByParts<'a> {
    /// A lookup that compares every key it takes.
    fn strict(hash: u64, parts: Parts<'a>) -> Self {
        Self {
            hash,
            parts,
            pass_by_hash: false,
        }
    }
}

impl Hash for ByParts<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<StoreKey> for ByParts<'_> {
    fn equivalent(&self, key: &StoreKey) -> bool {
        self.hash == key.hash
            && ((self.pass_by_hash && key.pass_only) || self.parts.is_text(&key.text))
    }
}

/// A lookup by parts that keeps the stored key text it matches.
struct KeepingText<'a> {
    by: ByParts<'a>,
    stored: &'a RefCell<Option<Arc<str>>>,
}

impl Hash for KeepingText<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.by.hash(state);
    }
}

impl Equivalent<StoreKey> for KeepingText<'_> {
    fn equivalent(&self, key: &StoreKey) -> bool {
        let equal = self.by.equivalent(key);
        if equal {
            *self.stored.borrow_mut() = Some(key.text.clone());
        }
        equal
    }
}

/// The store's keys carry their hash already: it is passed through as it is.
#[derive(Debug, Clone, Copy, Default)]
struct PassThrough;

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;

    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

/// Returns the one `u64` it was fed.
#[derive(Debug, Default)]
struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in rather than drop it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

// === impl ByWeight ===

#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl Weighter<StoreKey, Arc<Variants>> for ByWeight {
    fn weight(&self, key: &StoreKey, val: &Arc<Variants>) -> u64 {
        let pass = if val.is_pass_only() { PASS_OVERHEAD } else { 0 };
        KEY_OVERHEAD + key.text.len() as u64 + val.weight() + pass
    }
}

// === impl LogEvictions ===

#[derive(Debug, Clone, Copy)]
struct LogEvictions;

impl Lifecycle<StoreKey, Arc<Variants>> for LogEvictions {
    type RequestState = ();

    fn on_evict(&self, _state: &mut (), key: StoreKey, val: Arc<Variants>) {
        tracing::debug!(
            target: "courier::cache",
            event = "evict",
            uri = %crate::key::loggable(&key.text),
            weight = val.weight(),
            "cache entry evicted"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::UriKey;
    use http::{HeaderMap, Uri};
    use proptest::prelude::*;
    use std::time::Duration;

    fn key(uri: &str) -> UriKey {
        UriKey::new(&uri.parse::<Uri>().unwrap(), &HeaderMap::new())
    }

    fn by_parts(store: &MemoryStore, uri: &str) -> Option<Arc<Variants>> {
        store.get_key(key(uri).parts()).0
    }

    fn variants() -> Arc<Variants> {
        Arc::new(Variants::default())
    }

    #[test]
    fn a_colliding_hash_never_serves_another_uri() {
        let store = MemoryStore::new(1 << 20);
        let wanted = "http://b.example/y";
        // Another URI's entry, stored under exactly the hash the wanted URI has.
        let forged = StoreKey {
            hash: store.hash_text(wanted),
            text: Arc::from("http://a.example/x"),
            pass_only: false,
        };
        let other = variants();
        store.cache.insert(forged, other.clone());
        assert_eq!(store.len(), 1);
        assert!(by_parts(&store, wanted).is_none(), "by parts");
        assert!(store.get(wanted).is_none(), "by text");
        assert!(!store.remove(wanted));

        // The wanted URI's own entry sits beside the colliding one; each finds its own.
        let own = variants();
        store.insert(wanted.to_owned(), own.clone());
        assert_eq!(store.len(), 2);
        assert!(Arc::ptr_eq(&by_parts(&store, wanted).unwrap(), &own));
        assert!(Arc::ptr_eq(&store.get(wanted).unwrap(), &own));
        assert!(store.remove(wanted));
        assert!(by_parts(&store, wanted).is_none());
        assert_eq!(store.len(), 1, "the colliding entry stays");
    }

    #[test]
    fn parts_and_text_find_the_same_entry() {
        let store = MemoryStore::new(1 << 20);
        let stored = variants();
        store.insert("https://api.example:8443/a?b=C".to_owned(), stored.clone());
        for uri in [
            "https://api.example:8443/a?b=C",
            "HTTPS://API.EXAMPLE:8443/a?b=C",
            "https://user:pw@Api.Example:8443/a?b=C",
        ] {
            assert!(
                Arc::ptr_eq(&by_parts(&store, uri).unwrap(), &stored),
                "{uri}"
            );
        }
        for uri in [
            "https://api.example:8443/a?b=c",
            "https://api.example:8443/A?b=C",
            "https://api.example/a?b=C",
            "http://api.example:8443/a?b=C",
        ] {
            assert!(by_parts(&store, uri).is_none(), "{uri}");
        }
        // A key inserted with capitals through the store's text API is that exact text: no
        // request's key (always lowercase in scheme and host) matches it.
        store.insert("HTTP://UPPER.example/a".to_owned(), variants());
        assert!(by_parts(&store, "http://upper.example/a").is_none());
        assert!(store.get("HTTP://UPPER.example/a").is_some());
    }

    proptest! {
        #[test]
        fn parts_hash_as_their_text(
            scheme in prop_oneof![Just("http"), Just("HTTPS"), Just("Git+SSH")],
            host in "[a-zA-Z0-9.-]{1,30}(:[0-9]{1,5})?",
            path in "(/[a-zA-Z0-9%._~-]{0,20}){1,8}(\\?[a-zA-Z0-9=&%-]{0,40})?",
        ) {
            let store = MemoryStore::new(1 << 20);
            let uri = format!("{scheme}://{host}{path}");
            let key = key(&uri);
            let text = key.text();
            let mut hasher = KeyHasher::new(store.hasher.build_hasher());
            key.parts().hash(&mut hasher);
            prop_assert_eq!(hasher.finish(), store.hash_text(text.as_str()));
            prop_assert!(key.parts().is_text(text.as_str()));
            let mut other = text.as_str().to_owned();
            other.push('x');
            prop_assert!(!key.parts().is_text(&other));
            prop_assert!(!key.parts().is_text(&other[..text.as_str().len() - 1]));
        }
    }

    #[test]
    fn a_lookup_by_parts_hands_back_the_stored_text_to_replace_under() {
        let store = MemoryStore::new(1 << 20);
        let stored = variants();
        store.insert("https://api.example/a?b=C".to_owned(), stored.clone());
        let key = key("HTTPS://Api.Example/a?b=C");
        let hash = store.hash_parts(key.parts());
        let (text, found) = store.get_hashed(hash, key.parts()).unwrap();
        assert_eq!(&*text, "https://api.example/a?b=C");
        assert!(Arc::ptr_eq(&found, &stored));

        // Stored again under that text: the same key, replaced in place.
        let next = variants();
        store.insert_hashed(hash, text, next.clone());
        assert_eq!(store.len(), 1);
        assert!(Arc::ptr_eq(
            &by_parts(&store, "https://api.example/a?b=C").unwrap(),
            &next
        ));
        assert!(
            store
                .get_hashed(hash, self::key("https://api.example/a?b=c").parts())
                .is_none()
        );
        assert!(store.remove_hashed(hash, key.parts()));
        assert_eq!(store.len(), 0);
    }

    fn one_entry() -> Arc<Variants> {
        let now = Instant::now();
        let entry = crate::entry::Entry::new(
            http::StatusCode::OK,
            http::Version::HTTP_11,
            HeaderMap::new(),
            bytes::Bytes::from_static(b"x"),
            0,
            Vec::new(),
            crate::entry::Timing {
                request_time: now,
                response_time: now,
                response_wall: std::time::UNIX_EPOCH,
            },
        );
        Arc::new(Variants::new(vec![Arc::new(entry)]))
    }

    fn remember_pass(store: &MemoryStore, uri: &str, until: Instant) {
        let key = key(uri);
        store.remember_pass(store.hash_parts(key.parts()), key.parts(), until);
    }

    #[test]
    fn a_pass_is_found_by_the_cache_alone_and_counts_as_no_key() {
        let store = MemoryStore::new(1 << 20);
        let now = Instant::now();
        let until = now + Duration::from_secs(60);
        remember_pass(&store, "http://a.example/x", until);
        let found = by_parts(&store, "http://a.example/x").expect("the pass is held");
        assert!(found.is_pass_only());
        assert!(found.passes_at(now));
        assert!(!found.passes_at(until), "it ends at `until`");
        drop(found);
        assert!(
            store.get("http://a.example/x").is_none(),
            "no variants to hand out"
        );
        assert_eq!(CacheStore::len(&store), 0);
        assert!(CacheStore::is_empty(&store));
        assert!(store.weight() > 0, "its memory is counted");
        assert!(!store.remove("http://a.example/x"), "it held no responses");
        assert_eq!(store.weight(), 0);
    }

    #[test]
    fn a_pass_taken_by_its_hash_alone_never_serves_nor_takes_another_uri_s_answers() {
        let store = MemoryStore::new(1 << 20);
        let now = Instant::now();
        let wanted = "http://b.example/y";
        let hash = store.hash_text(wanted);
        // Another URI's pass, under exactly the hash the wanted URI has.
        let pass =
            Variants::default().with_pass(now + Duration::from_secs(60), &store.passes_alone);
        store.cache.insert(
            StoreKey::new(hash, Arc::from("http://a.example/x"), &pass),
            Arc::new(pass),
        );
        let found = by_parts(&store, wanted).expect("taken by its hash");
        assert!(found.is_pass_only() && found.passes_at(now));
        let key = key(wanted);
        assert!(
            store.get_hashed(hash, key.parts()).is_none(),
            "writes compare whole keys"
        );
        assert!(!store.remove_hashed(hash, key.parts()));

        // The wanted URI's answer is stored beside the pass, under its own text.
        let own = one_entry();
        store.insert_hashed(hash, Arc::from(wanted), own.clone());
        assert_eq!(store.cache.len(), 2);
        // The routing look-up may take the colliding pass (then the request goes upstream on
        // its own) or the URI's own entries, never another URI's.
        let found = by_parts(&store, wanted).unwrap();
        assert!(found.is_pass_only() || Arc::ptr_eq(&found, &own));
        assert!(Arc::ptr_eq(&store.get(wanted).unwrap(), &own));
        assert!(Arc::ptr_eq(
            &store.get_hashed(hash, key.parts()).unwrap().1,
            &own
        ));
        assert!(store.get("http://a.example/x").is_none());
    }

    #[test]
    fn a_pass_keeps_the_entries_and_storing_ends_it() {
        let store = MemoryStore::new(1 << 20);
        let now = Instant::now();
        let stored = one_entry();
        store.insert("http://a.example/x".to_owned(), stored.clone());
        remember_pass(&store, "http://a.example/x", now + Duration::from_secs(60));
        let found = store.get("http://a.example/x").expect("the entries stay");
        assert_eq!(found.entries().len(), 1);
        assert!(found.passes_at(now));
        assert_eq!(CacheStore::len(&store), 1);

        // Its responses removed, the pass stays, and the key no longer counts.
        let key = key("http://a.example/x");
        let hash = store.hash_parts(key.parts());
        assert!(store.remove_hashed(hash, key.parts()));
        assert!(
            !store.remove_hashed(hash, key.parts()),
            "nothing more to remove"
        );
        assert!(
            by_parts(&store, "http://a.example/x")
                .unwrap()
                .passes_at(now)
        );
        assert_eq!(CacheStore::len(&store), 0);

        // Responses stored for the URI end the pass.
        store.insert("http://a.example/x".to_owned(), stored);
        let found = by_parts(&store, "http://a.example/x").unwrap();
        assert!(!found.passes_at(now));
        assert_eq!(CacheStore::len(&store), 1);
    }

    #[test]
    fn passes_are_bounded_by_the_capacity_and_never_counted_as_keys() {
        let store = MemoryStore::new(16 * 1024);
        let until = Instant::now() + Duration::from_secs(60);
        for i in 0..2_000 {
            remember_pass(&store, &format!("http://a.example/{i}"), until);
            assert!(store.weight() <= store.capacity());
        }
        assert!(store.cache.len() < 2_000, "evicted like entries");
        assert_eq!(CacheStore::len(&store), 0);
        store.insert("http://a.example/kept".to_owned(), one_entry());
        assert_eq!(CacheStore::len(&store), 1);
    }

    #[test]
    fn shards_stay_large_enough_for_one_entry() {
        assert_eq!(MemoryStore::new(1024).cache.num_shards(), 1);
        assert_eq!(MemoryStore::new(64 * 1024 * 1024).cache.num_shards(), 16);
        assert!(MemoryStore::new(u64::MAX).cache.num_shards() <= 16);
        assert_eq!(MemoryStore::new(0).capacity(), 1);
    }
}

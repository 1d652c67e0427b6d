use crate::flight::Flights;
use crate::service::EtagCache;
use crate::store::{CacheStore, MemoryStore};
use courier_core::{SystemClock, WallClock};
use http::{HeaderName, StatusCode, header};
use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower_layer::Layer;

/// The default total capacity: 64 MiB.
pub const DEFAULT_CAPACITY: u64 = 64 * 1024 * 1024;

/// The default largest body stored: 1 MiB.
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 1024 * 1024;

/// The default longest wait of a request for another one of the same entry or key: 10 s.
pub const DEFAULT_SINGLE_FLIGHT_WAIT: Duration = Duration::from_secs(10);

/// Wraps a service in an [`EtagCache`].
///
/// # Clone
///
/// The store lives behind an `Arc` owned by the layer: every service the layer makes, and every
/// clone of those, share one store and one capacity.
///
/// # Setters
///
/// A layer is a value: each setter returns a layer with a store of its own (a fresh
/// [`MemoryStore`] of the same capacity). The services it makes share it with each other,
/// never with services made by the layer before the setter, which keep their settings and
/// their entries. The [`store_ref`](Self::store_ref) of a layer holds the entries of the
/// services that layer makes, so take it after the last setter. A store handed in with
/// [`store`](Self::store) is yours and is kept by every later setter: sharing it is what it
/// is for.
#[derive(Clone)]
pub struct EtagCacheLayer {
    pub(crate) shared: Arc<Shared>,
}

/// What every service of one layer shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn CacheStore>,
    /// The store again when it is a [`MemoryStore`], which is looked up without key text.
    pub(crate) memory: Option<MemoryStore>,
    /// Whether the layer made the store rather than being handed it with `store`: a setter
    /// replaces a store the layer made with a fresh one.
    own_store: bool,
    pub(crate) clock: Arc<dyn WallClock>,
    /// Seeds the credential fingerprints (at random, per layer).
    pub(crate) hasher: foldhash::quality::RandomState,
    pub(crate) max_entry_bytes: usize,
    pub(crate) always_revalidate: bool,
    pub(crate) stale_if_error: Option<Duration>,
    pub(crate) credential_headers: Vec<HeaderName>,
    pub(crate) statuses: Vec<StatusCode>,
    pub(crate) invalidate_locations: bool,
    pub(crate) single_flight: Option<Duration>,
    pub(crate) flights: Arc<Flights>,
    /// Where passes are kept when the store is not in memory (made at the first one).
    pub(crate) passes_apart: OnceLock<MemoryStore>,
}

/// The room for passes kept apart from a store that is not in memory: about 1 200 of them
/// (some 200 bytes each, as the in-memory store counts them).
pub(crate) const PASSES_APART_CAPACITY: u64 = 256 * 1024;

// === impl EtagCacheLayer ===

impl EtagCacheLayer {
    /// A cache with the defaults: 64 MiB in an in-memory store, 1 MiB per entry, fresh entries
    /// served without a request, credentials fingerprinted from `Authorization` and `Cookie`,
    /// 200 responses stored.
    pub fn new() -> Self {
        let memory = MemoryStore::new(DEFAULT_CAPACITY);
        Self {
            shared: Arc::new(Shared {
                store: Arc::new(memory.clone()),
                memory: Some(memory),
                own_store: true,
                clock: Arc::new(SystemClock),
                hasher: foldhash::quality::RandomState::default(),
                max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
                always_revalidate: false,
                stale_if_error: None,
                credential_headers: vec![header::AUTHORIZATION, header::COOKIE],
                statuses: vec![StatusCode::OK],
                invalidate_locations: true,
                single_flight: Some(DEFAULT_SINGLE_FLIGHT_WAIT),
                flights: Arc::default(),
                passes_apart: OnceLock::new(),
            }),
        }
    }

    /// A layer with state of its own: a fresh store (when the layer made it) and no
    /// revalidations in flight.
    fn with(self, f: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared::clone(&self.shared);
        f(&mut shared);
        if shared.own_store
            && let Some(memory) = &shared.memory
        {
            let memory = MemoryStore::new(memory.capacity());
            shared.store = Arc::new(memory.clone());
            shared.memory = Some(memory);
        }
        shared.flights = Arc::default();
        shared.passes_apart = OnceLock::new();
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The total bytes held, bodies and headers included; a new in-memory store of that size
    /// replaces the current store. Defaults to 64 MiB.
    pub fn capacity(self, bytes: u64) -> Self {
        let memory = MemoryStore::new(bytes);
        self.with(|s| {
            s.store = Arc::new(memory.clone());
            s.memory = Some(memory);
            s.own_store = true;
        })
    }

    /// The largest body stored; larger bodies, and bodies of unknown length, stream through
    /// and are not stored. Defaults to 1 MiB.
    pub fn max_entry_bytes(self, bytes: usize) -> Self {
        self.with(|s| s.max_entry_bytes = bytes)
    }

    /// Revalidate every stored entry with the server, even a fresh one. Defaults to `false`.
    pub fn always_revalidate(self, always: bool) -> Self {
        self.with(|s| s.always_revalidate = always)
    }

    /// How long past its freshness a stored entry may still be served when the upstream fails
    /// (a transport error or a 5xx), for responses that carry no `stale-if-error` of their own
    /// and no `must-revalidate` or `no-cache` (nor, for a request the cache is shared for,
    /// `proxy-revalidate` or `s-maxage`). Defaults to `None` (only the response's own
    /// `stale-if-error` counts).
    pub fn stale_if_error(self, window: Option<Duration>) -> Self {
        self.with(|s| s.stale_if_error = window)
    }

    /// The request headers whose values separate entries, so that different credentials never
    /// share one. An empty list shares entries between all callers: the cache is then a shared
    /// one and stores no `private` response. Whenever `Authorization` is not listed, a response
    /// to a request that carries it is stored only with `public`, `s-maxage` or
    /// `must-revalidate` (RFC 9111 section 3.5). For the requests it is shared for, the cache
    /// honours `s-maxage` and `proxy-revalidate`. Defaults to `Authorization` and `Cookie`.
    pub fn credential_headers(self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names: Vec<_> = names.into_iter().collect();
        self.with(|s| s.credential_headers = names)
    }

    /// The statuses that are stored. Defaults to 200 only.
    pub fn statuses(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let statuses: Vec<_> = statuses.into_iter().collect();
        self.with(|s| s.statuses = statuses)
    }

    /// Also invalidate the `Location` and `Content-Location` of a successful unsafe request when
    /// they are on the same host. Defaults to `true`.
    pub fn invalidate_locations(self, yes: bool) -> Self {
        self.with(|s| s.invalidate_locations = yes)
    }

    /// Collapse concurrent revalidations of one stored entry, and concurrent GETs of one key
    /// that has no entry to serve them, into one upstream request: the first goes upstream, the
    /// others wait for its result (at most `max_wait`, and never past their request's
    /// deadline, in its [`CallContext`](courier_core::CallContext)) and are answered from the entry it
    /// updated or stored. When its answer cannot serve them, or the wait runs out, each waiter
    /// sends its own request; when the first is cancelled, one waiter goes in its place. See
    /// the crate's **Concurrency**. `None` sends every request. Defaults to `Some(10 s)`.
    pub fn single_flight(self, max_wait: Option<Duration>) -> Self {
        self.with(|s| s.single_flight = max_wait)
    }

    /// The store to use instead of a fresh in-memory one: a [`DiskStore`](crate::DiskStore),
    /// or any [`CacheStore`]. Defaults to a [`MemoryStore`] of 64 MiB.
    pub fn store(self, store: impl CacheStore) -> Self {
        let memory = (&store as &dyn Any).downcast_ref::<MemoryStore>().cloned();
        let store: Arc<dyn CacheStore> = Arc::new(store);
        self.with(|s| {
            s.store = store;
            s.memory = memory;
            s.own_store = false;
        })
    }

    /// The wall clock that HTTP dates (`Date`, `Expires`) are compared with. Defaults to the
    /// system clock.
    pub fn wall_clock(self, clock: impl WallClock) -> Self {
        let clock: Arc<dyn WallClock> = Arc::new(clock);
        self.with(|s| s.clock = clock)
    }

    /// The store every service of this layer shares (read it after the last setter).
    pub fn store_ref(&self) -> &Arc<dyn CacheStore> {
        &self.shared.store
    }
}

impl Default for EtagCacheLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EtagCacheLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtagCacheLayer")
            .field("store", &self.store)
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("always_revalidate", &self.always_revalidate)
            .field("stale_if_error", &self.stale_if_error)
            .field("credential_headers", &self.credential_headers)
            .field("statuses", &self.statuses)
            .field("single_flight", &self.single_flight)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for EtagCacheLayer {
    type Service = EtagCache<S>;

    fn layer(&self, inner: S) -> Self::Service {
        EtagCache::new(inner, self.clone())
    }
}

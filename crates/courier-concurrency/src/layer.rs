//! [`ConcurrencyLimitLayer`]: the settings, and the limits every service it makes shares.

use crate::config::{AdaptiveLimit, Config, Limit};
use crate::handle::ConcurrencyHandle;
use crate::limiter::Shared;
use crate::service::ConcurrencyLimit;
use courier_core::{Classifier, Global, KeyBy, KeyFn, PerHost, RequestHead};
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tower_layer::Layer;

/// Wraps a service in a [`ConcurrencyLimit`]: one limit per host by default, learned from
/// latency.
///
/// Every service this layer makes, and every clone of those, shares the same limits (behind
/// an `Arc`), and so does the [`handle`](Self::handle).
///
/// # Setters
///
/// A layer is a value: each setter returns a layer with limits of its own. The services it
/// makes share them with each other, never with services made by the layer before the setter,
/// which keep their settings and their limits. A handle sees the limits of the services made
/// by the layer it was taken from, so take it after the last setter.
pub struct ConcurrencyLimitLayer<K: KeyFn = PerHost> {
    config: Config,
    key_fn: K,
    shared: Arc<Shared<K::Key>>,
}

impl ConcurrencyLimitLayer {
    /// A limit per host with the defaults: adaptive ([`AdaptiveLimit::new`]: from 20, within
    /// 1 and 1000), no queue (a call over the limit fails at once), the permit held until the
    /// body ends, drops judged by [`Classifier::new`], at most 4096 keys.
    pub fn new() -> Self {
        Self::with(Config::default(), PerHost)
    }
}

impl Default for ConcurrencyLimitLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: KeyFn> ConcurrencyLimitLayer<K> {
    fn with(config: Config, key_fn: K) -> Self {
        let single = K::SINGLE.then(|| key_fn.key(&RequestHead::new(&http::Request::new(()))));
        Self {
            shared: Arc::new(Shared::new(config.clone(), single)),
            config,
            key_fn,
        }
    }

    fn set(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut self.config);
        Self::with(self.config, self.key_fn)
    }

    /// How limits are keyed: [`PerHost`], [`Global`] or [`KeyBy`].
    pub fn key_fn(&self) -> &K {
        &self.key_fn
    }

    /// One limit per host: scheme and authority ([`HostKey`](courier_core::HostKey)).
    ///
    /// Defaults to one per host.
    pub fn per_host(self) -> ConcurrencyLimitLayer<PerHost> {
        ConcurrencyLimitLayer::with(self.config, PerHost)
    }

    /// One limit for every request, whatever its host.
    ///
    /// Defaults to one per host.
    pub fn global(self) -> ConcurrencyLimitLayer<Global> {
        ConcurrencyLimitLayer::with(self.config, Global)
    }

    /// A limit per key `f` returns for the request's head (method, URI, headers, extensions),
    /// e.g. per route or per tenant.
    ///
    /// Defaults to one per host.
    pub fn key_by<F, Key>(self, f: F) -> ConcurrencyLimitLayer<KeyBy<F>>
    where
        F: Fn(&RequestHead<'_>) -> Key + Clone + Send + Sync + 'static,
        Key: Hash + Eq + Clone + fmt::Debug + Send + Sync + 'static,
    {
        ConcurrencyLimitLayer::with(self.config, KeyBy(f))
    }

    /// A fixed limit of `n` calls in flight per key; nothing is learned.
    ///
    /// Defaults to adaptive (see [`adaptive`](Self::adaptive)).
    pub fn fixed(self, n: NonZeroUsize) -> Self {
        self.set(|c| c.limit = Limit::Fixed(n))
    }

    /// A limit per key learned from latency within the bounds of `limit`: it shrinks when a
    /// host's latency rises with its load (the host queues) and grows again while latency
    /// holds (see the [crate docs](crate#the-adaptive-limit)).
    ///
    /// Defaults to [`AdaptiveLimit::new`]: from 20, within 1 and 1000.
    pub fn adaptive(self, limit: AdaptiveLimit) -> Self {
        self.set(|c| c.limit = Limit::Adaptive(limit))
    }

    /// How many calls per key may wait for a permit when the limit is full; a call that finds
    /// the queue full too fails at once with
    /// [`ConcurrencyLimited`](courier_core::ConcurrencyLimited). Waiting calls get their
    /// permits first come, first served.
    ///
    /// Defaults to 0: a call over the limit fails at once.
    pub fn max_queue(self, n: usize) -> Self {
        self.set(|c| c.max_queue = n)
    }

    /// How long a queued call waits for its permit before it fails with
    /// [`ConcurrencyLimited`](courier_core::ConcurrencyLimited); never past the call's
    /// deadline ([`CallContext`](courier_core::CallContext)), and a call whose deadline has passed does not
    /// queue.
    ///
    /// Defaults to 1 s (only read with a [`max_queue`](Self::max_queue)).
    pub fn max_wait(self, d: Duration) -> Self {
        self.set(|c| c.max_wait = d)
    }

    /// Gives the permit back when the response headers arrive instead of when the body ends
    /// or is dropped: the limit then bounds calls waiting for an answer, not bodies being
    /// read.
    ///
    /// Defaults to `false`: the body holds the permit.
    pub fn release_at_headers(self, yes: bool) -> Self {
        self.set(|c| c.release_at_headers = yes)
    }

    /// The one place that decides what an answer means ([`courier_core::classifier`]): an
    /// answer whose verdict is an overload signal (an overload without a server's hint), and
    /// a timeout, shrink an adaptive limit as a drop does. Defaults to [`Classifier::new`];
    /// the preset gives its own (`CourierLayer::classifier`).
    pub fn classifier(self, classifier: Classifier) -> Self {
        self.set(|c| c.classifier = classifier)
    }

    /// The most keys kept. When a new key would pass it, the least recently used limits are
    /// dropped first, idle ones (nothing in flight or queued) before busy ones, until a
    /// quarter of the room is free.
    ///
    /// Defaults to 4096.
    pub fn max_keys(self, n: NonZeroUsize) -> Self {
        self.set(|c| c.max_keys = n)
    }

    /// A handle on the limits this layer's services share: the calls in flight, the limit
    /// and the calls queued, per key.
    pub fn handle(&self) -> ConcurrencyHandle<K::Key> {
        ConcurrencyHandle {
            shared: self.shared.clone(),
        }
    }

    /// What a service keeps: the key function and the shared limits.
    pub(crate) fn into_parts(self) -> (K, Arc<Shared<K::Key>>) {
        (self.key_fn, self.shared)
    }
}

impl<K: KeyFn + Clone> Clone for ConcurrencyLimitLayer<K> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            key_fn: self.key_fn.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<K: KeyFn + fmt::Debug> fmt::Debug for ConcurrencyLimitLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("config", &self.config)
            .field("key_fn", &self.key_fn)
            .finish()
    }
}

impl<S, K: KeyFn + Clone> Layer<S> for ConcurrencyLimitLayer<K> {
    type Service = ConcurrencyLimit<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(inner, self.clone())
    }
}

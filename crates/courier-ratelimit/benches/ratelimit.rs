//! The decision itself, next to governor's, in one run; plus one full service call.
//!
//! `cargo bench -p courier-ratelimit --bench ratelimit -- --warm-up-time 1 --measurement-time 3`
//!
//! Every bucket has a rate high enough that every call is admitted: the cost measured is the
//! decision (map lookup + compare-and-swap), not a refusal.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use courier_core::HostKey;
use courier_ratelimit::{InMemoryStore, Quota, Rate, TokenBucketRateLimitLayer};
use criterion::{Criterion, criterion_group, criterion_main};
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, service_fn};

const HOSTS: usize = 1000;

fn quota() -> Quota {
    Quota::new(Rate::per_second(1e9).unwrap(), NonZeroU32::MAX)
}

fn gov_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::MAX).allow_burst(NonZeroU32::MAX)
}

fn hosts() -> Vec<HostKey> {
    (0..HOSTS)
        .map(|i| {
            let req = http::Request::get(format!("https://host{i}.example.com/v1"))
                .body(())
                .unwrap();
            HostKey::from_request(&req)
        })
        .collect()
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    let store = InMemoryStore::<()>::new();
    let q = quota();
    g.bench_function("courier/decide (global key)", |b| {
        b.iter(|| black_box(store.decide(black_box(&()), q, Duration::MAX)))
    });
    let one = InMemoryStore::<HostKey>::new();
    let key = hosts().swap_remove(0);
    g.bench_function("courier/decide (one host)", |b| {
        b.iter(|| black_box(one.decide(black_box(&key), q, Duration::MAX)))
    });
    let gov = governor::RateLimiter::direct(gov_quota());
    g.bench_function("governor/check", |b| b.iter(|| black_box(gov.check())));
    g.finish();
}

fn keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_1000_hosts");
    let keys = hosts();
    let q = quota();
    let store = InMemoryStore::<HostKey>::new();
    let gov = governor::RateLimiter::keyed(gov_quota());
    for k in &keys {
        store.decide(k, q, Duration::MAX);
        let _ = gov.check_key(k);
    }
    let mut i = 0;
    g.bench_function("courier/decide", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(store.decide(&keys[i], q, Duration::MAX))
        })
    });
    let mut i = 0;
    g.bench_function("governor/check_key", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(gov.check_key(&keys[i]))
        })
    });
    // governor's dashmap store with the hasher courier's store uses, for a like-for-like look.
    let gov_fold = governor::RateLimiter::dashmap_with_hasher(
        gov_quota(),
        foldhash::fast::RandomState::default(),
    );
    for k in &keys {
        let _ = gov_fold.check_key(k);
    }
    let mut i = 0;
    g.bench_function("governor/check_key (foldhash)", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(gov_fold.check_key(&keys[i]))
        })
    });
    g.finish();

    // Which concurrent map: the lookup alone, papaya (lock-free reads) against dashmap
    // (sharded RwLock), same keys, same hasher.
    let mut g = c.benchmark_group("map_get_1000_hosts");
    let fold = foldhash::fast::RandomState::default();
    let papaya_map = papaya::HashMap::<HostKey, u64, _>::with_hasher(fold.clone());
    let dash = dashmap::DashMap::<HostKey, u64, _>::with_hasher(fold);
    for k in &keys {
        papaya_map.pin().insert(k.clone(), 1);
        dash.insert(k.clone(), 1);
    }
    let mut i = 0;
    g.bench_function("papaya/pin+get", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(papaya_map.pin().get(&keys[i]).copied())
        })
    });
    let mut i = 0;
    g.bench_function("dashmap/get", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(dash.get(&keys[i]).map(|v| *v))
        })
    });
    g.finish();
}

/// Runs `f` `iters` times over two threads at once; the wall time of it all.
fn two_threads(iters: u64, f: impl Fn() + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    f();
                }
            });
        }
    });
    start.elapsed()
}

/// Two threads on one key: time per decision, both threads counted.
fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads_one_key");
    let q = quota();
    let key = hosts().swap_remove(0);
    let store = Arc::new(InMemoryStore::<HostKey>::new());
    g.bench_function("courier/decide", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                black_box(store.decide(&key, q, Duration::MAX));
            })
        })
    });
    let gov = governor::RateLimiter::keyed(gov_quota());
    g.bench_function("governor/check_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(gov.check_key(&key));
            })
        })
    });
    let direct = governor::RateLimiter::direct(gov_quota());
    g.bench_function("governor/check", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(direct.check());
            })
        })
    });
    g.finish();
}

/// The whole service call over a ready `service_fn`, polled once (it completes at once), next
/// to the bare `service_fn`.
fn service_call(c: &mut Criterion) {
    let mut g = c.benchmark_group("service_call");
    let uri: http::Uri = "https://api.example.com/v1/items".parse().unwrap();
    let inner = service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(()))
    });
    let mut bare = inner;
    let mut limited =
        TokenBucketRateLimitLayer::new(Rate::per_second(1e9).unwrap(), NonZeroU32::MAX)
            .layer(inner);
    let mut cx = Context::from_waker(Waker::noop());
    g.bench_function("service_fn alone", |b| {
        b.iter(|| {
            let req = http::Request::get(uri.clone()).body(()).unwrap();
            let fut = pin!(bare.call(req));
            black_box(matches!(fut.poll(&mut cx), Poll::Ready(Ok(_))))
        })
    });
    g.bench_function("courier/ratelimit over service_fn", |b| {
        b.iter(|| {
            let req = http::Request::get(uri.clone()).body(()).unwrap();
            assert!(limited.poll_ready(&mut cx).is_ready());
            let fut = pin!(limited.call(req));
            black_box(matches!(fut.poll(&mut cx), Poll::Ready(Ok(_))))
        })
    });
    g.finish();
}

criterion_group!(benches, uncontended, keyed, contended, service_call);
criterion_main!(benches);

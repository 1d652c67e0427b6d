//! One decision over loopback Redis, next to the in-process store, in one run; plus a bare
//! PING over the same kind of connection (the floor any networked store pays), and a decision
//! during an outage (Redis skipped, the in-process fallback answers).
//!
//! `cargo bench -p courier-redis --bench redis -- --warm-up-time 1 --measurement-time 3`
//!
//! The Redis benches start their own `redis-server` on a free loopback port (or use
//! `COURIER_REDIS_URL`); without either they are skipped with a note, and the in-process ones
//! still run. Every call is admitted (the rate is high): what is measured is the decision.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use courier_core::HostKey;
use courier_ratelimit::{InMemoryStore, Quota, Rate, RateLimitStore};
use courier_redis::{LocalOrRedis, RedisStore};
use courier_testkit::redis as test_redis;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

fn quota() -> Quota {
    Quota::new(Rate::per_second(1e6).unwrap(), NonZeroU32::MAX)
}

fn host() -> HostKey {
    HostKey::from_request(
        &http::Request::get("https://api.example.com/v1")
            .body(())
            .unwrap(),
    )
}

fn one_decision(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let key = host();
    let q = quota();
    let mut g = c.benchmark_group("one_decision");

    let local = rt.block_on(async { InMemoryStore::<HostKey>::new() });
    g.bench_function("in-process InMemoryStore", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(local.acquire(&key, q, Duration::MAX).await) })
    });
    let either = LocalOrRedis::Local(local.clone());
    g.bench_function("in-process LocalOrRedis::Local", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(either.acquire(&key, q, Duration::MAX).await) })
    });

    let Some(mut redis) = rt.block_on(test_redis::redis("bench one_decision")) else {
        g.finish();
        return;
    };
    let url = redis.url();
    let prefix = test_redis::unique_prefix("bench");
    let store: RedisStore<HostKey> = rt.block_on(async {
        RedisStore::builder(url.as_str())
            .prefix(prefix)
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
            .expect("redis answers")
    });
    let conn = rt.block_on(async {
        redis::Client::open(url.as_str())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis answers")
    });
    g.bench_function("loopback redis PING (the floor)", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            async move {
                let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
                black_box(pong)
            }
        })
    });
    g.bench_function("loopback RedisStore (one EVALSHA)", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(store.acquire(&key, q, Duration::MAX).await) })
    });
    assert_eq!(store.outages(), 0, "every decision above came from redis");

    // Outage: kill our own server, let one decision notice, then measure the skipped path.
    if let Some(server) = redis.server() {
        server.kill();
        rt.block_on(async {
            let _ = store.acquire(&key, q, Duration::MAX).await;
        });
        assert!(store.is_degraded());
        g.bench_function("RedisStore during an outage (fallback)", |b| {
            b.to_async(&rt)
                .iter(|| async { black_box(store.acquire(&key, q, Duration::MAX).await) })
        });
    }
    g.finish();
}

criterion_group!(benches, one_decision);
criterion_main!(benches);

//! The store over Redis as production runs it, with real servers started by each test on
//! loopback: a Redis Cluster of three masters (each with a replica), and a primary with a
//! replica watched by three sentinels. Replicas of the preset share one limit through either,
//! and the store follows a failover.

use courier_core::{BoxError, HostKey};
use courier_ratelimit::{Decision, Quota, Rate, RateLimitStore, TokenBucketRateLimitLayer};
use courier_redis::{FailurePolicy, RedisStore, RedisStoreBuilder};
use courier_testkit::redis::unique_prefix;
use courier_testkit::redis_topology::{RedisCluster, RedisSentinel};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt, service_fn};

fn quota(rps: f64, burst: u32) -> Quota {
    Quota::new(
        Rate::per_second(rps).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

fn host() -> HostKey {
    HostKey::from_request(&http::Request::get("https://api.example/").body(()).unwrap())
}

fn request() -> http::Request<()> {
    http::Request::get("https://api.example/x")
        .body(())
        .unwrap()
}

/// Generous: the machine may be busy.
const PATIENT: Duration = Duration::from_millis(500);

async fn connect(builder: RedisStoreBuilder, prefix: &str) -> RedisStore<HostKey> {
    builder
        .prefix(prefix)
        .command_timeout(PATIENT)
        .retry_backoff(Duration::from_millis(200))
        .policy(FailurePolicy::FailClosed)
        .connect()
        .await
        .expect("redis answers")
}

/// Four replicas, each its own store and connection, share one key at 10/s, burst 5, for 3 s:
/// at most 5 + 30 + 1 calls start in any 3 s window, where each alone would start 35.
async fn four_replicas_share_one_limit(builder: impl Fn() -> RedisStoreBuilder) {
    let prefix = unique_prefix("topology");
    let starts = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let run_for = Duration::from_secs(3);
    let mut stores = Vec::new();
    let mut services = Vec::new();
    for _ in 0..4 {
        let store = connect(builder(), &prefix).await;
        stores.push(store.clone());
        let layer = TokenBucketRateLimitLayer::with_quota(quota(10.0, 5)).store_in(store);
        let starts = Arc::clone(&starts);
        services.push(ServiceBuilder::new().layer(layer).service(service_fn(
            move |_req: http::Request<()>| {
                starts.lock().unwrap().push(Instant::now());
                async { Ok::<_, BoxError>(http::Response::new(())) }
            },
        )));
    }
    let mut it = services.into_iter();
    let (a, b, c, d) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    );
    tokio::join!(
        replica(a, t0, run_for),
        replica(b, t0, run_for),
        replica(c, t0, run_for),
        replica(d, t0, run_for)
    );
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    let busiest = (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < run_for)
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(busiest <= 5 + 30 + 1, "{busiest} starts in 3 s");
    assert!(
        busiest >= 15,
        "the shared limit lets traffic through: {busiest}"
    );
    for s in &stores {
        assert_eq!(s.outages(), 0, "every decision came from redis");
    }
}

/// One replica: calls in a loop until `run_for` has passed since `t0`.
async fn replica<S>(svc: S, t0: Instant, run_for: Duration)
where
    S: tower::Service<http::Request<()>, Response = http::Response<()>, Error = BoxError> + Clone,
{
    let mut n = 0_u32;
    while t0.elapsed() < run_for && n < 1000 {
        timeout(Duration::from_secs(5), svc.clone().oneshot(request()))
            .await
            .expect("each call within 5 s")
            .expect("admitted");
        n += 1;
    }
}

/// Decides once, bounded: the store never holds a caller past its command timeout.
async fn decide(store: &RedisStore<HostKey>) -> (Decision, Duration) {
    let asked = Instant::now();
    let decision = timeout(
        Duration::from_secs(5),
        store.acquire(&host(), quota(1000.0, 1000), Duration::ZERO),
    )
    .await
    .expect("a decision within 5 s")
    .expect("never an error");
    (decision, asked.elapsed())
}

/// Asks every 50 ms until decisions come from Redis again (at most `limit`); every decision on
/// the way is bounded by the command timeout. Returns how long it took.
async fn until_shared(store: &RedisStore<HostKey>, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (decision, took) = decide(store).await;
        assert!(
            took <= PATIENT + Duration::from_millis(250),
            "a decision took {took:?}"
        );
        if matches!(decision, Decision::Admit(_)) && !store.is_degraded() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "still degraded after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_share_one_limit_through_a_cluster() {
    let Some(cluster) = RedisCluster::start("cluster_share", 3, 0).await else {
        return;
    };
    let seeds = cluster.seeds();
    four_replicas_share_one_limit(|| RedisStore::cluster_builder(seeds.clone())).await;
}

/// A master killed under traffic: decisions fail at once (fail-closed refuses, never waiting
/// past the command timeout), the outage is counted once, and decisions are shared again once
/// its replica has taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_is_one_outage_and_then_shared_again() {
    let Some(mut cluster) = RedisCluster::start("cluster_failover", 3, 1).await else {
        return;
    };
    let prefix = unique_prefix("failover");
    let store = connect(RedisStore::cluster_builder(cluster.seeds()), &prefix).await;
    let (tat_key, _) = store.key_names(&host());
    let (decision, _) = decide(&store).await;
    assert!(matches!(decision, Decision::Admit(_)));

    let master = cluster.master_of(&tat_key);
    cluster.kill(master);
    let took = until_shared(&store, Duration::from_secs(30)).await;
    assert!(cluster.settled(Duration::from_secs(10)).await);
    assert_eq!(store.outages(), 1, "one outage, after {took:?}");
    assert_ne!(cluster.master_of(&tat_key), master, "a replica took over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_share_one_limit_through_sentinel() {
    let Some(set) = RedisSentinel::start("sentinel_share").await else {
        return;
    };
    let urls = set.sentinel_urls();
    four_replicas_share_one_limit(|| {
        RedisStore::sentinel_builder(RedisSentinel::MASTER, urls.clone())
    })
    .await;
}

/// The primary killed: the store refuses (fail-closed) without waiting past its timeout while
/// the sentinels elect the replica, then asks them again and decides on the new primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_a_sentinel_failover() {
    let Some(mut set) = RedisSentinel::start("sentinel_failover").await else {
        return;
    };
    let prefix = unique_prefix("sentinel");
    let store = connect(
        RedisStore::sentinel_builder(RedisSentinel::MASTER, set.sentinel_urls()),
        &prefix,
    )
    .await;
    let (decision, _) = decide(&store).await;
    assert!(matches!(decision, Decision::Admit(_)));
    assert_eq!(set.master_port(), Some(set.primary_port()));

    set.kill_primary();
    let (during, took) = decide(&store).await;
    assert!(took <= PATIENT + Duration::from_millis(250), "{took:?}");
    assert!(
        matches!(during, Decision::Deny(_)),
        "fail-closed refuses while there is no primary: {during:?}"
    );
    assert!(
        set.failed_over(Duration::from_secs(30)).await,
        "the replica is promoted"
    );
    until_shared(&store, Duration::from_secs(30)).await;
    assert_eq!(store.outages(), 1);
    assert_eq!(set.master_port(), Some(set.replica_port()));
}

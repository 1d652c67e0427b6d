//! The store over Redis as production runs it, with real servers started by each test on
//! loopback: a Redis Cluster of three masters (each with a replica), and a primary with a
//! replica watched by three sentinels. Replicas of the preset share one limit through either,
//! and the store follows a failover.

use common::{PATIENT, host, quota};
use courier_core::HostKey;
use courier_ratelimit::{Decision, RateLimitStore};
use courier_redis::{FailurePolicy, RedisStore, RedisStoreBuilder};
use courier_testkit::redis::unique_prefix;
use courier_testkit::redis_topology::{RedisCluster, RedisSentinel};
use std::time::Duration;
use tokio::time::{Instant, timeout};

mod common;

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

/// Four stores, each its own connection, under one key prefix of their own.
async fn four_stores(builder: impl Fn() -> RedisStoreBuilder) -> [RedisStore<HostKey>; 4] {
    let prefix = unique_prefix("replicas");
    [
        connect(builder(), &prefix).await,
        connect(builder(), &prefix).await,
        connect(builder(), &prefix).await,
        connect(builder(), &prefix).await,
    ]
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
    let stores = four_stores(|| RedisStore::cluster_builder(cluster.seeds())).await;
    common::four_replicas_share_one_limit(stores).await;
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
    let stores =
        four_stores(|| RedisStore::sentinel_builder(RedisSentinel::MASTER, set.sentinel_urls()))
            .await;
    common::four_replicas_share_one_limit(stores).await;
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

//! Four replicas of the preset sharing one rate limit through a Redis Cluster and through the
//! master a set of Sentinels names: counted at one fault server on loopback, the arrivals in
//! every window `t` stay within `burst + rate × t`, where each replica alone would send its own
//! burst and rate.

#![cfg(feature = "redis")]

mod common;

use bytes::Bytes;
use common::get;
use courier::CourierLayer;
use courier::core::HostKey;
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::redis::{RedisStore, RedisStoreBuilder};
use courier_faultserver::FaultServer;
use courier_testkit::redis::unique_prefix;
use courier_testkit::redis_topology::{RedisCluster, RedisSentinel};
use http_body_util::{BodyExt, Full};
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

const RATE: f64 = 10.0;
const BURST: u32 = 5;
const REPLICAS: usize = 4;
const CALLERS: usize = 3;
const RUN_FOR: Duration = Duration::from_secs(3);

async fn four_presets_share_one_limit(builder: impl Fn() -> RedisStoreBuilder, test: &str) {
    let server = FaultServer::start().await.unwrap();
    let prefix = unique_prefix(test);
    let mut clients = Vec::new();
    for _ in 0..REPLICAS {
        let store: RedisStore<HostKey> = builder()
            .prefix(&prefix)
            .connect()
            .await
            .expect("the store connects");
        let bucket = TokenBucketRateLimitLayer::new(
            Rate::per_second(RATE).unwrap(),
            NonZeroU32::new(BURST).unwrap(),
        );
        let layer = CourierLayer::new()
            .cache(None)
            .rate_limit(bucket)
            .shared_rate_limit(store);
        clients.push(layer.hyper::<Full<Bytes>>());
    }
    let url = server.url_for("/s/shared");
    let started = Instant::now();
    let callers = clients.iter().flat_map(|client| {
        (0..CALLERS).map(|_| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                // Bounded in count and in time: at most the whole shared allowance.
                let mut sent = 0;
                while started.elapsed() < RUN_FOR && sent < 100 {
                    let resp = client
                        .clone()
                        .oneshot(get(&url))
                        .await
                        .expect("paced, then served");
                    assert_eq!(resp.status(), 200);
                    resp.into_body().collect().await.expect("the body");
                    sent += 1;
                }
                sent
            }
        })
    });
    let sent: usize = common::bounded(futures_util::future::join_all(callers))
        .await
        .into_iter()
        .sum();

    let mut arrivals: Vec<f64> = server.hits("shared").iter().map(|h| h.t_ms).collect();
    assert_eq!(arrivals.len(), sent, "every call sent once");
    arrivals.sort_by(f64::total_cmp);
    for window_s in [1.0, 2.0, 3.0] {
        let window_ms = window_s * 1000.0;
        let busiest = (0..arrivals.len())
            .map(|i| {
                arrivals[i..]
                    .iter()
                    .take_while(|t| **t - arrivals[i] < window_ms)
                    .count()
            })
            .max()
            .unwrap_or(0);
        // One more than the bound: a slot at each end of a window.
        let bound = f64::from(BURST) + RATE * window_s + 1.0;
        assert!(
            busiest as f64 <= bound,
            "{test}: {busiest} arrivals in {window_s} s, more than {bound}"
        );
    }
    // And the shared limit let traffic through: most of one replica's allowance at least.
    assert!(
        arrivals.len() as f64 >= f64::from(BURST) + RATE * RUN_FOR.as_secs_f64() * 0.6,
        "{test}: {} arrivals",
        arrivals.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_presets_share_one_limit_through_a_cluster() {
    let Some(cluster) = RedisCluster::start("presets_cluster", 3, 0).await else {
        return;
    };
    four_presets_share_one_limit(
        || RedisStore::cluster_builder(cluster.seeds()),
        "presets_cluster",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_presets_share_one_limit_through_sentinel() {
    let Some(set) = RedisSentinel::start("presets_sentinel").await else {
        return;
    };
    four_presets_share_one_limit(
        || RedisStore::sentinel_builder(RedisSentinel::MASTER, set.sentinel_urls()),
        "presets_sentinel",
    )
    .await;
}

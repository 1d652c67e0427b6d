//! The store over Redis as production runs it, with real servers started by each test on
//! loopback: a Redis Cluster of three masters (each with a replica), and a primary with a
//! replica watched by three sentinels. Replicas of the preset share one limit through either,
//! and the store follows a failover.

use common::{PATIENT, host, quota};
use courier_core::HostKey;
use courier_ratelimit::{Decision, RateLimitStore};
use courier_redis::{FailurePolicy, RedisStore, RedisStoreBuilder};
use courier_testkit::redis::{RedisServer, own_redis, unique_prefix};
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

/// A reset on a cluster deletes the hash-tagged TAT on the node that holds the key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_through_a_cluster_starts_from_a_full_bucket() {
    let Some(cluster) = RedisCluster::start("cluster_reset", 3, 0).await else {
        return;
    };
    let prefix = unique_prefix("reset");
    let store = connect(RedisStore::cluster_builder(cluster.seeds()), &prefix).await;
    common::reset_starts_from_a_full_bucket(&store).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_through_sentinel_starts_from_a_full_bucket() {
    let Some(set) = RedisSentinel::start("sentinel_reset").await else {
        return;
    };
    let prefix = unique_prefix("reset");
    let store = connect(
        RedisStore::sentinel_builder(RedisSentinel::MASTER, set.sentinel_urls()),
        &prefix,
    )
    .await;
    common::reset_starts_from_a_full_bucket(&store).await;
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

/// A primary and a replica that both ask for a password (`requirepass`, the replica's
/// `masterauth`), watched by three sentinels that know it (`sentinel auth-pass`) and ask for
/// one of their own (the default user's ACL password; `sentinel sentinel-pass` between them).
struct PasswordSentinel {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
    dir: std::path::PathBuf,
}

impl PasswordSentinel {
    const MASTER: &'static str = "courier-auth";
    const MASTER_PASSWORD: &'static str = "m-s3cret";
    const SENTINEL_PASSWORD: &'static str = "s-s3cret";

    async fn start(test: &str) -> Option<Self> {
        // The testkit skips (or fails, under COURIER_REQUIRE_REDIS=1) without redis-server.
        own_redis(test).await?;
        if cli_missing() {
            assert!(
                std::env::var("COURIER_REQUIRE_REDIS").as_deref() != Ok("1"),
                "{test}: COURIER_REQUIRE_REDIS=1 but redis-cli is not on PATH"
            );
            eprintln!("SKIPPED {test}: redis-cli is not on PATH");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("courier-redis-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the temporary folder is writable");
        let pw = Self::MASTER_PASSWORD;
        // Each asks for the password once started (the testkit checks a start with a bare PING).
        let primary = RedisServer::start_with(None, &["--masterauth", pw]).await;
        cli(primary.port(), None, &["config", "set", "requirepass", pw]);
        let primary_port = primary.port().to_string();
        let replica = RedisServer::start_with(
            None,
            &[
                "--replicaof",
                "127.0.0.1",
                &primary_port,
                "--masterauth",
                pw,
            ],
        )
        .await;
        cli(replica.port(), None, &["config", "set", "requirepass", pw]);
        let folder = dir.clone();
        let write_config = move |port: u16| {
            let path = folder.join(format!("sentinel-{port}.conf"));
            let text = format!(
                "sentinel monitor {m} 127.0.0.1 {primary_port} 2\n\
                 sentinel auth-pass {m} {pw}\n\
                 sentinel sentinel-pass {sp}\n\
                 sentinel down-after-milliseconds {m} 1000\n\
                 sentinel failover-timeout {m} 5000\n\
                 sentinel parallel-syncs {m} 1\n",
                m = Self::MASTER,
                sp = Self::SENTINEL_PASSWORD,
            );
            std::fs::write(&path, text).expect("the temporary folder is writable");
            path.display().to_string()
        };
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let sentinel = RedisServer::start_with(Some(&write_config), &["--sentinel"]).await;
            let password = format!(">{}", Self::SENTINEL_PASSWORD);
            cli(
                sentinel.port(),
                None,
                &["acl", "setuser", "default", "resetpass", &password],
            );
            sentinels.push(sentinel);
        }
        let set = Self {
            primary,
            replica,
            sentinels,
            dir,
        };
        let mut settled = false;
        for _ in 0..300 {
            settled = set.sentinels.iter().all(|s| {
                let info = set.sentinel_cli(s.port(), &["sentinel", "master", Self::MASTER]);
                let lines: Vec<&str> = info.lines().collect();
                let field = |name: &str| {
                    let i = lines.iter().position(|l| *l == name)?;
                    lines.get(i + 1).copied()
                };
                field("num-slaves") == Some("1") && field("num-other-sentinels") == Some("2")
            });
            if settled {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            settled,
            "the sentinels know the replica and each other within 30 s"
        );
        Some(set)
    }

    fn sentinel_cli(&self, port: u16, args: &[&str]) -> String {
        cli(port, Some(Self::SENTINEL_PASSWORD), args)
    }

    /// The sentinels' URLs, with their password.
    fn sentinel_urls(&self) -> Vec<String> {
        let pw = Self::SENTINEL_PASSWORD;
        self.sentinels
            .iter()
            .map(|s| format!("redis://:{pw}@127.0.0.1:{}/", s.port()))
            .collect()
    }

    fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let out = self.sentinel_cli(
                s.port(),
                &["sentinel", "get-master-addr-by-name", Self::MASTER],
            );
            out.lines().nth(1)?.trim().parse().ok()
        })
    }
}

impl Drop for PasswordSentinel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cli_missing() -> bool {
    !std::process::Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `redis-cli -p port [-a password] args...`, its output; empty when it fails.
fn cli(port: u16, password: Option<&str>, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new("redis-cli");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "--no-auth-warning",
    ]);
    if let Some(password) = password {
        cmd.args(["-a", password]);
    }
    cmd.args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// A master and replica behind passwords, sentinels behind one of their own: the store asks
/// the sentinels (their password in their URLs), authenticates to the master, and after a
/// failover to the promoted replica. Without the master's credentials it cannot connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_passwords_and_its_failover() {
    let Some(mut set) = PasswordSentinel::start("sentinel_password").await else {
        return;
    };
    let builder = || RedisStore::sentinel_builder(PasswordSentinel::MASTER, set.sentinel_urls());
    let refused = builder()
        .connect_timeout(Duration::from_secs(2))
        .connect::<HostKey>()
        .await;
    assert!(refused.is_err(), "no master credentials, no connection");
    let store = connect(
        builder().master_credentials(None, PasswordSentinel::MASTER_PASSWORD),
        &unique_prefix("sentinel-auth"),
    )
    .await;
    let (decision, _) = decide(&store).await;
    assert!(matches!(decision, Decision::Admit(_)));
    common::reset_starts_from_a_full_bucket(&store).await;

    set.primary.kill();
    let replica = set.replica.port();
    let mut failed_over = false;
    for _ in 0..300 {
        if set.master_port() == Some(replica) {
            failed_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(failed_over, "the replica is promoted within 30 s");
    until_shared(&store, Duration::from_secs(30)).await;
    assert_eq!(store.outages(), 1);
}

/// Master credentials belong to a store over Sentinel: elsewhere they go in the URL.
#[tokio::test]
async fn master_credentials_elsewhere_are_refused() {
    let built = RedisStore::builder("redis://127.0.0.1:1/")
        .master_credentials(Some("user"), "pw")
        .connect_lazy::<HostKey>();
    assert!(built.is_err());
}

//! Redis as production runs it, for tests: a Redis Cluster of a test's own (masters, and
//! replicas to fail over to) and a primary with a replica watched by three sentinels. Each is
//! made of `redis-server` processes on free loopback ports, in a temporary folder that is
//! removed with it; `redis-cli` creates the cluster and is asked what the servers think.
//!
//! Skipped, and said so, without `redis-server` and `redis-cli` on PATH; with
//! `COURIER_REQUIRE_REDIS=1` that fails the test instead, as for [`crate::redis`].

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::redis::{RedisServer, have_binary, skip};

/// A folder of the test's own under the system's temporary folder; removed on drop.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "courier-redis-{test}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temporary folder is writable");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `redis-cli -p port args...`, its output; empty when it fails.
fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn have_cli() -> bool {
    Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn available(test: &str) -> Option<()> {
    if !have_binary() || !have_cli() {
        return skip(test, "redis-server or redis-cli is not on PATH");
    }
    Some(())
}

/// Waits (at most `limit`, looking every 100 ms) until `done` holds.
async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Redis Cluster on loopback: `masters` masters, each with `replicas` replicas, a node
/// timeout of one second (a killed master is failed over in a few seconds).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _dir: Scratch,
}

// === impl RedisCluster ===

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every node says it is ok.
    /// `None` (after saying why) when the binaries are missing.
    ///
    /// # Panics
    ///
    /// When the cluster does not form within 30 s, and as [`crate::redis::redis`].
    pub async fn start(test: &str, masters: usize, replicas: usize) -> Option<Self> {
        available(test)?;
        let dir = Scratch::new(test);
        let nodes_conf = format!("{}/nodes-{{port}}.conf", dir.0.display());
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            nodes.push(
                RedisServer::start_with(
                    None,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &nodes_conf,
                        "--cluster-node-timeout",
                        "1000",
                        // A replica fails over however long ago it last heard its master: a
                        // fresh cluster's replicas may not have synced yet.
                        "--cluster-replica-validity-factor",
                        "0",
                        "--dir",
                        &dir.0.display().to_string(),
                    ],
                )
                .await,
            );
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(created, "redis-cli --cluster create {addrs:?}");
        let cluster = Self { nodes, _dir: dir };
        assert!(
            cluster.settled(Duration::from_secs(30)).await,
            "the cluster forms within 30 s"
        );
        Some(cluster)
    }

    /// Waits (at most `limit`) until every running node says `cluster_state:ok` and knows the
    /// same master for every slot it was asked about.
    pub async fn settled(&self, limit: Duration) -> bool {
        until(limit, || {
            self.nodes
                .iter()
                .filter(|n| n.is_running())
                .all(|n| cli(n.port(), &["cluster", "info"]).contains("cluster_state:ok"))
        })
        .await
    }

    /// `redis://` URLs of every node, for seeds.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The index of the node that is the master of `key`'s slot now.
    ///
    /// # Panics
    ///
    /// When no running node names one.
    pub fn master_of(&self, key: &str) -> usize {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a node runs");
        let slot: u16 = cli(asker.port(), &["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        let nodes = cli(asker.port(), &["cluster", "nodes"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u16>().is_ok_and(|a| a <= slot)
                        && b.parse::<u16>().is_ok_and(|b| slot <= b)
                }
                None => range.parse::<u16>() == Ok(slot),
            });
            if serves {
                let port: u16 = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .expect("CLUSTER NODES names host:port@bus");
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port() == port)
                    .expect("the master is one of ours");
            }
        }
        panic!("no master serves slot {slot}: {nodes}");
    }

    /// Kills node `i` at once (SIGKILL, as a crash).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }
}

/// A primary and one replica on loopback, watched by three sentinels (quorum 2, down after
/// one second) under the master name [`RedisSentinel::MASTER`].
#[derive(Debug)]
pub struct RedisSentinel {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
    _dir: Scratch,
}

// === impl RedisSentinel ===

impl RedisSentinel {
    /// The master name the sentinels watch.
    pub const MASTER: &'static str = "courier";

    /// Starts the primary, the replica and the sentinels, and waits until every sentinel
    /// knows the replica and the other sentinels. `None` (after saying why) when the binaries
    /// are missing.
    ///
    /// # Panics
    ///
    /// When they do not settle within 30 s, and as [`crate::redis::redis`].
    pub async fn start(test: &str) -> Option<Self> {
        available(test)?;
        let dir = Scratch::new(test);
        let primary = RedisServer::start_with(None, &[]).await;
        let replica = RedisServer::start_with(
            None,
            &["--replicaof", "127.0.0.1", &primary.port().to_string()],
        )
        .await;
        let primary_port = primary.port();
        let folder = dir.0.clone();
        let write_config = move |port: u16| {
            let path = folder.join(format!("sentinel-{port}.conf"));
            let text = format!(
                "sentinel monitor {m} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {m} 1000\n\
                 sentinel failover-timeout {m} 5000\n\
                 sentinel parallel-syncs {m} 1\n",
                m = Self::MASTER
            );
            std::fs::write(&path, text).expect("the temporary folder is writable");
            path.display().to_string()
        };
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(RedisServer::start_with(Some(&write_config), &["--sentinel"]).await);
        }
        let set = Self {
            primary,
            replica,
            sentinels,
            _dir: dir,
        };
        let settled = until(Duration::from_secs(30), || {
            set.sentinels.iter().all(|s| {
                let info = cli(s.port(), &["sentinel", "master", Self::MASTER]);
                let field = |name: &str| {
                    let mut lines = info.lines();
                    while let Some(line) = lines.next() {
                        if line == name {
                            return lines.next().map(str::to_owned);
                        }
                    }
                    None
                };
                field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some("2")
            })
        })
        .await;
        assert!(
            settled,
            "the sentinels know the replica and each other within 30 s"
        );
        Some(set)
    }

    /// `redis://` URLs of the sentinels.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The primary's port at the start.
    pub fn primary_port(&self) -> u16 {
        self.primary.port()
    }

    /// The replica's port at the start.
    pub fn replica_port(&self) -> u16 {
        self.replica.port()
    }

    /// The port of the master the first sentinel that answers names now.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let out = cli(
                s.port(),
                &["sentinel", "get-master-addr-by-name", Self::MASTER],
            );
            out.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// Kills the primary at once (SIGKILL, as a crash).
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// Waits (at most `limit`) until the sentinels name the replica as the master.
    pub async fn failed_over(&self, limit: Duration) -> bool {
        let replica = self.replica.port();
        until(limit, || self.master_port() == Some(replica)).await
    }
}

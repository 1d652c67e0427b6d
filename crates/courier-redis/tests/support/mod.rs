//! A Redis for the tests: a `redis-server` of their own on a free loopback port when the
//! binary is on PATH, or the server at `COURIER_REDIS_URL`. Where neither is there, a test
//! says plainly that it was skipped and returns; with `COURIER_REQUIRE_REDIS=1` it fails
//! instead, so CI always runs them for real.
//!
//! Shared by this crate's tests and bench and by the facade's tests: it needs nothing but
//! `courier_redis` and tokio.

#![allow(dead_code, unreachable_pub)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where the tests' Redis is.
pub enum Redis {
    /// A server this test started, and stops (or kills) when dropped.
    Own(RedisServer),
    /// A server someone else runs.
    External(String),
}

impl Redis {
    pub fn url(&self) -> String {
        match self {
            Self::Own(s) => s.url(),
            Self::External(url) => url.clone(),
        }
    }

    /// The server, when this test controls it (to stop, restart or pause it).
    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            Self::Own(s) => Some(s),
            Self::External(_) => None,
        }
    }
}

fn required() -> bool {
    std::env::var("COURIER_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

fn have_binary() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn skip(test: &str, why: &str) -> Option<Redis> {
    if required() {
        panic!("{test}: COURIER_REQUIRE_REDIS=1 but {why}");
    }
    // Straight to the process's stderr: the test harness captures `println!`, and a skip must
    // be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (install redis-server, or set COURIER_REDIS_URL)"
    );
    None
}

/// A Redis for `test`: `COURIER_REDIS_URL` if set, else a server of its own. `None` (after
/// printing that the test was skipped) when there is neither.
pub async fn redis(test: &str) -> Option<Redis> {
    if let Ok(url) = std::env::var("COURIER_REDIS_URL") {
        if !answers(&url).await {
            return skip(test, "the redis at COURIER_REDIS_URL does not answer");
        }
        return Some(Redis::External(url));
    }
    own_redis(test).await.map(Redis::Own)
}

/// A server this test controls (for tests that stop, restart or pause it): needs the
/// `redis-server` binary.
pub async fn own_redis(test: &str) -> Option<RedisServer> {
    if !have_binary() {
        skip(test, "redis-server is not on PATH")?;
    }
    Some(RedisServer::start().await)
}

/// One `redis-server` process on 127.0.0.1, without persistence; killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    async fn start() -> Self {
        for _ in 0..5 {
            let port = free_port();
            let mut server = Self { port, child: None };
            if server.spawn().await {
                return server;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the process on this server's port and waits (at most 5 s) until it answers
    /// PING. Returns whether it did.
    async fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        self.child = Some(child);
        for _ in 0..100 {
            if ping(self.port).await {
                return true;
            }
            if let Some(child) = &mut self.child
                && child.try_wait().ok().flatten().is_some()
            {
                self.child = None;
                return false; // exited: the port was taken
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill();
        false
    }

    /// Kills the server at once (as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (no persistence: the script cache is gone too).
    pub async fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn().await,
            "redis-server restarts on port {}",
            self.port
        );
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server runs").id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(b"PING\r\n").await.ok()?;
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).await.ok()?;
        (&buf == b"+PONG\r\n").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(()))
    )
}

async fn answers(url: &str) -> bool {
    courier_redis::RedisStore::builder(url)
        .connect_timeout(Duration::from_secs(2))
        .connect::<()>()
        .await
        .is_ok()
}

/// A prefix no other test (or earlier run against the same external server) uses.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "courier-test:{test}:{}:{nanos}:{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

//! A Redis for tests: a `redis-server` of their own on a free loopback port when the binary is
//! on PATH, or the server at `COURIER_REDIS_URL`. Where neither is there, a test says plainly
//! that it was skipped and returns; with `COURIER_REQUIRE_REDIS=1` it fails instead, so CI
//! always runs them for real.
//!
//! ```no_run
//! use courier_testkit::redis::{redis, unique_prefix};
//!
//! # async fn run() {
//! let Some(redis) = redis("my_test").await else {
//!     return; // skipped, and said so on stderr
//! };
//! let url = redis.url(); // redis://127.0.0.1:<port>/
//! let prefix = unique_prefix("my_test"); // keys no other test uses
//! # let _ = (url, prefix); }
//! ```
//!
//! It only starts a process and speaks enough of the Redis protocol to see that a server
//! answers (`AUTH` when the URL has a password, then `PING`): no Redis client is compiled in.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Where a test's Redis is.
#[derive(Debug)]
pub enum Redis {
    /// A server this test started, and stops (kills) when dropped.
    Own(RedisServer),
    /// A server someone else runs (`COURIER_REDIS_URL`).
    External(String),
}

// === impl Redis ===

impl Redis {
    /// The server's URL.
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

/// A Redis for `test`: `COURIER_REDIS_URL` if set, else a server of its own. `None` (after
/// printing that the test was skipped) when there is neither.
///
/// # Panics
///
/// With `COURIER_REQUIRE_REDIS=1`, where it would return `None`; and when `redis-server` is on
/// PATH but starts on none of five free ports.
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
/// `redis-server` binary. `None` (after printing that the test was skipped) without it.
///
/// # Panics
///
/// As [`redis`].
pub async fn own_redis(test: &str) -> Option<RedisServer> {
    if !have_binary() {
        skip(test, "redis-server is not on PATH")?;
    }
    Some(RedisServer::start().await)
}

/// A key prefix no other test (or earlier run against the same external server) uses.
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

pub(crate) fn required() -> bool {
    std::env::var("COURIER_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

pub(crate) fn have_binary() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn skip<T>(test: &str, why: &str) -> Option<T> {
    assert!(!required(), "{test}: COURIER_REQUIRE_REDIS=1 but {why}");
    // Straight to the process's stderr: the test harness captures `println!`, and a skip must
    // be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (install redis-server, or set COURIER_REDIS_URL)"
    );
    None
}

/// One `redis-server` process on 127.0.0.1, without persistence; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// A configuration file given first (a sentinel's), `{port}` replaced.
    config: Option<String>,
    /// More arguments, after the usual ones, `{port}` replaced.
    extra: Vec<String>,
    /// Its working directory, its own and removed with it: a replica writes the snapshot it
    /// syncs from its master there (`--save ""` does not stop that), never into the tests'.
    dir: std::path::PathBuf,
}

// === impl RedisServer ===

impl RedisServer {
    async fn start() -> Self {
        Self::start_with(None, &[]).await
    }

    /// A server started with `config` as its configuration file (written by `config(port)`
    /// before each start) and `extra` arguments, in which `{port}` stands for its port.
    ///
    /// # Panics
    ///
    /// When it starts on none of five free ports.
    pub async fn start_with(config: Option<&dyn Fn(u16) -> String>, extra: &[&str]) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("courier-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("the temporary folder is writable");
            let mut server = Self {
                port,
                dir,
                child: None,
                config: config.map(|write| write(port)),
                extra: extra
                    .iter()
                    .map(|a| a.replace("{port}", &port.to_string()))
                    .collect(),
            };
            if server.spawn().await {
                return server;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port it listens on (the same after a restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Starts the process on this server's port and waits (at most 5 s) until it answers
    /// PING. Returns whether it did.
    async fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(self.config.iter())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(&self.extra)
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server, found on PATH, starts");
        self.child = Some(child);
        for _ in 0..100 {
            if ping("127.0.0.1", self.port, None).await {
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

    /// Whether the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server at once (as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (no persistence: the script cache is gone too).
    ///
    /// # Panics
    ///
    /// When it does not answer within 5 s.
    pub async fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn().await,
            "redis-server restarts on port {}",
            self.port
        );
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    ///
    /// # Panics
    ///
    /// When the server is not running, or `kill` fails.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused process (SIGCONT).
    ///
    /// # Panics
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("a paused or resumed server runs")
            .id()
            .to_string();
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
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback binds port 0");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
}

/// Whether the server at `url` (`redis://[[user]:password@]host[:port][/db]`) answers PING
/// within 2 s, after `AUTH` when the URL has a password. Other schemes (TLS, Unix sockets)
/// are not spoken here: they count as not answering.
async fn answers(url: &str) -> bool {
    let Some(target) = Target::parse(url) else {
        return false;
    };
    let auth = target
        .password
        .as_deref()
        .map(|p| (target.user.as_deref(), p));
    tokio::time::timeout(Duration::from_secs(2), async {
        ping(&target.host, target.port, auth).await
    })
    .await
    .unwrap_or(false)
}

/// Sends `AUTH` (when given) and `PING` in the Redis protocol; whether the answers were `+OK`
/// and `+PONG` within 500 ms.
async fn ping(host: &str, port: u16, auth: Option<(Option<&str>, &str)>) -> bool {
    let attempt = async {
        let stream = TcpStream::connect((host, port)).await.ok()?;
        let mut stream = BufReader::new(stream);
        if let Some((user, password)) = auth {
            let mut args = vec!["AUTH"];
            args.extend(user);
            args.push(password);
            stream.write_all(&command(&args)).await.ok()?;
            (read_line(&mut stream).await? == "+OK").then_some(())?;
        }
        stream.write_all(&command(&["PING"])).await.ok()?;
        (read_line(&mut stream).await? == "+PONG").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Some(()))
    )
}

/// A command as a RESP array of bulk strings.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One reply line without its CRLF; `None` on EOF, on an error, or past 512 bytes.
async fn read_line(stream: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    let read = (&mut *stream).take(512).read_line(&mut line).await.ok()?;
    let line = line.strip_suffix("\r\n").filter(|_| read > 0)?;
    Some(line.to_owned())
}

/// Where a `redis://` URL points, and with what credentials.
#[derive(Debug, PartialEq)]
struct Target {
    host: String,
    port: u16,
    user: Option<String>,
    password: Option<String>,
}

impl Target {
    fn parse(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("redis://")?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (user, password) = match userinfo.map(|u| u.split_once(':')) {
            None => (None, None),
            Some(None) => (None, None),
            Some(Some((user, password))) => (
                Some(percent_decode(user)?).filter(|u| !u.is_empty()),
                Some(percent_decode(password)?),
            ),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        let port = match port {
            Some(port) => port.parse().ok()?,
            None => 6379,
        };
        let host = if host.is_empty() { "127.0.0.1" } else { host };
        Some(Self {
            host: host.to_owned(),
            port,
            user,
            password,
        })
    }
}

/// `%XX` escapes decoded; `None` when one is broken or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_host_port_and_credentials() {
        let t = |url| Target::parse(url);
        let target = |host: &str, port, user: Option<&str>, password: Option<&str>| {
            Some(Target {
                host: host.to_owned(),
                port,
                user: user.map(str::to_owned),
                password: password.map(str::to_owned),
            })
        };
        assert_eq!(
            t("redis://127.0.0.1:6380/"),
            target("127.0.0.1", 6380, None, None)
        );
        assert_eq!(
            t("redis://localhost"),
            target("localhost", 6379, None, None)
        );
        assert_eq!(
            t("redis://:s%40cret@127.0.0.1:7000/2"),
            target("127.0.0.1", 7000, None, Some("s@cret"))
        );
        assert_eq!(
            t("redis://me:pw@[::1]:7001"),
            target("::1", 7001, Some("me"), Some("pw"))
        );
        assert_eq!(t("redis://me@[::1]"), target("::1", 6379, None, None));
        assert_eq!(t("rediss://127.0.0.1:6380/"), None);
        assert_eq!(t("redis://127.0.0.1:port/"), None);
        assert_eq!(t("redis://:%zz@127.0.0.1/"), None);
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(command(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(
            command(&["AUTH", "me", "pw"]),
            b"*3\r\n$4\r\nAUTH\r\n$2\r\nme\r\n$2\r\npw\r\n"
        );
    }

    #[tokio::test]
    async fn a_port_where_nothing_listens_does_not_answer() {
        // Bound, then closed: nothing listens there now.
        let port = free_port();
        assert!(!ping("127.0.0.1", port, None).await);
        assert!(!answers(&format!("redis://127.0.0.1:{port}/")).await);
    }
}

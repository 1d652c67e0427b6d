//! The seam between the store's policy (timeouts, fallback, backoff) and the Redis wire: the
//! real backend sends the scripts over a tokio [`ConnectionManager`]; the unit tests put a
//! scripted fake in its place to drive outages on paused time.

use crate::script::{FORGET, GCRA, GIVE_BACK, GcraCall, PARK, Reply};
use courier_core::BoxError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

pub(crate) type BoxFut<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send + 'static>>;

/// One round trip each. Every future owns what it needs.
pub(crate) trait Backend: Send + Sync + 'static {
    /// Runs the GCRA script.
    fn decide(&self, call: GcraCall) -> BoxFut<Reply>;
    /// Runs the park script.
    fn park(&self, park_key: String, wait_us: u64) -> BoxFut<()>;
    /// Runs the give-back script.
    fn give_back(&self, tat_key: String, ticket: u64, interval_us: u64) -> BoxFut<()>;
    /// Runs the forget script: deletes the bucket's TAT if it is still `ticket`.
    fn forget_bucket(&self, tat_key: String, ticket: u64) -> BoxFut<()>;
    /// Checks that Redis runs the GCRA script, writes included (a read-only replica, a full
    /// memory or an ACL refusing the writes fail it), by running it as `call` (on a key of its
    /// own). Loads the script into Redis's cache on the way.
    fn probe(&self, call: GcraCall) -> BoxFut<()>;
    /// Drops the connection and starts over with a fresh one (after repeated timeouts, when the
    /// old connection may be stuck on a path that no longer leads anywhere).
    fn reset(&self);
    /// Where Redis is, for logs (never with credentials).
    fn describe(&self) -> String;
}

/// The real thing: a multiplexed connection kept alive (and reconnected) by the `redis`
/// crate's [`ConnectionManager`].
pub(crate) struct RedisBackend {
    client: redis::Client,
    config: ConnectionManagerConfig,
    conn: RwLock<ConnectionManager>,
}

impl RedisBackend {
    /// Must be called inside a tokio runtime (the manager spawns its helper task there). Does
    /// not connect: the first command does.
    pub(crate) fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Self> {
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(Self {
            client,
            config,
            conn: RwLock::new(conn),
        })
    }

    fn conn(&self) -> ConnectionManager {
        match self.conn.read() {
            Ok(conn) => conn.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl Backend for RedisBackend {
    fn decide(&self, call: GcraCall) -> BoxFut<Reply> {
        let mut conn = self.conn();
        Box::pin(async move {
            let values: Vec<i64> = GCRA
                .key(&call.tat_key)
                .key(&call.park_key)
                .arg(&call.args[..])
                .invoke_async(&mut conn)
                .await?;
            Ok(Reply::from_values(&values)?)
        })
    }

    fn park(&self, park_key: String, wait_us: u64) -> BoxFut<()> {
        let mut conn = self.conn();
        Box::pin(async move {
            let _: i64 = PARK
                .key(&park_key)
                .arg(wait_us)
                .invoke_async(&mut conn)
                .await?;
            Ok(())
        })
    }

    fn give_back(&self, tat_key: String, ticket: u64, interval_us: u64) -> BoxFut<()> {
        let mut conn = self.conn();
        Box::pin(async move {
            let _: i64 = GIVE_BACK
                .key(&tat_key)
                .arg(ticket)
                .arg(interval_us)
                .invoke_async(&mut conn)
                .await?;
            Ok(())
        })
    }

    fn forget_bucket(&self, tat_key: String, ticket: u64) -> BoxFut<()> {
        let mut conn = self.conn();
        Box::pin(async move {
            let _: i64 = FORGET
                .key(&tat_key)
                .arg(ticket)
                .invoke_async(&mut conn)
                .await?;
            Ok(())
        })
    }

    fn probe(&self, call: GcraCall) -> BoxFut<()> {
        probe_by_deciding(self.decide(call))
    }

    fn reset(&self) {
        let Ok(fresh) =
            ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
        else {
            return;
        };
        match self.conn.write() {
            Ok(mut conn) => *conn = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
    }

    fn describe(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("addr", &self.describe())
            .finish()
    }
}

pub(crate) type DynBackend = Arc<dyn Backend>;

/// A probe is a decision whose reply does not matter: that Redis ran the script is the answer.
fn probe_by_deciding(decide: BoxFut<Reply>) -> BoxFut<()> {
    Box::pin(async move {
        decide.await?;
        Ok(())
    })
}

/// Makes a connection: to a cluster's seed nodes, or to the master the sentinels name now.
pub(crate) type Connect<C> = Arc<dyn Fn() -> BoxFut<C> + Send + Sync>;

/// A backend over a connection made on first use and made again after a failed command: over
/// a Redis Cluster (the `redis` crate's cluster connection follows MOVED and ASK and refreshes
/// its slot map itself) or over the master a set of sentinels names (asked again after a
/// failure, so that a failover is followed).
pub(crate) struct LazyBackend<C> {
    connect: Connect<C>,
    conn: Arc<RwLock<Option<C>>>,
    describe: String,
}

impl<C> LazyBackend<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(connect: Connect<C>, describe: String) -> Self {
        Self {
            connect,
            conn: Arc::new(RwLock::new(None)),
            describe,
        }
    }

    /// Runs `command` on the connection (made first, when there is none); a failure drops the
    /// connection, so that the next command starts from a fresh one.
    fn run<T, F, Fut>(&self, command: F) -> BoxFut<T>
    where
        T: Send + 'static,
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        let cached = match self.conn.read() {
            Ok(conn) => conn.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let connect = Arc::clone(&self.connect);
        let slot = Arc::clone(&self.conn);
        Box::pin(async move {
            let conn = match cached {
                Some(conn) => conn,
                None => {
                    let conn = connect().await?;
                    match slot.write() {
                        Ok(mut s) => *s = Some(conn.clone()),
                        Err(poisoned) => *poisoned.into_inner() = Some(conn.clone()),
                    }
                    conn
                }
            };
            match command(conn).await {
                Ok(value) => Ok(value),
                Err(err) => {
                    if !is_script_error(&err) {
                        forget(&slot);
                    }
                    Err(err.into())
                }
            }
        })
    }
}

/// Drops the connection in `slot`.
fn forget<C>(slot: &RwLock<Option<C>>) {
    match slot.write() {
        Ok(mut s) => *s = None,
        Err(poisoned) => *poisoned.into_inner() = None,
    }
}

/// A reply Redis gave to the script itself (a bad argument): the connection is fine.
fn is_script_error(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Extension && !err.is_connection_dropped()
}

impl<C> Backend for LazyBackend<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn decide(&self, call: GcraCall) -> BoxFut<Reply> {
        let decided = self.run(move |mut conn| async move {
            GCRA.key(&call.tat_key)
                .key(&call.park_key)
                .arg(&call.args[..])
                .invoke_async::<Vec<i64>>(&mut conn)
                .await
        });
        Box::pin(async move { Ok(Reply::from_values(&decided.await?)?) })
    }

    fn park(&self, park_key: String, wait_us: u64) -> BoxFut<()> {
        self.run(move |mut conn| async move {
            PARK.key(&park_key)
                .arg(wait_us)
                .invoke_async::<i64>(&mut conn)
                .await
                .map(drop)
        })
    }

    fn give_back(&self, tat_key: String, ticket: u64, interval_us: u64) -> BoxFut<()> {
        self.run(move |mut conn| async move {
            GIVE_BACK
                .key(&tat_key)
                .arg(ticket)
                .arg(interval_us)
                .invoke_async::<i64>(&mut conn)
                .await
                .map(drop)
        })
    }

    fn forget_bucket(&self, tat_key: String, ticket: u64) -> BoxFut<()> {
        self.run(move |mut conn| async move {
            FORGET
                .key(&tat_key)
                .arg(ticket)
                .invoke_async::<i64>(&mut conn)
                .await
                .map(drop)
        })
    }

    fn probe(&self, call: GcraCall) -> BoxFut<()> {
        probe_by_deciding(self.decide(call))
    }

    fn reset(&self) {
        forget(&self.conn);
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

impl<C> std::fmt::Debug for LazyBackend<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyBackend")
            .field("addr", &self.describe)
            .finish_non_exhaustive()
    }
}

/// A backend whose answers the test sets, counting what it was asked.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Mode {
        /// Every command answers; decisions with this reply.
        Answer(Reply),
        /// Every command fails at once (connection refused).
        Fail,
        /// No command ever answers (a stopped server).
        Hang,
    }

    #[derive(Debug)]
    pub(crate) struct Fake {
        pub(crate) mode: Mutex<Mode>,
        pub(crate) decides: Mutex<Vec<GcraCall>>,
        pub(crate) parks: Mutex<Vec<(String, u64)>>,
        pub(crate) give_backs: Mutex<Vec<(String, u64, u64)>>,
        pub(crate) forgotten: Mutex<Vec<(String, u64)>>,
        pub(crate) probes: AtomicUsize,
        pub(crate) probe_calls: Mutex<Vec<GcraCall>>,
        pub(crate) resets: AtomicUsize,
    }

    impl Fake {
        pub(crate) fn new(mode: Mode) -> Arc<Self> {
            Arc::new(Self {
                mode: Mutex::new(mode),
                decides: Mutex::default(),
                parks: Mutex::default(),
                give_backs: Mutex::default(),
                forgotten: Mutex::default(),
                probes: AtomicUsize::new(0),
                probe_calls: Mutex::default(),
                resets: AtomicUsize::new(0),
            })
        }

        pub(crate) fn set(&self, mode: Mode) {
            *self.mode.lock().unwrap() = mode;
        }

        pub(crate) fn decides(&self) -> usize {
            self.decides.lock().unwrap().len()
        }

        fn answer<T: Send + 'static>(&self, ok: T) -> BoxFut<T> {
            match *self.mode.lock().unwrap() {
                Mode::Answer(_) => Box::pin(async move { Ok(ok) }),
                Mode::Fail => Box::pin(async {
                    Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
                }),
                Mode::Hang => Box::pin(std::future::pending()),
            }
        }
    }

    impl Backend for Fake {
        fn decide(&self, call: GcraCall) -> BoxFut<Reply> {
            self.decides.lock().unwrap().push(call);
            let reply = match *self.mode.lock().unwrap() {
                Mode::Answer(reply) => reply,
                _ => Reply {
                    admitted: false,
                    wait_us: 0,
                    parked: false,
                    ticket: 0,
                },
            };
            self.answer(reply)
        }

        fn park(&self, park_key: String, wait_us: u64) -> BoxFut<()> {
            self.parks.lock().unwrap().push((park_key, wait_us));
            self.answer(())
        }

        fn give_back(&self, tat_key: String, ticket: u64, interval_us: u64) -> BoxFut<()> {
            self.give_backs
                .lock()
                .unwrap()
                .push((tat_key, ticket, interval_us));
            self.answer(())
        }

        fn forget_bucket(&self, tat_key: String, ticket: u64) -> BoxFut<()> {
            self.forgotten.lock().unwrap().push((tat_key, ticket));
            self.answer(())
        }

        fn probe(&self, call: GcraCall) -> BoxFut<()> {
            self.probes.fetch_add(1, Ordering::SeqCst);
            self.probe_calls.lock().unwrap().push(call);
            self.answer(())
        }

        fn reset(&self) {
            self.resets.fetch_add(1, Ordering::SeqCst);
        }

        fn describe(&self) -> String {
            "fake:0".to_owned()
        }
    }
}

//! The listener, the connections and the handle that owns them.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::conditional::Conditional;
use crate::hits::Hit;
use crate::limited::Buckets;
use crate::plan::{Plan, Step};

/// A running fault server on loopback.
///
/// Dropping the handle stops the server: the listener closes and every connection is aborted.
/// [`FaultServer::shutdown`] does the same and waits until it is done.
pub struct FaultServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

// === impl FaultServer ===

impl FaultServer {
    /// Starts a server on `127.0.0.1` with a port chosen by the OS.
    ///
    /// # Errors
    ///
    /// When the socket cannot be bound.
    pub async fn start() -> io::Result<Self> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a server on `addr` (port 0 lets the OS choose).
    ///
    /// Must be called inside a tokio runtime; the server runs as tasks on it.
    ///
    /// # Errors
    ///
    /// When the socket cannot be bound.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stopped));
        tracing::info!(%addr, "fault server listening");
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, e.g. `http://127.0.0.1:8080` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL of `path` on this server; `path` should start with `/`.
    pub fn url_for(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The requests recorded under `name`, oldest first: `/s/{name}` records under `name`;
    /// the built-in endpoints record under `items`, `cursor`, `conditional` and
    /// `limited/{name}`.
    pub fn hits(&self, name: &str) -> Vec<Hit> {
        self.shared.hits(name)
    }

    /// Replaces the plan for `name`, like `POST /__plan/{name}`. Recorded hits stay.
    ///
    /// # Panics
    ///
    /// When a step is invalid (status outside 200-999, `times` 0, a header that is not valid
    /// HTTP, a `content-length` below the body's length, a wait over
    /// [`MAX_STEP_WAIT`](crate::MAX_STEP_WAIT)); [`FaultServer::try_set_plan`] returns the error
    /// instead.
    pub fn set_plan(&self, name: &str, plan: Vec<Step>) {
        if let Err(e) = self.try_set_plan(name, plan) {
            panic!("invalid plan for {name:?}: {e}");
        }
    }

    /// Replaces the plan for `name`, like `POST /__plan/{name}`; refuses an invalid plan.
    ///
    /// # Errors
    ///
    /// When a step is invalid; the error says which and why.
    pub fn try_set_plan(&self, name: &str, plan: Vec<Step>) -> Result<(), crate::PlanError> {
        let plan = Plan::new(&plan)?;
        self.shared.set_plan(name, plan);
        Ok(())
    }

    /// Clears the plan and the hits for `name`, like `DELETE /__plan/{name}`.
    pub fn clear(&self, name: &str) {
        self.shared.clear(name);
    }

    /// Sets the quota of `/conditional`: `limit` requests per `window`, starting afresh now.
    /// Defaults to 60 per hour.
    pub fn set_conditional_quota(&self, limit: u32, window: Duration) {
        self.shared
            .conditional()
            .set_quota(limit, window, self.shared.now());
    }

    /// Stops accepting, aborts every connection and waits until the listener is closed.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Aborting drops the listener and the JoinSet, which aborts every connection.
            task.abort();
        }
    }
}

// === accept loop and connections ===

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            // A send or a dropped handle both stop the server.
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(serve_connection(stream, peer, Arc::clone(&shared)));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
    tracing::info!("fault server stopped");
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let control = Arc::new(ConnControl::default());
    let io = TokioIo::new(ResetOnDrop {
        stream,
        control: Arc::clone(&control),
    });
    let service = {
        let control = Arc::clone(&control);
        service_fn(move |req| crate::routes::handle(Arc::clone(&shared), Arc::clone(&control), req))
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No server-side timeouts: an idle keep-alive connection stays open until the client
    // closes it, so a test that jumps a paused clock forward never races a server close.
    builder
        .http1()
        .header_read_timeout(None)
        .auto_date_header(false)
        .http2()
        .auto_date_header(false);
    let connection = builder.serve_connection(io, service);
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        }
        () = control.end.notified() => {
            tracing::debug!(%peer, "connection ended by plan");
        }
    }
}

/// Lets a request handler tear down its own connection.
#[derive(Debug, Default)]
pub(crate) struct ConnControl {
    reset_requested: AtomicBool,
    close_when_flushed: AtomicBool,
    end: Notify,
}

impl ConnControl {
    /// Closes the connection with a TCP reset as soon as the connection task sees it.
    pub(crate) fn reset(&self) {
        self.reset_requested.store(true, Ordering::SeqCst);
        self.end.notify_one();
    }

    /// Closes the connection (FIN, not RST) the next time everything written is flushed.
    pub(crate) fn close_when_flushed(&self) {
        self.close_when_flushed.store(true, Ordering::SeqCst);
    }
}

/// The TCP stream; when a reset was asked for, closing it sends RST instead of FIN. It tells
/// the connection task when a flush completes that a body cut short was waiting for.
#[derive(Debug)]
struct ResetOnDrop {
    stream: TcpStream,
    control: Arc<ConnControl>,
}

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        if self.control.reset_requested.load(Ordering::SeqCst) {
            // SO_LINGER 0: the close discards unsent data and sends RST; it does not block.
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for ResetOnDrop {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResetOnDrop {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.stream).poll_flush(cx);
        // hyper flushes the stream only once its own buffer is written out.
        if flushed.is_ready() && this.control.close_when_flushed.load(Ordering::SeqCst) {
            this.control.end.notify_one();
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

// === shared state ===

/// Everything the connections share.
#[derive(Debug)]
pub(crate) struct Shared {
    started: Instant,
    names: Mutex<HashMap<String, NameState>>,
    conditional: Mutex<Conditional>,
    pub(crate) buckets: Buckets,
}

#[derive(Debug, Default)]
struct NameState {
    plan: Plan,
    hits: Vec<Hit>,
}

/// Locks a mutex; a panic elsewhere cannot leave this state half-written in a way that
/// matters to a test server, so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            names: Mutex::new(HashMap::new()),
            conditional: Mutex::new(Conditional::new(std::time::SystemTime::now())),
            buckets: Buckets::default(),
        }
    }

    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The calendar time, for `Date` and friends.
    pub(crate) fn now(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }

    pub(crate) fn conditional(&self) -> MutexGuard<'_, Conditional> {
        lock(&self.conditional)
    }

    pub(crate) fn record(&self, name: &str, hit: Hit) {
        lock(&self.names)
            .entry(name.to_owned())
            .or_default()
            .hits
            .push(hit);
    }

    /// Records the hit and takes the plan's next step in one go, so hits and steps pair up.
    pub(crate) fn record_and_step(&self, name: &str, hit: Hit) -> Option<crate::plan::ValidStep> {
        let mut names = lock(&self.names);
        let state = names.entry(name.to_owned()).or_default();
        state.hits.push(hit);
        state.plan.next_step()
    }

    pub(crate) fn hits(&self, name: &str) -> Vec<Hit> {
        lock(&self.names)
            .get(name)
            .map(|s| s.hits.clone())
            .unwrap_or_default()
    }

    pub(crate) fn set_plan(&self, name: &str, plan: Plan) {
        lock(&self.names).entry(name.to_owned()).or_default().plan = plan;
    }

    pub(crate) fn clear(&self, name: &str) {
        lock(&self.names).remove(name);
    }
}

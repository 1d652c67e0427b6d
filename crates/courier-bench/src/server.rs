//! A minimal hyper server on 127.0.0.1, on its own thread and its own current-thread runtime,
//! so that the client under measurement and the server never share a scheduler.
//!
//! Every request is answered `200 OK` with a two-byte body (`ok`) and a `Content-Length`, over
//! HTTP/1.1 with keep-alive: the cheapest answer a real server gives, so that what the client
//! adds is as visible as it can be. [`LoopbackServer::start_with_delays`] makes a slower host
//! of the same server: each answer waits as long as a function of the caller's says, asked
//! once per request as it arrives (the tail of `benches/hedge.rs`, [`crate::hedge::Tail`]).

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::oneshot;

/// The body every answer carries.
pub const BODY: &[u8] = b"ok";

/// How long each answer waits: asked once per request, in the order the server reads them.
type Delays = Arc<Mutex<dyn FnMut() -> Duration + Send>>;

/// A running loopback server; stopped (and its thread joined) on drop.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    served: Arc<AtomicU64>,
}

// === impl LoopbackServer ===

impl LoopbackServer {
    /// Binds an ephemeral port on 127.0.0.1 and serves on a thread of its own.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound or the thread cannot be spawned.
    pub fn start() -> io::Result<Self> {
        Self::spawn(None)
    }

    /// Like [`start`](Self::start), but each answer waits what `delay` returns first: it is
    /// called once per request, as the server reads its head, on the server's thread. A zero
    /// wait answers at once, as [`start`](Self::start)'s server does.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound or the thread cannot be spawned.
    pub fn start_with_delays(delay: impl FnMut() -> Duration + Send + 'static) -> io::Result<Self> {
        Self::spawn(Some(Arc::new(Mutex::new(delay))))
    }

    fn spawn(delays: Option<Delays>) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new().name("loopback-server".into());
        let served = Arc::new(AtomicU64::new(0));
        let counter = served.clone();
        let thread =
            thread.spawn(move || runtime.block_on(serve(listener, rx, counter, delays)))?;
        Ok(Self {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
            served,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The requests it has received so far: each counted as its head is read, before its
    /// answer, so a request whose caller went away while it waited counts too.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn answer(
    _req: Request<Incoming>,
    wait: Option<Duration>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(wait) = wait.filter(|w| !w.is_zero()) {
        tokio::time::sleep(wait).await;
    }
    Ok(Response::builder()
        .header(http::header::CONTENT_LENGTH, BODY.len())
        .body(Full::new(Bytes::from_static(BODY)))
        .unwrap_or_default())
}

async fn serve(
    listener: std::net::TcpListener,
    mut shutdown: oneshot::Receiver<()>,
    served: Arc<AtomicU64>,
    delays: Option<Delays>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let served = served.clone();
                let delays = delays.clone();
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |req| {
                        served.fetch_add(1, Ordering::Relaxed);
                        let wait = delays
                            .as_ref()
                            .map(|d| (d.lock().unwrap_or_else(|p| p.into_inner()))());
                        answer(req, wait)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One GET on a connection of its own: the whole answer.
    async fn get(addr: SocketAddr) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("writes");
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got))
            .await
            .expect("answers within 5 s")
            .expect("reads");
        String::from_utf8_lossy(&got).into_owned()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn answers_ok_over_loopback_and_stops_on_drop() {
        let server = LoopbackServer::start().expect("server starts");
        assert!(server.addr().ip().is_loopback());
        let text = get(server.addr()).await;
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        assert!(text.ends_with("\r\n\r\nok"), "{text}");
        assert_eq!(server.served(), 1);
        let addr = server.addr();
        drop(server);
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn asks_for_a_wait_once_per_request_and_still_answers_ok() {
        let asked = Arc::new(AtomicU64::new(0));
        let server = LoopbackServer::start_with_delays({
            let asked = asked.clone();
            move || {
                let n = asked.fetch_add(1, Ordering::Relaxed);
                Duration::from_millis(n % 2)
            }
        })
        .expect("server starts");
        for _ in 0..3 {
            let text = get(server.addr()).await;
            assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
            assert!(text.ends_with("\r\n\r\nok"), "{text}");
        }
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        assert_eq!(server.served(), 3);
    }
}

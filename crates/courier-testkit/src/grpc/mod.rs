//! A tonic `Greeter` service on loopback whose answers follow a script, and the code generated
//! from `proto/greeter.proto` for it.
//!
//! The generated code (`greeter.rs`) is checked in, so that building needs no `protoc`. To
//! make it again after changing the proto (with `protoc` installed), run `tonic-prost-build`'s
//! `configure().build_client(true).build_server(true).compile_protos(&["proto/greeter.proto"],
//! &["proto"])` into a scratch folder and copy `courier.greeter.rs` over `greeter.rs`.
//!
//! ```no_run
//! use courier_testkit::grpc::{Answer, ScriptedGreeter};
//!
//! # async fn run() -> std::io::Result<()> {
//! let server = ScriptedGreeter::start().await?;
//! server.push(Answer::status(tonic::Code::Unavailable), 2);
//! // ... call server.url() ...
//! assert_eq!(server.hits().len(), 3);
//! # Ok(()) }
//! ```

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    unreachable_pub,
    unused_qualifications
)]
pub mod greeter;

use greeter::greeter_server::{Greeter, GreeterServer};
use greeter::{CountReply, CountRequest, HelloReply, HelloRequest};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};

/// How the server answers one unary call.
#[derive(Debug, Clone)]
pub enum Answer {
    /// `hello, {name}`.
    Ok,
    /// This status (before any message: a trailers-only answer), with a
    /// `grpc-retry-pushback-ms` of this value when there is one.
    Status {
        /// The code.
        code: Code,
        /// The pushback, as sent (`"300"`, `"-1"`, ...).
        pushback: Option<&'static str>,
    },
    /// `hello, {name}`, after this long.
    Slow(Duration),
}

impl Answer {
    /// `code`, with no pushback.
    pub const fn status(code: Code) -> Self {
        Self::Status {
            code,
            pushback: None,
        }
    }

    /// `code`, with `grpc-retry-pushback-ms: pushback`.
    pub const fn pushback(code: Code, pushback: &'static str) -> Self {
        Self::Status {
            code,
            pushback: Some(pushback),
        }
    }
}

/// One call the server saw.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The method's name: `SayHello`, `SayHelloAgain` or `Count`.
    pub method: &'static str,
    /// The call's `grpc-timeout`, as it came.
    pub grpc_timeout: Option<String>,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Debug, Default)]
struct State {
    script: VecDeque<Answer>,
    hits: Vec<Hit>,
    /// `Count` sends this many messages, then fails with UNAVAILABLE; `None`: it sends them all.
    count_fails_after: Option<u32>,
}

#[derive(Debug, Clone, Default)]
struct Scripted(Arc<Mutex<State>>);

impl Scripted {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hit<T>(&self, method: &'static str, req: &Request<T>) {
        let grpc_timeout = req
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.lock().hits.push(Hit {
            method,
            grpc_timeout,
            at: Instant::now(),
        });
    }

    async fn unary(
        &self,
        method: &'static str,
        req: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.hit(method, &req);
        let answer = self.lock().script.pop_front().unwrap_or(Answer::Ok);
        let reply = || {
            Ok(Response::new(HelloReply {
                message: format!("hello, {}", req.get_ref().name),
            }))
        };
        match answer {
            Answer::Ok => reply(),
            Answer::Slow(d) => {
                tokio::time::sleep(d).await;
                reply()
            }
            Answer::Status { code, pushback } => {
                let mut status = Status::new(code, "scripted");
                if let Some(p) = pushback.and_then(|p| p.parse().ok()) {
                    status.metadata_mut().insert("grpc-retry-pushback-ms", p);
                }
                Err(status)
            }
        }
    }
}

type CountStream = Pin<Box<dyn Stream<Item = Result<CountReply, Status>> + Send>>;

#[tonic::async_trait]
impl Greeter for Scripted {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.unary("SayHello", req).await
    }

    async fn say_hello_again(
        &self,
        req: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        self.unary("SayHelloAgain", req).await
    }

    type CountStream = CountStream;

    async fn count(
        &self,
        req: Request<CountRequest>,
    ) -> Result<Response<Self::CountStream>, Status> {
        self.hit("Count", &req);
        let up_to = req.get_ref().up_to;
        let fails_after = self.lock().count_fails_after;
        let sent = fails_after.map_or(up_to, |n| n.min(up_to));
        let messages = (1..=sent).map(|n| Ok(CountReply { n }));
        let end = fails_after.map(|_| Err(Status::unavailable("the stream broke")));
        let stream = tokio_stream::iter(messages.chain(end));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The scripted Greeter, serving on `127.0.0.1` until dropped.
#[derive(Debug)]
pub struct ScriptedGreeter {
    addr: SocketAddr,
    state: Scripted,
    _stop: oneshot::Sender<()>,
}

impl ScriptedGreeter {
    /// Starts a server on a free loopback port. Unscripted calls answer OK.
    ///
    /// # Errors
    ///
    /// When no port can be bound.
    pub async fn start() -> io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Scripted::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = GreeterServer::new(state.clone());
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            state,
            _stop: stop,
        })
    }

    /// `http://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next `times` unary calls (of either method) answer `answer`.
    pub fn push(&self, answer: Answer, times: usize) {
        let mut state = self.state.lock();
        state.script.extend(std::iter::repeat_n(answer, times));
    }

    /// `Count` sends at most `n` messages, then fails with UNAVAILABLE.
    pub fn count_fails_after(&self, n: u32) {
        self.state.lock().count_fails_after = Some(n);
    }

    /// Every call seen so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.state.lock().hits.clone()
    }
}

//! The request body of [`Client`](super::Client): bytes, or a stream replayable up to a cap.

use bytes::Bytes;
use courier_core::BoxError;
use courier_core::body::RetryBody;
use courier_retry::ReplayBody;
use courier_retry::body::DEFAULT_REPLAY_CAP;
use futures_core::Stream;
use http_body::{Frame, SizeHint};
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// A request body: bytes held in memory, or a stream.
///
/// Bytes ([`From`] a `Bytes`, `Vec<u8>`, `String`, `&'static str` or `&'static [u8]`) are sent
/// again on every retry and on a 307 or 308 redirect. A stream ([`wrap_stream`](Self::wrap_stream))
/// is sent again only while what it has sent fits its replay cap
/// ([`DEFAULT_REPLAY_CAP`](courier_retry::body::DEFAULT_REPLAY_CAP), 64 KiB, or [`wrap_stream_with_cap`](Self::wrap_stream_with_cap)):
/// past the cap the call makes no other attempt (its last record says `body_not_replayable`),
/// and a 307 or 308 is not followed ([`RedirectErrorKind::BodyNotReplayable`](super::RedirectErrorKind::BodyNotReplayable)).
pub struct Body {
    kind: Kind,
}

/// Two variants, so that a body is as large as `Bytes` (32 bytes): a request of 256 bytes,
/// which hyper's dispatch moves a few times per call, copies at about half the cost of one a
/// word larger.
enum Kind {
    /// Empty for no body, and once read: a retry or a redirect sends a fresh copy.
    Bytes(Bytes),
    /// Boxed: the body moves through every layer of the stack, and a stream is rare.
    Stream(Box<Streamed>),
}

/// A stream through the retry layer's replay, and the handle on the copy a redirect sends
/// again.
struct Streamed {
    replay: ReplayBody<Tee>,
    shared: Arc<TeeShared>,
}

/// A boxed stream of chunks, as [`Body::wrap_stream`] keeps it.
type BoxStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;

// === impl Body ===

impl Body {
    /// No body.
    pub const fn empty() -> Self {
        Self {
            kind: Kind::Bytes(Bytes::new()),
        }
    }

    /// A body read from `stream`, sent again on a retry or a 307/308 redirect while what it
    /// has sent fits [`DEFAULT_REPLAY_CAP`](courier_retry::body::DEFAULT_REPLAY_CAP) (64 KiB).
    pub fn wrap_stream<S, E>(stream: S) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Self::wrap_stream_with_cap(stream, DEFAULT_REPLAY_CAP)
    }

    /// [`wrap_stream`](Self::wrap_stream) keeping at most `cap` bytes for a replay.
    pub fn wrap_stream_with_cap<S, E>(stream: S, cap: usize) -> Self
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let stream: BoxStream = Box::pin(MapErr { inner: stream });
        let shared = Arc::new(TeeShared {
            cap,
            state: Mutex::new(TeeState {
                stream: Some(stream),
                kept: Some(Vec::new()),
                len: 0,
                settled: None,
                waker: None,
            }),
        });
        let tee = Tee {
            shared: shared.clone(),
        };
        Self {
            kind: Kind::Stream(Box::new(Streamed {
                replay: ReplayBody::with_cap(tee, cap),
                shared,
            })),
        }
    }

    /// What a redirect needs to send this body again: the bytes, or a handle on the stream's
    /// copy.
    pub(crate) fn keeper(&self) -> Keeper {
        match &self.kind {
            Kind::Bytes(bytes) => Keeper::Bytes(bytes.clone()),
            Kind::Stream(s) => Keeper::Stream(s.shared.clone()),
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::empty()
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Bytes(b) if b.is_empty() => f.write_str("Body(empty)"),
            Kind::Bytes(b) => write!(f, "Body({} bytes)", b.len()),
            Kind::Stream(s) => write!(f, "Body(stream, replay cap {})", s.replay.cap()),
        }
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Bytes(bytes),
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Bytes::from(bytes).into()
    }
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Bytes::from(text).into()
    }
}

impl From<&'static str> for Body {
    fn from(text: &'static str) -> Self {
        Bytes::from_static(text.as_bytes()).into()
    }
}

impl From<&'static [u8]> for Body {
    fn from(bytes: &'static [u8]) -> Self {
        Bytes::from_static(bytes).into()
    }
}

impl RetryBody for Body {
    fn try_clone_body(&self) -> Option<Self> {
        let kind = match &self.kind {
            Kind::Bytes(b) => Kind::Bytes(b.clone()),
            Kind::Stream(s) => Kind::Stream(Box::new(Streamed {
                replay: s.replay.try_clone_body()?,
                shared: s.shared.clone(),
            })),
        };
        Some(Self { kind })
    }

    fn poll_replayable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        match &self.kind {
            Kind::Stream(s) => s.replay.poll_replayable(cx),
            _ => Poll::Ready(true),
        }
    }

    fn try_clone_aside(&self) -> Option<Self> {
        match &self.kind {
            Kind::Stream(s) => s.replay.try_clone_aside().map(|replay| Self {
                kind: Kind::Stream(Box::new(Streamed {
                    replay,
                    shared: s.shared.clone(),
                })),
            }),
            _ => self.try_clone_body(),
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Bytes(bytes) if bytes.is_empty() => Poll::Ready(None),
            Kind::Bytes(bytes) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(bytes))))),
            Kind::Stream(s) => Pin::new(&mut s.replay).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Bytes(b) => b.is_empty(),
            Kind::Stream(s) => s.replay.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Bytes(b) => SizeHint::with_exact(b.len() as u64),
            Kind::Stream(s) => s.replay.size_hint(),
        }
    }
}

/// What a redirect needs to send a body again.
pub(crate) enum Keeper {
    Bytes(Bytes),
    Stream(Arc<TeeShared>),
}

impl Keeper {
    /// The whole body as the first hop sent it, once every reader of the first hop has let go
    /// of it; `None` when it outgrew its cap, failed, or was not read to its end.
    pub(crate) async fn whole(self) -> Option<Bytes> {
        match self {
            Self::Bytes(b) => Some(b),
            Self::Stream(shared) => std::future::poll_fn(|cx| shared.poll_settled(cx)).await,
        }
    }
}

/// The user's stream, read once, with a copy of every chunk kept up to the cap: what a
/// redirect sends again once the first hop is done with the body. The retry layer's
/// [`ReplayBody`] above it replays within one hop; the copy here outlives the hop.
pub(crate) struct Tee {
    shared: Arc<TeeShared>,
}

pub(crate) struct TeeShared {
    cap: usize,
    state: Mutex<TeeState>,
}

struct TeeState {
    stream: Option<BoxStream>,
    /// Every chunk read, while within the cap and not failed.
    kept: Option<Vec<Bytes>>,
    len: usize,
    /// `Some(true)` once read to its end within the cap, `Some(false)` once it cannot be
    /// (over the cap, failed, or dropped unfinished).
    settled: Option<bool>,
    waker: Option<Waker>,
}

fn lock(m: &Mutex<TeeState>) -> MutexGuard<'_, TeeState> {
    // Plain data; a panic elsewhere leaves it consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TeeState {
    fn settle(&mut self, whole: bool) {
        if self.settled.is_none() {
            self.settled = Some(whole);
            if !whole {
                self.kept = None;
            }
            self.stream = None;
            if let Some(w) = self.waker.take() {
                w.wake();
            }
        }
    }
}

impl TeeShared {
    fn poll_settled(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut state = lock(&self.state);
        match state.settled {
            Some(true) => {
                let kept = state.kept.as_deref().unwrap_or_default();
                let mut whole = Vec::with_capacity(state.len);
                for chunk in kept {
                    whole.extend_from_slice(chunk);
                }
                Poll::Ready(Some(Bytes::from(whole)))
            }
            Some(false) => Poll::Ready(None),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let cap = self.shared.cap;
        let mut state = lock(&self.shared.state);
        let Some(stream) = state.stream.as_mut() else {
            return Poll::Ready(None);
        };
        match stream.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                state.settle(true);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                state.settle(false);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(chunk))) => {
                state.len = state.len.saturating_add(chunk.len());
                if state.len > cap {
                    state.kept = None;
                    // Over the cap: no redirect can send it again; say so at once.
                    if let Some(w) = state.waker.take() {
                        w.wake();
                    }
                    state.settled = Some(false);
                } else if let Some(kept) = state.kept.as_mut() {
                    kept.push(chunk.clone());
                }
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // Dropped before its end: the copy is not whole.
        lock(&self.shared.state).settle(false);
    }
}

pin_project_lite::pin_project! {
    struct MapErr<S> {
        #[pin]
        inner: S,
    }
}

impl<S, E> Stream for MapErr<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: Into<BoxError>,
{
    type Item = Result<Bytes, BoxError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project()
            .inner
            .poll_next(cx)
            .map(|o| o.map(|r| r.map_err(Into::into)))
    }
}

//! The response body: stored bytes, or the upstream body, possibly copied into the store as it
//! streams, and read by the requests waiting for it as well as by its caller.

use crate::flight::Drive;
use crate::response::Storing;
use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker, ready};

pin_project! {
    /// The body of every response the cache returns.
    ///
    /// Either the stored bytes of a hit (handed out without copying), or the upstream body passed
    /// through frame by frame. When the response is being stored, each data frame is also copied
    /// into a buffer; the entry is stored only when the body ends successfully, so a body that
    /// fails, or is dropped before its end and read on by no one, is never stored. Nor is one
    /// whose length differs from the exact length announced (`Content-Length`, or an exact size
    /// hint).
    ///
    /// The body of an answer other requests wait for (see the crate's **Concurrency**) is read
    /// by them too, so that they are served once it ends whether or not its caller reads it
    /// then: the caller gets every frame, in order, whoever read it first (its upstream body
    /// then wakes them all, and is polled under a lock).
    pub struct CacheBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Stored { data: Option<Bytes> },
        Upstream { #[pin] body: B, tee: Option<Box<Tee>> },
        Shared { answer: Arc<SharedAnswer<B>> },
    }
}

/// At most this many bytes are reserved for a copy up front, whatever length the response
/// announces; a longer body grows the buffer as it comes.
const MAX_PREALLOCATION: usize = crate::layer::DEFAULT_MAX_ENTRY_BYTES;

pub(crate) struct Tee {
    buf: BytesMut,
    /// The most bytes stored: the exact length announced, else the largest entry.
    limit: usize,
    /// Whether `limit` is the exact length announced: a body that ends shorter is truncated.
    exact: bool,
    storing: Storing,
}

impl Tee {
    /// A copy of a body announced at `expected` bytes (an upper bound), `exact` when that is
    /// known, stored once it ends if it holds at most `limit` bytes.
    fn new(expected: usize, exact: Option<usize>, limit: usize, storing: Storing) -> Box<Self> {
        Box::new(Self {
            buf: BytesMut::with_capacity(expected.min(limit).min(MAX_PREALLOCATION)),
            limit: exact.map_or(limit, |n| n.min(limit)),
            exact: exact.is_some(),
            storing,
        })
    }
}

impl<B> CacheBody<B> {
    /// A body of stored bytes.
    pub fn stored(data: Bytes) -> Self {
        Self {
            kind: Kind::Stored {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// The upstream body, passed through untouched.
    pub fn upstream(body: B) -> Self {
        Self {
            kind: Kind::Upstream { body, tee: None },
        }
    }

    /// The upstream body, copied into the store once it ends successfully with `exact` bytes
    /// when that is known, at most `limit` bytes otherwise. `expected` is the announced length
    /// (an upper bound).
    pub(crate) fn teed(
        body: B,
        expected: usize,
        exact: Option<usize>,
        limit: usize,
        storing: Storing,
    ) -> Self {
        Self {
            kind: Kind::Upstream {
                body,
                tee: Some(Tee::new(expected, exact, limit, storing)),
            },
        }
    }

    /// Whether this body came out of the store.
    pub fn is_stored(&self) -> bool {
        matches!(self.kind, Kind::Stored { .. })
    }
}

impl<B> CacheBody<B>
where
    B: Body + Send + 'static,
    B::Error: Send,
{
    /// As [`teed`](Self::teed), for an answer other requests wait for: with the handle they
    /// read it by.
    pub(crate) fn shared(
        body: B,
        expected: usize,
        exact: Option<usize>,
        limit: usize,
        storing: Storing,
    ) -> (Self, Arc<dyn Drive>) {
        let answer = Arc::new(SharedAnswer {
            state: Mutex::new(Answer {
                body: Some(Box::pin(body)),
                tee: Some(Tee::new(expected, exact, limit, storing)),
                frames: VecDeque::new(),
                error: None,
                reader: None,
            }),
            wakers: Arc::default(),
        });
        let body = Self {
            kind: Kind::Shared {
                answer: answer.clone(),
            },
        };
        (body, answer)
    }
}

impl<B> fmt::Debug for CacheBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Stored { data } => f
                .debug_struct("CacheBody::Stored")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
            Kind::Upstream { tee, .. } => f
                .debug_struct("CacheBody::Upstream")
                .field("storing", &tee.is_some())
                .finish(),
            Kind::Shared { .. } => f.write_str("CacheBody::Shared"),
        }
    }
}

/// Copies `frame`'s data into the tee, giving the copy up when the body outgrows it.
fn copy(tee: &mut Option<Box<Tee>>, frame: &Frame<Bytes>) {
    if let (Some(t), Some(data)) = (tee.as_mut(), frame.data_ref()) {
        if t.buf.len() + data.len() > t.limit {
            // Longer than announced or allowed: stream the rest, store nothing.
            abandon(tee);
        } else {
            t.buf.extend_from_slice(data);
        }
    }
}

fn finish(tee: &mut Option<Box<Tee>>) {
    if let Some(tee) = tee.take() {
        let Tee {
            buf,
            limit,
            exact,
            storing,
        } = *tee;
        if !exact || buf.len() == limit {
            storing.finish(buf.freeze());
        } else {
            storing.abandon();
        }
    }
}

/// Stores nothing of this body.
fn abandon(tee: &mut Option<Box<Tee>>) {
    if let Some(tee) = tee.take() {
        tee.storing.abandon();
    }
}

impl<B> Body for CacheBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Stored { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Upstream { mut body, tee } => match ready!(body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                    copy(tee, &frame);
                    if body.is_end_stream() {
                        finish(tee);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Some(Err(err)) => {
                    abandon(tee);
                    Poll::Ready(Some(Err(err)))
                }
                None => {
                    finish(tee);
                    Poll::Ready(None)
                }
            },
            KindProj::Shared { answer } => answer.poll_caller(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Stored { data } => data.is_none(),
            Kind::Upstream { body, .. } => body.is_end_stream(),
            Kind::Shared { answer } => {
                let answer = answer.lock();
                answer.frames.is_empty()
                    && answer.error.is_none()
                    && answer.body.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Stored { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Upstream { body, .. } => body.size_hint(),
            Kind::Shared { answer } => {
                let answer = answer.lock();
                let queued: u64 = answer
                    .frames
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum();
                let rest = answer
                    .body
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint());
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(queued));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(queued));
                }
                hint
            }
        }
    }
}

// === impl SharedAnswer ===

/// An answer other requests wait for, read by its caller and by them, one at a time.
pub(crate) struct SharedAnswer<B> {
    state: Mutex<Answer<B>>,
    /// Everyone waiting for the upstream body: it is polled with a waker that wakes them all,
    /// so that none waits on a reader that is busy elsewhere.
    wakers: Arc<Wakers>,
}

struct Answer<B> {
    /// `None` once it has ended.
    body: Option<Pin<Box<B>>>,
    tee: Option<Box<Tee>>,
    /// Frames read by a waiting request that the caller has not read yet.
    frames: VecDeque<Frame<Bytes>>,
    /// The body's error, read by a waiting request, for the caller.
    error: Option<Box<dyn Stashed<B> + Send>>,
    /// The caller's waker, while it waits for a frame: a waiting request that reads one
    /// wakes it.
    reader: Option<Waker>,
}

/// A body's error, kept for its caller.
trait Stashed<B> {
    fn take(self: Box<Self>) -> B::Error
    where
        B: Body;
}

struct Stash<B: Body>(B::Error);

impl<B: Body> Stashed<B> for Stash<B> {
    fn take(self: Box<Self>) -> B::Error {
        self.0
    }
}

impl<B> SharedAnswer<B> {
    fn lock(&self) -> MutexGuard<'_, Answer<B>> {
        // Consistent between any two statements that touch it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Body> SharedAnswer<B> {
    /// The caller's next frame: one a waiting request read first, or the body's next.
    fn poll_caller(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut answer = self.lock();
        if let Some(frame) = answer.frames.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(error) = answer.error.take() {
            return Poll::Ready(Some(Err(error.take())));
        }
        self.wakers.register(cx.waker());
        let read = answer.read(&self.wakers);
        if read.is_pending() {
            answer.reader = Some(cx.waker().clone());
        }
        read
    }
}

impl<B: Body> Answer<B> {
    /// The body's next frame, copied into the tee, with `wakers` woken when there is more.
    fn read(&mut self, wakers: &Arc<Wakers>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let waker = Waker::from(wakers.clone());
        let mut cx = Context::from_waker(&waker);
        match ready!(body.as_mut().poll_frame(&mut cx)) {
            Some(Ok(frame)) => {
                let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                copy(&mut self.tee, &frame);
                if body.is_end_stream() {
                    self.body = None;
                    finish(&mut self.tee);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            // The waiting requests stop here; a caller that reads on gets what the body gives.
            Some(Err(err)) => {
                abandon(&mut self.tee);
                Poll::Ready(Some(Err(err)))
            }
            None => {
                self.body = None;
                finish(&mut self.tee);
                Poll::Ready(None)
            }
        }
    }
}

impl<B> Drive for SharedAnswer<B>
where
    B: Body + Send + 'static,
    B::Error: Send,
{
    fn poll_drive(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut answer = self.lock();
        let mut read_any = false;
        // Over for the waiting requests once stored or given up; then everyone is woken, for
        // the outcome.
        while answer.tee.is_some() {
            self.wakers.register(cx.waker());
            match answer.read(&self.wakers) {
                Poll::Ready(Some(Ok(frame))) => {
                    answer.frames.push_back(frame);
                    read_any = true;
                }
                Poll::Ready(Some(Err(err))) => {
                    answer.error = Some(Box::new(Stash::<B>(err)));
                    break;
                }
                Poll::Ready(None) => break,
                Poll::Pending => {
                    // The caller may be waiting for what was read here.
                    if read_any && let Some(reader) = answer.reader.take() {
                        reader.wake();
                    }
                    return Poll::Pending;
                }
            }
        }
        if let Some(reader) = answer.reader.take() {
            reader.wake();
        }
        self.wakers.wake_all();
        Poll::Ready(())
    }
}

/// The wakers of everyone waiting for one upstream body.
#[derive(Default)]
struct Wakers(Mutex<Vec<Waker>>);

impl Wakers {
    fn lock(&self) -> MutexGuard<'_, Vec<Waker>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, waker: &Waker) {
        let mut wakers = self.lock();
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }

    fn wake_all(&self) {
        for waker in std::mem::take(&mut *self.lock()) {
            waker.wake();
        }
    }
}

impl Wake for Wakers {
    fn wake(self: Arc<Self>) {
        self.wake_all();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_all();
    }
}

//! Request bodies that can be sent more than once.
//!
//! The retry layer needs a fresh copy of the request body for every attempt. It asks the body
//! through [`RetryBody::try_clone_body`]:
//!
//! - every `Clone` body (`Full<Bytes>`, `String`, `Bytes`, `()`, `Empty`, ...) is replayed as
//!   is, through a blanket implementation;
//! - a streaming body is wrapped in [`ReplayBody`], which keeps the bytes it has sent, up to a
//!   cap (64 KiB by default), so that a retry sends them again followed by whatever the
//!   original had not yet read. Past the cap it keeps nothing and declines to be cloned: the
//!   request is sent once and not retried.
//!
//! Before a retry goes out, the layer also asks [`RetryBody::poll_replayable`] whether a copy
//! made now would be whole. A `Clone` body always is. A [`ReplayBody`] is once the original
//! has been read to its end within the cap, or else once every earlier attempt has let go of
//! it (failed or dropped it) within the cap: an attempt answered early (a 503 before the
//! server read the body) may still be sending it, and the bytes it sends from then on count
//! against the cap too.
//!
//! Why a trait rather than `B: Clone`: a streaming body can only know at run time whether it is
//! still replayable, and the trait lets it say no, which `Clone` cannot. Why `ReplayBody` is not
//! `Clone` itself: the blanket implementation would then ignore its cap.

use bytes::{Buf, Bytes};
use courier_core::BoxError;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::error::ReplayCapExceeded;

/// The default replay cap of [`ReplayBody`]: 64 KiB.
pub const DEFAULT_REPLAY_CAP: usize = 64 * 1024;

pub use courier_core::body::RetryBody;

/// Makes a streaming body replayable, up to a byte cap.
///
/// The original streams through unchanged while a copy of each chunk (and the trailers) is kept.
/// A replay obtained from [`RetryBody::try_clone_body`] first sends the kept chunks, then goes
/// on reading the original body where the previous attempt left it. Only one instance reads at
/// a time: a replay polled while an earlier attempt still holds the body waits until that
/// attempt drops it or finishes.
///
/// Once more than the cap has been read, the copy is dropped and `try_clone_body` returns
/// `None`. A replay that was made before the cap was passed fails with
/// [`ReplayCapExceeded`] rather than send a partial body. A body whose size hint already says
/// it is over the cap is never buffered at all.
///
/// # Letting go
///
/// An instance lets go of the body when it has been read to its end (or failed) or when it is
/// dropped. Until the original body has been read to its end, [`RetryBody::poll_replayable`]
/// on one instance is `Pending` while any other instance has not let go, be it in the middle
/// of the body or not yet polled at all: the retry layer sends a replay only once the attempt
/// before it is done with the body, so that the bytes that attempt still sends cannot push
/// the replay past the cap. A copy kept aside and never sent counts as one that may still be
/// read: drop the copies you do not send. Once the original has been read to its end within
/// the cap (its last frame read and the body saying it has no more counts: a transport that
/// knows the length stops there), every byte is kept: `poll_replayable` is `Ready(true)` whoever still holds a copy
/// (a hedge sent while the retry layer keeps its own copy aside).
///
/// # Clone
///
/// `ReplayBody` is deliberately not `Clone`: use [`RetryBody::try_clone_body`].
///
/// ```
/// use bytes::Bytes;
/// use courier_retry::{ReplayBody, RetryBody};
/// use http_body_util::{BodyExt, Full};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let body = ReplayBody::new(Full::new(Bytes::from_static(b"hello")));
/// let again = body.try_clone_body().expect("under the cap");
/// assert_eq!(body.collect().await.unwrap().to_bytes(), "hello");
/// assert_eq!(again.collect().await.unwrap().to_bytes(), "hello");
/// # }
/// ```
pub struct ReplayBody<B> {
    shared: Arc<Shared<B>>,
    /// The body state while this instance holds it.
    state: Option<BodyState<B>>,
    /// How many chunks this instance has sent.
    pos: usize,
    /// Bytes this instance has sent.
    sent: u64,
    trailers_sent: bool,
    finished: bool,
    /// Whether this instance is one of `Shared::live`: until it ends or is dropped.
    live: bool,
}

struct Shared<B> {
    slot: Mutex<Slot<B>>,
    /// Set once the copy is gone; read without the lock by `try_clone_body`.
    capped: AtomicBool,
    /// Instances that have not let go of the body: not read to their end and not dropped.
    live: AtomicUsize,
    /// Set once the original was read to its end within the cap: every byte is kept, and a
    /// copy is whole whoever still holds one.
    complete: AtomicBool,
    cap: usize,
    size_hint: SizeHint,
    empty: bool,
}

struct Slot<B> {
    state: Option<BodyState<B>>,
    waiters: Vec<Waker>,
    /// Who waits in `poll_replayable` for the other instances to let go.
    watcher: Option<Waker>,
}

struct BodyState<B> {
    /// Every chunk read so far, while not capped (`chunks.len() == read`).
    chunks: Vec<Bytes>,
    read: usize,
    buffered: usize,
    trailers: Option<HeaderMap>,
    /// `None` once the original ended or failed.
    inner: Option<Pin<Box<B>>>,
    failed: bool,
    capped: bool,
}

// === impl ReplayBody ===

impl<B: Body> ReplayBody<B> {
    /// Wraps `body` with the default cap of [`DEFAULT_REPLAY_CAP`] bytes.
    pub fn new(body: B) -> Self {
        Self::with_cap(body, DEFAULT_REPLAY_CAP)
    }

    /// Wraps `body`, keeping at most `cap` bytes for replays.
    pub fn with_cap(body: B, cap: usize) -> Self {
        let size_hint = body.size_hint();
        let empty = body.is_end_stream();
        let over = usize::try_from(size_hint.lower()).map_or(true, |lower| lower > cap);
        let state = BodyState {
            chunks: Vec::new(),
            read: 0,
            buffered: 0,
            trailers: None,
            inner: Some(Box::pin(body)),
            failed: false,
            capped: over,
        };
        Self {
            shared: Arc::new(Shared {
                slot: Mutex::new(Slot {
                    state: Some(state),
                    waiters: Vec::new(),
                    watcher: None,
                }),
                capped: AtomicBool::new(over),
                live: AtomicUsize::new(1),
                complete: AtomicBool::new(false),
                cap,
                size_hint,
                empty,
            }),
            state: None,
            pos: 0,
            sent: 0,
            trailers_sent: false,
            finished: false,
            live: true,
        }
    }
}

impl<B> ReplayBody<B> {
    /// The replay cap in bytes.
    pub fn cap(&self) -> usize {
        self.shared.cap
    }

    /// Whether the copy was dropped: the body outgrew the cap or failed, and cannot be replayed.
    pub fn is_capped(&self) -> bool {
        self.shared.capped.load(Ordering::Acquire)
    }

    /// Lets go of the body for good (read to its end, failed, or dropped): hands the body state
    /// back so that the next replay can take it, and tells whoever waits for that.
    fn let_go(&mut self) {
        let state = self.state.take();
        let live = std::mem::take(&mut self.live);
        if live {
            self.shared.live.fetch_sub(1, Ordering::AcqRel);
        }
        if state.is_none() && !live {
            return;
        }
        let (waiters, watcher) = {
            let mut slot = lock(&self.shared.slot);
            if state.is_some() {
                slot.state = state;
            }
            (std::mem::take(&mut slot.waiters), slot.watcher.take())
        };
        for w in waiters.into_iter().chain(watcher) {
            w.wake();
        }
    }

    fn mark_capped(&self, state: &mut BodyState<B>) {
        state.capped = true;
        state.chunks = Vec::new();
        state.trailers = None;
        self.shared.capped.store(true, Ordering::Release);
        // The answer of `poll_replayable` is known now.
        let watcher = lock(&self.shared.slot).watcher.take();
        if let Some(w) = watcher {
            w.wake();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The slot holds plain data; a panic elsewhere leaves it consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<B> RetryBody for ReplayBody<B> {
    fn try_clone_body(&self) -> Option<Self> {
        if self.is_capped() {
            return None;
        }
        self.shared.live.fetch_add(1, Ordering::AcqRel);
        Some(Self {
            shared: self.shared.clone(),
            state: None,
            pos: 0,
            sent: 0,
            trailers_sent: false,
            finished: false,
            live: true,
        })
    }

    /// Only an empty body: a copy of one with content, kept aside, would count as a reader
    /// that has not let go (holding back a retry's replay), and the first request could read
    /// the body past the cap before the copy is sent.
    fn try_clone_aside(&self) -> Option<Self> {
        if self.shared.empty {
            self.try_clone_body()
        } else {
            None
        }
    }

    /// `Ready(false)` as soon as the body is over the cap or failed; else `Ready(true)` once
    /// the original has been read to its end, or every other instance has let go of the body
    /// (see [Letting go](ReplayBody#letting-go)), `Pending` until then. An empty body is always whole: `Ready(true)` at once.
    fn poll_replayable(&self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.shared.empty {
            return Poll::Ready(true);
        }
        if self.is_capped() {
            return Poll::Ready(false);
        }
        if self.shared.complete.load(Ordering::Acquire) {
            return Poll::Ready(true);
        }
        let others =
            |shared: &Shared<B>| shared.live.load(Ordering::Acquire) - usize::from(self.live);
        if others(&self.shared) == 0 {
            return Poll::Ready(true);
        }
        // Register, then look again: an instance that lets go after the look wakes the watcher,
        // since it takes the lock to do so.
        let mut slot = lock(&self.shared.slot);
        match &mut slot.watcher {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        if self.is_capped() {
            slot.watcher = None;
            return Poll::Ready(false);
        }
        if others(&self.shared) == 0 {
            slot.watcher = None;
            return Poll::Ready(true);
        }
        Poll::Pending
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if this.state.is_none() {
            let mut slot = lock(&this.shared.slot);
            match slot.state.take() {
                Some(state) => this.state = Some(state),
                None => {
                    // An earlier attempt still holds the body; it wakes us when it lets go.
                    slot.waiters.push(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
        let cap = this.shared.cap;
        let mut state = this.state.take().expect("state was acquired above");
        // The original says, after a frame, that it has no more: it is read to its end. A
        // transport that knows the length (hyper with a `Content-Length`) stops polling there
        // and drops the body, never asking for the end.
        let mut ended = false;
        let out = loop {
            // Replay what was kept.
            if this.pos < state.read {
                if state.capped {
                    break Poll::Ready(Some(Err(ReplayCapExceeded::new(cap).into())));
                }
                let chunk = state.chunks[this.pos].clone();
                this.pos += 1;
                this.sent += chunk.len() as u64;
                break Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            // Then read on from the original.
            if let Some(inner) = state.inner.as_mut() {
                match inner.as_mut().poll_frame(cx) {
                    Poll::Pending => break Poll::Pending,
                    Poll::Ready(None) => {
                        state.inner = None;
                        if !state.capped {
                            this.shared.complete.store(true, Ordering::Release);
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        state.inner = None;
                        state.failed = true;
                        this.mark_capped(&mut state);
                        this.finished = true;
                        break Poll::Ready(Some(Err(e.into())));
                    }
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(mut data) => {
                            let bytes = data.copy_to_bytes(data.remaining());
                            state.read += 1;
                            this.pos = state.read;
                            this.sent += bytes.len() as u64;
                            ended = inner.is_end_stream();
                            if !state.capped {
                                if state.buffered.saturating_add(bytes.len()) > cap {
                                    this.mark_capped(&mut state);
                                } else {
                                    state.buffered += bytes.len();
                                    state.chunks.push(bytes.clone());
                                }
                            }
                            break Poll::Ready(Some(Ok(Frame::data(bytes))));
                        }
                        Err(frame) => match frame.into_trailers() {
                            Ok(trailers) => {
                                ended = inner.is_end_stream();
                                if !state.capped {
                                    state.trailers = Some(trailers.clone());
                                }
                                this.trailers_sent = true;
                                break Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                            }
                            // A frame kind this crate does not know: skip it.
                            Err(_) => continue,
                        },
                    },
                }
                continue;
            }
            // The original has ended.
            if state.failed {
                this.finished = true;
                break Poll::Ready(Some(Err(ReplayCapExceeded::new(cap).into())));
            }
            if let (false, Some(trailers)) = (this.trailers_sent, &state.trailers) {
                this.trailers_sent = true;
                break Poll::Ready(Some(Ok(Frame::trailers(trailers.clone()))));
            }
            this.finished = true;
            break Poll::Ready(None);
        };
        if ended {
            state.inner = None;
            if !state.capped {
                this.shared.complete.store(true, Ordering::Release);
            }
        }
        this.state = Some(state);
        if this.finished {
            this.let_go();
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        if self.finished {
            return true;
        }
        match &self.state {
            Some(state) => {
                self.pos >= state.read
                    && state.inner.is_none()
                    && !state.failed
                    && (state.trailers.is_none() || self.trailers_sent)
            }
            None => self.shared.empty,
        }
    }

    fn size_hint(&self) -> SizeHint {
        let original = self.shared.size_hint;
        if let Some(exact) = original.exact() {
            return SizeHint::with_exact(exact.saturating_sub(self.sent));
        }
        let mut hint = SizeHint::new();
        if let Some(upper) = original.upper() {
            hint.set_upper(upper.saturating_sub(self.sent));
        }
        hint.set_lower(original.lower().saturating_sub(self.sent));
        hint
    }
}

impl<B> Drop for ReplayBody<B> {
    fn drop(&mut self) {
        self.let_go();
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayBody")
            .field("cap", &self.shared.cap)
            .field("capped", &self.is_capped())
            .field("sent", &self.sent)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_testkit::body::ScriptedBody;
    use http_body_util::BodyExt;
    use std::convert::Infallible;

    /// A body that yields its chunks one poll at a time.
    fn chunks(parts: &[&'static str]) -> ScriptedBody<Infallible> {
        ScriptedBody::chunks(parts.iter().copied())
    }

    async fn collect<B: Body<Data = Bytes, Error = BoxError>>(b: B) -> Result<Bytes, BoxError> {
        Ok(b.collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn replays_streamed_chunks() {
        let body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
        let replay = body.try_clone_body().unwrap();
        assert_eq!(collect(body).await.unwrap(), "abcdef");
        assert_eq!(collect(replay).await.unwrap(), "abcdef");
    }

    #[tokio::test]
    async fn replay_continues_a_partly_read_original() {
        let mut body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
        let replay = body.try_clone_body().unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "ab");
        drop(body);
        assert_eq!(collect(replay).await.unwrap(), "abcdef");
    }

    #[tokio::test]
    async fn over_the_cap_declines_and_never_sends_a_partial_body() {
        let body = ReplayBody::with_cap(chunks(&["abc", "def"]), 4);
        let early = body.try_clone_body().expect("nothing read yet");
        assert_eq!(collect(body).await.unwrap(), "abcdef");
        assert!(early.is_capped());
        assert!(early.try_clone_body().is_none());
        let err = collect(early).await.unwrap_err();
        assert!(err.is::<ReplayCapExceeded>(), "{err}");
    }

    #[tokio::test]
    async fn known_size_over_the_cap_is_never_buffered() {
        let body = ReplayBody::with_cap(http_body_util::Full::new(Bytes::from(vec![7; 100])), 10);
        assert!(body.is_capped());
        assert!(body.try_clone_body().is_none());
        assert_eq!(body.size_hint().exact(), Some(100));
    }

    #[tokio::test]
    async fn size_hint_and_trailers_are_replayed() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", "1".parse().unwrap());
        let body = http_body_util::Full::new(Bytes::from_static(b"xyz"))
            .with_trailers(std::future::ready(Some(Ok::<_, Infallible>(trailers))));
        let body = ReplayBody::new(body);
        let replay = body.try_clone_body().unwrap();
        let got = body.collect().await.unwrap();
        assert_eq!(got.trailers().unwrap()["x-sum"], "1");
        let got = replay.collect().await.unwrap();
        assert_eq!(got.trailers().unwrap()["x-sum"], "1");
        assert_eq!(got.to_bytes(), "xyz");
    }

    #[tokio::test]
    async fn replay_waits_for_the_holder() {
        let mut body = ReplayBody::new(chunks(&["ab", "cd"]));
        let mut replay = body.try_clone_body().unwrap();
        let _ = body.frame().await;
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut replay).poll_frame(&mut cx).is_pending());
        drop(body);
        assert_eq!(collect(replay).await.unwrap(), "abcd");
    }

    /// A waker that counts its wakes.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn wakes(count: &Count) -> usize {
        count.0.load(Ordering::SeqCst)
    }

    #[test]
    fn a_clone_body_is_always_replayable() {
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(
            String::from("x").poll_replayable(&mut cx),
            Poll::Ready(true)
        );
    }

    #[tokio::test]
    async fn an_empty_body_is_replayable_while_another_copy_is_held() {
        // A GET's empty body, with a copy kept aside (by the cache, for a request it may send
        // again) while an attempt holds another: nothing of it can be missing.
        let mut cx = Context::from_waker(Waker::noop());
        let body = ReplayBody::new(http_body_util::Empty::<Bytes>::new());
        let kept = body.try_clone_body().unwrap();
        let template = body.try_clone_body().unwrap();
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(true));
        let replay = template.try_clone_body().unwrap();
        assert_eq!(collect(replay).await.unwrap(), "");
        drop((body, kept));
    }

    #[tokio::test]
    async fn replayable_once_the_sent_copy_is_dropped() {
        let (count, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        let body = ReplayBody::new(chunks(&["ab", "cd"]));
        let template = body.try_clone_body().unwrap();
        // Not polled yet, but alive: it may still be read.
        assert!(template.poll_replayable(&mut cx).is_pending());
        drop(body);
        assert_eq!(wakes(&count), 1);
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(true));
        let replay = template.try_clone_body().unwrap();
        assert_eq!(collect(replay).await.unwrap(), "abcd");
    }

    #[tokio::test]
    async fn pending_while_partly_read_then_replayable_at_the_end() {
        let (count, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        let mut body = ReplayBody::new(chunks(&["ab", "cd"]));
        let template = body.try_clone_body().unwrap();
        let _ = body.frame().await;
        assert!(template.poll_replayable(&mut cx).is_pending());
        let _ = body.frame().await;
        assert!(template.poll_replayable(&mut cx).is_pending());
        assert_eq!(wakes(&count), 0);
        // The end: it lets go while still alive.
        assert!(body.frame().await.is_none());
        assert_eq!(wakes(&count), 1);
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(true));
        drop(body);
        assert_eq!(
            collect(template.try_clone_body().unwrap()).await.unwrap(),
            "abcd"
        );
    }

    #[tokio::test]
    async fn passing_the_cap_answers_no_at_once() {
        let (count, waker) = counter();
        let mut cx = Context::from_waker(&waker);
        let mut body = ReplayBody::with_cap(chunks(&["abc", "def", "g"]), 4);
        let template = body.try_clone_body().unwrap();
        let _ = body.frame().await;
        assert!(template.poll_replayable(&mut cx).is_pending());
        let _ = body.frame().await;
        // Still held, but no longer whole: known without waiting for the holder.
        assert_eq!(wakes(&count), 1);
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(false));
        assert!(template.try_clone_body().is_none());
    }

    #[tokio::test]
    async fn a_failed_body_answers_no() {
        let mut cx = Context::from_waker(Waker::noop());
        let failing =
            ScriptedBody::<std::io::Error>::new().error(std::io::ErrorKind::BrokenPipe.into());
        let mut body = ReplayBody::new(failing);
        let template = body.try_clone_body().unwrap();
        assert!(body.frame().await.unwrap().is_err());
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(false));
    }

    #[tokio::test]
    async fn a_copy_kept_aside_holds_a_replay_back_until_the_original_is_read_whole() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut body = ReplayBody::new(chunks(&["a", "b"]));
        let template = body.try_clone_body().unwrap();
        let aside = template.try_clone_body().unwrap();
        // Half read, then dropped: the copy aside may still read the rest past the cap.
        body.frame().await.unwrap().unwrap();
        drop(body);
        assert!(template.poll_replayable(&mut cx).is_pending());
        // Read to its end within the cap: every byte is kept, and a copy is whole whoever
        // still holds one (here another copy, never sent).
        let another = template.try_clone_body().unwrap();
        assert_eq!(collect(aside).await.unwrap(), "ab");
        assert_eq!(template.poll_replayable(&mut cx), Poll::Ready(true));
        assert_eq!(collect(another).await.unwrap(), "ab");
    }

    #[tokio::test]
    async fn an_original_that_says_it_has_ended_is_read_whole_without_being_asked_again() {
        // A transport that knows the length (hyper with a Content-Length) stops polling once
        // the body says it has ended, and drops it: no poll ever returns the end.
        let mut cx = Context::from_waker(Waker::noop());
        let mut body = ReplayBody::new(http_body_util::Full::new(Bytes::from_static(b"{}")));
        let aside = body.try_clone_body().unwrap();
        let mut sent = Vec::new();
        while !body.is_end_stream() {
            let frame = body.frame().await.unwrap().unwrap();
            sent.extend_from_slice(&frame.into_data().unwrap());
        }
        drop(body);
        assert_eq!(sent, b"{}");
        assert_eq!(aside.poll_replayable(&mut cx), Poll::Ready(true));
        assert_eq!(collect(aside).await.unwrap(), "{}");
    }
}

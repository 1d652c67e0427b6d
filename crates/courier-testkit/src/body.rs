//! Bodies that follow a script, for requests and responses alike: given frames, an error
//! among them, a size hint that says more than they hold, a stall, a pause before each frame;
//! and a body the test feeds through a channel.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use courier_testkit::body::{BoxError, ScriptedBody};
//! use http_body::Body;
//! use http_body_util::BodyExt;
//!
//! // Ten bytes announced, five sent, then the connection resets.
//! let mut body = ScriptedBody::<BoxError>::chunks(["hello"])
//!     .error("connection reset".into())
//!     .exact_len(10);
//! assert_eq!(body.size_hint().exact(), Some(10));
//! assert_eq!(body.frame().await.unwrap().unwrap().into_data().unwrap(), "hello");
//! assert!(body.frame().await.unwrap().is_err());
//! assert!(body.frame().await.is_none());
//! # }
//! ```
//!
//! Neither body is `Clone`: a retry layer sees a streaming body, one it must buffer to replay.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Sleep;

/// The error most scripted bodies carry (the same type as `courier_core::BoxError`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body that yields the steps of its script in order, whatever came before (a step after an
/// error is still yielded, for a caller that keeps polling), then ends.
///
/// Its size hint is the default (nothing known) unless [`exact_len`](Self::exact_len) says
/// otherwise; `is_end_stream` is never true before the end has been polled.
pub struct ScriptedBody<E> {
    steps: VecDeque<Step<E>>,
    hint: SizeHint,
    gap: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    end: Option<Arc<AtomicBool>>,
}

enum Step<E> {
    Data(Bytes),
    Error(E),
    /// Pending forever, waking no one.
    Stall,
}

// === impl ScriptedBody ===

impl<E> ScriptedBody<E> {
    /// A body that ends at once.
    pub fn new() -> Self {
        Self {
            steps: VecDeque::new(),
            hint: SizeHint::default(),
            gap: None,
            sleep: None,
            end: None,
        }
    }

    /// A body of these data frames, one per poll.
    pub fn chunks<C: Into<Bytes>>(chunks: impl IntoIterator<Item = C>) -> Self {
        let mut body = Self::new();
        body.steps
            .extend(chunks.into_iter().map(|c| Step::Data(c.into())));
        body
    }

    /// Then a data frame.
    pub fn data(mut self, data: impl Into<Bytes>) -> Self {
        self.steps.push_back(Step::Data(data.into()));
        self
    }

    /// Then an error.
    pub fn error(mut self, err: E) -> Self {
        self.steps.push_back(Step::Error(err));
        self
    }

    /// Then nothing, ever: every later poll is pending and no waker is woken (a peer that
    /// stopped sending). Steps after it are never reached.
    pub fn stall(mut self) -> Self {
        self.steps.push_back(Step::Stall);
        self
    }

    /// An exact size hint of `len` bytes, whatever the frames hold: more than they hold is a
    /// body that ends short of its announced length.
    pub fn exact_len(mut self, len: u64) -> Self {
        self.hint = SizeHint::with_exact(len);
        self
    }

    /// Waits `gap` (on tokio's clock) before each frame; the end comes without a wait.
    pub fn gap(mut self, gap: Duration) -> Self {
        self.gap = Some(gap);
        self
    }

    /// Sets `flag` when the body reports its end: a test can see whether the body was read to
    /// the end (drained) or dropped before.
    pub fn signal_end(mut self, flag: Arc<AtomicBool>) -> Self {
        self.end = Some(flag);
        self
    }
}

impl<E> Default for ScriptedBody<E> {
    fn default() -> Self {
        Self::new()
    }
}

// Nothing is pinned structurally: the one future is boxed.
impl<E> Unpin for ScriptedBody<E> {}

impl<E> fmt::Debug for ScriptedBody<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedBody")
            .field("steps_left", &self.steps.len())
            .field("hint", &self.hint)
            .field("gap", &self.gap)
            .finish_non_exhaustive()
    }
}

impl<E> Body for ScriptedBody<E> {
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        let this = self.get_mut();
        match this.steps.front() {
            None => {
                if let Some(end) = &this.end {
                    end.store(true, Ordering::SeqCst);
                }
                return Poll::Ready(None);
            }
            Some(Step::Stall) => return Poll::Pending,
            Some(_) => {}
        }
        if let Some(gap) = this.gap {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
            ready!(sleep.as_mut().poll(cx));
            this.sleep = None;
        }
        match this.steps.pop_front() {
            Some(Step::Data(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Some(Step::Error(err)) => Poll::Ready(Some(Err(err))),
            Some(Step::Stall) | None => unreachable!("the front step was a frame or an error"),
        }
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}

/// A body the test feeds through a channel: each `Ok` is a data frame, each `Err` an error,
/// and the body ends when every sender is dropped.
pub struct ChannelBody<E> {
    rx: mpsc::UnboundedReceiver<Result<Bytes, E>>,
    hint: SizeHint,
}

// === impl ChannelBody ===

impl<E> ChannelBody<E> {
    /// The sender to feed the body with, and the body.
    pub fn new() -> (mpsc::UnboundedSender<Result<Bytes, E>>, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let body = Self {
            rx,
            hint: SizeHint::default(),
        };
        (tx, body)
    }

    /// An exact size hint of `len` bytes, whatever comes through the channel.
    pub fn exact_len(mut self, len: u64) -> Self {
        self.hint = SizeHint::with_exact(len);
        self
    }
}

// The receiver is not pinned.
impl<E> Unpin for ChannelBody<E> {}

impl<E> fmt::Debug for ChannelBody<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelBody")
            .field("hint", &self.hint)
            .finish_non_exhaustive()
    }
}

impl<E> Body for ChannelBody<E> {
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;
    use tokio::time::Instant;

    #[tokio::test]
    async fn steps_come_in_order_past_an_error_and_the_end_is_signalled() {
        let end = Arc::new(AtomicBool::new(false));
        let mut body = ScriptedBody::<&'static str>::chunks(["a", "bc"])
            .error("reset")
            .data("d")
            .signal_end(end.clone());
        assert_eq!(body.size_hint().exact(), None, "no hint unless given");
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            got.push(frame.map(|f| f.into_data().unwrap()));
            assert!(!end.load(Ordering::SeqCst));
        }
        assert_eq!(
            got,
            [
                Ok("a".into()),
                Ok("bc".into()),
                Err("reset"),
                Ok("d".into())
            ]
        );
        assert!(end.load(Ordering::SeqCst), "read to the end");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gap_comes_before_each_frame_and_a_stall_never_ends() {
        let start = Instant::now();
        let mut body = ScriptedBody::<Infallible>::chunks(["x", "y"])
            .stall()
            .gap(Duration::from_millis(10));
        body.frame().await.unwrap().unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        body.frame().await.unwrap().unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(20));
        let stalled = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
        assert!(stalled.is_err(), "still pending an hour later");
    }

    #[tokio::test]
    async fn a_channel_body_yields_what_is_sent_and_ends_with_the_senders() {
        let (tx, body) = ChannelBody::<&'static str>::new();
        let mut body = body.exact_len(3);
        assert_eq!(body.size_hint().exact(), Some(3));
        tx.send(Ok(Bytes::from("ab"))).unwrap();
        tx.send(Err("cut")).unwrap();
        drop(tx);
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "ab");
        assert_eq!(body.frame().await.unwrap().unwrap_err(), "cut");
        assert!(body.frame().await.is_none());
    }
}

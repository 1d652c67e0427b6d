//! The response body: all at once, or one byte at a time.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::server::ConnControl;

/// The body of every response the server sends.
#[derive(Debug)]
pub(crate) struct ResponseBody {
    kind: Kind,
    /// The response announces more bytes than the body holds: hide the body's length, so that
    /// hyper writes the announced `content-length` instead of trusting (or asserting) a length
    /// of its own.
    cut_short: Option<CutShort>,
}

/// How a body short of its announced length ends.
#[derive(Debug)]
enum CutShort {
    /// HTTP/2: end the stream; the client sees fewer bytes than announced.
    EndStream,
    /// HTTP/1.1: close the connection once every byte is flushed. Ending the body instead
    /// would make hyper drop the connection with the last bytes still in its buffer.
    CloseWhenFlushed(Arc<ConnControl>),
}

#[derive(Debug)]
enum Kind {
    Full(Option<Bytes>),
    Drip {
        data: Bytes,
        gap: Duration,
        // `None` until the first byte is out: the first byte goes with the headers.
        sleep: Option<Pin<Box<Sleep>>>,
    },
}

// === impl ResponseBody ===

impl ResponseBody {
    /// A body sent in one frame.
    pub(crate) fn full(data: impl Into<Bytes>) -> Self {
        let data = data.into();
        Self {
            kind: Kind::Full((!data.is_empty()).then_some(data)),
            cut_short: None,
        }
    }

    /// An empty body.
    pub(crate) fn empty() -> Self {
        Self {
            kind: Kind::Full(None),
            cut_short: None,
        }
    }

    /// A body sent one byte per frame, `gap` apart.
    pub(crate) fn drip(data: Bytes, gap: Duration) -> Self {
        if gap.is_zero() {
            return Self::full(data);
        }
        Self {
            kind: Kind::Drip {
                data,
                gap,
                sleep: None,
            },
            cut_short: None,
        }
    }

    /// Marks a body that falls short of the `content-length` its response announces: it
    /// reports no exact length and never reports its end ahead. With `close` (HTTP/1.1), once
    /// its bytes are out it closes the connection as soon as they are flushed; without (HTTP/2),
    /// it ends the stream.
    pub(crate) fn cut_short(mut self, close: Option<Arc<ConnControl>>) -> Self {
        self.cut_short = Some(match close {
            Some(control) => CutShort::CloseWhenFlushed(control),
            None => CutShort::EndStream,
        });
        self
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = match &mut this.kind {
            Kind::Full(data) => data.take().map(|d| Ok(Frame::data(d))),
            Kind::Drip { data, gap, sleep } => {
                if data.is_empty() {
                    None
                } else {
                    match sleep {
                        Some(sleep) => {
                            ready!(sleep.as_mut().poll(cx));
                            let next = Instant::now() + *gap;
                            sleep.as_mut().reset(next);
                        }
                        None => *sleep = Some(Box::pin(tokio::time::sleep(*gap))),
                    }
                    Some(Ok(Frame::data(data.split_to(1))))
                }
            }
        };
        match (frame, &this.cut_short) {
            (Some(frame), _) => Poll::Ready(Some(frame)),
            (None, None | Some(CutShort::EndStream)) => Poll::Ready(None),
            (None, Some(CutShort::CloseWhenFlushed(control))) => {
                // The connection task drops this body along with the connection.
                control.close_when_flushed();
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.cut_short.is_some() {
            // Never at the start, or hyper would send an empty body and drop the length.
            return false;
        }
        match &self.kind {
            Kind::Full(data) => data.is_none(),
            Kind::Drip { data, .. } => data.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let len = match &self.kind {
            Kind::Full(data) => data.as_ref().map_or(0, Bytes::len),
            Kind::Drip { data, .. } => data.len(),
        };
        if self.cut_short.is_some() {
            let mut hint = SizeHint::new();
            hint.set_lower(len as u64);
            hint
        } else {
            SizeHint::with_exact(len as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn drip_sends_one_byte_per_gap() {
        let start = Instant::now();
        let mut body = ResponseBody::drip(Bytes::from_static(b"abc"), Duration::from_millis(10));
        assert_eq!(body.size_hint().exact(), Some(3));
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            seen.push((data, start.elapsed()));
        }
        let expected = [
            (Bytes::from_static(b"a"), Duration::ZERO),
            (Bytes::from_static(b"b"), Duration::from_millis(10)),
            (Bytes::from_static(b"c"), Duration::from_millis(20)),
        ];
        assert_eq!(seen, expected);
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn full_and_empty() {
        let body = ResponseBody::full("hi").collect().await.unwrap().to_bytes();
        assert_eq!(body, "hi");
        assert!(ResponseBody::empty().is_end_stream());
        let body = ResponseBody::drip(Bytes::from_static(b"xy"), Duration::ZERO);
        assert_eq!(body.collect().await.unwrap().to_bytes(), "xy");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_cut_short_hides_its_length() {
        for body in [
            ResponseBody::full("ab").cut_short(None),
            ResponseBody::empty().cut_short(None),
            ResponseBody::drip(Bytes::from_static(b"ab"), Duration::from_millis(5)).cut_short(None),
        ] {
            assert_eq!(body.size_hint().exact(), None);
            assert!(!body.is_end_stream());
            let lower = body.size_hint().lower();
            let sent = body.collect().await.unwrap().to_bytes();
            assert_eq!(sent.len() as u64, lower, "every byte still goes out");
        }
    }
}

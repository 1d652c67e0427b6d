//! The response body: all at once, or one byte at a time.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The body of every response the server sends.
#[derive(Debug)]
pub(crate) struct ResponseBody {
    kind: Kind,
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
        }
    }

    /// An empty body.
    pub(crate) fn empty() -> Self {
        Self {
            kind: Kind::Full(None),
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
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().kind {
            Kind::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Kind::Drip { data, gap, sleep } => {
                if data.is_empty() {
                    return Poll::Ready(None);
                }
                match sleep {
                    Some(sleep) => {
                        ready!(sleep.as_mut().poll(cx));
                        let next = Instant::now() + *gap;
                        sleep.as_mut().reset(next);
                    }
                    None => *sleep = Some(Box::pin(tokio::time::sleep(*gap))),
                }
                Poll::Ready(Some(Ok(Frame::data(data.split_to(1)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
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
        SizeHint::with_exact(len as u64)
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
}

//! The response body: stored bytes, or the upstream body, possibly copied into the store as it
//! streams.

use crate::response::Storing;
use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

pin_project! {
    /// The body of every response the cache returns.
    ///
    /// Either the stored bytes of a hit (handed out without copying), or the upstream body passed
    /// through frame by frame. When the response is being stored, each data frame is also copied
    /// into a buffer; the entry is stored only when the body ends successfully, so a body that
    /// fails, or is dropped before its end, is never stored. Nor is one whose length differs
    /// from the exact length announced (`Content-Length`, or an exact size hint).
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
                tee: Some(Box::new(Tee {
                    buf: BytesMut::with_capacity(expected.min(limit).min(MAX_PREALLOCATION)),
                    limit: exact.map_or(limit, |n| n.min(limit)),
                    exact: exact.is_some(),
                    storing,
                })),
            },
        }
    }

    /// Whether this body came out of the store.
    pub fn is_stored(&self) -> bool {
        matches!(self.kind, Kind::Stored { .. })
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
        }
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
                    if let (Some(t), Some(data)) = (tee.as_mut(), frame.data_ref()) {
                        if t.buf.len() + data.len() > t.limit {
                            // Longer than announced or allowed: stream the rest, store nothing.
                            *tee = None;
                        } else {
                            t.buf.extend_from_slice(data);
                        }
                    }
                    if body.is_end_stream() {
                        finish(tee);
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Some(Err(err)) => {
                    *tee = None;
                    Poll::Ready(Some(Err(err)))
                }
                None => {
                    finish(tee);
                    Poll::Ready(None)
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Stored { data } => data.is_none(),
            Kind::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Stored { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Upstream { body, .. } => body.size_hint(),
        }
    }
}

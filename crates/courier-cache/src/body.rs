//! The response body: stored bytes, or the upstream body, possibly copied into the store as it
//! streams.

use crate::service::Storing;
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
    /// fails, or is dropped before its end, is never stored.
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

pub(crate) struct Tee {
    buf: BytesMut,
    limit: usize,
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

    /// The upstream body, copied into the store once it ends successfully.
    pub(crate) fn teed(body: B, expected: usize, limit: usize, storing: Storing) -> Self {
        Self {
            kind: Kind::Upstream {
                body,
                tee: Some(Box::new(Tee {
                    buf: BytesMut::with_capacity(expected.min(limit)),
                    limit,
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
        let Tee { buf, storing, .. } = *tee;
        storing.finish(buf.freeze());
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
                            // Longer than announced: stream the rest, store nothing.
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

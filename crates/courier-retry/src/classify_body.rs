//! [`ClassifyBodyLayer`]: read the first bytes of each answer before any layer decides.
//!
//! A classifier with a body rule ([`Classifier::classify_body`]) wants to see the start of an
//! answer's body: an API that answers every failure `200 OK` with an error envelope in JSON, or
//! a body that breaks in its first bytes. [`ClassifyBody`] sits inside the attempt (in the
//! preset, under the attempt timeout), reads up to the rule's limit of each answer's body,
//! hands those bytes to the rule with the verdict of the head, and puts the verdict it returns
//! on the response as an extension, where [`Classifier::classify_response`] finds it for every
//! layer above. The bytes read are not lost: the body the caller gets starts with them.
//!
//! A body that fails within the limit makes the attempt fail: its error comes back as the
//! attempt's, a [`TransportError`] of kind read (or timeout, tls or local, when its own source
//! says so), so a retry-safe request is asked again and no layer above sees half an answer.
//! After the limit the body streams as it comes, its errors its own.
//!
//! # Cost
//!
//! Off unless the classifier has a body rule: without one the service passes the answer on
//! untouched (one branch per call). With one, every answer waits for its first bytes before
//! the caller sees its head (up to the limit, or the whole body when it is shorter): the
//! attempt takes that much longer to answer, and its head is bounded by the attempt timeout
//! and the deadline above, which now cover those bytes too. Each answer costs one allocation
//! for the body, one for the frames read, and a copy of at most the limit for the rule.
//!
//! ```
//! use courier_core::{Classifier, Verdict};
//! use courier_retry::ClassifyBodyLayer;
//! use http::{Request, Response};
//! use std::convert::Infallible;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // An API that answers its errors `200 OK` with `{"error": ...}`.
//! let classifier = Classifier::new()
//!     .classify_body(64, |_head, prefix, verdict| {
//!         if prefix.starts_with(b"{\"error\"") { Verdict::transient() } else { verdict }
//!     })
//!     .unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(ClassifyBodyLayer::new(classifier.clone()))
//!     .service(service_fn(|_req: Request<String>| async {
//!         Ok::<_, Infallible>(Response::new(String::from("{\"error\": \"busy\"}")))
//!     }));
//! let res = svc.oneshot(Request::new(String::new())).await.unwrap();
//! assert!(classifier.classify(&res).may_change());
//! # }
//! ```

use bytes::Buf;
use courier_core::classify::{FailureKind, TransportError, classify_error};
use courier_core::{BoxError, Classifier, ResponseHead};
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_layer::Layer;
use tower_service::Service;

/// Applies [`ClassifyBody`]: the body rule of a [`Classifier`], applied inside the attempt.
///
/// See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ClassifyBodyLayer {
    classifier: Option<Classifier>,
}

impl ClassifyBodyLayer {
    /// A layer applying `classifier`'s body rule; a pass-through when it has none.
    pub fn new(classifier: Classifier) -> Self {
        Self {
            classifier: classifier.body_rule().is_some().then_some(classifier),
        }
    }
}

impl<S> Layer<S> for ClassifyBodyLayer {
    type Service = ClassifyBody<S>;

    fn layer(&self, inner: S) -> ClassifyBody<S> {
        ClassifyBody {
            inner,
            classifier: self.classifier.clone(),
        }
    }
}

/// Reads the first bytes of each answer for its classifier's body rule; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct ClassifyBody<S> {
    inner: S,
    classifier: Option<Classifier>,
}

impl<S> ClassifyBody<S> {
    /// `inner`, with `classifier`'s body rule applied to its answers.
    pub fn new(inner: S, classifier: Classifier) -> Self {
        ClassifyBodyLayer::new(classifier).layer(inner)
    }

    /// `inner` as it is: what the preset uses when no body rule is set.
    pub fn pass_through(inner: S) -> Self {
        Self {
            inner,
            classifier: None,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for ClassifyBody<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    RB: Body,
    RB::Error: Into<BoxError>,
{
    type Response = Response<ClassifiedBody<RB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, RB>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, req: Request<B>) -> Self::Future {
        ResponseFuture {
            state: State::Head {
                fut: self.inner.call(req),
            },
            classifier: self.classifier.clone(),
        }
    }
}

pin_project! {
    /// The response future of [`ClassifyBody`].
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F, RB: Body> {
        #[pin]
        state: State<F, RB>,
        classifier: Option<Classifier>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB: Body> {
        // Head => (done | Reading)
        Head { #[pin] fut: F },
        // Reading => done
        Reading { read: Option<Prefix<RB>> },
    }
}

/// An answer whose first bytes are being read.
struct Prefix<RB: Body> {
    parts: http::response::Parts,
    body: Pin<Box<RB>>,
    frames: VecDeque<Frame<RB::Data>>,
    bytes: Vec<u8>,
    limit: usize,
    ended: bool,
}

impl<F, RB, E> Future for ResponseFuture<F, RB>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
    RB: Body,
    RB::Error: Into<BoxError>,
{
    type Output = Result<Response<ClassifiedBody<RB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Head { fut } => {
                    let res = ready!(fut.poll(cx)).map_err(Into::into)?;
                    let Some(rule) = this.classifier.as_ref().and_then(Classifier::body_rule)
                    else {
                        return Poll::Ready(Ok(res.map(ClassifiedBody::pass)));
                    };
                    let (parts, body) = res.into_parts();
                    let read = Prefix {
                        parts,
                        body: Box::pin(body),
                        frames: VecDeque::new(),
                        bytes: Vec::new(),
                        limit: rule.limit(),
                        ended: false,
                    };
                    this.state.set(State::Reading { read: Some(read) });
                }
                StateProj::Reading { read } => {
                    let prefix = read.as_mut().expect("polled after completion");
                    ready!(prefix.poll_read(cx))?;
                    let prefix = read.take().expect("just read");
                    let classifier = this.classifier.as_ref().expect("a rule was read");
                    return Poll::Ready(Ok(prefix.classified(classifier)));
                }
            }
        }
    }
}

impl<F, RB: Body> fmt::Debug for ResponseFuture<F, RB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Head { .. } => "head",
            State::Reading { .. } => "reading",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<RB> Prefix<RB>
where
    RB: Body,
    RB::Error: Into<BoxError>,
{
    /// Reads frames until the limit is reached or the body ends; a body error is the
    /// attempt's failure.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        while self.bytes.len() < self.limit && !self.ended {
            match ready!(self.body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let take = data.remaining().min(self.limit - self.bytes.len());
                        if copy_prefix(data, take, &mut self.bytes) < take {
                            // More chunks than one look shows: the rule gets the bytes up
                            // to there, and no gap.
                            self.limit = self.bytes.len();
                        }
                    } else {
                        // Trailers end the body.
                        self.ended = true;
                    }
                    self.frames.push_back(frame);
                }
                Some(Err(e)) => return Poll::Ready(Err(body_failure(e.into()))),
                None => self.ended = true,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The answer with its verdict, its body starting with the frames read.
    fn classified(mut self, classifier: &Classifier) -> Response<ClassifiedBody<RB>> {
        let p = &self.parts;
        let head = ResponseHead::new(p.status, p.version, &p.headers, &p.extensions);
        let verdict = classifier.classify_head(&head);
        let verdict = match classifier.body_rule() {
            Some(rule) => rule.classify(&head, &self.bytes, verdict),
            None => verdict,
        };
        self.parts.extensions.insert(verdict);
        let body = ClassifiedBody {
            kind: Kind::Read {
                frames: self.frames,
                rest: (!self.ended).then_some(self.body),
            },
        };
        Response::from_parts(self.parts, body)
    }
}

/// Copies the first `take` bytes of `data` into `out`, through as many of its chunks as one
/// look shows; returns how many were copied.
fn copy_prefix<D: Buf>(data: &D, take: usize, out: &mut Vec<u8>) -> usize {
    let mut slices = [std::io::IoSlice::new(&[]); 16];
    let n = data.chunks_vectored(&mut slices);
    let mut left = take;
    for slice in &slices[..n] {
        let k = slice.len().min(left);
        out.extend_from_slice(&slice[..k]);
        left -= k;
        if left == 0 {
            break;
        }
    }
    take - left
}

/// A failure while reading an answer's first bytes: a read failure of the attempt unless its
/// source says timeout, tls or local.
fn body_failure(e: BoxError) -> BoxError {
    let kind = match classify_error(&*e) {
        kind @ (FailureKind::Timeout | FailureKind::Tls | FailureKind::Local) => kind,
        _ => FailureKind::Read,
    };
    Box::new(TransportError::new(kind, e))
}

pin_project! {
    /// The body of an answer that went through [`ClassifyBody`]: the frames read for the
    /// classifier, then the rest as it comes.
    pub struct ClassifiedBody<B: Body> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B: Body> {
        Pass { #[pin] inner: B },
        Read { frames: VecDeque<Frame<B::Data>>, rest: Option<Pin<Box<B>>> },
    }
}

impl<B: Body> ClassifiedBody<B> {
    /// `inner` as it is.
    pub(crate) fn pass(inner: B) -> Self {
        Self {
            kind: Kind::Pass { inner },
        }
    }
}

impl<B: Body> Body for ClassifiedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Pass { inner } => inner.poll_frame(cx),
            KindProj::Read { frames, rest } => {
                if let Some(frame) = frames.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match rest {
                    Some(body) => body.as_mut().poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Pass { inner } => inner.is_end_stream(),
            Kind::Read { frames, rest } => {
                frames.is_empty() && rest.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Pass { inner } => inner.size_hint(),
            Kind::Read { frames, rest } => {
                let read: u64 = frames
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.remaining() as u64))
                    .sum();
                let rest = rest
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint());
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(read));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(read));
                }
                hint
            }
        }
    }
}

impl<B: Body> fmt::Debug for ClassifiedBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Pass { .. } => "pass",
            Kind::Read { .. } => "read",
        };
        f.debug_struct("ClassifiedBody")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

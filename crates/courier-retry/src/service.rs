use crate::body::RetryBody;
use crate::future::{Ctx, ResponseFuture};
use crate::hedge;
use crate::layer::{Config, RetryLayer};
use crate::telemetry::{self, Spans};
use courier_core::idempotency::IDEMPOTENCY_KEY;
use courier_core::{Attempts, BoxError, CallContext, CallOptions};
use http::{HeaderValue, Method, Request, Response};
use http_body::Body;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

/// Retries a request while asking again may change the answer and doing so is safe.
///
/// Made by [`RetryLayer`]; see the [crate docs](crate).
///
/// # Clone
///
/// Clones share the layer's configuration and retry budget. The service has no readiness state
/// of its own: readiness is the inner service's. Which instance each attempt goes to is in
/// the [crate docs](crate#clone).
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    /// `None` in a pass-through service.
    config: Option<Arc<Config>>,
    /// The hedging of every attempt, when [`with_hedge`](Self::with_hedge) set it.
    hedge: Option<Arc<crate::hedge::Config>>,
    /// The clone of `inner` later attempts are cloned from; `None` until the first call.
    spare: Option<Arc<Spare<S>>>,
}

/// A clone of a retry service's inner service, kept aside: a call that retries clones it for
/// its later attempts. In a mutex only to be `Sync` whenever the service is `Send`.
pub(crate) struct Spare<S>(Mutex<S>);

impl<S: Clone> Spare<S> {
    /// A clone for a call's later attempts.
    pub(crate) fn service(&self) -> S {
        // A clone that panicked left the service as it was.
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

// === impl Retry ===

impl<S> Retry<S> {
    /// Wraps `inner` in the retry loop `layer` describes, sharing its budget with every
    /// other service `layer` (or a clone of it) makes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: RetryLayer) -> Self {
        Self {
            inner,
            config: Some(layer.into_config()),
            hedge: None,
            spare: None,
        }
    }

    /// The layer switched off: one attempt, straight to `inner`, with no idempotency key, no
    /// budget deposit, no copy of the request and no `Attempts` extension; the answer is
    /// `inner`'s (with [`with_hedge`](Self::with_hedge), that attempt is hedged, and the hedge
    /// keeps its own budget and copy). The same type as an active `Retry<S>`, so a stack can switch it at run time.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            config: None,
            hedge: None,
            spare: None,
        }
    }

    /// Hedges every attempt this service sends as `layer` says (the one attempt of a
    /// pass-through service too): the same as a [`HedgeLayer`](crate::hedge::HedgeLayer)
    /// just below, with no service of its own in the stack's type, and one rule for what may
    /// be repeated: an attempt is hedged only when this layer counts it safe to repeat (its
    /// classifier's retry-safe paths and the keys it generates included), however many
    /// attempts it allows; the hedge's own [`attempts`](crate::hedge::HedgeLayer::attempts)
    /// bound the copies. courier's preset hedges
    /// this way: one more service level with the bounds hedging needs, in a stack as deep as
    /// the preset's, made the compiler's work on a program naming the stack's future grow
    /// past bounds (the figures are in the `courier` crate's `preset` module docs).
    ///
    /// ```
    /// use courier_retry::hedge::HedgeLayer;
    /// use courier_retry::{Retry, RetryLayer};
    /// use std::time::Duration;
    ///
    /// let upstream = tower::service_fn(|_req: http::Request<String>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// });
    /// let retry = Retry::new(upstream, RetryLayer::new())
    ///     .with_hedge(HedgeLayer::new().after(Duration::from_millis(50)));
    /// assert!(retry.is_hedged());
    /// ```
    pub fn with_hedge(mut self, layer: crate::hedge::HedgeLayer) -> Self {
        self.hedge = Some(Arc::clone(layer.config()));
        self
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through), and hedges
    /// nothing.
    pub const fn is_pass_through(&self) -> bool {
        self.config.is_none() && self.hedge.is_none()
    }

    /// Whether [`with_hedge`](Self::with_hedge) set hedging.
    pub const fn is_hedged(&self) -> bool {
        self.hedge.is_some()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably. The next call's retries are cloned from it as it is then.
    pub fn get_mut(&mut self) -> &mut S {
        self.spare = None;
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for Retry<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Body + Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(config) = self.config.clone() else {
            let fut = hedge::call(self.hedge.as_ref(), &mut self.inner, req, None);
            return ResponseFuture::pass(fut);
        };
        let start = Instant::now();

        let (mut parts, body) = req.into_parts();
        if config.generate_keys
            && (parts.method == Method::POST || parts.method == Method::PATCH)
            && !parts.headers.contains_key(IDEMPOTENCY_KEY)
        {
            let mut buf = uuid::Uuid::encode_buffer();
            let key = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
            parts.headers.insert(
                IDEMPOTENCY_KEY,
                HeaderValue::from_str(key).expect("a hyphenated uuid is a valid header value"),
            );
        }
        if let Some(budget) = &config.budget {
            budget.deposit(&parts, start);
        }
        // The caller's options for this call, read with the deadline from the one context.
        let (deadline, options) = match CallContext::get(&parts.extensions) {
            Some(call) => (call.deadline(), *call.options()),
            None => (None, CallOptions::new()),
        };
        let retry_safe = match options.retry_safety() {
            Some(safe) => safe,
            None => config.is_retry_safe(&parts),
        };
        let max_attempts = options.max_attempts().unwrap_or(config.attempts);
        let template = if max_attempts > 1 {
            body.try_clone_body()
        } else {
            None
        };
        let call_seq = if config.seed.is_some() {
            config.calls.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        // The first attempt takes the request as it is; the template keeps copies for later
        // attempts. Extensions that hold nothing but the call's context with its deadline and
        // no options (the preset's case) are not cloned (a clone of a non-empty map allocates
        // three times): a retry puts a context with the deadline back.
        let template_parts =
            if deadline.is_some() && options.is_empty() && parts.extensions.len() == 1 {
                let extensions = std::mem::take(&mut parts.extensions);
                let template = parts.clone();
                parts.extensions = extensions;
                template
            } else {
                parts.clone()
            };
        // The first attempt goes to the instance poll_ready made ready, which stays here (with
        // whatever it learnt from the call, such as the breaker or bucket it used); a clone of
        // the spare drives later attempts, made ready again before each.
        let spans = Spans::start(&parts, config.url_query, start);
        if let Some(span) = spans.attempt() {
            telemetry::inject(span, &mut parts.headers);
        }
        let fut = {
            let _attempt = spans.attempt().map(tracing::Span::enter);
            let req = Request::from_parts(parts, body);
            let retry = config.to_hedges(retry_safe);
            hedge::call(self.hedge.as_ref(), &mut self.inner, req, Some(retry))
        };
        let spare = match &self.spare {
            Some(spare) => Arc::clone(spare),
            None => Arc::clone(
                self.spare
                    .insert(Arc::new(Spare(Mutex::new(self.inner.clone())))),
            ),
        };
        ResponseFuture::new(
            fut,
            Ctx {
                config,
                hedge: self.hedge.clone(),
                spare,
                parts: template_parts,
                body: template,
                retry_safe,
                max_attempts,
                deadline,
                start,
                attempt: 1,
                records: Attempts::new(),
                rng: None,
                call_seq,
                spans,
                finished: false,
            },
        )
    }
}

impl<S: fmt::Debug> fmt::Debug for Retry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .field("hedge", &self.hedge)
            .finish()
    }
}

//! One place that decides what an answer means, for every layer.
//!
//! Retry, the circuit breaker, adaptive pacing and telemetry each ask a different question of
//! the same answer: may asking again change it? does it count against the host? is the host
//! refusing work for lack of capacity? A [`Classifier`] answers all three at once, as a
//! [`Verdict`], and every layer reads the same verdict: set one classifier on the preset
//! (`CourierLayer::classifier`) or on each layer used alone, and a 409 declared transient is
//! retried, counted by the breaker and recorded as a failure everywhere alike.
//!
//! # The default verdicts
//!
//! | answer | verdict | retry | breaker | pacing |
//! | --- | --- | --- | --- | --- |
//! | 1xx, 2xx, 3xx | success | final | success | accepted |
//! | 408 | failed | may change | not counted | accepted |
//! | 429 | overload | may change | not counted | a signal, unless hinted |
//! | 500, 502, 504 | failed | may change | failing answer | accepted |
//! | 503 | overload | may change | failing answer | a signal, unless hinted |
//! | 403 with `Retry-After` or a spent quota | overload, hinted | may change | not counted | accepted |
//! | other 4xx and 5xx (501 included) | failed | final | not counted | accepted |
//! | gRPC OK (trailers-only) | success | final | success | accepted |
//! | gRPC UNAVAILABLE | overload | may change | failing answer | a signal, unless pushback |
//! | gRPC RESOURCE_EXHAUSTED | overload | final | not counted | a signal, unless pushback |
//! | other gRPC codes | failed | final | not counted | accepted |
//! | a failure (no answer) | its [`FailureKind`] | connect, timeout, read | connect: the host is not there; tls, local: nothing; else a failure | timeouts |
//!
//! "Hinted" means the answer says when to come back (`Retry-After`, `x-ratelimit-*`, the IETF
//! `RateLimit` fields, `grpc-retry-pushback-ms`): retry obeys it and pacing leaves the host to
//! the rate limiter and retry. Every row is a setting ([`Classifier::retryable_statuses`],
//! [`Classifier::failure_statuses`], [`Classifier::overload_statuses`], the gRPC sets), and
//! [`Classifier::reclassify`] lets a function of yours have the last word on any answer.
//!
//! # Whether a request may be repeated
//!
//! [`Classifier::is_retry_safe`]: an idempotent method ([`Classifier::idempotent_methods`]),
//! a non-empty `Idempotency-Key`, the [`RetrySafe`] extension, or a path marked safe
//! ([`Classifier::retry_safe_paths`]). A connect failure may be repeated whatever the request:
//! nothing was sent.
//!
//! # From the body
//!
//! Opt-in ([`Classifier::classify_body`]): a layer inside the attempt (courier-retry's
//! `ClassifyBodyLayer`, which the preset puts under the attempt timeout) reads up to a number
//! of bytes of each answer before any layer decides. A body that breaks within them is a
//! [`FailureKind::Read`] failure of the attempt, and the bytes read are handed to your function
//! with the verdict so far. The verdict it returns travels on the response as an extension,
//! where [`Classifier::classify_response`] finds it.
//!
//! ```
//! use courier_core::classifier::{Classifier, Class, ResponseHead, Verdict};
//! use http::{HeaderMap, StatusCode, Version};
//!
//! let classifier = Classifier::new().reclassify(|head: &ResponseHead<'_>, verdict: Verdict| {
//!     match head.status() {
//!         StatusCode::CONFLICT => Verdict::transient(),
//!         _ if head.headers().contains_key("x-throttled") => Verdict::overload(false),
//!         _ => verdict,
//!     }
//! });
//!
//! let headers = HeaderMap::new();
//! let extensions = http::Extensions::new();
//! let head = ResponseHead::new(StatusCode::CONFLICT, Version::HTTP_11, &headers, &extensions);
//! let verdict = classifier.classify_response(&head);
//! assert!(verdict.may_change());
//! assert!(verdict.counts_against_host());
//! assert_eq!(verdict.class(), Class::Failed);
//! ```

use crate::classify::{FailureKind, classify_error, is_rate_limit_403};
use crate::error::{BoxError, InvalidConfig};
use crate::grpc::{GRPC_RETRY_PUSHBACK_MS, GrpcCode, status_in_headers};
use crate::hints::HintConfig;
use crate::host::RequestHead;
use crate::idempotency::{RetrySafe, has_idempotency_key};
use http::{HeaderMap, Method, StatusCode, Version};
use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What an answer is, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Class {
    /// The call did what was asked.
    Success,
    /// An answer saying this call failed.
    Failed,
    /// The host refuses work for lack of capacity. `hinted`: it said when to come back.
    Overload {
        /// The answer carries a wait the server asked for.
        hinted: bool,
    },
    /// No usable answer: a failure of this kind (a local refusal and a TLS failure included).
    Failure(FailureKind),
}

impl Class {
    /// A short snake_case name for logs and `error.type`: `success`, `failed`, `overload`, or
    /// the failure's kind.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Overload { .. } => "overload",
            Self::Failure(kind) => kind.as_str(),
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an answer means to every layer: its [`Class`], whether asking again may change it
/// (retry), and whether it counts against the host (the breaker). Adaptive pacing reads an
/// overload without a hint as its signal.
///
/// The constructors give each class its usual meaning; [`retryable`](Self::retryable) and
/// [`against_host`](Self::against_host) change either half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Verdict {
    class: Class,
    may_change: bool,
    against_host: bool,
}

impl Verdict {
    /// The call did what was asked: final, and a success for the host.
    pub const fn success() -> Self {
        Self {
            class: Class::Success,
            may_change: false,
            against_host: false,
        }
    }

    /// An answer that is final and says nothing against the host (a 404, a 422).
    pub const fn failed() -> Self {
        Self {
            class: Class::Failed,
            may_change: false,
            against_host: false,
        }
    }

    /// An answer that may change if asked again and counts against the host (a 500, a 502).
    pub const fn transient() -> Self {
        Self {
            class: Class::Failed,
            may_change: true,
            against_host: true,
        }
    }

    /// The host refuses work for lack of capacity (a 429): may change if asked again, not
    /// counted against the host. `hinted` when the answer says when to come back; one without
    /// a hint is adaptive pacing's signal and retry spreads its wait wider.
    pub const fn overload(hinted: bool) -> Self {
        Self {
            class: Class::Overload { hinted },
            may_change: true,
            against_host: false,
        }
    }

    /// A failure of `kind` with no answer: connect, timeout and read may change if asked
    /// again; a connect failure says the host is not there and a timeout or a read failure
    /// that this call failed (both count against the host); tls and local count for nothing.
    pub const fn failure(kind: FailureKind) -> Self {
        Self {
            class: Class::Failure(kind),
            may_change: kind.is_retryable(),
            against_host: !matches!(kind, FailureKind::Local | FailureKind::Tls),
        }
    }

    /// The same verdict, saying whether asking again may change the answer.
    #[must_use]
    pub const fn retryable(mut self, may_change: bool) -> Self {
        self.may_change = may_change;
        self
    }

    /// The same verdict, saying whether it counts against the host.
    #[must_use]
    pub const fn against_host(mut self, against_host: bool) -> Self {
        self.against_host = against_host;
        self
    }

    /// What the answer is.
    pub const fn class(&self) -> Class {
        self.class
    }

    /// Whether asking again may change the answer (retry reads it; whether the request may
    /// be repeated at all is [`Classifier::is_retry_safe`]).
    pub const fn may_change(&self) -> bool {
        self.may_change
    }

    /// Whether the answer counts against the host (the breaker reads it).
    pub const fn counts_against_host(&self) -> bool {
        self.against_host
    }

    /// Whether the call did what was asked.
    pub const fn is_success(&self) -> bool {
        matches!(self.class, Class::Success)
    }

    /// Whether this is an overload with no hint: adaptive pacing's signal, and the answer
    /// after which retry waits from its wider `overload_base`.
    pub const fn is_overload_signal(&self) -> bool {
        matches!(self.class, Class::Overload { hinted: false })
    }

    /// The failure's kind, when there was no answer.
    pub const fn failure_kind(&self) -> Option<FailureKind> {
        match self.class {
            Class::Failure(kind) => Some(kind),
            _ => None,
        }
    }
}

/// The head of a response, as a classifier sees it.
#[derive(Debug, Clone, Copy)]
pub struct ResponseHead<'a> {
    status: StatusCode,
    version: Version,
    headers: &'a HeaderMap,
    extensions: &'a http::Extensions,
}

impl<'a> ResponseHead<'a> {
    /// A head of these parts.
    pub const fn new(
        status: StatusCode,
        version: Version,
        headers: &'a HeaderMap,
        extensions: &'a http::Extensions,
    ) -> Self {
        Self {
            status,
            version,
            headers,
            extensions,
        }
    }

    /// The head of `res`.
    pub fn of<B>(res: &'a http::Response<B>) -> Self {
        Self::new(res.status(), res.version(), res.headers(), res.extensions())
    }

    /// The status.
    pub const fn status(&self) -> StatusCode {
        self.status
    }

    /// The HTTP version.
    pub const fn version(&self) -> Version {
        self.version
    }

    /// The headers.
    pub const fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    /// The extensions.
    pub const fn extensions(&self) -> &'a http::Extensions {
        self.extensions
    }

    /// The code of a trailers-only gRPC answer (see [`status_in_headers`]).
    pub fn grpc_status(&self) -> Option<GrpcCode> {
        status_in_headers(self.headers)
    }
}

/// The verdict a layer below put on an answer from its body, if one did.
#[inline]
fn body_verdict(head: &ResponseHead<'_>) -> Option<Verdict> {
    if head.extensions.is_empty() {
        return None;
    }
    head.extensions.get::<Verdict>().copied()
}

/// A set of statuses, one bit each: membership is a load and a mask.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StatusSet([u64; 16]);

impl StatusSet {
    /// No status.
    pub const fn empty() -> Self {
        Self([0; 16])
    }

    /// These statuses.
    pub fn of(statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let mut set = Self::empty();
        for s in statuses {
            set.insert(s);
        }
        set
    }

    /// Adds `status`.
    pub fn insert(&mut self, status: StatusCode) {
        let n = usize::from(status.as_u16());
        if let Some(word) = self.0.get_mut(n / 64) {
            *word |= 1 << (n % 64);
        }
    }

    /// Whether `status` is in the set.
    #[inline]
    pub fn contains(&self, status: StatusCode) -> bool {
        let n = usize::from(status.as_u16());
        self.0.get(n / 64).is_some_and(|w| w & (1 << (n % 64)) != 0)
    }

    /// The statuses, in order.
    pub fn iter(&self) -> impl Iterator<Item = StatusCode> + '_ {
        (100u16..1000)
            .filter_map(|n| StatusCode::from_u16(n).ok())
            .filter(|s| self.contains(*s))
    }
}

impl fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(|s| s.as_u16()))
            .finish()
    }
}

/// A set of gRPC codes, one bit each (codes above 63 are never members).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct CodeSet(u64);

impl CodeSet {
    fn of(codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        Self(
            codes
                .into_iter()
                .filter(|c| c.get() < 64)
                .fold(0, |set, c| set | 1 << c.get()),
        )
    }

    fn contains(self, code: GrpcCode) -> bool {
        code.get() < 64 && self.0 & (1 << code.get()) != 0
    }

    fn iter(self) -> impl Iterator<Item = GrpcCode> {
        (0u16..64)
            .filter(move |c| self.0 & (1 << c) != 0)
            .map(GrpcCode::new)
    }
}

impl fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

type Reclassify = dyn Fn(&ResponseHead<'_>, Verdict) -> Verdict + Send + Sync;
type BodyFn = dyn Fn(&ResponseHead<'_>, &[u8], Verdict) -> Verdict + Send + Sync;

/// The opt-in reading of a body before the verdict ([`Classifier::classify_body`]).
#[doc(hidden)]
#[derive(Clone)]
pub struct BodyRule {
    limit: usize,
    f: Arc<BodyFn>,
}

impl BodyRule {
    /// The most bytes read before deciding.
    pub const fn limit(&self) -> usize {
        self.limit
    }

    /// The verdict on an answer whose first bytes (all of them when the body ended within the
    /// limit) are `prefix`, given the verdict on its head.
    pub fn classify(&self, head: &ResponseHead<'_>, prefix: &[u8], verdict: Verdict) -> Verdict {
        (self.f)(head, prefix, verdict)
    }
}

impl fmt::Debug for BodyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyRule")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// Decides what every answer means, for every layer: see the [module docs](self).
///
/// Cheap to clone (one `Arc`); a setter returns a classifier of its own.
#[derive(Clone)]
pub struct Classifier {
    rules: Arc<Rules>,
}

#[derive(Clone)]
struct Rules {
    retryable: StatusSet,
    failing: StatusSet,
    overload: StatusSet,
    rate_limit_403: bool,
    grpc_retryable: CodeSet,
    grpc_failing: CodeSet,
    grpc_overload: CodeSet,
    hints: HintConfig,
    methods: Vec<Method>,
    safe_paths: Vec<String>,
    reclassify: Option<Arc<Reclassify>>,
    body: Option<BodyRule>,
}

/// The statuses that may change if asked again, by default.
pub const RETRYABLE_STATUSES: [StatusCode; 6] = crate::classify::RETRYABLE_STATUSES;

/// The statuses that count against the host, by default.
pub const FAILURE_STATUSES: [StatusCode; 4] = [
    StatusCode::INTERNAL_SERVER_ERROR,
    StatusCode::BAD_GATEWAY,
    StatusCode::SERVICE_UNAVAILABLE,
    StatusCode::GATEWAY_TIMEOUT,
];

/// The statuses that say the host refuses work for lack of capacity, by default.
pub const OVERLOAD_STATUSES: [StatusCode; 2] = [
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::SERVICE_UNAVAILABLE,
];

/// The methods that may be repeated after the request may have reached the server, by
/// default (RFC 9110's idempotent methods).
pub const IDEMPOTENT_METHODS: [Method; 6] = [
    Method::GET,
    Method::HEAD,
    Method::OPTIONS,
    Method::TRACE,
    Method::PUT,
    Method::DELETE,
];

impl Default for Classifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Classifier {
    /// The defaults of the [module docs](self): what courier's layers decide unless told
    /// otherwise.
    pub fn new() -> Self {
        Self {
            rules: Arc::new(Rules {
                retryable: StatusSet::of(RETRYABLE_STATUSES),
                failing: StatusSet::of(FAILURE_STATUSES),
                overload: StatusSet::of(OVERLOAD_STATUSES),
                rate_limit_403: true,
                grpc_retryable: CodeSet::of([GrpcCode::UNAVAILABLE]),
                grpc_failing: CodeSet::of([GrpcCode::UNAVAILABLE]),
                grpc_overload: CodeSet::of([GrpcCode::UNAVAILABLE, GrpcCode::RESOURCE_EXHAUSTED]),
                hints: HintConfig::new(),
                methods: IDEMPOTENT_METHODS.to_vec(),
                safe_paths: Vec::new(),
                reclassify: None,
                body: None,
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Rules)) -> Self {
        f(Arc::make_mut(&mut self.rules));
        self
    }

    /// The statuses that may change if asked again. Defaults to 408, 429, 500, 502, 503, 504
    /// ([`RETRYABLE_STATUSES`]).
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for a status below 400: a success or a redirect is an answer, and
    /// retrying it would only repeat it until the attempts run out. (To retry such an answer
    /// anyway, say so with [`reclassify`](Self::reclassify).)
    pub fn retryable_statuses(
        self,
        statuses: impl IntoIterator<Item = StatusCode>,
    ) -> Result<Self, InvalidConfig> {
        let statuses: Vec<StatusCode> = statuses.into_iter().collect();
        if let Some(bad) = statuses.iter().find(|s| !(400..=599).contains(&s.as_u16())) {
            return Err(InvalidConfig::new(
                "a retryable status must be an error status (400 to 599)",
                bad,
                "only the statuses that may change if asked again, such as 503",
            ));
        }
        Ok(self.with(|r| r.retryable = StatusSet::of(statuses)))
    }

    /// The statuses that count against the host: the breaker's failing answers. Defaults to
    /// 500, 502, 503 and 504 ([`FAILURE_STATUSES`]).
    pub fn failure_statuses(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let set = StatusSet::of(statuses);
        self.with(|r| r.failing = set)
    }

    /// The statuses that say the host refuses work for lack of capacity: without a server
    /// hint, adaptive pacing's signal, and retry's wider backoff. Defaults to 429 and 503
    /// ([`OVERLOAD_STATUSES`]).
    pub fn overload_statuses(self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        let set = StatusSet::of(statuses);
        self.with(|r| r.overload = set)
    }

    /// Whether a 403 with `Retry-After` or a spent quota counts as a rate limit: a hinted
    /// overload that may change after the server's wait. Defaults to `true`.
    pub fn rate_limit_403(self, enabled: bool) -> Self {
        self.with(|r| r.rate_limit_403 = enabled)
    }

    /// The gRPC codes that may change if asked again, read from a trailers-only answer's
    /// `grpc-status` (gRFC A6's `retryableStatusCodes`). An answer that sends its headers
    /// without a status has committed the call: it is never retried. Defaults to UNAVAILABLE.
    pub fn grpc_retryable_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        let set = CodeSet::of(codes);
        self.with(|r| r.grpc_retryable = set)
    }

    /// The gRPC codes that count against the host. Defaults to UNAVAILABLE: the service
    /// itself is not there.
    pub fn grpc_failure_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        let set = CodeSet::of(codes);
        self.with(|r| r.grpc_failing = set)
    }

    /// The gRPC codes that say the server refuses work for lack of capacity (gRPC's 503 and
    /// 429); without `grpc-retry-pushback-ms`, adaptive pacing's signal. Defaults to
    /// UNAVAILABLE and RESOURCE_EXHAUSTED.
    pub fn grpc_overload_codes(self, codes: impl IntoIterator<Item = GrpcCode>) -> Self {
        let set = CodeSet::of(codes);
        self.with(|r| r.grpc_overload = set)
    }

    /// How server hints are read when telling a hinted overload from a bare one. Defaults to
    /// [`HintConfig::new`].
    pub fn hint_config(self, hints: HintConfig) -> Self {
        self.with(|r| r.hints = hints)
    }

    /// The methods that may be repeated after the request may have reached the server; others
    /// need an `Idempotency-Key`. Defaults to GET, HEAD, OPTIONS, TRACE, PUT, DELETE
    /// ([`IDEMPOTENT_METHODS`]).
    pub fn idempotent_methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|r| r.methods = methods)
    }

    /// Paths that may be repeated whatever their method, as an idempotent method may: an exact
    /// path, or one ending in `/` for every path under it. For gRPC, a method is
    /// `/package.Service/Method` and a whole service `/package.Service/`: gRPC calls are POSTs,
    /// and only the caller knows which of its methods are safe to repeat (gRFC A6's
    /// per-method policy). A request can also say so itself with the [`RetrySafe`]
    /// extension. Defaults to none.
    pub fn retry_safe_paths<P: Into<String>>(self, paths: impl IntoIterator<Item = P>) -> Self {
        let paths = paths.into_iter().map(Into::into).collect();
        self.with(|r| r.safe_paths = paths)
    }

    /// A function of yours that has the last word on every answer: it is given the answer's
    /// head and the verdict of the settings, and returns the verdict every layer reads (a 409
    /// as [`Verdict::transient`], a 200 carrying an overload header as
    /// [`Verdict::overload`]). It runs once per attempt in each layer that reads the answer,
    /// so keep it cheap and pure. Failures with no answer are not given to it. Defaults to
    /// none.
    pub fn reclassify(
        self,
        f: impl Fn(&ResponseHead<'_>, Verdict) -> Verdict + Send + Sync + 'static,
    ) -> Self {
        let f: Arc<Reclassify> = Arc::new(f);
        self.with(|r| r.reclassify = Some(f))
    }

    /// Reads up to `limit` bytes of every answer before deciding, and lets `f` decide from
    /// them: it is given the head, the bytes read (the whole body when it ended within
    /// `limit`) and the verdict on the head, after [`reclassify`](Self::reclassify). A body
    /// that breaks within `limit` makes the attempt a [`FailureKind::Read`] failure, which
    /// retry repeats for a request that is safe to repeat. Needs a layer that reads the body
    /// (courier-retry's `ClassifyBodyLayer`, in the preset under the attempt timeout, so the
    /// reading is bounded by the attempt's time and the call's deadline).
    ///
    /// The cost: every answer's first `limit` bytes are read before the layers above see the
    /// answer (the caller's first byte waits for them), and kept in one buffer until the
    /// caller reads them. Off by default.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] for a `limit` of 0 or above 16 MiB.
    pub fn classify_body(
        self,
        limit: usize,
        f: impl Fn(&ResponseHead<'_>, &[u8], Verdict) -> Verdict + Send + Sync + 'static,
    ) -> Result<Self, InvalidConfig> {
        if limit == 0 || limit > MAX_BODY_LIMIT {
            return Err(InvalidConfig::new(
                "a body classification limit must be from 1 byte to 16 MiB",
                limit,
                "the size of an error envelope, such as 4096",
            ));
        }
        let rule = BodyRule {
            limit,
            f: Arc::new(f),
        };
        Ok(self.with(|r| r.body = Some(rule)))
    }

    /// The body rule, when [`classify_body`](Self::classify_body) set one.
    #[doc(hidden)]
    pub fn body_rule(&self) -> Option<&BodyRule> {
        self.rules.body.as_ref()
    }

    /// The statuses that may change if asked again.
    pub fn retryable_status_set(&self) -> &StatusSet {
        &self.rules.retryable
    }

    /// The statuses that count against the host.
    pub fn failure_status_set(&self) -> &StatusSet {
        &self.rules.failing
    }

    /// The verdict on an answer: one a layer below put on it (from its body) when there is
    /// one, else the settings' verdict given to [`reclassify`](Self::reclassify).
    #[inline]
    pub fn classify_response(&self, head: &ResponseHead<'_>) -> Verdict {
        body_verdict(head).unwrap_or_else(|| self.classify_head(head))
    }

    /// As [`classify_response`](Self::classify_response), for a caller that has read the
    /// head's gRPC status already (`grpc`, what [`ResponseHead::grpc_status`] gave): the
    /// headers are searched for it once.
    #[doc(hidden)]
    #[inline]
    pub fn classify_response_with_grpc(
        &self,
        head: &ResponseHead<'_>,
        grpc: Option<GrpcCode>,
    ) -> Verdict {
        body_verdict(head).unwrap_or_else(|| self.classify_head_with_grpc(head, grpc))
    }

    /// The verdict on an answer's head alone, ignoring a verdict from its body.
    #[doc(hidden)]
    pub fn classify_head(&self, head: &ResponseHead<'_>) -> Verdict {
        self.classify_head_with_grpc(head, head.grpc_status())
    }

    #[inline]
    fn classify_head_with_grpc(&self, head: &ResponseHead<'_>, grpc: Option<GrpcCode>) -> Verdict {
        let verdict = match grpc {
            Some(code) => self.of_grpc(code, head.headers),
            None => self.of_status(head.status, head.headers),
        };
        match &self.rules.reclassify {
            Some(f) => f(head, verdict),
            None => verdict,
        }
    }

    /// The verdict on a response, read from its head (see
    /// [`classify_response`](Self::classify_response)).
    pub fn classify<B>(&self, res: &http::Response<B>) -> Verdict {
        self.classify_response(&ResponseHead::of(res))
    }

    /// The verdict on a failure with no answer: its [`FailureKind`], by
    /// [`classify_error`].
    pub fn classify_error(&self, err: &(dyn Error + 'static)) -> Verdict {
        Verdict::failure(classify_error(err))
    }

    /// The verdict on either.
    pub fn classify_result<B>(&self, result: &Result<http::Response<B>, BoxError>) -> Verdict {
        match result {
            Ok(res) => self.classify(res),
            Err(e) => self.classify_error(&**e),
        }
    }

    #[inline]
    fn of_status(&self, status: StatusCode, headers: &HeaderMap) -> Verdict {
        let r = &*self.rules;
        let (retryable, failing, overload) = (
            r.retryable.contains(status),
            r.failing.contains(status),
            r.overload.contains(status),
        );
        if status.as_u16() < 400 && !(retryable || failing || overload) {
            return Verdict::success();
        }
        let rate_limit = r.rate_limit_403 && is_rate_limit_403(status, headers);
        let class = if overload {
            Class::Overload {
                hinted: r.hints.parse(headers).is_some(),
            }
        } else if rate_limit {
            Class::Overload { hinted: true }
        } else {
            Class::Failed
        };
        Verdict {
            class,
            may_change: retryable || rate_limit,
            against_host: failing,
        }
    }

    fn of_grpc(&self, code: GrpcCode, headers: &HeaderMap) -> Verdict {
        let r = &*self.rules;
        let (retryable, failing, overload) = (
            r.grpc_retryable.contains(code),
            r.grpc_failing.contains(code),
            r.grpc_overload.contains(code),
        );
        if code == GrpcCode::OK && !(retryable || failing || overload) {
            return Verdict::success();
        }
        let class = if overload {
            Class::Overload {
                hinted: headers.contains_key(GRPC_RETRY_PUSHBACK_MS),
            }
        } else {
            Class::Failed
        };
        Verdict {
            class,
            may_change: retryable,
            against_host: failing,
        }
    }

    /// Whether the request may be repeated after it may have reached the server: an
    /// idempotent method, a non-empty `Idempotency-Key`, the [`RetrySafe`] extension, or a
    /// retry-safe path.
    pub fn is_retry_safe(&self, head: &RequestHead<'_>) -> bool {
        let r = &*self.rules;
        r.methods.contains(head.method())
            || has_idempotency_key(head.headers())
            || RetrySafe::is_marked(head.extensions())
            || (!r.safe_paths.is_empty() && r.is_safe_path(head.uri().path()))
    }
}

/// The largest [`Classifier::classify_body`] limit.
pub const MAX_BODY_LIMIT: usize = 16 << 20;

impl Rules {
    fn is_safe_path(&self, path: &str) -> bool {
        self.safe_paths.iter().any(|safe| {
            if safe.ends_with('/') {
                path.starts_with(safe.as_str())
            } else {
                path == safe
            }
        })
    }
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &*self.rules;
        f.debug_struct("Classifier")
            .field("retryable_statuses", &r.retryable)
            .field("failure_statuses", &r.failing)
            .field("overload_statuses", &r.overload)
            .field("rate_limit_403", &r.rate_limit_403)
            .field("grpc_retryable_codes", &r.grpc_retryable)
            .field("grpc_failure_codes", &r.grpc_failing)
            .field("grpc_overload_codes", &r.grpc_overload)
            .field("idempotent_methods", &r.methods)
            .field("retry_safe_paths", &r.safe_paths)
            .field("reclassify", &r.reclassify.is_some())
            .field("body", &r.body)
            .finish()
    }
}

#[cfg(test)]
mod tests;

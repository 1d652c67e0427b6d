//! What layers tell each other through request and response extensions.

use crate::classify::FailureKind;
use crate::grpc::GrpcCode;
use crate::host::HostKey;
use crate::options::CallOptions;
use http::{Extensions, StatusCode};
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

/// What the layers of one call share, as one request extension: the host the call is for, its
/// deadline, the records of its earlier attempts, and the caller's options for it.
///
/// The outermost courier layer of a call that has something to put there puts it on the
/// request ([`CallContext::get_or_insert`]); every layer below reads it from there, and a
/// layer used alone makes it when it has something to put and none is there. Nothing else is
/// added to a request's extensions by courier's layers.
///
/// - **The host** ([`host`](Self::host)): the key of the call's host, made once, by the first
///   layer that needs it; every layer keyed per host ([`PerHost`](crate::PerHost), through
///   [`RequestHead::host`](crate::RequestHead::host)) takes it from here rather than from the
///   URI again. It is checked against the request's URI in place (a few comparisons), so a
///   layer in between that points the request elsewhere gets the new host.
/// - **The deadline** ([`deadline`](Self::deadline)): the absolute moment by which the whole
///   call must be done. Set by the deadline layer (or by a server-side layer from an incoming
///   request); retry never sleeps past it, the rate limiter never waits past it, the attempt
///   timeout is `min(per_attempt, left)`. It only ever shrinks
///   ([`shrink_deadline`](Self::shrink_deadline) keeps the earlier of the two).
/// - **The earlier attempts** ([`earlier_attempts`](Self::earlier_attempts)): on every attempt
///   after a call's first, retry puts the records so far here, so that the layers below tell
///   a retry from a new call (the breaker counts a call's failures once).
/// - **The caller's options** ([`options`](Self::options)): what the caller asked of this one
///   call ([`CallOptions`]: its own deadline, attempts, retry-safety, cache use), put by
///   [`CallOptions::apply`] and read by the layers the options' module names.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use courier_core::CallContext;
/// use std::time::Duration;
/// use tokio::time::Instant;
///
/// let mut req = http::Request::get("http://api.example/items").body(()).unwrap();
/// let outer = Instant::now() + Duration::from_secs(5);
/// CallContext::get_or_insert(&mut req).shrink_deadline(outer);
/// // A nested deadline never extends an earlier one.
/// let inner = Instant::now() + Duration::from_secs(30);
/// assert_eq!(CallContext::get_or_insert(&mut req).shrink_deadline(inner), outer);
/// // The host key is made by the first layer that needs it, once.
/// let host = courier_core::RequestHead::new(&req).host();
/// let ctx = CallContext::get(req.extensions()).unwrap();
/// assert_eq!(ctx.host(), Some(&host));
/// assert_eq!(host.to_string(), "http://api.example");
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    host: std::sync::OnceLock<HostKey>,
    deadline: Option<Instant>,
    /// Boxed: a retry's alone, and the context stays small for every first attempt.
    attempts: Option<Box<Attempts>>,
    options: CallOptions,
}

impl CallContext {
    /// The context of the call `ext` belong to, if a layer has put one there.
    #[inline]
    pub fn get(ext: &Extensions) -> Option<&Self> {
        if ext.is_empty() {
            return None;
        }
        ext.get::<Self>()
    }

    /// The context of the call `req` belongs to, put there if none was.
    #[inline]
    pub fn get_or_insert<B>(req: &mut http::Request<B>) -> &mut Self {
        req.extensions_mut().get_or_insert_default::<Self>()
    }

    /// As [`get_or_insert`](Self::get_or_insert), for a request taken apart.
    #[doc(hidden)]
    #[inline]
    pub fn get_or_insert_parts(parts: &mut http::request::Parts) -> &mut Self {
        parts.extensions.get_or_insert_default::<Self>()
    }

    /// The key of `uri`'s host (with `headers`' `Host` when the URI has no authority): the one
    /// this context holds when the URI still names it, else made (and kept, if the context had
    /// none).
    #[inline]
    pub fn host_of(&self, uri: &http::Uri, headers: &http::HeaderMap) -> HostKey {
        let host = self.host.get_or_init(|| HostKey::from_parts(uri, headers));
        match host.matches(uri) {
            Some(true) => host.clone(),
            _ => HostKey::from_parts(uri, headers),
        }
    }

    /// The deadline in `ext`, if a layer set one.
    #[inline]
    pub fn deadline_in(ext: &Extensions) -> Option<Instant> {
        Self::get(ext).and_then(|c| c.deadline)
    }

    /// The host the call is for, once a layer has needed it; `None` before.
    pub fn host(&self) -> Option<&HostKey> {
        self.host.get()
    }

    /// The call's deadline, if one was set.
    pub const fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Time left until the deadline (zero once passed); `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether waiting `wait` from now would end after the deadline (never without one).
    pub fn would_pass(&self, wait: Duration) -> bool {
        self.deadline
            .is_some_and(|at| Instant::now().checked_add(wait).is_none_or(|end| end > at))
    }

    /// Sets the deadline to `at` unless an earlier one is set already; returns the one in
    /// force.
    pub fn shrink_deadline(&mut self, at: Instant) -> Instant {
        let at = self.deadline.map_or(at, |set| set.min(at));
        self.deadline = Some(at);
        at
    }

    /// Sets the deadline `budget` from now (saturating at the far future) unless an earlier one
    /// is set already; returns the one in force.
    pub fn shrink_deadline_after(&mut self, budget: Duration) -> Instant {
        let now = Instant::now();
        self.shrink_deadline(now.checked_add(budget).unwrap_or_else(far_future))
    }

    /// The records of the call's earlier attempts, on a retry; `None` on a call's first
    /// attempt.
    pub fn earlier_attempts(&self) -> Option<&Attempts> {
        self.attempts.as_deref().filter(|a| a.count() > 0)
    }

    /// Puts the records of the call's attempts so far, for the attempt about to be sent.
    #[doc(hidden)]
    pub fn set_earlier_attempts(&mut self, attempts: Attempts) {
        self.attempts = Some(Box::new(attempts));
    }

    /// The caller's options for this call; none set unless a caller put some.
    #[inline]
    pub const fn options(&self) -> &CallOptions {
        &self.options
    }

    /// Puts the caller's options for this call, replacing any set before.
    pub fn set_options(&mut self, options: CallOptions) {
        self.options = options;
    }
}

fn far_future() -> Instant {
    // About thirty years: far enough to be "never", near enough not to overflow.
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// Where a wait between attempts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitSource {
    /// Our own backoff (full jitter).
    Backoff,
    /// The server's `Retry-After`.
    RetryAfter,
    /// The IETF `RateLimit` field (remaining 0 until its reset).
    RateLimit,
    /// `x-ratelimit-remaining: 0` with `x-ratelimit-reset`.
    QuotaReset,
    /// gRPC's `grpc-retry-pushback-ms`.
    Pushback,
}

impl WaitSource {
    /// A short snake_case name for logs.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Backoff => "backoff",
            Self::RetryAfter => "retry_after",
            Self::RateLimit => "ratelimit",
            Self::QuotaReset => "quota_reset",
            Self::Pushback => "pushback",
        }
    }
}

impl fmt::Display for WaitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one attempt ended with.
///
/// A gRPC answer is [`Grpc`](Self::Grpc) once its `grpc-status` is known: at once when the
/// status came with the headers (a trailers-only answer, the way a server refuses), else when
/// the answer's trailers are read. An answer that sent its headers without a status has
/// committed the call and is recorded as its [`Status`](Self::Status) until then; through
/// `courier::grpc`'s channel, the record turns into the trailers' code once they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A response with this status.
    Status(StatusCode),
    /// A gRPC answer: its code, and the HTTP status it came with.
    Grpc(GrpcAnswer),
    /// A failure of this kind.
    Failure(FailureKind),
}

/// A gRPC answer as an attempt's record keeps it: the `grpc-status` and the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrpcAnswer {
    /// The HTTP status the answer came with (200 from a gRPC server; a proxy may send others).
    pub status: StatusCode,
    /// The `grpc-status`.
    pub code: GrpcCode,
}

impl fmt::Display for GrpcAnswer {
    /// `grpc UNAVAILABLE`, with the HTTP status after it when that is not 200
    /// (`grpc UNAVAILABLE (http 503)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "grpc {}", self.code)?;
        if self.status != StatusCode::OK {
            write!(f, " (http {})", self.status.as_u16())?;
        }
        Ok(())
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(s) => write!(f, "{}", s.as_u16()),
            Self::Grpc(answer) => write!(f, "{answer}"),
            Self::Failure(k) => write!(f, "{k}"),
        }
    }
}

/// What was decided after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Another attempt follows after `wait`.
    Retry,
    /// The call ends with this attempt's answer.
    Stop,
}

impl Decision {
    /// `"retry"` or `"stop"`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Stop => "stop",
        }
    }
}

/// Why a decision was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The status cannot change by asking again (2xx, 3xx, most 4xx, 501).
    FinalStatus,
    /// The status may change by asking again.
    RetryableStatus,
    /// The failure may not happen again (a connect error, a timeout, a reset).
    RetryableFailure,
    /// A failure that is never retried: tls, or one of our own refusals.
    NeverRetried,
    /// The request may have run and repeating it is not safe (no idempotent method, no key).
    NotRetrySafe,
    /// Every allowed attempt was used.
    AttemptsExhausted,
    /// The server asked for a wait longer than `max_wait`.
    HintTooLong,
    /// The wait would end past the call's deadline.
    PastDeadline,
    /// The retry budget refused another retry.
    BudgetExhausted,
    /// The request body could not be replayed (streaming and over the replay cap).
    BodyNotReplayable,
    /// A gRPC server's `grpc-retry-pushback-ms` said not to retry (negative or unreadable).
    PushbackRefused,
    /// The call's deadline passed while this attempt was under way, and a layer outside ended
    /// the call there.
    DeadlinePassed,
    /// The caller dropped the call while this attempt was under way.
    Canceled,
}

impl Reason {
    /// A short snake_case name for logs.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::FinalStatus => "final_status",
            Self::RetryableStatus => "retryable_status",
            Self::RetryableFailure => "retryable_failure",
            Self::NeverRetried => "never_retried",
            Self::NotRetrySafe => "not_retry_safe",
            Self::AttemptsExhausted => "attempts_exhausted",
            Self::HintTooLong => "hint_exceeds_max_wait",
            Self::PastDeadline => "past_deadline",
            Self::BudgetExhausted => "retry_budget_exhausted",
            Self::BodyNotReplayable => "body_not_replayable",
            Self::PushbackRefused => "pushback_refused",
            Self::DeadlinePassed => "deadline_passed",
            Self::Canceled => "canceled",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt of a call, as the retry layer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Status or failure kind.
    pub outcome: AttemptOutcome,
    /// What the answer meant, as the [`Classifier`](crate::Classifier) decided: every layer
    /// that judges the host reads it from the records of a call's earlier attempts.
    pub verdict: crate::classifier::Verdict,
    /// Retry or stop.
    pub decision: Decision,
    /// Why.
    pub reason: Reason,
    /// The wait before the next attempt (zero when stopping).
    pub wait: Duration,
    /// Where that wait came from; `None` when there is no wait.
    pub wait_source: Option<WaitSource>,
    /// Time since the call started, when this attempt ended.
    pub elapsed: Duration,
}

impl fmt::Display for AttemptRecord {
    /// What the attempt met and what followed, as `courier request --trace` shows an attempt:
    /// `503 -> retry in 96 ms (backoff)`, `grpc UNAVAILABLE -> retry in 300 ms (pushback)`,
    /// `grpc OK -> stop (final_status)`, `connect -> stop (attempts_exhausted)`.
    ///
    /// ```
    /// use courier_core::AttemptRecord;
    /// use courier_core::extensions::{AttemptOutcome, Decision, GrpcAnswer, Reason, WaitSource};
    /// use courier_core::grpc::GrpcCode;
    /// use std::time::Duration;
    ///
    /// let mut record = AttemptRecord {
    ///     attempt: 1,
    ///     outcome: AttemptOutcome::Grpc(GrpcAnswer {
    ///         status: http::StatusCode::OK,
    ///         code: GrpcCode::UNAVAILABLE,
    ///     }),
    ///     verdict: courier_core::Verdict::overload(false).against_host(true),
    ///     decision: Decision::Retry,
    ///     reason: Reason::RetryableStatus,
    ///     wait: Duration::from_millis(300),
    ///     wait_source: Some(WaitSource::Pushback),
    ///     elapsed: Duration::from_millis(2),
    /// };
    /// assert_eq!(record.to_string(), "grpc UNAVAILABLE -> retry in 300 ms (pushback)");
    /// record.decision = Decision::Stop;
    /// record.reason = Reason::PushbackRefused;
    /// assert_eq!(record.to_string(), "grpc UNAVAILABLE -> stop (pushback_refused)");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.outcome, self.decision.as_str())?;
        match (self.decision, self.wait_source) {
            (Decision::Retry, Some(source)) => {
                write!(f, " in {} ms ({source})", self.wait.as_millis())
            }
            _ => write!(f, " ({})", self.reason),
        }
    }
}

/// Every attempt of a call, as a response extension set by the retry layer.
///
/// The first record is kept inline: a call that ends after one attempt (the common case)
/// allocates nothing for its records.
///
/// # Responses served from the cache
///
/// The cache layer sits above retry (as in courier's preset), so it puts an `Attempts` on
/// what it builds itself. A response served from the cache without an answer from below for
/// this call carries an empty `Attempts` (`count() == 0`, `last() == None`), with its
/// [`CacheStatus`] saying why: `Hit` (fresh: nothing was sent), `Revalidated` by another
/// caller's concurrent revalidation (this call sent nothing), or `Stale` because the call
/// failed with an error (the records were the error's, in its
/// [`CallFailed`](crate::CallFailed), and the stored answer replaces it without them). A
/// response the cache builds from an answer from
/// below keeps that answer's `Attempts`: `Revalidated` from this call's 304, `Stale` in place
/// of a 5xx. With a retry layer below the cache, then, every response the cache returns
/// carries `Attempts`.
///
/// ```
/// use courier_core::Attempts;
///
/// let attempts = Attempts::new();
/// assert_eq!(attempts.count(), 0);
/// assert!(attempts.last().is_none());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Attempts(Records);

#[derive(Debug, Clone, Default)]
enum Records {
    #[default]
    None,
    One(AttemptRecord),
    Many(Vec<AttemptRecord>),
    /// Records whose last one waits for its gRPC answer's trailers: every clone shares them,
    /// and sees the completed records once the trailers are read.
    AwaitingTrailers(std::sync::Arc<AwaitingTrailers>),
}

#[derive(Debug)]
struct AwaitingTrailers {
    records: Vec<AttemptRecord>,
    completed: std::sync::OnceLock<Vec<AttemptRecord>>,
}

impl AwaitingTrailers {
    fn records(&self) -> &[AttemptRecord] {
        self.completed.get().unwrap_or(&self.records)
    }
}

/// Completes the last record of a call's [`Attempts`] with the `grpc-status` of its answer's
/// trailers: what [`Attempts::await_grpc_trailers`] gives.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct GrpcTrailers(std::sync::Arc<AwaitingTrailers>);

impl GrpcTrailers {
    /// The answer ended with `code`: the last record's outcome becomes
    /// [`AttemptOutcome::Grpc`] with it, in every copy of the records. Only the first call
    /// counts.
    pub fn complete(&self, code: GrpcCode) {
        let mut records = self.0.records.clone();
        if let Some(last) = records.last_mut()
            && let AttemptOutcome::Status(status) = last.outcome
        {
            last.outcome = AttemptOutcome::Grpc(GrpcAnswer { status, code });
        }
        let _ = self.0.completed.set(records);
    }
}

impl Attempts {
    /// No attempt yet.
    pub const fn new() -> Self {
        Self(Records::None)
    }

    /// Adds the record of the attempt that just ended.
    pub fn push(&mut self, record: AttemptRecord) {
        self.0 = match std::mem::take(&mut self.0) {
            Records::None => Records::One(record),
            Records::One(first) => Records::Many(vec![first, record]),
            Records::Many(mut all) => {
                all.push(record);
                Records::Many(all)
            }
            Records::AwaitingTrailers(shared) => {
                let mut all = shared.records().to_vec();
                all.push(record);
                Records::Many(all)
            }
        };
    }

    /// For a layer that reads a gRPC answer's trailers, on the records of the call that
    /// answer ends (as its response's extension): a handle that completes the last record
    /// with the trailers' `grpc-status` ([`GrpcTrailers::complete`]), which every copy of
    /// these records then shows, those already handed on with the response included. `None`
    /// when the last record is no answer's [`AttemptOutcome::Status`] (a failure, or a
    /// trailers-only answer whose code is known).
    ///
    /// ```
    /// use courier_core::{AttemptRecord, Attempts};
    /// use courier_core::extensions::{AttemptOutcome, Decision, Reason};
    /// use courier_core::grpc::GrpcCode;
    /// use std::time::Duration;
    ///
    /// let mut attempts = Attempts::from_iter([AttemptRecord {
    ///     attempt: 1,
    ///     outcome: AttemptOutcome::Status(http::StatusCode::OK),
    ///     verdict: courier_core::Verdict::success(),
    ///     decision: Decision::Stop,
    ///     reason: Reason::FinalStatus,
    ///     wait: Duration::ZERO,
    ///     wait_source: None,
    ///     elapsed: Duration::from_millis(2),
    /// }]);
    /// let trailers = attempts.await_grpc_trailers().expect("an answer");
    /// let handed_on = attempts.clone();
    /// assert_eq!(handed_on.records()[0].to_string(), "200 -> stop (final_status)");
    /// trailers.complete(GrpcCode::OK);
    /// assert_eq!(handed_on.records()[0].to_string(), "grpc OK -> stop (final_status)");
    /// ```
    #[doc(hidden)]
    pub fn await_grpc_trailers(&mut self) -> Option<GrpcTrailers> {
        if !matches!(self.last()?.outcome, AttemptOutcome::Status(_)) {
            return None;
        }
        let shared = std::sync::Arc::new(AwaitingTrailers {
            records: self.records().to_vec(),
            completed: std::sync::OnceLock::new(),
        });
        self.0 = Records::AwaitingTrailers(shared.clone());
        Some(GrpcTrailers(shared))
    }

    /// Every record, the first attempt first.
    pub fn records(&self) -> &[AttemptRecord] {
        match &self.0 {
            Records::None => &[],
            Records::One(one) => std::slice::from_ref(one),
            Records::Many(all) => all,
            Records::AwaitingTrailers(shared) => shared.records(),
        }
    }

    /// The records, the first attempt first.
    pub fn iter(&self) -> std::slice::Iter<'_, AttemptRecord> {
        self.records().iter()
    }

    /// How many attempts were made.
    pub fn count(&self) -> usize {
        self.records().len()
    }

    /// The last record, which holds the reason the call stopped.
    pub fn last(&self) -> Option<&AttemptRecord> {
        self.records().last()
    }
}

/// The records handed over by a call dropped inside [`Attempts::of_dropped`]: `None` outside
/// one, `Some(None)` inside one before any hand-over.
type Handed = std::cell::RefCell<Option<Option<Attempts>>>;

thread_local! {
    static HANDED: Handed = const { std::cell::RefCell::new(None) };
}

impl Attempts {
    /// Runs `drop_call`, which drops a call under way, and returns the records that a layer
    /// inside it handed over while it was dropped ([`hand_over`](Self::hand_over)).
    ///
    /// How a layer that ends a call from outside (the deadline, when its time is up while the
    /// layers below still wait) learns what the call did: the retry layer's future, dropped
    /// unfinished, hands its records over, the attempt under way included. The hand-over is
    /// synchronous, on this thread, inside `drop_call`; where two nested layers hand over, the
    /// last one dropped, the outer one, is kept. Nothing is allocated unless a record is.
    ///
    /// ```
    /// use courier_core::{AttemptRecord, Attempts};
    /// use courier_core::extensions::{AttemptOutcome, Decision, Reason};
    /// use std::time::Duration;
    ///
    /// struct Call(Attempts);
    /// impl Drop for Call {
    ///     fn drop(&mut self) {
    ///         std::mem::take(&mut self.0).hand_over();
    ///     }
    /// }
    ///
    /// let record = AttemptRecord {
    ///     attempt: 1,
    ///     outcome: AttemptOutcome::Status(http::StatusCode::SERVICE_UNAVAILABLE),
    ///     verdict: courier_core::Verdict::overload(false).against_host(true),
    ///     decision: Decision::Stop,
    ///     reason: Reason::DeadlinePassed,
    ///     wait: Duration::ZERO,
    ///     wait_source: None,
    ///     elapsed: Duration::from_secs(1),
    /// };
    /// let call = Call(Attempts::from_iter([record]));
    /// let handed = Attempts::of_dropped(|| drop(call)).expect("handed over");
    /// assert_eq!(handed.count(), 1);
    /// assert!(Attempts::of_dropped(|| ()).is_none(), "nothing dropped, nothing handed");
    /// ```
    pub fn of_dropped(drop_call: impl FnOnce()) -> Option<Self> {
        /// Puts back the slot of an enclosing `of_dropped`, on a panic in `drop_call` too.
        struct Scope(Option<Option<Option<Attempts>>>);
        impl Scope {
            fn restore(&mut self) -> Option<Attempts> {
                let outer = self.0.take()?;
                HANDED
                    .try_with(|h| {
                        h.try_borrow_mut()
                            .ok()
                            .map(|mut s| std::mem::replace(&mut *s, outer))
                    })
                    .ok()
                    .flatten()
                    .flatten()
                    .flatten()
            }
        }
        impl Drop for Scope {
            fn drop(&mut self) {
                self.restore();
            }
        }
        let mut scope = Scope(Some(HANDED.with(|h| h.replace(Some(None)))));
        drop_call();
        scope.restore()
    }

    /// Hands the records of a call being dropped unfinished to the layer dropping it, when
    /// that layer asked for them with [`of_dropped`](Self::of_dropped); else drops them.
    pub fn hand_over(self) {
        // A record dropped while the slot is borrowed (a record's own drop cannot be) is lost.
        let _ = HANDED.try_with(|h| {
            if let Ok(mut slot) = h.try_borrow_mut()
                && let Some(handed) = slot.as_mut()
            {
                *handed = Some(self);
            }
        });
    }
}

impl PartialEq for Attempts {
    fn eq(&self, other: &Self) -> bool {
        self.records() == other.records()
    }
}

impl Eq for Attempts {}

impl<'a> IntoIterator for &'a Attempts {
    type Item = &'a AttemptRecord;
    type IntoIter = std::slice::Iter<'a, AttemptRecord>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl FromIterator<AttemptRecord> for Attempts {
    fn from_iter<I: IntoIterator<Item = AttemptRecord>>(iter: I) -> Self {
        let mut attempts = Self::new();
        for record in iter {
            attempts.push(record);
        }
        attempts
    }
}

/// How the cache answered, as a response extension set by the cache layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheStatus {
    /// Served from the cache without a request: the entry was fresh.
    Hit,
    /// The server answered 304; the stored body was served.
    Revalidated,
    /// Not in the cache (or not usable); the server's answer was passed on.
    Miss,
    /// The upstream failed and a stored entry within its stale-if-error window was served.
    Stale,
    /// The cache was not consulted (a method or directive the cache does not handle).
    Bypass,
}

impl CacheStatus {
    /// A short snake_case name for logs.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Revalidated => "revalidated",
            Self::Miss => "miss",
            Self::Stale => "stale",
            Self::Bypass => "bypass",
        }
    }

    /// Whether the response came out of the store rather than fresh from the server; server
    /// hints on such a response are old news and must be ignored.
    pub const fn is_from_cache(&self) -> bool {
        matches!(self, Self::Hit | Self::Revalidated | Self::Stale)
    }
}

impl fmt::Display for CacheStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_handed_over_only_to_the_drop_that_asks_the_outer_one_kept() {
        Attempts::from_iter([record(1)]).hand_over();
        assert!(
            Attempts::of_dropped(|| ()).is_none(),
            "nobody asked: dropped"
        );
        let handed = Attempts::of_dropped(|| {
            // A nested drop that asks keeps its own; the enclosing one gets what follows.
            let inner = Attempts::of_dropped(|| Attempts::from_iter([record(7)]).hand_over());
            assert_eq!(inner.map(|a| a.count()), Some(1));
            Attempts::from_iter([record(1), record(2)]).hand_over();
        });
        assert_eq!(handed.map(|a| a.count()), Some(2));
        // A drop that panics leaves no slot open behind it.
        let panicked = std::panic::catch_unwind(|| {
            Attempts::of_dropped(|| panic!("a drop that panics"));
        });
        assert!(panicked.is_err());
        Attempts::from_iter([record(1)]).hand_over();
        assert!(Attempts::of_dropped(|| ()).is_none());
    }

    fn context() -> CallContext {
        CallContext::default()
    }

    #[tokio::test(start_paused = true)]
    async fn nested_deadline_only_shrinks() {
        let mut ctx = context();
        let d1 = ctx.shrink_deadline_after(Duration::from_secs(10));
        let d2 = ctx.shrink_deadline_after(Duration::from_secs(20));
        assert_eq!(d1, d2);
        let d3 = ctx.shrink_deadline_after(Duration::from_secs(2));
        assert!(d3 < d1);
        assert_eq!(ctx.deadline(), Some(d3));
        assert_eq!(ctx.remaining(), Some(Duration::from_secs(2)));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(ctx.remaining(), Some(Duration::ZERO));
    }

    #[test]
    fn a_context_makes_its_host_once_and_finds_it_again() {
        let mut req = http::Request::get("http://API.example:80/x")
            .body(())
            .unwrap();
        assert!(CallContext::get(req.extensions()).is_none());
        assert_eq!(CallContext::deadline_in(req.extensions()), None);
        assert!(
            CallContext::get_or_insert(&mut req).host().is_none(),
            "not needed yet"
        );
        let ctx = CallContext::get(req.extensions()).expect("put there");
        assert_eq!(ctx.deadline(), None);
        assert!(ctx.earlier_attempts().is_none());
        // The first layer that needs the host makes it, and the context keeps it...
        let made = crate::RequestHead::new(&req).host();
        assert_eq!(made.to_string(), "http://api.example");
        let kept = CallContext::get(req.extensions()).and_then(CallContext::host);
        assert_eq!(kept, Some(&made));
        // ... which every later layer reads while the URI names that host ...
        assert_eq!(crate::RequestHead::new(&req).host(), made);
        // ... and the URI's once a layer in between points the request elsewhere.
        *req.uri_mut() = "http://other.example/x".parse().unwrap();
        assert_eq!(
            crate::RequestHead::new(&req).host().to_string(),
            "http://other.example"
        );
    }

    #[test]
    fn a_context_is_small() {
        // Boxed into every request's extensions by the outermost layer: kept to a few words.
        assert!(
            std::mem::size_of::<CallContext>() <= 104,
            "{}",
            std::mem::size_of::<CallContext>()
        );
    }

    #[test]
    fn earlier_attempts_are_none_until_there_are_some() {
        let mut ctx = context();
        ctx.set_earlier_attempts(Attempts::new());
        assert!(ctx.earlier_attempts().is_none());
        ctx.set_earlier_attempts(Attempts::from_iter([record(1)]));
        assert_eq!(ctx.earlier_attempts().map(Attempts::count), Some(1));
    }

    fn record(attempt: u32) -> AttemptRecord {
        AttemptRecord {
            attempt,
            outcome: AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE),
            verdict: crate::Verdict::overload(false).against_host(true),
            decision: Decision::Retry,
            reason: Reason::RetryableStatus,
            wait: Duration::from_millis(u64::from(attempt)),
            wait_source: Some(WaitSource::Backoff),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn attempts_keep_every_record_in_order() {
        let mut attempts = Attempts::new();
        for n in 1..=4 {
            attempts.push(record(n));
            assert_eq!(attempts.count(), n as usize);
            assert_eq!(attempts.last().map(|r| r.attempt), Some(n));
            let seen: Vec<u32> = attempts.iter().map(|r| r.attempt).collect();
            assert_eq!(seen, (1..=n).collect::<Vec<_>>());
        }
        let collected: Attempts = (1..=4).map(record).collect();
        assert_eq!(collected, attempts);
        let one: Attempts = std::iter::once(record(1)).collect();
        assert_ne!(one, attempts);
        assert_eq!(one.records(), &[record(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_passes_the_deadline_only_if_it_ends_after_it() {
        let mut d = context();
        assert!(
            !d.would_pass(Duration::from_secs(3600)),
            "no deadline: never"
        );
        d.shrink_deadline_after(Duration::from_secs(10));
        assert!(!d.would_pass(Duration::ZERO));
        assert!(!d.would_pass(Duration::from_secs(5)));
        assert!(
            !d.would_pass(Duration::from_secs(10)),
            "ending at the deadline is in time"
        );
        assert!(d.would_pass(Duration::from_millis(10_001)));
        assert!(d.would_pass(Duration::from_secs(60)));
    }

    #[test]
    fn every_wait_source_has_its_own_name() {
        for (source, name) in [
            (WaitSource::Backoff, "backoff"),
            (WaitSource::RetryAfter, "retry_after"),
            (WaitSource::RateLimit, "ratelimit"),
            (WaitSource::QuotaReset, "quota_reset"),
        ] {
            assert_eq!(source.as_str(), name, "{source:?}");
            assert_eq!(source.to_string(), name, "{source:?}");
        }
    }

    #[test]
    fn an_outcome_prints_its_status_code_or_failure_kind() {
        for (outcome, text) in [
            (AttemptOutcome::Status(StatusCode::OK), "200"),
            (
                AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE),
                "503",
            ),
            (AttemptOutcome::Failure(FailureKind::Connect), "connect"),
            (AttemptOutcome::Failure(FailureKind::Timeout), "timeout"),
        ] {
            assert_eq!(outcome.to_string(), text, "{outcome:?}");
        }
    }

    #[test]
    fn every_decision_has_its_own_name() {
        assert_eq!(Decision::Retry.as_str(), "retry");
        assert_eq!(Decision::Stop.as_str(), "stop");
    }

    #[test]
    fn every_reason_has_its_own_name() {
        for (reason, name) in [
            (Reason::FinalStatus, "final_status"),
            (Reason::RetryableStatus, "retryable_status"),
            (Reason::RetryableFailure, "retryable_failure"),
            (Reason::NeverRetried, "never_retried"),
            (Reason::NotRetrySafe, "not_retry_safe"),
            (Reason::AttemptsExhausted, "attempts_exhausted"),
            (Reason::HintTooLong, "hint_exceeds_max_wait"),
            (Reason::PastDeadline, "past_deadline"),
            (Reason::BudgetExhausted, "retry_budget_exhausted"),
            (Reason::BodyNotReplayable, "body_not_replayable"),
        ] {
            assert_eq!(reason.as_str(), name, "{reason:?}");
            assert_eq!(reason.to_string(), name, "{reason:?}");
        }
    }

    #[test]
    fn every_cache_status_has_its_own_name_and_says_if_it_came_from_the_store() {
        // (status, name, served from the store)
        for (status, name, from_cache) in [
            (CacheStatus::Hit, "hit", true),
            (CacheStatus::Revalidated, "revalidated", true),
            (CacheStatus::Miss, "miss", false),
            (CacheStatus::Stale, "stale", true),
            (CacheStatus::Bypass, "bypass", false),
        ] {
            assert_eq!(status.as_str(), name, "{status:?}");
            assert_eq!(status.to_string(), name, "{status:?}");
            assert_eq!(status.is_from_cache(), from_cache, "{status:?}");
        }
    }

    #[test]
    fn a_for_loop_over_attempts_sees_every_record_in_order() {
        let attempts: Attempts = (1..=3).map(record).collect();
        let mut seen = Vec::new();
        for r in &attempts {
            seen.push(r.attempt);
        }
        assert_eq!(seen, [1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn huge_budget_saturates() {
        let mut d = context();
        d.shrink_deadline_after(Duration::MAX);
        // "Never": decades away, not a year or a day.
        let twenty_years = Duration::from_secs(86_400 * 365 * 20);
        assert!(d.remaining().unwrap() > twenty_years, "{:?}", d.remaining());
        assert!(!d.would_pass(twenty_years));
        assert!(d.would_pass(Duration::MAX));
    }
}

//! The response future of [`TokenBucketRateLimit`](crate::TokenBucketRateLimit).

use crate::error::RateLimited;
use crate::layer::Shared;
use crate::store::{Decision, Denial, Entry, Grant, RateLimitStore};
use courier_core::KeyFn;
use courier_core::{BoxError, CacheStatus, WaitSource};
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, Request, Response};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep, sleep_until};
use tower_service::Service;

pin_project! {
    /// Decides (unless the service did), waits for the slot if there is one to wait for, then
    /// calls the inner service (unless the service did) and reads the server's hints off its
    /// response.
    ///
    /// Dropping the future before it called the inner service hands its slot back to the store
    /// (see [`RateLimitStore::cancel`]), and so does a refusal after the wait; nobody else waits
    /// longer because of it.
    ///
    /// A pass-through service's future is the inner service's, and nothing else.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        #[pin]
        kind: Kind<S, B, KF, St>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        Limited { #[pin] fut: Limited<S, B, KF, St> },
        Passing { #[pin] fut: S::Future },
    }
}

// === impl ResponseFuture ===

impl<S, B, KF, St> ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    #[inline]
    pub(crate) fn limited(fut: Limited<S, B, KF, St>) -> Self {
        Self {
            kind: Kind::Limited { fut },
        }
    }

    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn pass(fut: S::Future) -> Self {
        Self {
            kind: Kind::Passing { fut },
        }
    }
}

impl<S, B, ResB, KF, St> Future for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Output = Result<Response<ResB>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Limited { fut } => fut.poll(cx),
            KindProj::Passing { fut } => fut.poll(cx).map_err(Into::into),
        }
    }
}

impl<S, B, KF, St> fmt::Debug for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Limited { fut } => fut.fmt(f),
            Kind::Passing { .. } => f.write_str("ResponseFuture::Passing"),
        }
    }
}

pin_project! {
    // An active limiter's future.
    #[must_use = "futures do nothing unless polled"]
    pub(crate) struct Limited<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        #[pin]
        state: State<St::Acquire, S::Future>,
        // The instance made ready and the request, until the call starts. Boxed: a call that
        // starts at once (the usual case) carries neither, and the future stays small.
        pending: Option<Box<(S, Request<B>)>>,
        key: Held<KF::Key>,
        shared: Arc<Shared<KF, St>>,
    }

    impl<S, B, KF, St> PinnedDrop for Limited<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Dropped before the call started: give the slot back.
            let grant = match this.state.project() {
                StateProj::Sleeping { grant, .. } => grant,
                StateProj::Decided { decision: Decision::Admit(grant) } => grant,
                _ => return,
            };
            let shared = &**this.shared;
            shared.store.cancel(this.key.get(), shared.config.quota, grant);
        }
    }
}

pin_project! {
    // (Acquire | Decided) => (Sleeping | Calling | Done)
    // Sleeping => Calling
    // Calling => Done
    #[project = StateProj]
    enum State<A, F> {
        Acquire { #[pin] fut: BeforeDeadline<A> },
        Decided { decision: Decision },
        // The slot reserved, to give back if the request is never sent; the timer is boxed, as
        // only a waiting request needs one.
        Sleeping { sleep: Pin<Box<Sleep>>, grant: Grant },
        Calling { #[pin] fut: F },
        Done,
    }
}

pin_project! {
    /// A store's decision that comes later (over the network), raced against the request's
    /// deadline: the timer is armed only once the store keeps the request waiting, and when the
    /// deadline comes first the request is refused at once, nothing sent.
    pub(crate) struct BeforeDeadline<A> {
        #[pin]
        fut: A,
        deadline: Option<Instant>,
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<A: Future<Output = Result<Decision, BoxError>>> Future for BeforeDeadline<A> {
    type Output = A::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(decision) = this.fut.poll(cx) {
            return Poll::Ready(decision);
        }
        let Some(at) = *this.deadline else {
            return Poll::Pending;
        };
        let timer = this.timer.get_or_insert_with(|| Box::pin(sleep_until(at)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Ok(Decision::Deny(Denial::new(Duration::ZERO))))
    }
}

/// The key a future's request was decided under: the key itself, or the in-process store's
/// entry holding it (one reference count, no copy of the key).
pub(crate) enum Held<K> {
    Key(K),
    Entry(Arc<Entry<K>>),
}

impl<K> Held<K> {
    fn get(&self) -> &K {
        match self {
            Self::Key(key) => key,
            Self::Entry(entry) => &entry.key,
        }
    }
}

// === impl Limited ===

impl<S, B, KF, St> Limited<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    /// Waits for the store's decision, but never past `deadline`, then goes on with `pending`.
    pub(crate) fn acquiring(
        acquire: St::Acquire,
        deadline: Option<Instant>,
        pending: Box<(S, Request<B>)>,
        key: Held<KF::Key>,
        shared: Arc<Shared<KF, St>>,
    ) -> Self {
        Self {
            state: State::Acquire {
                fut: BeforeDeadline {
                    fut: acquire,
                    deadline,
                    timer: None,
                },
            },
            pending: Some(pending),
            key,
            shared,
        }
    }

    /// Goes on with a decision already taken; `pending` is `None` only for a refusal.
    pub(crate) fn decided(
        decision: Decision,
        pending: Option<Box<(S, Request<B>)>>,
        key: Held<KF::Key>,
        shared: Arc<Shared<KF, St>>,
    ) -> Self {
        Self {
            state: State::Decided { decision },
            pending,
            key,
            shared,
        }
    }

    /// The call started at once.
    #[inline]
    pub(crate) fn calling(fut: S::Future, key: Held<KF::Key>, shared: Arc<Shared<KF, St>>) -> Self {
        Self {
            state: State::Calling { fut },
            pending: None,
            key,
            shared,
        }
    }
}

impl<S, B, ResB, KF, St> Future for Limited<S, B, KF, St>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Output = Result<Response<ResB>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let decision = match this.state.as_mut().project() {
                StateProj::Calling { fut } => {
                    let result = ready!(fut.poll(cx));
                    this.state.set(State::Done);
                    if let Ok(resp) = &result {
                        observe(this.shared, this.key.get(), resp);
                    }
                    return Poll::Ready(result.map_err(Into::into));
                }
                StateProj::Acquire { fut } => match ready!(fut.poll(cx)) {
                    Ok(decision) => decision,
                    Err(err) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(err));
                    }
                },
                StateProj::Decided { decision } => *decision,
                StateProj::Sleeping { sleep, grant } => {
                    ready!(sleep.as_mut().poll(cx));
                    let now = Instant::now();
                    let deadline = deadline_of(this.pending);
                    let shared = &**this.shared;
                    // A park that came while this request waited (a 429 to one ahead of it)
                    // holds it too, within what it accepts to wait.
                    let parked = || {
                        shared
                            .store
                            .parked_until(this.key.get())
                            .filter(|&until| until > now)
                    };
                    let grant = *grant;
                    let refusal = match deadline {
                        // tokio's timer wakes on whole milliseconds, up to one after the slot:
                        // a slot just before the deadline can wake just after it. Never sent
                        // then.
                        Some(deadline) if now > deadline => Denial::new(Duration::ZERO),
                        _ => match parked() {
                            Some(until)
                                if until - now > shared.config.max_wait
                                    || deadline.is_some_and(|d| until > d) =>
                            {
                                Denial::new(until - now).parked(true)
                            }
                            Some(until) => {
                                sleep.as_mut().reset(until);
                                continue;
                            }
                            // The slot has come: from here on it is spent.
                            None => {
                                this.state.set(State::Done);
                                this.state.set(State::Calling {
                                    fut: start(this.pending),
                                });
                                continue;
                            }
                        },
                    };
                    // Never sent: the slot goes back (once: the state leaves Sleeping).
                    this.state.set(State::Done);
                    Decision::Deny(give_back(shared, this.key.get(), &grant, refusal))
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            };
            match decision {
                Decision::Deny(denial) => {
                    this.state.set(State::Done);
                    refused(this.key.get(), denial);
                    return Poll::Ready(Err(Box::new(RateLimited::new(denial.retry_in()))));
                }
                Decision::Admit(grant) => {
                    let now = Instant::now();
                    if let Some(deadline) = deadline_of(this.pending)
                        && grant.at().max(now) > deadline
                    {
                        // A slot past the deadline (a store's answer that came late): never
                        // sent, so the slot goes back, and the caller hears when it was.
                        this.state.set(State::Done);
                        let refusal = Denial::new(grant.at().saturating_duration_since(now));
                        let denial = give_back(this.shared, this.key.get(), &grant, refusal);
                        refused(this.key.get(), denial);
                        return Poll::Ready(Err(Box::new(RateLimited::new(denial.retry_in()))));
                    }
                    if grant.at() > now {
                        let wait = grant.at() - now;
                        crate::telemetry::waiting(this.key.get(), wait);
                        if wait > this.shared.config.log_waits_over {
                            tracing::info!(
                                host = ?this.key.get(),
                                wait_ms = wait.as_millis() as u64,
                                "rate limit: waiting for a slot"
                            );
                        }
                        this.state.set(State::Sleeping {
                            sleep: Box::pin(tokio::time::sleep_until(grant.at())),
                            grant,
                        });
                        continue;
                    }
                    // Out of Decided first: from the call on, the slot is spent.
                    this.state.set(State::Done);
                    this.state.set(State::Calling {
                        fut: start(this.pending),
                    });
                }
            }
        }
    }
}

/// The deadline of the request held while its slot is pending.
pub(crate) fn deadline_of<S, B>(pending: &Option<Box<(S, Request<B>)>>) -> Option<Instant> {
    pending
        .as_deref()
        .and_then(|(_, req)| courier_core::Deadline::get(req.extensions()))
        .map(|d| d.instant())
}

/// Gives back the slot of a request refused after all (it was never sent), and returns the
/// refusal, naming when a slot is free now that this one went back (or did not: a later
/// reservation may be stacked on it). An in-process store is asked; any other store cannot be
/// asked without reserving, and `refusal` stands.
#[cold]
fn give_back<KF, St>(
    shared: &Shared<KF, St>,
    key: &KF::Key,
    grant: &Grant,
    refusal: Denial,
) -> Denial
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    let quota = shared.config.quota;
    shared.store.cancel(key, quota, grant);
    match shared.store.in_process() {
        Some(store) => store.next_slot(key, quota),
        None => refusal,
    }
}

#[cold]
/// Calls the inner service with the request held while the slot was pending.
pub(crate) fn start<S, B>(pending: &mut Option<Box<(S, Request<B>)>>) -> S::Future
where
    S: Service<Request<B>>,
{
    let (mut inner, req) = *pending
        .take()
        .expect("the request is taken only when the call starts");
    inner.call(req)
}

fn refused<K: fmt::Debug + 'static>(key: &K, denial: Denial) {
    crate::telemetry::refused(key, denial.is_parked());
    tracing::debug!(
        host = ?key,
        retry_in_ms = denial.retry_in().as_millis() as u64,
        parked = denial.is_parked(),
        "rate limited: no slot soon enough"
    );
}

impl<S, B, KF, St> fmt::Debug for Limited<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (state, grant) = match &self.state {
            State::Acquire { .. } => ("acquire", None),
            State::Decided { .. } => ("decided", None),
            State::Sleeping { grant, .. } => ("sleeping", Some(grant)),
            State::Calling { .. } => ("calling", None),
            State::Done => ("done", None),
        };
        f.debug_struct("Limited")
            .field("key", self.key.get())
            .field("state", &state)
            .field("grant", &grant)
            .finish()
    }
}

/// Parks the response's key when the server asks for quiet.
#[inline]
fn observe<ResB, KF, St>(shared: &Shared<KF, St>, key: &KF::Key, resp: &Response<ResB>)
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    if shared.config.hints.is_some() && may_hint(resp.headers()) {
        // Else the usual answer: none of the fields a hint is read from.
        observe_hints(shared, key, resp);
    }
}

#[inline(never)]
fn observe_hints<ResB, KF, St>(shared: &Shared<KF, St>, key: &KF::Key, resp: &Response<ResB>)
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    let Some(hints) = &shared.config.hints else {
        return;
    };
    if resp
        .extensions()
        .get::<CacheStatus>()
        .is_some_and(CacheStatus::is_from_cache)
    {
        return; // old news: the hint was obeyed (or not) when the response was fresh
    }
    let status = resp.status().as_u16();
    let hint = match hints.parse(resp.headers()) {
        // Retry-After means "rate limited" only on these; on a redirect or a 201 it means
        // other things, and the quota fields beside it still count.
        Some(hint)
            if hint.source() == WaitSource::RetryAfter && !matches!(status, 403 | 429 | 503) =>
        {
            hints.parse_quota(resp.headers())
        }
        hint => hint,
    };
    let Some(hint) = hint else {
        return;
    };
    if hint.wait().is_zero() {
        return;
    }
    shared.store.park(key, hint.wait());
    tracing::info!(
        host = ?key,
        until = %http_date(hints.wall_clock().now().checked_add(hint.wait())),
        wait_ms = hint.wait().as_millis() as u64,
        why = hint.source().as_str(),
        status,
        "rate limit: host parked by the server"
    );
}

/// An HTTP-date for the log, or `-` for a moment HTTP dates cannot name (before 1970, after
/// 9999, or past `SystemTime`'s range), where `httpdate` would panic.
fn http_date(at: Option<std::time::SystemTime>) -> String {
    const YEAR_10000: Duration = Duration::from_secs(253_402_300_800);
    match at.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
        Some(since) if since < YEAR_10000 => httpdate::fmt_http_date(std::time::UNIX_EPOCH + since),
        _ => "-".to_owned(),
    }
}

/// Whether `headers` hold a field [`HintConfig::parse`](courier_core::HintConfig::parse) may
/// find a wait in: `Retry-After`, `RateLimit`, `RateLimit-Remaining` or `X-RateLimit-Remaining`
/// (a reset alone asks for nothing). One pass over the names, with no hashing: cheaper than
/// the parse's lookups by name when, as usual, there is nothing to find.
#[inline]
pub(crate) fn may_hint(headers: &HeaderMap) -> bool {
    !headers.is_empty()
        && headers.keys().any(|name| {
            name == RETRY_AFTER
                || name == RATELIMIT
                || name == RATELIMIT_REMAINING
                || name == X_RATELIMIT_REMAINING
        })
}

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

#[cfg(test)]
mod tests {
    use super::may_hint;
    use courier_core::HintConfig;
    use http::{HeaderMap, HeaderName, HeaderValue};
    use proptest::prelude::*;

    const NAMES: &[&str] = &[
        "Retry-After",
        "retry-after",
        "RateLimit",
        "ratelimit-remaining",
        "RateLimit-Reset",
        "ratelimit-policy",
        "X-RateLimit-Remaining",
        "x-ratelimit-reset",
        "x-ratelimit-limit",
        "date",
        "content-type",
        "content-length",
        "server",
        "x-request-id",
        "ratelimit-x",
        "retry-afterx",
    ];
    const VALUES: &[&str] = &[
        "0",
        "7",
        "120",
        "1700000042",
        "-1",
        "soon",
        "\"default\";r=0;t=10",
        "limit=10, remaining=0, reset=7",
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "",
    ];

    fn headers(pairs: &[(usize, usize)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for &(n, v) in pairs {
            h.append(
                HeaderName::from_bytes(NAMES[n].as_bytes()).unwrap(),
                HeaderValue::from_static(VALUES[v]),
            );
        }
        h
    }

    #[test]
    fn each_field_a_hint_is_read_from_passes_the_check() {
        let hinted = |pairs: &[(usize, usize)]| {
            let h = headers(pairs);
            assert!(HintConfig::new().parse(&h).is_some(), "{h:?}");
            may_hint(&h)
        };
        assert!(hinted(&[(10, 0), (0, 2)]), "Retry-After");
        assert!(hinted(&[(2, 6)]), "RateLimit, list form");
        assert!(hinted(&[(2, 7)]), "RateLimit, dictionary form");
        assert!(hinted(&[(3, 0), (4, 1)]), "RateLimit-Remaining");
        assert!(hinted(&[(9, 8), (6, 0), (7, 1)]), "X-RateLimit-Remaining");
        assert!(!may_hint(&HeaderMap::new()));
        assert!(!may_hint(&headers(&[(9, 8), (10, 6), (11, 1), (12, 5)])));
        assert!(!may_hint(&headers(&[
            (4, 1),
            (7, 1),
            (8, 2),
            (14, 0),
            (15, 1)
        ])));
    }

    proptest! {
        /// Skipping the parse never loses a hint: whenever it finds one, the check passes.
        #[test]
        fn the_check_never_hides_a_hint(
            pairs in proptest::collection::vec((0..NAMES.len(), 0..VALUES.len()), 0..8),
        ) {
            let h = headers(&pairs);
            if HintConfig::new().parse(&h).is_some() {
                prop_assert!(may_hint(&h), "{h:?}");
            }
        }
    }
}

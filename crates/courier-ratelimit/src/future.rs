//! The response future of [`TokenBucketRateLimit`](crate::TokenBucketRateLimit), and how the
//! token bucket holds a request's slot in it.

use crate::layer::Shared;
use crate::slot::{Next, Slot, SlotFuture};
use crate::store::{Decision, Denial, Entry, Grant, RateLimitStore};
use courier_core::KeyFn;
use courier_core::RateLimited;
use courier_core::{BoxError, CacheStatus, WaitSource};
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, Response};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep, sleep_until};

pub use crate::service::ResponseFuture;

/// The future of an active token bucket's request.
pub(crate) type Limited<S, B, KF, St> = SlotFuture<S, B, Bucket<KF, St>>;

/// The token bucket's hold on one request's slot: the key it was decided under, and the
/// layer's state.
pub(crate) struct Bucket<KF: KeyFn, St> {
    pub(crate) key: Held<KF::Key>,
    pub(crate) shared: Arc<Shared<KF, St>>,
}

impl<KF: KeyFn, St> fmt::Debug for Bucket<KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("key", self.key.get())
            .finish()
    }
}

impl<KF, St> Slot for Bucket<KF, St>
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Acquire = BeforeDeadline<St::Acquire>;

    fn admitted(&self, grant: &Grant, now: Instant, deadline: Option<Instant>) -> Next {
        if let Some(deadline) = deadline
            && grant.at().max(now) > deadline
        {
            // A slot past the deadline (a store's answer that came late): never sent, so the
            // slot goes back, and the caller hears when it was.
            return Next::Refuse(Denial::new(grant.at().saturating_duration_since(now)));
        }
        if grant.at() <= now {
            return Next::Go;
        }
        let wait = grant.at() - now;
        let key = self.key.get();
        crate::telemetry::waiting(key, wait);
        if wait > self.shared.config.log_waits_over {
            tracing::info!(
                host = ?key,
                wait_ms = wait.as_millis() as u64,
                "rate limit: waiting for a slot"
            );
        }
        Next::Wait(grant.at())
    }

    fn woke(&self, _grant: &Grant, now: Instant, deadline: Option<Instant>) -> Next {
        // tokio's timer wakes on whole milliseconds, up to one after the slot: a slot just
        // before the deadline can wake just after it. Never sent then.
        if deadline.is_some_and(|deadline| now > deadline) {
            return Next::Refuse(Denial::new(Duration::ZERO));
        }
        // A park that came while this request waited (a 429 to one ahead of it) holds it too,
        // within what it accepts to wait.
        let parked = self.shared.store.parked_until(self.key.get());
        match parked.filter(|&until| until > now) {
            Some(until)
                if until - now > self.shared.config.max_wait
                    || deadline.is_some_and(|d| until > d) =>
            {
                Next::Refuse(Denial::new(until - now).parked(true))
            }
            Some(until) => Next::Wait(until),
            // The slot has come.
            None => Next::Go,
        }
    }

    fn give_back(&self, grant: &Grant) {
        let shared = &*self.shared;
        shared
            .store
            .cancel(self.key.get(), shared.config.quota, grant);
    }

    /// A request whose slot went back hears when a slot is free now that it did (or did not: a
    /// later reservation may be stacked on it). An in-process store is asked; any other store
    /// cannot be asked without reserving, and the refusal stands.
    #[cold]
    fn refusal(&self, denial: Denial, gave_back: bool) -> BoxError {
        let key = self.key.get();
        let denial = match self.shared.store.in_process() {
            Some(store) if gave_back => store.next_slot(key, self.shared.config.quota),
            _ => denial,
        };
        refused(key, denial);
        Box::new(RateLimited::new(denial.retry_in()))
    }

    #[inline]
    fn answered<ResB>(&self, result: &Result<Response<ResB>, BoxError>) {
        if let Ok(resp) = result {
            observe(&self.shared, self.key.get(), resp);
        }
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

impl<A> BeforeDeadline<A> {
    pub(crate) fn new(fut: A, deadline: Option<Instant>) -> Self {
        Self {
            fut,
            deadline,
            timer: None,
        }
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

fn refused<K: fmt::Debug + 'static>(key: &K, denial: Denial) {
    crate::telemetry::refused(key, denial.is_parked());
    tracing::debug!(
        host = ?key,
        retry_in_ms = denial.retry_in().as_millis() as u64,
        parked = denial.is_parked(),
        "rate limited: no slot soon enough"
    );
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

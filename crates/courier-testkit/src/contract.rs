//! The tower readiness contract, checked the same way for every layer.
//!
//! `poll_ready` makes *this* instance ready; a clone starts unready. A layer that moves its
//! inner service into the response future must clone it, keep the clone and move out the
//! instance it made ready (`std::mem::replace`), or keep calling the ready one in place.
//! [`ReadyOnce`] is an inner service that holds a layer to that: its clones start unready, and
//! calling an instance that `poll_ready` did not make ready panics. [`check`] drives a layer
//! around one through the patterns that catch a layer calling the wrong instance.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use courier_testkit::contract;
//! use std::convert::Infallible;
//! use tower::{Layer, service_fn};
//! use tower::layer::util::Identity;
//!
//! let inner = service_fn(|n: u32| async move { Ok::<_, Infallible>(n * 2) });
//! let checked = contract::check(inner, |inner| Identity::new().layer(inner), || 21).await;
//! assert_eq!(checked.calls, contract::CALLS);
//! assert!(checked.responses.iter().all(|&n| n == 42));
//! # }
//! ```

use std::fmt;
use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use tower_service::Service;

/// How many calls [`check`] makes through the service under test.
pub const CALLS: usize = ROUNDS * 2 + 2;

/// The rounds of "made ready, cloned, called; the clone driven on its own".
const ROUNDS: usize = 3;

/// An inner service whose readiness belongs to one instance: `poll_ready` makes this instance
/// ready (once `inner` is), `call` spends it, and a clone starts unready.
///
/// # Panics
///
/// `call` panics when this instance was not made ready: the layer above called an instance
/// `poll_ready` was never called on, or called one twice on one `poll_ready`.
pub struct ReadyOnce<S> {
    inner: S,
    ready: bool,
    calls: Arc<AtomicUsize>,
}

// === impl ReadyOnce ===

impl<S> ReadyOnce<S> {
    /// Wraps `inner`, unready.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            ready: false,
            calls: Arc::default(),
        }
    }

    /// Whether this instance was made ready and not called since.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// How many calls this instance and every clone of it took.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, consuming this one.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone> Clone for ReadyOnce<S> {
    /// A clone starts unready, as tower's contract allows: readiness is per instance.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            ready: false,
            calls: Arc::clone(&self.calls),
        }
    }
}

impl<S> fmt::Debug for ReadyOnce<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadyOnce")
            .field("ready", &self.ready)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl<S, R> Service<R> for ReadyOnce<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        ready!(self.inner.poll_ready(cx))?;
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> S::Future {
        assert!(
            self.ready,
            "a layer calls only the instance that poll_ready made ready"
        );
        self.ready = false;
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.call(req)
    }
}

/// What [`check`] drove: the service under test, handed back for more checks, its answers
/// in the order the requests were made, and how many calls reached the inner service.
#[derive(Debug)]
pub struct Checked<T, R> {
    /// The service under test (the one `check` made ready, not a clone of it).
    pub service: T,
    /// Every answer, in the order its request was made.
    pub responses: Vec<R>,
    /// How many calls reached the inner [`ReadyOnce`] (and its clones): a layer that answers
    /// some calls itself (a cache hit) or sends some twice (a retry) makes it differ from
    /// [`CALLS`].
    pub calls: usize,
}

/// Wraps `inner` in a [`ReadyOnce`], then in the layer under test (`wrap`), and makes
/// [`CALLS`] calls with requests from `request`:
///
/// 1. three times: made ready, cloned, and the ready one called (the clone starts unready);
///    then the clone made ready and called on its own;
/// 2. two calls in flight at once: the second made ready and called before the first's
///    future is polled, then both awaited.
///
/// A layer that calls an instance it did not make ready panics inside [`ReadyOnce`].
///
/// # Panics
///
/// When the layer calls the wrong instance, or when `poll_ready` or a call fails (the inner
/// service given here is expected to answer every request).
pub async fn check<S, T, Req>(
    inner: S,
    wrap: impl FnOnce(ReadyOnce<S>) -> T,
    mut request: impl FnMut() -> Req,
) -> Checked<T, T::Response>
where
    T: Service<Req> + Clone,
    T::Error: fmt::Debug,
{
    let inner = ReadyOnce::new(inner);
    let calls = Arc::clone(&inner.calls);
    let mut service = wrap(inner);
    let mut responses = Vec::with_capacity(CALLS);
    for _ in 0..ROUNDS {
        made_ready(&mut service).await;
        let mut clone = service.clone();
        responses.push(answer(service.call(request())).await);
        made_ready(&mut clone).await;
        responses.push(answer(clone.call(request())).await);
    }
    made_ready(&mut service).await;
    let first = service.call(request());
    made_ready(&mut service).await;
    let second = service.call(request());
    let (first, second) = tokio::join!(answer(first), answer(second));
    responses.extend([first, second]);
    Checked {
        service,
        responses,
        calls: calls.load(Ordering::SeqCst),
    }
}

async fn made_ready<T, Req>(service: &mut T)
where
    T: Service<Req>,
    T::Error: fmt::Debug,
{
    if let Err(err) = poll_fn(|cx| service.poll_ready(cx)).await {
        panic!("poll_ready of the service under test failed: {err:?}");
    }
}

async fn answer<F, R, E>(future: F) -> R
where
    F: Future<Output = Result<R, E>>,
    E: fmt::Debug,
{
    match future.await {
        Ok(response) => response,
        Err(err) => panic!("a call through the service under test failed: {err:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::{Ready, ready};

    #[derive(Clone)]
    struct Double;

    impl Service<u32> for Double {
        type Response = u32;
        type Error = Infallible;
        type Future = Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, n: u32) -> Self::Future {
            ready(Ok(n * 2))
        }
    }

    /// Moves the instance it made ready out, as a layer whose future owns the inner service
    /// does (`Right`), or calls a fresh clone of it (`Wrong`).
    #[derive(Clone)]
    struct Moves<S> {
        inner: S,
        right: bool,
    }

    impl<S: Service<u32> + Clone> Service<u32> for Moves<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, n: u32) -> S::Future {
            let clone = self.inner.clone();
            let mut taken = if self.right {
                std::mem::replace(&mut self.inner, clone)
            } else {
                clone
            };
            taken.call(n)
        }
    }

    #[tokio::test]
    async fn a_layer_that_moves_the_ready_instance_passes() {
        let mut n = 0;
        let checked = check(
            Double,
            |inner| Moves { inner, right: true },
            || {
                n += 1;
                n
            },
        )
        .await;
        assert_eq!(checked.calls, CALLS);
        let want: Vec<u32> = (1..=CALLS as u32).map(|n| n * 2).collect();
        assert_eq!(
            checked.responses, want,
            "answers in the order of the requests"
        );
        assert!(!checked.service.inner.is_ready(), "the last call spent it");
    }

    #[tokio::test]
    #[should_panic(expected = "a layer calls only the instance that poll_ready made ready")]
    async fn a_layer_that_calls_a_clone_fails() {
        check(
            Double,
            |inner| Moves {
                inner,
                right: false,
            },
            || 1,
        )
        .await;
    }

    #[test]
    fn a_clone_starts_unready_and_shares_the_count() {
        let mut ready = ReadyOnce::new(Double);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(ready.poll_ready(&mut cx).is_ready());
        let clone = ready.clone();
        assert!(ready.is_ready() && !clone.is_ready());
        assert_eq!(ready.call(1).into_inner(), Ok(2));
        assert_eq!((ready.calls(), clone.calls()), (1, 1));
        assert!(!ready.is_ready());
    }
}

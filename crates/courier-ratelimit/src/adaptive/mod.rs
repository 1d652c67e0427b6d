//! `AdaptivePacingLayer`: paces a host at the capacity it shows, learned from its overload
//! signals, when nobody knows its quota.
//!
//! A host that says nothing but 503 when a crowd arrives is the case the token bucket cannot
//! serve: nobody configured its rate. This layer learns it, per host (or per key of your own),
//! and paces every attempt of every caller sharing the layer to it:
//!
//! - **Signals.** An answer the layer's [classifier](AdaptivePacingLayer::classifier) calls
//!   an overload without a hint (by default a bare 503 or 429), and a timeout, are overload
//!   signals; an answer with the server's own wait teaches nothing; any other answer is an
//!   accept. [Signals and accepts](#signals-and-accepts) has the whole rule.
//! - **Enough evidence.** Signals pace only when the last second holds at least
//!   [`min_answers`](AdaptivePacingLayer::min_answers) answers (10: three 503s in a quiet
//!   second are no overload), and only the path they came from while they all come from one
//!   path (its requests are paced; every other path of the host goes unpaced): a path that
//!   always refuses slows at most itself. Once signals come from a second path, the whole host
//!   is paced. A crowd calling many paths, or one, of an overloaded host is paced as it calls.
//! - **The estimate.** Once signals are half of the host's answers over the last second
//!   ([`overload_share`](AdaptivePacingLayer::overload_share): fewer are one path's trouble,
//!   not the host's), the host's rate becomes what it accepted over that second (at least
//!   [`min_rate`](AdaptivePacingLayer::min_rate)); accepts that come within the second after
//!   the signal raise it, since under overload the quick refusals arrive before the slow
//!   successes. Requests then start at most at that rate, which holds, then grows back once
//!   the signals stop, as [the ramp](#the-ramp) says: a host that keeps signalling stays near
//!   its capacity; one that stops is back to full speed within a few seconds.
//! - **When pacing does not help, it stops.** A host whose refusals are a share of whatever
//!   is sent (a path that always answers 503) accepts less as it is paced less: once what it
//!   accepts has fallen below half of where a stretch of pacing began (after the hold and a
//!   second more), pacing stops and signals are ignored for `recover_after`, leaving the
//!   refusals to retry and the breaker. A host at its capacity keeps accepting it and stays
//!   paced. One where at least half the answers, from several paths, are bare 503s for
//!   reasons of their own is paced as if overloaded: key the layer by route
//!   ([`key_by`](AdaptivePacingLayer::key_by)) where such routes answer so.
//! - **Healthy hosts pay little.** Until the first signal nothing is paced: a call costs a
//!   key comparison, a hash of its path, two reference counts (the layer's state and the
//!   host's estimate, held by the response future), one atomic load, and, when it answers,
//!   the classifier's verdict and one counted accept (a clock read and an atomic update); no
//!   allocation. BENCHMARKS.md has what that costs.
//! - **Slots** are the token bucket's: each paced request reserves one from a
//!   [`RateLimitStore`](crate::RateLimitStore) at the rate of the moment (see [the
//!   ramp](#the-ramp)) with a burst of one (decided in `call` with the in-process store),
//!   waits for it inside the response future, looks every 250 ms whether pacing has ended
//!   (then it goes at once), and gives its slot back when it is not sent: the caller dropped
//!   the future, the wait outlived the deadline, or pacing ended. Each stretch of pacing
//!   starts from a fresh bucket ([`RateLimitStore::reset`](crate::RateLimitStore::reset)).
//!   With the [`InMemoryStore`](crate::InMemoryStore) (the default) the slots are this
//!   process's; with a shared store (`store_in`, e.g. courier-redis) every replica draws its
//!   slots from the same buckets, so a crowd of replicas together keeps to the pace.
//! - **Bounded**: at most [`max_keys`](AdaptivePacingLayer::max_keys) keys are kept; when
//!   more come, keys that are unpaced and answered nothing in the last second are forgotten
//!   (forgetting one loses nothing).
//!
//! # Signals and accepts
//!
//! Each answer is judged by the layer's [`Classifier`](courier_core::Classifier)
//! ([`AdaptivePacingLayer::classifier`]; its default verdicts are the table in
//! [`courier_core::classifier`]), and the [`Verdict`](courier_core::Verdict) decides:
//!
//! - **An overload without a hint**
//!   ([`is_overload_signal`](courier_core::Verdict::is_overload_signal)) is a signal. By
//!   default: a 503 or 429 without a server hint, and a gRPC UNAVAILABLE or RESOURCE_EXHAUSTED
//!   in a trailers-only answer without `grpc-retry-pushback-ms`.
//! - **An overload with a hint** (a wait the server named: `Retry-After`, a spent
//!   `x-ratelimit-*` or `RateLimit` quota, `grpc-retry-pushback-ms`) is the server's word: the
//!   token bucket parks the host and retry waits what it says, and this layer learns nothing
//!   from it, so an explicit hint always beats the estimate. But for a rate-limiting 403
//!   (with `Retry-After` or a spent quota): it speaks of the caller's quota, not of the
//!   host's capacity, and is an accept.
//! - **A failure with no answer** counts by its kind
//!   ([`Verdict::failure_kind`](courier_core::Verdict::failure_kind)). A timeout (to the
//!   answer, or to connect) is a signal: a host too busy to accept drops the connection
//!   attempt, and the client times out. Any other connect failure (refused: nothing listens,
//!   a host that is down, which the circuit breaker judges) is an accept. Every other failure
//!   teaches nothing: a reset or a broken answer is no refusal, and our own refusals and TLS
//!   failures say nothing about the host.
//! - **Any other answer is an accept**: the host had the capacity to answer. A 500 is an
//!   accept: the answer is the path's, not the host's.
//!
//! A classifier of your own moves answers between these: one that
//! [reclassifies](courier_core::Classifier::reclassify) a 200 carrying an overload header as
//! [`Verdict::overload(false)`](courier_core::Verdict::overload) makes it a signal, and one
//! that calls a 503 a success makes it an accept.
//!
//! # The ramp
//!
//! The rate a paced host is paced at, `t` after the last signal that paced it (each such
//! signal sets the learned rate, `base`, again and starts the ramp over), with
//! [`hold`](AdaptivePacingLayer::hold), [`ramp`](AdaptivePacingLayer::ramp),
//! [`min_rate`](AdaptivePacingLayer::min_rate), [`max_rate`](AdaptivePacingLayer::max_rate)
//! and [`recover_after`](AdaptivePacingLayer::recover_after) the layer's settings:
//!
//! - `base` while `t < hold`;
//! - then `base * (1 + x³)`, with `x = (t - hold) / ramp`, growing continuously: `1 + n³`
//!   times `base` `n` ramps after the hold, that is 2 times after one, 9 after two, 28 after
//!   three, 65 after four;
//! - but a host paced at `min_rate` (it accepted no more than that over the last second, so
//!   nothing is known of its capacity) has no hold: `min_rate * 2^(t / 250 ms)`, doubling
//!   every 250 ms, so that a host back from an outage is at full speed within seconds.
//!
//! Pacing ends (every request is sent at once again) when that rate reaches `max_rate`, or
//! at `t = recover_after`, whichever comes first. A paced request reserves its slot at the
//! rate of the moment it is called. With the defaults (hold 2 s, ramp 1 s, recover after
//! 10 s), a host whose learned rate is 5/s is paced at 5/s until 2 s after its last signal,
//! 10/s at 3 s, 45/s at 4 s, 140/s at 5 s, 325/s at 6 s, and not at all from 10 s.
//!
//! # Why this rule
//!
//! TCP's AIMD halves on a loss and adds one per round trip: from a crowd's first 503 it
//! would take many rounds of refusals to come down from "unbounded" to 5 per second, and as
//! many to climb back. Netflix's concurrency limits and Envoy's adaptive concurrency bound
//! requests in flight, which cannot express "one request every 200 ms" when a round trip is
//! 50 ms. The client-side throttling of the SRE book and gRPC's retry throttling reject
//! requests locally with a probability, which is right for shedding load but turns a caller's
//! call into an error where a wait would have served it. Measuring what the host accepted is
//! what a delivery-rate estimate (BBR) does; [the ramp](#the-ramp), a plateau and then a
//! cubic, is CUBIC's shape: cautious at the capacity just measured, fast once the host has
//! shown it can take more. Paced waits, not refusals: the caller's call is served, later.
//!
//! ```
//! use courier_ratelimit::adaptive::AdaptivePacingLayer;
//! use http::{Request, Response, StatusCode};
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! // A host that serves the first 5 of a crowd and refuses the rest with a bare 503.
//! let served = Arc::new(AtomicUsize::new(0));
//! let host = service_fn(move |_req: Request<()>| {
//!     let n = served.fetch_add(1, Ordering::Relaxed);
//!     let status = if n < 5 { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
//!     async move { Ok::<_, std::convert::Infallible>(Response::builder().status(status).body(()).unwrap()) }
//! });
//! let layer = AdaptivePacingLayer::new();
//! let svc = ServiceBuilder::new().layer(layer.clone()).service(host);
//! for i in 0..10 {
//!     let req = Request::get(format!("http://api.example/orders/{i}")).body(()).unwrap();
//!     svc.clone().oneshot(req).await.unwrap();
//! }
//! // Ten answers, half of them refusals, five accepted in the last second: paced at 5 per
//! // second, every path of the host.
//! let host = courier_core::HostKey::from_request(&Request::get("http://api.example/").body(()).unwrap());
//! assert_eq!(layer.learned_rate(&host), Some(5.0));
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     let req = Request::get("http://api.example/").body(()).unwrap();
//!     svc.clone().oneshot(req).await.unwrap();
//! }
//! assert!(start.elapsed() >= Duration::from_millis(400), "{:?}", start.elapsed());
//! # }
//! ```

mod estimate;
mod layer;
mod service;

pub use layer::{
    AdaptivePacingLayer, DEFAULT_HOLD, DEFAULT_MAX_HOSTS, DEFAULT_MAX_RATE, DEFAULT_MIN_ANSWERS,
    DEFAULT_MIN_RATE, DEFAULT_OVERLOAD_SHARE, DEFAULT_RAMP, DEFAULT_RECOVER_AFTER,
};
pub use service::{AdaptivePacing, ResponseFuture};

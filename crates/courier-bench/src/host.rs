//! A mock upstream host for the simulations: a tower service with a server-side token bucket,
//! a fixed round-trip time, and a log of every request it saw.
//!
//! It runs on tokio's clock, so on paused time a simulation of minutes takes milliseconds and
//! gives the same figures on every run.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// The request and response body of the simulations.
pub type Body = Full<Bytes>;

/// How the host answers a request its bucket has no token for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `429 Too Many Requests` with `Retry-After` in whole seconds (rounded up) until the next
    /// token.
    TooManyRequests,
    /// `503 Service Unavailable` with no hint at all.
    Unavailable,
}

/// What the host allows.
#[derive(Debug, Clone, Copy)]
pub struct HostConfig {
    /// Requests served at once from a full bucket.
    pub burst: u32,
    /// Tokens per second after that; 0 refuses everything once the burst is spent.
    pub rate: f64,
    /// How a request without a token is answered.
    pub refusal: Refusal,
    /// The round trip: the host decides when the request arrives and the answer comes back
    /// this much later.
    pub rtt: Duration,
}

/// One request the host saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// When it arrived, since the host was made.
    pub at: Duration,
    /// What it was answered.
    pub status: StatusCode,
}

#[derive(Debug)]
struct State {
    /// The rate in force: the config's until [`Host::set_capacity`] changes it.
    rate: f64,
    /// The burst in force.
    burst: u32,
    tokens: f64,
    last: Instant,
    hits: Vec<Hit>,
}

/// The mock host. Clones share one bucket and one log.
#[derive(Debug, Clone)]
pub struct Host {
    config: HostConfig,
    start: Instant,
    state: Arc<Mutex<State>>,
}

// === impl Host ===

impl Host {
    /// A host with a full bucket, its clock started now.
    pub fn new(config: HostConfig) -> Self {
        let now = Instant::now();
        Self {
            config,
            start: now,
            state: Arc::new(Mutex::new(State {
                rate: config.rate,
                burst: config.burst,
                tokens: f64::from(config.burst),
                last: now,
                hits: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on the host serves `rate` per second with a burst of `burst` (a host that
    /// recovers, or one that degrades).
    pub fn set_capacity(&self, burst: u32, rate: f64) {
        let now = Instant::now();
        let mut state = self.lock();
        let refill = now.duration_since(state.last).as_secs_f64() * state.rate;
        state.tokens = (state.tokens + refill).min(f64::from(state.burst));
        state.last = now;
        state.rate = rate;
        state.burst = burst;
    }

    /// Every request seen so far, in arrival order.
    pub fn hits(&self) -> Vec<Hit> {
        self.lock().hits.clone()
    }

    /// Requests seen so far.
    pub fn sent(&self) -> usize {
        self.lock().hits.len()
    }

    /// Requests refused so far.
    pub fn refused(&self) -> usize {
        self.lock()
            .hits
            .iter()
            .filter(|h| h.status != StatusCode::OK)
            .count()
    }

    /// Requests that arrived in each whole second `[k, k + 1)` of the first `seconds`.
    pub fn per_second(&self, seconds: usize) -> Vec<usize> {
        let mut out = vec![0; seconds];
        for hit in self.lock().hits.iter() {
            let k = hit.at.as_secs() as usize;
            if let Some(n) = out.get_mut(k) {
                *n += 1;
            }
        }
        out
    }

    /// Decides one request arriving now: a token, or a refusal.
    fn admit(&self) -> Response<Body> {
        let now = Instant::now();
        let mut state = self.lock();
        let c = self.config;
        let refill = now.duration_since(state.last).as_secs_f64() * state.rate;
        state.tokens = (state.tokens + refill).min(f64::from(state.burst));
        state.last = now;
        let response = if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            Response::new(Body::from("page"))
        } else {
            let mut resp = Response::new(Body::default());
            match c.refusal {
                Refusal::TooManyRequests => {
                    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    // Whole seconds until the next token, rounded up: what servers send.
                    let wait = if state.rate > 0.0 {
                        ((1.0 - state.tokens) / state.rate).ceil().max(1.0)
                    } else {
                        3600.0
                    };
                    resp.headers_mut()
                        .insert(http::header::RETRY_AFTER, (wait as u64).into());
                }
                Refusal::Unavailable => *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
            }
            resp
        };
        state.hits.push(Hit {
            at: now.duration_since(self.start),
            status: response.status(),
        });
        response
    }
}

impl tower::Service<Request<Body>> for Host {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        let response = self.admit();
        let rtt = self.config.rtt;
        Box::pin(async move {
            tokio::time::sleep(rtt).await;
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn get() -> Request<Body> {
        Request::get("http://api.example/")
            .body(Body::default())
            .unwrap()
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn serves_the_burst_then_refuses_with_retry_after_rounded_up() {
        let host = Host::new(HostConfig {
            burst: 2,
            rate: 0.5,
            refusal: Refusal::TooManyRequests,
            rtt: Duration::from_millis(10),
        });
        for _ in 0..2 {
            assert_eq!(host.clone().oneshot(get()).await.unwrap().status(), 200);
        }
        let refused = host.clone().oneshot(get()).await.unwrap();
        assert_eq!(refused.status(), 429);
        // 20 ms after the burst: 0.01 tokens, 1.98 s to go, sent as 2.
        assert_eq!(refused.headers()["retry-after"], "2");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(host.clone().oneshot(get()).await.unwrap().status(), 200);
        assert_eq!((host.sent(), host.refused()), (4, 1));
        assert_eq!(host.per_second(3), vec![3, 0, 1]);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn unavailable_refusals_carry_no_hint() {
        let host = Host::new(HostConfig {
            burst: 0,
            rate: 0.0,
            refusal: Refusal::Unavailable,
            rtt: Duration::ZERO,
        });
        let resp = host.clone().oneshot(get()).await.unwrap();
        assert_eq!(resp.status(), 503);
        assert!(resp.headers().is_empty());
    }
}

//! `/limited/{name}?rate=&burst=`: a server-side token bucket per name.

use courier_core::excerpt::Excerpt;
use std::collections::HashMap;
use std::sync::Mutex;

use http::{HeaderValue, Request, StatusCode, header};
use tokio::time::Instant;

use crate::routes::{Resp, bad_request, number_param, query_param, text};
use crate::server::{Shared, lock};

/// Tokens per second when `rate` is not given.
const DEFAULT_RATE: f64 = 1.0;
/// The most names kept; past it the fullest buckets would be forgotten anyway, so all are.
const MAX_BUCKETS: usize = 10_000;

/// The buckets, by name.
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// A token bucket: `burst` tokens at most, `rate` new tokens per second.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bucket {
    rate: f64,
    burst: u32,
    tokens: f64,
    last: Instant,
}

// === impl Bucket ===

impl Bucket {
    /// A full bucket.
    pub(crate) fn new(rate: f64, burst: u32, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: f64::from(burst),
            last: now,
        }
    }

    /// Takes a token; `Err(seconds)` says how long until one is there, rounded up, at least 1.
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), u64> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(f64::from(self.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = ((1.0 - self.tokens) / self.rate).ceil();
            // `as` saturates; a finite positive rate keeps this finite anyway.
            Err((wait as u64).max(1))
        }
    }

    /// Follows new parameters without refilling: the tokens stay, capped at the new burst.
    fn reconfigure(&mut self, rate: f64, burst: u32) {
        self.rate = rate;
        self.burst = burst;
        self.tokens = self.tokens.min(f64::from(burst));
    }
}

/// Answers `/limited/{name}`.
pub(crate) fn limited<B>(shared: &Shared, name: &str, req: &Request<B>) -> Resp {
    if name.is_empty() {
        return text(StatusCode::NOT_FOUND, "name the bucket: /limited/{name}\n");
    }
    let rate = match query_param(req.uri(), "rate") {
        None => DEFAULT_RATE,
        Some(raw) => match raw.parse::<f64>() {
            Ok(rate) if rate.is_finite() && (1e-6..=1e9).contains(&rate) => rate,
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "rate=\"{}\" is not valid; use tokens per second, e.g. 2 or 0.5\n",
                        Excerpt::new(&raw)
                    ),
                );
            }
        },
    };
    let burst = match number_param(req.uri(), "burst", 1) {
        Ok(burst) => u32::try_from(burst.unwrap_or(1)).unwrap_or(u32::MAX),
        Err(message) => return bad_request(&message),
    };
    let now = Instant::now();
    let taken = {
        let mut buckets = lock(&shared.buckets.buckets);
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(name) {
            buckets.clear();
        }
        let bucket = buckets
            .entry(name.to_owned())
            .or_insert_with(|| Bucket::new(rate, burst, now));
        if bucket.rate != rate || bucket.burst != burst {
            bucket.reconfigure(rate, burst);
        }
        bucket.take(now)
    };
    match taken {
        Ok(()) => text(StatusCode::OK, "ok\n"),
        Err(secs) => {
            let mut resp = text(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("rate limited; retry after {secs} s\n"),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn burst_then_rate() {
        let start = Instant::now();
        let mut b = Bucket::new(2.0, 3, start);
        assert_eq!(
            (b.take(start), b.take(start), b.take(start)),
            (Ok(()), Ok(()), Ok(()))
        );
        assert_eq!(b.take(start), Err(1), "half a second rounds up to 1");
        tokio::time::advance(Duration::from_millis(499)).await;
        assert_eq!(b.take(Instant::now()), Err(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(b.take(Instant::now()), Ok(()));
        // Idle for a long time: the bucket holds `burst` at most.
        tokio::time::advance(Duration::from_secs(100)).await;
        let now = Instant::now();
        assert_eq!(
            (0..4).map(|_| b.take(now).is_ok()).collect::<Vec<_>>(),
            [true, true, true, false]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn slow_rate_rounds_retry_after_up() {
        let now = Instant::now();
        let mut b = Bucket::new(0.4, 1, now);
        assert_eq!(b.take(now), Ok(()));
        assert_eq!(b.take(now), Err(3), "2.5 s rounds up to 3");
    }

    proptest! {
        #[test]
        fn never_more_than_burst_plus_rate_times_elapsed(
            rate in 0.001f64..1000.0,
            burst in 1u32..50,
            steps in proptest::collection::vec(0u64..5_000, 1..60),
        ) {
            let start = Instant::now();
            let mut b = Bucket::new(rate, burst, start);
            let mut granted = 0u64;
            let mut at = start;
            for ms in steps {
                at += Duration::from_millis(ms);
                match b.take(at) {
                    Ok(()) => granted += 1,
                    Err(secs) => prop_assert!(secs >= 1),
                }
                let allowed = f64::from(burst) + rate * (at - start).as_secs_f64();
                prop_assert!(granted as f64 <= allowed + 1e-6, "{granted} > {allowed}");
            }
        }
    }
}

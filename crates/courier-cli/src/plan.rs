//! What `courier request` will do: built once from the arguments, then either printed
//! (`--dry-run`) or turned into the preset, so the plan shown is the plan run.

use std::fmt::{self, Write as _};
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::idempotency::{IDEMPOTENCY_KEY, has_idempotency_key, is_idempotent};
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;
use courier::retry::policy::backoff_ceiling;
use http::{HeaderMap, Method};
use url::Url;

use crate::request::RequestArgs;

/// The backoff base the CLI sets on the retry layer (the layer's own default too).
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The backoff cap the CLI sets on the retry layer (the layer's own default too).
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// The default longest server-requested wait.
pub(crate) const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

/// Header values never printed.
const SECRET_HEADERS: [http::HeaderName; 3] = [
    http::header::AUTHORIZATION,
    http::header::PROXY_AUTHORIZATION,
    http::header::COOKIE,
];

/// One request and the stack that sends it.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Attempts in all, the first included.
    pub(crate) attempts: u32,
    pub(crate) max_wait: Duration,
    pub(crate) deadline: Duration,
    pub(crate) attempt_timeout: Duration,
    pub(crate) rate: Option<(Rate, NonZeroU32)>,
    pub(crate) auto_key: bool,
    pub(crate) seed: Option<u64>,
}

// === impl Plan ===

impl Plan {
    pub(crate) fn from_args(args: &RequestArgs) -> Self {
        let mut headers = HeaderMap::new();
        for (name, value) in &args.headers {
            headers.append(name.clone(), value.clone());
        }
        if let Some(key) = &args.idempotency_key {
            headers.insert(IDEMPOTENCY_KEY, key.clone());
        }
        Self {
            method: args.method.clone(),
            url: args.url.clone(),
            headers,
            body: args
                .data
                .as_ref()
                .map(|d| Bytes::copy_from_slice(d.as_bytes()))
                .unwrap_or_default(),
            attempts: args.retries.saturating_add(1),
            max_wait: args.max_wait.unwrap_or(DEFAULT_MAX_WAIT),
            deadline: args.deadline.unwrap_or(courier::preset::DEFAULT_DEADLINE),
            attempt_timeout: args
                .attempt_timeout
                .unwrap_or(courier::preset::DEFAULT_ATTEMPT_TIMEOUT),
            rate: args.rate.zip(args.burst),
            auto_key: args.auto_idempotency_key,
            seed: args.seed,
        }
    }

    /// The preset, configured as the plan says.
    pub(crate) fn layer(&self) -> CourierLayer {
        let mut retry = RetryLayer::new()
            .attempts(self.attempts)
            .base(BACKOFF_BASE)
            .cap(BACKOFF_CAP)
            .max_wait(self.max_wait)
            .generate_idempotency_keys(self.auto_key);
        if let Some(seed) = self.seed {
            retry = retry.seed(seed);
        }
        CourierLayer::new()
            .retry(retry)
            .deadline(self.deadline)
            .attempt_timeout(self.attempt_timeout)
            .rate_limit(self.rate.map(|(rate, burst)| {
                TokenBucketRateLimitLayer::new(rate, burst).max_wait(self.max_wait)
            }))
    }

    /// The request, as the first attempt sends it (before the retry layer adds a key).
    pub(crate) fn request(&self) -> http::Request<http_body_util::Full<Bytes>> {
        let mut req = http::Request::new(http_body_util::Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self
            .url
            .as_str()
            .parse()
            .expect("parse::url checked that the URL is a valid request target");
        *req.headers_mut() = self.headers.clone();
        req
    }

    /// Whether a retry may follow a failure after which the request may have run, and why.
    pub(crate) fn retry_safety(&self) -> (bool, String) {
        let m = &self.method;
        if is_idempotent(m) {
            return (true, format!("{m} is idempotent (RFC 9110)"));
        }
        if has_idempotency_key(&self.headers) {
            return (true, format!("{m} carries an Idempotency-Key"));
        }
        let may_generate = matches!(*m, Method::POST | Method::PATCH)
            && !self.headers.contains_key(IDEMPOTENCY_KEY);
        if self.auto_key && may_generate {
            return (
                true,
                format!(
                    "{m} gets a UUID v4 Idempotency-Key before the first attempt, \
                     the same on every attempt"
                ),
            );
        }
        let key = if self.headers.contains_key(IDEMPOTENCY_KEY) {
            "a blank Idempotency-Key"
        } else {
            "no Idempotency-Key"
        };
        (
            false,
            format!(
                "{m} is not idempotent and carries {key}; it is sent again only when a \
                 connection failed before anything was sent (add --idempotency-key K or \
                 --auto-idempotency-key)"
            ),
        )
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Each retry's backoff ceiling, the retries at the cap folded into one entry.
pub(crate) fn ceilings(retries: u32) -> Vec<String> {
    let mut out = Vec::new();
    for retry in 1..=retries {
        let ceiling = backoff_ceiling(BACKOFF_BASE, BACKOFF_CAP, retry);
        if ceiling >= BACKOFF_CAP && retry < retries {
            out.push(format!(
                "retries {retry} to {retries}: {} each",
                secs(BACKOFF_CAP)
            ));
            break;
        }
        out.push(format!("retry {retry}: {}", secs(ceiling)));
    }
    out
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} {}", self.method, self.url)?;
        for (name, value) in &self.headers {
            let shown = if SECRET_HEADERS.contains(name) {
                "<redacted>".into()
            } else {
                String::from_utf8_lossy(value.as_bytes())
            };
            writeln!(f, "  {name}: {shown}")?;
        }
        if !self.body.is_empty() {
            writeln!(f, "  body: {} bytes", self.body.len())?;
        }
        let (safe, why) = self.retry_safety();
        writeln!(
            f,
            "retry-safe:      {}: {why}",
            if safe { "yes" } else { "no" }
        )?;
        let retries = self.attempts - 1;
        writeln!(
            f,
            "attempts:        {} in all ({retries} {})",
            self.attempts,
            if retries == 1 { "retry" } else { "retries" }
        )?;
        if retries > 10 {
            writeln!(
                f,
                "retry budget:    10 retries per 10 s per host, plus 10 % of calls: \
                 later retries stop with retry_budget_exhausted"
            )?;
        }
        if retries == 0 {
            writeln!(f, "backoff:         none (no retries)")?;
        } else {
            let mut line = String::new();
            let _ = write!(
                line,
                "backoff:         full jitter, each wait uniform in [0, ceiling]; ceilings: {}",
                ceilings(retries).join(", ")
            );
            writeln!(f, "{line}")?;
            writeln!(
                f,
                "                 a server's Retry-After or quota reset replaces the backoff"
            )?;
        }
        writeln!(
            f,
            "max wait:        {} (a server asking longer gets its answer back at once)",
            secs(self.max_wait)
        )?;
        writeln!(
            f,
            "deadline:        {} for the whole call, waits and body included",
            secs(self.deadline)
        )?;
        writeln!(
            f,
            "attempt timeout: {} per attempt (to the response head)",
            secs(self.attempt_timeout)
        )?;
        match &self.rate {
            Some((rate, burst)) => writeln!(
                f,
                "rate limit:      {} requests per second, burst {burst}, per host, retries included",
                rate.as_per_second()
            )?,
            None => writeln!(f, "rate limit:      off")?,
        }
        match self.seed {
            Some(seed) => writeln!(f, "jitter seed:     {seed}")?,
            None => writeln!(f, "jitter seed:     none (random)")?,
        }
        write!(f, "dry run: nothing was sent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_then_fold_at_the_cap() {
        assert_eq!(ceilings(0), Vec::<String>::new());
        assert_eq!(ceilings(2), ["retry 1: 0.5 s", "retry 2: 1 s"]);
        assert_eq!(
            ceilings(9),
            [
                "retry 1: 0.5 s",
                "retry 2: 1 s",
                "retry 3: 2 s",
                "retry 4: 4 s",
                "retry 5: 8 s",
                "retry 6: 16 s",
                "retries 7 to 9: 30 s each",
            ]
        );
        // Four billion retries still print in a few entries.
        assert_eq!(ceilings(u32::MAX).len(), 7);
    }
}

//! What `courier request` will do: built once from the arguments, then either printed
//! (`--dry-run`) or turned into the preset, so the plan shown is the plan run.

use std::fmt::{self, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use courier::core::idempotency::{IDEMPOTENCY_KEY, has_idempotency_key, is_idempotent};
use courier::retry::policy::backoff_ceiling;
use http::{HeaderMap, HeaderValue, Method};
use url::Url;

use crate::request::RequestArgs;
use crate::stack::{BACKOFF_BASE, BACKOFF_CAP, OVERLOAD_BASE, Stack};

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
    /// What the body is, as `--dry-run` says it; `None` for none.
    pub(crate) body: Option<String>,
    pub(crate) stack: Stack,
    /// The User-Agent sent when `headers` has none; `None` sends none.
    pub(crate) user_agent: Option<HeaderValue>,
    /// The `--cacert` file.
    pub(crate) cacert: Option<PathBuf>,
    /// The `--cert` file.
    pub(crate) cert: Option<PathBuf>,
}

// === impl Plan ===

impl Plan {
    /// The plan of `args`, sending the body `body` describes.
    pub(crate) fn from_args(args: &RequestArgs, body: Option<String>) -> Self {
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
            body,
            stack: Stack::from_args(&args.stack),
            user_agent: args.client.user_agent_shown(),
            cacert: args.client.cacert_path().map(Into::into),
            cert: args.client.cert_path().map(Into::into),
        }
    }

    /// The request with `body`, as the first attempt sends it (before the retry layer adds a
    /// key).
    pub(crate) fn request<B>(&self, body: B) -> http::Request<B> {
        build_request(&self.method, &self.url, self.headers.clone(), body)
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
        if self.stack.auto_key && may_generate {
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

/// Each retry's backoff ceiling from `base`, the retries at the cap folded into one entry.
pub(crate) fn ceilings(base: Duration, retries: u32) -> Vec<String> {
    let mut out = Vec::new();
    for retry in 1..=retries {
        let ceiling = backoff_ceiling(base, BACKOFF_CAP, retry);
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
        if let Some(body) = &self.body {
            writeln!(f, "  body: {body}")?;
        }
        let (safe, why) = self.retry_safety();
        writeln!(
            f,
            "retry-safe:      {}: {why}",
            if safe { "yes" } else { "no" }
        )?;
        let stack = &self.stack;
        let retries = stack.attempts - 1;
        writeln!(
            f,
            "attempts:        {} in all ({retries} {})",
            stack.attempts,
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
                ceilings(BACKOFF_BASE, retries).join(", ")
            );
            writeln!(f, "{line}")?;
            writeln!(
                f,
                "                 after a 503 or 429 without a hint: {}",
                ceilings(OVERLOAD_BASE, retries).join(", ")
            )?;
            writeln!(
                f,
                "                 a server's Retry-After or quota reset replaces the backoff"
            )?;
        }
        writeln!(
            f,
            "max wait:        {} (a server asking longer gets its answer back at once)",
            secs(stack.max_wait)
        )?;
        writeln!(
            f,
            "deadline:        {} for the whole call, waits and body included",
            secs(stack.deadline)
        )?;
        writeln!(
            f,
            "attempt timeout: {} per attempt (to the response head)",
            secs(stack.attempt_timeout)
        )?;
        match &stack.rate {
            Some((rate, burst)) => writeln!(
                f,
                "rate limit:      {} requests per second, burst {burst}, per host, retries included",
                rate.as_per_second()
            )?,
            None => writeln!(f, "rate limit:      off")?,
        }
        match stack.seed {
            Some(seed) => writeln!(f, "jitter seed:     {seed}")?,
            None => writeln!(f, "jitter seed:     none (random)")?,
        }
        match &self.user_agent {
            _ if self.headers.contains_key(http::header::USER_AGENT) => {}
            Some(agent) => writeln!(
                f,
                "user agent:      {}",
                String::from_utf8_lossy(agent.as_bytes())
            )?,
            None => writeln!(f, "user agent:      none")?,
        }
        match &self.cacert {
            Some(path) => writeln!(
                f,
                "trusted roots:   the system's and those in {}",
                path.display()
            )?,
            None if self.url.scheme() == "https" => {
                writeln!(f, "trusted roots:   the system's")?;
            }
            None => {}
        }
        if let Some(path) = &self.cert {
            writeln!(
                f,
                "client cert:     {}, presented when the server asks for one",
                path.display()
            )?;
        }
        write!(f, "dry run: nothing was sent")
    }
}

/// A request of the CLI's: `url` was checked by `parse::url` to be a valid request target.
pub(crate) fn build_request<B>(
    method: &http::Method,
    url: &url::Url,
    headers: HeaderMap,
    body: B,
) -> http::Request<B> {
    let mut req = http::Request::new(body);
    *req.method_mut() = method.clone();
    *req.uri_mut() = url
        .as_str()
        .parse()
        .expect("parse::url checked that the URL is a valid request target");
    *req.headers_mut() = headers;
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_then_fold_at_the_cap() {
        assert_eq!(ceilings(BACKOFF_BASE, 0), Vec::<String>::new());
        assert_eq!(
            ceilings(BACKOFF_BASE, 2),
            ["retry 1: 0.5 s", "retry 2: 1 s"]
        );
        assert_eq!(
            ceilings(BACKOFF_BASE, 9),
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
        assert_eq!(ceilings(BACKOFF_BASE, u32::MAX).len(), 7);
        assert_eq!(
            ceilings(OVERLOAD_BASE, 5),
            [
                "retry 1: 2 s",
                "retry 2: 4 s",
                "retry 3: 8 s",
                "retry 4: 16 s",
                "retry 5: 30 s"
            ]
        );
    }
}

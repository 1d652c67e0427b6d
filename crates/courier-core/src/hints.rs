//! What the server asks for, as one wait.
//!
//! A server says "come back later" in several dialects:
//!
//! - `Retry-After` (RFC 9110 section 10.2.3): delay-seconds (`120`) or an HTTP-date in any of the
//!   three formats RFC 9110 accepts. A date is counted from the same response's `Date` (the
//!   server's clock), not from ours: our clock is used only when `Date` is missing or invalid, so
//!   a skewed client still waits exactly the delta the server meant.
//! - The IETF `RateLimit` field (draft-ietf-httpapi-ratelimit-headers, a structured field):
//!   `"default";r=0;t=10` means no quota is left for ten seconds. The older dictionary form
//!   `limit=10, remaining=0, reset=10` and the `RateLimit-Remaining` / `RateLimit-Reset` pair of
//!   early drafts are read too.
//! - GitHub-style `x-ratelimit-remaining: 0` with `x-ratelimit-reset`, as epoch seconds, epoch
//!   milliseconds or a delta ([`ResetFormat`]).
//!
//! When several are present, `Retry-After` wins, then `RateLimit`, then `x-ratelimit-*`. Of a
//! duplicated field, the first is read, except `RateLimit` and `RateLimit-Policy`: structured
//! lists, whose lines are joined into one (RFC 9651 section 4.2). Garbage, negative and
//! fractional values count as absent; huge values saturate and are capped at [`MAX_HINT`] (but a
//! structured field's integer has at most 15 digits: a longer one makes that field invalid, as
//! RFC 9651 says, and so absent); a moment in the past is a zero wait.
//! Nothing here panics or wraps, whatever the bytes.
//!
//! ```
//! use courier_core::hints::{HintConfig, parse_retry_after};
//! use courier_core::{ManualClock, WaitSource};
//! use http::HeaderMap;
//! use std::time::{Duration, UNIX_EPOCH};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after", "Wed, 21 Oct 2015 07:28:02 GMT".parse().unwrap());
//! headers.insert("date", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
//! // Our clock is an hour off; the server's own delta is what counts.
//! let config = HintConfig::new().clock(ManualClock::new(UNIX_EPOCH));
//! let hint = config.parse(&headers).unwrap();
//! assert_eq!(hint.wait(), Duration::from_secs(2));
//! assert_eq!(hint.source(), WaitSource::RetryAfter);
//! ```

use crate::clock::{SystemClock, WallClock};
use crate::extensions::WaitSource;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest wait a hint can ask for; larger values are capped to it (a year).
pub const MAX_HINT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Values of `x-ratelimit-reset` at or above this are epoch seconds under [`ResetFormat::Auto`]
/// (1e9 is September 2001; no real quota window is 31 years long).
pub const AUTO_EPOCH_THRESHOLD: u64 = 1_000_000_000;

/// Values of `x-ratelimit-reset` at or above this are epoch milliseconds under
/// [`ResetFormat::Auto`] (1e12 ms is September 2001; as epoch seconds it would be the year
/// 33658).
pub const AUTO_EPOCH_MILLIS_THRESHOLD: u64 = 1_000_000_000_000;

const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

/// How to read `x-ratelimit-reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResetFormat {
    /// UTC epoch seconds (GitHub, Twitter).
    EpochSeconds,
    /// Seconds from now (many others).
    DeltaSeconds,
    /// Epoch milliseconds when the value is at least [`AUTO_EPOCH_MILLIS_THRESHOLD`], epoch
    /// seconds when it is at least [`AUTO_EPOCH_THRESHOLD`], else a delta.
    #[default]
    Auto,
}

/// A server's request to wait, and which field said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHint {
    wait: Duration,
    source: WaitSource,
}

impl ServerHint {
    /// A hint to wait `wait` (capped at [`MAX_HINT`]).
    pub fn new(wait: Duration, source: WaitSource) -> Self {
        Self {
            wait: wait.min(MAX_HINT),
            source,
        }
    }

    /// How long the server asks us to wait, from when the response was parsed.
    pub const fn wait(&self) -> Duration {
        self.wait
    }

    /// Which field the wait came from.
    pub const fn source(&self) -> WaitSource {
        self.source
    }
}

/// How hints are read: the reset format and the wall clock. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HintConfig {
    reset_format: ResetFormat,
    clock: Arc<dyn WallClock>,
}

impl Default for HintConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl HintConfig {
    /// [`ResetFormat::Auto`] and the system clock.
    pub fn new() -> Self {
        Self {
            reset_format: ResetFormat::Auto,
            clock: Arc::new(SystemClock),
        }
    }

    /// How to read `x-ratelimit-reset`. Defaults to [`ResetFormat::Auto`].
    pub fn reset_format(mut self, format: ResetFormat) -> Self {
        self.reset_format = format;
        self
    }

    /// The wall clock HTTP dates are compared with when a response has no valid `Date`.
    /// Defaults to [`SystemClock`].
    pub fn clock(mut self, clock: impl WallClock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The wall clock in use.
    #[doc(hidden)]
    pub fn wall_clock(&self) -> &dyn WallClock {
        &*self.clock
    }

    /// The wait the response headers ask for, if any: `Retry-After`, else `RateLimit`, else
    /// `x-ratelimit-*`.
    pub fn parse(&self, headers: &HeaderMap) -> Option<ServerHint> {
        if let Some(v) = headers.get(http::header::RETRY_AFTER)
            && let Some(wait) = parse_retry_after(v, server_now(headers, &*self.clock))
        {
            return Some(ServerHint::new(wait, WaitSource::RetryAfter));
        }
        self.parse_quota(headers)
    }

    /// The wait the quota fields ask for, if any: `RateLimit`, else `x-ratelimit-*`;
    /// `Retry-After` is not read. For a response where `Retry-After` means something other
    /// than a rate limit (a redirect, a 201), whose quota fields still count.
    pub fn parse_quota(&self, headers: &HeaderMap) -> Option<ServerHint> {
        if let Some(wait) = parse_ratelimit(headers) {
            return Some(ServerHint::new(wait, WaitSource::RateLimit));
        }
        parse_x_ratelimit(
            headers,
            self.reset_format,
            server_now(headers, &*self.clock),
        )
        .map(|wait| ServerHint::new(wait, WaitSource::QuotaReset))
    }
}

/// The server's "now": the response's `Date` when valid, else our wall clock.
pub fn server_now(headers: &HeaderMap, clock: &dyn WallClock) -> SystemTime {
    headers
        .get(http::header::DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(|d| httpdate::parse_http_date(d.trim()).ok())
        .unwrap_or_else(|| clock.now())
}

/// Reads one `Retry-After` value: delay-seconds, or an HTTP-date counted from `now` (pass the
/// response's `Date`; see [`server_now`]).
///
/// ```
/// use courier_core::hints::parse_retry_after;
/// use http::HeaderValue;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let now = UNIX_EPOCH;
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("120"), now), Some(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("1.5"), now), None);
/// assert_eq!(parse_retry_after(&HeaderValue::from_static("-1"), now), None);
/// ```
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Some(secs) = parse_digits(text) {
        return Some(Duration::from_secs(secs).min(MAX_HINT));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(until(at, now))
}

/// Reads GitHub-style `x-ratelimit-remaining: 0` with `x-ratelimit-reset`. Returns the wait until
/// the reset only when nothing remains.
#[doc(hidden)]
pub fn parse_x_ratelimit(
    headers: &HeaderMap,
    format: ResetFormat,
    now: SystemTime,
) -> Option<Duration> {
    let remaining = digits_header(headers, &X_RATELIMIT_REMAINING)?;
    if remaining != 0 {
        return None;
    }
    let reset = digits_header(headers, &X_RATELIMIT_RESET)?;
    let epoch = match format {
        ResetFormat::EpochSeconds => Some(Duration::from_secs(reset)),
        ResetFormat::DeltaSeconds => None,
        ResetFormat::Auto if reset >= AUTO_EPOCH_MILLIS_THRESHOLD => {
            Some(Duration::from_millis(reset))
        }
        ResetFormat::Auto if reset >= AUTO_EPOCH_THRESHOLD => Some(Duration::from_secs(reset)),
        ResetFormat::Auto => None,
    };
    Some(match epoch {
        Some(since_epoch) => match UNIX_EPOCH.checked_add(since_epoch) {
            Some(at) => until(at, now),
            None => MAX_HINT,
        },
        None => Duration::from_secs(reset).min(MAX_HINT),
    })
}

/// Whether the headers say the quota is spent (`x-ratelimit-remaining: 0`, or a `RateLimit`
/// field with nothing remaining). Used to tell a rate-limiting 403 from a plain one.
#[doc(hidden)]
pub fn quota_exhausted(headers: &HeaderMap) -> bool {
    digits_header(headers, &X_RATELIMIT_REMAINING) == Some(0)
        || digits_header(headers, &RATELIMIT_REMAINING) == Some(0)
        || structured_field(headers, &RATELIMIT).is_some_and(|text| ratelimit_spent(&text))
}

/// A structured field's text: its one line, or all its lines joined into one list, as RFC 9651
/// section 4.2 asks of a list or dictionary split over several lines. `None` when absent or
/// when a line is not visible ASCII (which no structured field is).
fn structured_field<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<Cow<'h, str>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?.to_str().ok()?;
    let mut joined: Option<String> = None;
    for line in lines {
        let text = joined.get_or_insert_with(|| first.to_owned());
        text.push_str(", ");
        text.push_str(line.to_str().ok()?);
    }
    Some(joined.map_or(Cow::Borrowed(first), Cow::Owned))
}

/// Whether a `RateLimit` field names a policy with nothing remaining, whether or not it says
/// when that ends.
fn ratelimit_spent(text: &str) -> bool {
    if let Ok(list) = sfv::Parser::new(text).parse::<sfv::List>() {
        return list.iter().any(|entry| match entry {
            sfv::ListEntry::Item(item) => {
                param(&item.params, "r").and_then(non_negative) == Some(0)
            }
            sfv::ListEntry::InnerList(_) => false,
        });
    }
    sfv::Parser::new(text)
        .parse::<sfv::Dictionary>()
        .ok()
        .and_then(|dict| {
            dict.iter()
                .find(|(k, _)| k.as_str() == "remaining")
                .and_then(|(_, v)| match v {
                    sfv::ListEntry::Item(item) => non_negative(&item.bare_item),
                    sfv::ListEntry::InnerList(_) => None,
                })
        })
        == Some(0)
}

/// Reads the IETF `RateLimit` field: the longest reset among the policies with nothing remaining.
///
/// Accepts the current list form (`"default";r=0;t=10`), the older dictionary form
/// (`limit=10, remaining=0, reset=10`), and the separate `RateLimit-Remaining` /
/// `RateLimit-Reset` fields of early drafts.
#[doc(hidden)]
pub fn parse_ratelimit(headers: &HeaderMap) -> Option<Duration> {
    if let Some(text) = structured_field(headers, &RATELIMIT)
        && let Some(wait) = ratelimit_list(&text).or_else(|| ratelimit_dict(&text))
    {
        return Some(wait);
    }
    if digits_header(headers, &RATELIMIT_REMAINING)? == 0 {
        let reset = digits_header(headers, &RATELIMIT_RESET)?;
        return Some(Duration::from_secs(reset).min(MAX_HINT));
    }
    None
}

fn ratelimit_list(text: &str) -> Option<Duration> {
    let list: sfv::List = sfv::Parser::new(text).parse().ok()?;
    list.iter()
        .filter_map(|entry| match entry {
            sfv::ListEntry::Item(item) => Some(&item.params),
            sfv::ListEntry::InnerList(_) => None,
        })
        .filter_map(|params| {
            let remaining = non_negative(param(params, "r")?)?;
            if remaining != 0 {
                return None;
            }
            // Without `t` the draft says the reset is unknown: nothing to wait for.
            non_negative(param(params, "t")?)
        })
        .max()
        .map(|secs| Duration::from_secs(secs).min(MAX_HINT))
}

fn ratelimit_dict(text: &str) -> Option<Duration> {
    let dict: sfv::Dictionary = sfv::Parser::new(text).parse().ok()?;
    let get = |name: &str| {
        dict.iter()
            .find(|(k, _)| k.as_str() == name)
            .and_then(|(_, v)| match v {
                sfv::ListEntry::Item(item) => non_negative(&item.bare_item),
                sfv::ListEntry::InnerList(_) => None,
            })
    };
    if get("remaining")? != 0 {
        return None;
    }
    get("reset").map(|secs| Duration::from_secs(secs).min(MAX_HINT))
}

/// A `RateLimit-Policy` entry: `quota` units per `window`.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitPolicy {
    /// The policy's name (empty for the unnamed older form).
    pub name: String,
    /// Units allowed per window.
    pub quota: u64,
    /// The window, when given.
    pub window: Option<Duration>,
}

/// Reads the `RateLimit-Policy` field (`"default";q=100;w=10`, or the older `100;w=10`).
/// Entries that do not parse are skipped.
#[doc(hidden)]
pub fn parse_ratelimit_policy(headers: &HeaderMap) -> Vec<RateLimitPolicy> {
    let Some(text) = structured_field(headers, &RATELIMIT_POLICY) else {
        return Vec::new();
    };
    let Ok(list) = sfv::Parser::new(&*text).parse::<sfv::List>() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                return None;
            };
            let window = param(&item.params, "w")
                .and_then(non_negative)
                .map(Duration::from_secs);
            match &item.bare_item {
                sfv::BareItem::Integer(_) => Some(RateLimitPolicy {
                    name: String::new(),
                    quota: non_negative(&item.bare_item)?,
                    window,
                }),
                other => {
                    let name = match other {
                        sfv::BareItem::String(s) => s.as_str().to_owned(),
                        sfv::BareItem::Token(t) => t.as_str().to_owned(),
                        _ => return None,
                    };
                    Some(RateLimitPolicy {
                        name,
                        quota: non_negative(param(&item.params, "q")?)?,
                        window,
                    })
                }
            }
        })
        .collect()
}

fn param<'a>(params: &'a sfv::Parameters, name: &str) -> Option<&'a sfv::BareItem> {
    params
        .iter()
        .find(|(k, _)| k.as_str() == name)
        .map(|(_, v)| v)
}

fn non_negative(item: &sfv::BareItem) -> Option<u64> {
    let n: i64 = item.as_integer()?.into();
    u64::try_from(n).ok()
}

/// The first value of `name`, if it is 1*DIGIT (surrounding whitespace allowed), saturating.
fn digits_header(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    parse_digits(headers.get(name)?.to_str().ok()?.trim())
}

/// 1*DIGIT, saturating at `u64::MAX`; anything else (sign, fraction, empty) is `None`.
fn parse_digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// From `now` until `at`: zero for a moment in the past, capped at [`MAX_HINT`].
fn until(at: SystemTime, now: SystemTime) -> Duration {
    at.duration_since(now)
        .unwrap_or(Duration::ZERO)
        .min(MAX_HINT)
}

#[cfg(test)]
mod tests;

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
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn a_ratelimit_list_split_over_two_lines_is_one_list() {
        let h = headers(&[
            ("ratelimit", r#""burst";r=5;t=1"#),
            ("ratelimit", r#""daily";r=0;t=30"#),
        ]);
        let hint = HintConfig::new().parse(&h);
        assert_eq!(
            hint.map(|h| (h.wait(), h.source())),
            Some((Duration::from_secs(30), WaitSource::RateLimit)),
            "the spent policy on the second line counts"
        );
        let h = headers(&[
            ("ratelimit-policy", r#""burst";q=5;w=1"#),
            ("ratelimit-policy", r#""daily";q=100;w=86400"#),
        ]);
        let names: Vec<_> = parse_ratelimit_policy(&h)
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["burst", "daily"]);
    }

    #[test]
    fn a_ratelimit_field_with_nothing_remaining_is_a_spent_quota_without_a_reset() {
        for value in [r#""default";r=0"#, "limit=10, remaining=0"] {
            let h = headers(&[("ratelimit", value)]);
            assert!(quota_exhausted(&h), "{value}");
            assert!(
                crate::classify::may_change(http::StatusCode::FORBIDDEN, &h),
                "{value}: a 403 that says the quota is spent may change"
            );
            assert_eq!(parse_ratelimit(&h), None, "{value}: no reset, no wait");
        }
        let h = headers(&[("ratelimit", r#""default";r=3"#)]);
        assert!(!quota_exhausted(&h));
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn config_at(secs: u64) -> HintConfig {
        HintConfig::new().clock(ManualClock::new(at(secs)))
    }

    // 1994-11-06 08:49:37 UTC, the RFC 9110 example date.
    const RFC_DATE_SECS: u64 = 784_111_777;

    #[test]
    fn retry_after_delay_seconds() {
        let h = headers(&[("retry-after", "120")]);
        let hint = config_at(0).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::from_secs(120));
        assert_eq!(hint.source(), WaitSource::RetryAfter);
    }

    #[test]
    fn retry_after_all_three_date_formats() {
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            let h = headers(&[("retry-after", date)]);
            let hint = config_at(RFC_DATE_SECS - 7).parse(&h).expect(date);
            assert_eq!(hint.wait(), Duration::from_secs(7), "{date}");
        }
    }

    #[test]
    fn retry_after_date_counts_from_the_response_date() {
        // Server clock 40 s behind ours: Date is 40 s before our now, Retry-After 2 s after Date.
        let h = headers(&[
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"),
        ]);
        let hint = config_at(RFC_DATE_SECS + 40).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::from_secs(2));
    }

    #[test]
    fn invalid_date_header_falls_back_to_our_clock() {
        let h = headers(&[
            ("date", "yesterday"),
            ("retry-after", "Sun, 06 Nov 1994 08:49:39 GMT"),
        ]);
        let hint = config_at(RFC_DATE_SECS).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::from_secs(2));
    }

    #[test]
    fn date_in_the_past_is_zero() {
        let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        let hint = config_at(RFC_DATE_SECS + 3600).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::ZERO);
    }

    #[test]
    fn garbage_counts_as_absent() {
        for v in [
            "",
            "soon",
            "-5",
            "1.5",
            "+3",
            "0x10",
            "12 s",
            "Sun, 99 Nov 1994 08:49:37 GMT",
        ] {
            let h = headers(&[("retry-after", v)]);
            assert_eq!(config_at(0).parse(&h), None, "{v:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        assert_eq!(config_at(0).parse(&h), None);
    }

    #[test]
    fn huge_delay_saturates_and_caps() {
        let h = headers(&[("retry-after", "999999999999999999999999999999")]);
        assert_eq!(config_at(0).parse(&h).unwrap().wait(), MAX_HINT);
    }

    #[test]
    fn first_of_duplicated_fields() {
        let h = headers(&[("retry-after", "3"), ("retry-after", "100")]);
        assert_eq!(
            config_at(0).parse(&h).unwrap().wait(),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn x_ratelimit_epoch_and_delta() {
        let now = 1_700_000_000;
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000042"),
        ]);
        let hint = config_at(now).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::from_secs(42));
        assert_eq!(hint.source(), WaitSource::QuotaReset);

        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "42")]);
        assert_eq!(
            config_at(now).parse(&h).unwrap().wait(),
            Duration::from_secs(42)
        );
        let epoch = config_at(now).reset_format(ResetFormat::EpochSeconds);
        assert_eq!(
            epoch.parse(&h).unwrap().wait(),
            Duration::ZERO,
            "42 as epoch is long past"
        );
        let delta = config_at(now).reset_format(ResetFormat::DeltaSeconds);
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000042"),
        ]);
        assert_eq!(delta.parse(&h).unwrap().wait(), MAX_HINT);
    }

    #[test]
    fn x_ratelimit_reset_in_epoch_milliseconds_under_auto() {
        let now = 1_700_000_000;
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000042500"),
        ]);
        assert_eq!(
            config_at(now).parse(&h).unwrap().wait(),
            Duration::from_millis(42_500)
        );
        // Said to be seconds, it is a moment far ahead: capped.
        let epoch = config_at(now).reset_format(ResetFormat::EpochSeconds);
        assert_eq!(epoch.parse(&h).unwrap().wait(), MAX_HINT);
    }

    #[test]
    fn x_ratelimit_epoch_counts_from_the_response_date() {
        // Date says 1700000000 while our clock is 100 s ahead.
        let date = httpdate::fmt_http_date(at(1_700_000_000));
        let h = headers(&[
            ("date", &date),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000005"),
        ]);
        assert_eq!(
            config_at(1_700_000_100).parse(&h).unwrap().wait(),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn x_ratelimit_needs_remaining_zero() {
        let h = headers(&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "42")]);
        assert_eq!(config_at(0).parse(&h), None);
        let h = headers(&[("x-ratelimit-reset", "42")]);
        assert_eq!(config_at(0).parse(&h), None);
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "-1")]);
        assert_eq!(config_at(0).parse(&h), None);
    }

    #[test]
    fn ietf_ratelimit_list_form() {
        let h = headers(&[("ratelimit", r#""default";r=0;t=10, "burst";r=5;t=1"#)]);
        let hint = config_at(0).parse(&h).unwrap();
        assert_eq!(hint.wait(), Duration::from_secs(10));
        assert_eq!(hint.source(), WaitSource::RateLimit);
        let h = headers(&[("ratelimit", r#""default";r=50;t=30"#)]);
        assert_eq!(config_at(0).parse(&h), None, "quota left: no wait");
        let h = headers(&[("ratelimit", r#""a";r=0;t=10, "b";r=0;t=30"#)]);
        assert_eq!(
            config_at(0).parse(&h).unwrap().wait(),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn ietf_ratelimit_older_forms() {
        let h = headers(&[("ratelimit", "limit=10, remaining=0, reset=7")]);
        assert_eq!(
            config_at(0).parse(&h).unwrap().wait(),
            Duration::from_secs(7)
        );
        let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "9")]);
        assert_eq!(
            config_at(0).parse(&h).unwrap().wait(),
            Duration::from_secs(9)
        );
        let h = headers(&[("ratelimit", "limit=10, remaining=-1, reset=7")]);
        assert_eq!(config_at(0).parse(&h), None);
    }

    #[test]
    fn precedence_retry_after_then_ratelimit_then_x() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "30"),
            ("ratelimit", r#""d";r=0;t=20"#),
            ("retry-after", "10"),
        ]);
        assert_eq!(
            config_at(0).parse(&h).unwrap().source(),
            WaitSource::RetryAfter
        );
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "30"),
            ("ratelimit", r#""d";r=0;t=20"#),
            ("retry-after", "garbage"),
        ]);
        let hint = config_at(0).parse(&h).unwrap();
        assert_eq!(
            (hint.wait(), hint.source()),
            (Duration::from_secs(20), WaitSource::RateLimit)
        );
    }

    #[test]
    fn policy_field() {
        let h = headers(&[("ratelimit-policy", r#""default";q=100;w=10, 50;w=1"#)]);
        let p = parse_ratelimit_policy(&h);
        assert_eq!(
            p,
            vec![
                RateLimitPolicy {
                    name: "default".into(),
                    quota: 100,
                    window: Some(Duration::from_secs(10))
                },
                RateLimitPolicy {
                    name: String::new(),
                    quota: 50,
                    window: Some(Duration::from_secs(1))
                },
            ]
        );
        assert!(parse_ratelimit_policy(&headers(&[("ratelimit-policy", "((")])).is_empty());
    }

    #[test]
    fn quota_exhausted_detects_rate_limit_403() {
        assert!(quota_exhausted(&headers(&[("x-ratelimit-remaining", "0")])));
        assert!(!quota_exhausted(&headers(&[(
            "x-ratelimit-remaining",
            "1"
        )])));
        assert!(!quota_exhausted(&HeaderMap::new()));
    }
}

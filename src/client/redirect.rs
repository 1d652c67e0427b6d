//! Redirects, followed by [`Client`](super::Client) one hop at a time.
//!
//! A redirect is a new call, to a URL that may name another host: each hop goes through the
//! whole preset on its own (its breaker, its rate limit and its cache entry are those of the
//! hop's host), which is why the client follows redirects and not the preset: a layer that
//! sent a request to another origin would judge and pace that origin by the first one's rules.
//! The transports follow none ([`reqwest_client_builder`](crate::transport::reqwest_client_builder)
//! turns reqwest's off).
//!
//! The rules, per hop:
//!
//! | answer | the next request |
//! | --- | --- |
//! | 301, 302, 303 | a GET without a body (a HEAD stays a HEAD); `Content-Type`, `Content-Length`, `Content-Encoding`, `Transfer-Encoding` and `Idempotency-Key` dropped |
//! | 307, 308 | the same method, headers and body: bytes are sent again, a stream only when it was read to its end within its replay cap ([`Body`](super::Body)) |
//! | any other status, or no `Location` | none: the answer is the response |
//!
//! - A hop to another origin (scheme, host or port) drops `Authorization`, `Cookie`,
//!   `Proxy-Authorization` and a `Host` set by hand.
//! - A hop from `https` to `http` is refused, as is a `Location` that is no `http` or `https`
//!   URL: [`Error::Redirect`](crate::Error::Redirect).
//! - At most [`RedirectPolicy::DEFAULT_MAX_HOPS`] hops by default; the answer that would make one
//!   more fails the call with [`RedirectErrorKind::TooManyRedirects`].
//! - The hops share the first one's deadline: the preset's budget (or the request's
//!   [`timeout`](super::RequestBuilder::timeout)) counts from the first hop.
//! - [`Response::attempts`](super::Response::attempts) holds the records of every hop, the
//!   first hop's first; each hop's records count their attempts from 1.

use courier_core::Attempts;
use http::{HeaderMap, Method, StatusCode, header};
use std::fmt;
use url::Url;

/// How many redirects [`Client`](super::Client) follows: [`limited`](Self::limited) to a
/// number of hops, or [`none`](Self::none). Defaults to
/// [`DEFAULT_MAX_HOPS`](Self::DEFAULT_MAX_HOPS). The [module docs](self) give the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectPolicy {
    max_hops: u32,
}

// === impl RedirectPolicy ===

impl RedirectPolicy {
    /// The hops followed by default: 10.
    pub const DEFAULT_MAX_HOPS: u32 = 10;

    /// Follows at most `max_hops` redirects; one more fails the call
    /// ([`RedirectErrorKind::TooManyRedirects`]). `limited(0)` is [`none`](Self::none).
    pub const fn limited(max_hops: u32) -> Self {
        Self { max_hops }
    }

    /// Follows no redirect: a 3xx is the response, as the transport gave it.
    pub const fn none() -> Self {
        Self::limited(0)
    }

    /// The most hops followed.
    pub const fn max_hops(&self) -> u32 {
        self.max_hops
    }

    /// Whether any redirect is followed.
    pub(crate) const fn follows(&self) -> bool {
        self.max_hops > 0
    }
}

impl Default for RedirectPolicy {
    fn default() -> Self {
        Self::limited(Self::DEFAULT_MAX_HOPS)
    }
}

/// Why a redirect was not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedirectErrorKind {
    /// The answer asked for one hop more than the [`RedirectPolicy`] allows.
    TooManyRedirects {
        /// The most hops the policy follows.
        limit: u32,
    },
    /// An `https` URL redirected to an `http` one: the request and its answer would cross
    /// the network in clear.
    InsecureRedirect,
    /// A 307 or 308 asked for the body again, and the body was a stream that outgrew its
    /// replay cap or was not read to its end.
    BodyNotReplayable,
    /// The `Location` is no `http` or `https` URL.
    InvalidLocation,
}

impl fmt::Display for RedirectErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyRedirects { limit } => write!(f, "more than {limit} redirects"),
            Self::InsecureRedirect => f.write_str("a redirect from https to http"),
            Self::BodyNotReplayable => {
                f.write_str("the body is a stream that cannot be sent again whole")
            }
            Self::InvalidLocation => f.write_str("a Location that is no http or https URL"),
        }
    }
}

/// A redirect the client did not follow ([`Error::Redirect`](crate::Error::Redirect)), with
/// the attempts of every hop so far.
#[derive(Debug)]
pub struct RedirectError {
    kind: RedirectErrorKind,
    status: StatusCode,
    location: String,
    attempts: Attempts,
}

// === impl RedirectError ===

impl RedirectError {
    pub(crate) fn new(
        kind: RedirectErrorKind,
        status: StatusCode,
        location: &str,
        attempts: Attempts,
    ) -> Self {
        Self {
            kind,
            status,
            location: location.to_owned(),
            attempts,
        }
    }

    /// Why it was not followed.
    pub const fn kind(&self) -> RedirectErrorKind {
        self.kind
    }

    /// The status of the redirect.
    pub const fn status(&self) -> StatusCode {
        self.status
    }

    /// The `Location` it pointed to, as sent (lossily decoded).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The attempts of every hop, the redirect not followed the last.
    pub fn attempts(&self) -> &Attempts {
        &self.attempts
    }
}

impl fmt::Display for RedirectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "redirect not followed: {} ({} to {})",
            self.kind,
            self.status.as_u16(),
            courier_core::excerpt::Excerpt::new(&self.location)
        )
    }
}

impl std::error::Error for RedirectError {}

/// The next hop of a redirect.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    pub(crate) url: Url,
    /// 301, 302 and 303: a GET (a HEAD stays a HEAD) without a body.
    pub(crate) to_get: bool,
    /// Another scheme, host or port.
    pub(crate) cross_origin: bool,
}

/// What the client does with an answer of `status` to `method` on `url`, after `hops` hops:
/// `Ok(None)` returns it, `Ok(Some(hop))` follows it, `Err` refuses it.
pub(crate) fn next_hop(
    policy: RedirectPolicy,
    hops: u32,
    status: StatusCode,
    url: &Url,
    location: Option<&str>,
) -> Result<Option<Hop>, RedirectErrorKind> {
    let to_get = match status {
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER => true,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => false,
        _ => return Ok(None),
    };
    let Some(location) = location else {
        return Ok(None);
    };
    if !policy.follows() {
        return Ok(None);
    }
    if hops >= policy.max_hops {
        return Err(RedirectErrorKind::TooManyRedirects {
            limit: policy.max_hops,
        });
    }
    let mut next = url
        .join(location)
        .map_err(|_| RedirectErrorKind::InvalidLocation)?;
    if !matches!(next.scheme(), "http" | "https") || next.host().is_none() {
        return Err(RedirectErrorKind::InvalidLocation);
    }
    if url.scheme() == "https" && next.scheme() == "http" {
        return Err(RedirectErrorKind::InsecureRedirect);
    }
    next.set_fragment(None);
    let cross_origin = url.origin() != next.origin();
    Ok(Some(Hop {
        url: next,
        to_get,
        cross_origin,
    }))
}

/// The request headers of the hop after `hop`, in place; the method returned.
pub(crate) fn rewrite(hop: &Hop, method: Method, headers: &mut HeaderMap) -> Method {
    if hop.cross_origin {
        for name in [
            header::AUTHORIZATION,
            header::COOKIE,
            header::PROXY_AUTHORIZATION,
            header::HOST,
        ] {
            headers.remove(name);
        }
    }
    if hop.to_get {
        for name in [
            header::CONTENT_TYPE,
            header::CONTENT_LENGTH,
            header::CONTENT_ENCODING,
            header::TRANSFER_ENCODING,
            courier_core::idempotency::IDEMPOTENCY_KEY,
        ] {
            headers.remove(name);
        }
        if method != Method::HEAD {
            return Method::GET;
        }
    }
    method
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn next(status: u16, from: &str, to: &str) -> Result<Option<Hop>, RedirectErrorKind> {
        next_hop(
            RedirectPolicy::default(),
            0,
            StatusCode::from_u16(status).unwrap(),
            &url(from),
            Some(to),
        )
    }

    #[test]
    fn https_to_http_is_refused_and_the_other_way_followed() {
        assert_eq!(
            next(302, "https://a.example/x", "http://a.example/y"),
            Err(RedirectErrorKind::InsecureRedirect)
        );
        let hop = next(307, "http://a.example/x", "https://a.example/y")
            .unwrap()
            .unwrap();
        assert!(hop.cross_origin, "another scheme is another origin");
        assert!(!hop.to_get);
    }

    #[test]
    fn a_relative_location_is_joined_and_the_same_origin_kept() {
        let hop = next(301, "http://a.example:8080/api/x?q=1#f", "y#g")
            .unwrap()
            .unwrap();
        assert_eq!(hop.url.as_str(), "http://a.example:8080/api/y");
        assert!(!hop.cross_origin);
        assert!(hop.to_get);
        let hop = next(308, "http://a.example/x", "http://a.example:80/z")
            .unwrap()
            .unwrap();
        assert!(!hop.cross_origin, "the default port is the same origin");
        let hop = next(308, "http://a.example/x", "http://a.example:81/z")
            .unwrap()
            .unwrap();
        assert!(hop.cross_origin);
    }

    #[test]
    fn other_statuses_no_location_or_no_policy_return_the_answer() {
        for status in [200, 300, 304, 305, 306, 404] {
            assert_eq!(
                next(status, "http://a.example/", "/b"),
                Ok(None),
                "{status}"
            );
        }
        let from = url("http://a.example/");
        let found = StatusCode::FOUND;
        assert_eq!(
            next_hop(RedirectPolicy::default(), 0, found, &from, None),
            Ok(None)
        );
        assert_eq!(
            next_hop(RedirectPolicy::none(), 0, found, &from, Some("/b")),
            Ok(None)
        );
    }

    #[test]
    fn the_hop_past_the_limit_and_a_bad_location_are_refused() {
        let from = url("http://a.example/");
        let policy = RedirectPolicy::limited(2);
        let found = StatusCode::FOUND;
        assert!(matches!(
            next_hop(policy, 1, found, &from, Some("/b")),
            Ok(Some(_))
        ));
        assert_eq!(
            next_hop(policy, 2, found, &from, Some("/b")),
            Err(RedirectErrorKind::TooManyRedirects { limit: 2 })
        );
        for bad in ["ftp://a.example/", "mailto:x@a.example", "http://[::1"] {
            assert_eq!(
                next(302, "http://a.example/", bad),
                Err(RedirectErrorKind::InvalidLocation),
                "{bad}"
            );
        }
    }

    #[test]
    fn headers_are_rewritten_by_the_rules() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer t"),
            ("cookie", "c=1"),
            ("proxy-authorization", "Basic x"),
            ("content-type", "application/json"),
            ("idempotency-key", "k"),
            ("x-kept", "1"),
        ] {
            headers.insert(name, value.parse().unwrap());
        }
        let same = next(307, "http://a.example/", "/b").unwrap().unwrap();
        let mut kept = headers.clone();
        assert_eq!(rewrite(&same, Method::POST, &mut kept), Method::POST);
        assert_eq!(kept, headers, "a 307 to the same origin changes nothing");

        let other = next(303, "http://a.example/", "http://b.example/")
            .unwrap()
            .unwrap();
        let mut changed = headers.clone();
        assert_eq!(rewrite(&other, Method::POST, &mut changed), Method::GET);
        let names: Vec<&str> = changed.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
        assert_eq!(
            rewrite(&other, Method::HEAD, &mut headers.clone()),
            Method::HEAD
        );
    }
}

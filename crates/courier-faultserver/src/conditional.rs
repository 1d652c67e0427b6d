//! `/conditional`: an ETag-protected resource with a GitHub-style quota.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use courier_core::cache_control::{EntityTag, EntityTagList};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use hyper::body::Incoming;

use crate::body::ResponseBody;
use crate::routes::{Resp, bad_request, number_param, read_body, text};
use crate::server::Shared;

/// The quota a fresh server starts with: GitHub's unauthenticated 60 per hour.
const DEFAULT_LIMIT: u32 = 60;
const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);

/// The resource behind `/conditional` and its quota.
#[derive(Debug)]
pub(crate) struct Conditional {
    version: u64,
    body: Bytes,
    content_type: HeaderValue,
    etag: EntityTag,
    last_modified: SystemTime,
    /// The version before this one has the same `Last-Modified` (two changes in one second):
    /// `If-Modified-Since` at that second cannot tell them apart.
    same_second: bool,
    quota: Quota,
}

#[derive(Debug)]
struct Quota {
    limit: u32,
    remaining: u32,
    window: Duration,
    reset_at: SystemTime,
}

// === impl Conditional ===

impl Conditional {
    pub(crate) fn new(now: SystemTime) -> Self {
        // An hour in the past, so that `If-Modified-Since: <now>` is already a match.
        let last_modified = whole_seconds(now.checked_sub(DEFAULT_WINDOW).unwrap_or(UNIX_EPOCH));
        let mut this = Self {
            version: 0,
            body: Bytes::new(),
            content_type: HeaderValue::from_static("application/json"),
            etag: EntityTag::strong(""),
            last_modified,
            same_second: false,
            quota: Quota {
                limit: DEFAULT_LIMIT,
                remaining: DEFAULT_LIMIT,
                window: DEFAULT_WINDOW,
                reset_at: now + DEFAULT_WINDOW,
            },
        };
        this.change(None, None, last_modified);
        this
    }

    pub(crate) fn set_quota(&mut self, limit: u32, window: Duration, now: SystemTime) {
        self.quota = Quota {
            limit,
            remaining: limit,
            window,
            reset_at: now.checked_add(window).unwrap_or(now),
        };
    }

    /// A new version: the given body, or a generated one. `Last-Modified` is the second of the
    /// change, never later than the `Date` it is sent with (RFC 9110 section 8.8.2.1); a second
    /// change within one second keeps it, and `If-Modified-Since` at that second then no longer
    /// matches (the ETag tells the versions apart).
    fn change(&mut self, body: Option<Bytes>, content_type: Option<HeaderValue>, now: SystemTime) {
        self.version += 1;
        let (body, content_type) = match body {
            Some(body) => (
                body,
                content_type.unwrap_or(HeaderValue::from_static("application/octet-stream")),
            ),
            None => (
                Bytes::from(format!(
                    "{{\"version\":{},\"message\":\"hello from /conditional\"}}",
                    self.version
                )),
                HeaderValue::from_static("application/json"),
            ),
        };
        self.etag = EntityTag::strong(format!("v{}-{:016x}", self.version, fnv1a(&body)));
        self.body = body;
        self.content_type = content_type;
        if self.version > 1 {
            let last_modified = whole_seconds(now).max(self.last_modified);
            self.same_second = last_modified == self.last_modified;
            self.last_modified = last_modified;
        }
    }

    fn refill(&mut self, now: SystemTime) {
        if now >= self.quota.reset_at {
            self.quota.remaining = self.quota.limit;
            self.quota.reset_at = now.checked_add(self.quota.window).unwrap_or(now);
        }
    }

    /// Whether the request's validators match the current representation (RFC 9110 13.2.2:
    /// `If-None-Match` first; `If-Modified-Since` only without it).
    fn not_modified(&self, headers: &HeaderMap) -> bool {
        let if_none_match: Vec<&str> = headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if headers.contains_key(header::IF_NONE_MATCH) {
            return EntityTagList::parse(&if_none_match.join(", ")).weak_matches(&self.etag);
        }
        let mut since = headers.get_all(header::IF_MODIFIED_SINCE).iter();
        match (since.next(), since.next()) {
            (Some(value), None) => value
                .to_str()
                .ok()
                .and_then(|s| httpdate::parse_http_date(s).ok())
                .is_some_and(|since| {
                    self.last_modified < since || (self.last_modified == since && !self.same_second)
                }),
            // Absent, or more than one member: ignored.
            _ => false,
        }
    }

    fn validators(&self, headers: &mut HeaderMap) {
        if let Ok(etag) = HeaderValue::from_str(&self.etag.to_string()) {
            headers.insert(header::ETAG, etag);
        }
        if let Ok(lm) = HeaderValue::from_str(&httpdate::fmt_http_date(self.last_modified)) {
            headers.insert(header::LAST_MODIFIED, lm);
        }
    }

    fn quota_headers(&self, headers: &mut HeaderMap) {
        let q = &self.quota;
        let reset = q
            .reset_at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let pairs = [
            ("x-ratelimit-limit", u64::from(q.limit)),
            ("x-ratelimit-remaining", u64::from(q.remaining)),
            ("x-ratelimit-used", u64::from(q.limit - q.remaining)),
            ("x-ratelimit-reset", reset),
        ];
        for (name, value) in pairs {
            headers.insert(name, HeaderValue::from(value));
        }
        headers.insert(
            "x-ratelimit-resource",
            HeaderValue::from_static("conditional"),
        );
    }
}

/// `GET | HEAD | POST /conditional`.
pub(crate) async fn conditional(shared: &Shared, req: Request<Incoming>) -> Resp {
    let cache_control = match number_param(req.uri(), "max_age", 0) {
        Ok(Some(max_age)) => HeaderValue::from_str(&format!("max-age={max_age}"))
            .unwrap_or(HeaderValue::from_static("no-cache")),
        Ok(None) => HeaderValue::from_static("no-cache"),
        Err(message) => return bad_request(&message),
    };
    let method = req.method().clone();
    if method == Method::POST {
        let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
        let body = match read_body(req.into_body()).await {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        let now = shared.now();
        let mut resource = shared.conditional();
        resource.refill(now);
        let body = (!body.is_empty()).then_some(body);
        resource.change(body, content_type, now);
        tracing::debug!(version = resource.version, "conditional resource changed");
        return representation(&resource, StatusCode::OK, cache_control);
    }
    if method != Method::GET && method != Method::HEAD {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed here; use GET, HEAD or POST\n",
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
        return resp;
    }
    let now = shared.now();
    let mut resource = shared.conditional();
    resource.refill(now);
    if resource.not_modified(req.headers()) {
        // A 304 is free, even with the quota spent.
        let mut resp = Resp::new(ResponseBody::empty());
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resource.validators(resp.headers_mut());
        resource.quota_headers(resp.headers_mut());
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, cache_control);
        return resp;
    }
    if resource.quota.remaining == 0 {
        let mut resp = text(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded; wait until x-ratelimit-reset, or revalidate with \
             If-None-Match (a 304 is free)\n",
        );
        resource.quota_headers(resp.headers_mut());
        return resp;
    }
    resource.quota.remaining -= 1;
    representation(&resource, StatusCode::OK, cache_control)
}

fn representation(resource: &Conditional, status: StatusCode, cache_control: HeaderValue) -> Resp {
    let mut resp = Resp::new(ResponseBody::full(resource.body.clone()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, resource.content_type.clone());
    headers.insert(header::CACHE_CONTROL, cache_control);
    resource.validators(headers);
    resource.quota_headers(headers);
    resp
}

fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn rfc_9110_precedence() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut r = Conditional::new(now);
        let etag = r.etag.to_string();
        let lm = httpdate::fmt_http_date(r.last_modified);
        let later = httpdate::fmt_http_date(now);
        let earlier = httpdate::fmt_http_date(r.last_modified - Duration::from_secs(1));

        assert!(r.not_modified(&headers(&[("if-none-match", &etag)])));
        assert!(r.not_modified(&headers(&[("if-none-match", &format!("W/{etag}"))])));
        assert!(r.not_modified(&headers(&[("if-none-match", "*")])));
        assert!(r.not_modified(&headers(&[("if-none-match", &format!("\"x\", {etag}"))])));
        assert!(!r.not_modified(&headers(&[("if-none-match", "\"other\"")])));
        assert!(r.not_modified(&headers(&[("if-modified-since", &lm)])));
        assert!(r.not_modified(&headers(&[("if-modified-since", &later)])));
        assert!(!r.not_modified(&headers(&[("if-modified-since", &earlier)])));
        assert!(!r.not_modified(&headers(&[("if-modified-since", "garbage")])));
        // If-None-Match present and not matching: If-Modified-Since is not consulted.
        assert!(!r.not_modified(&headers(&[
            ("if-none-match", "\"other\""),
            ("if-modified-since", &later)
        ])));
        assert!(!r.not_modified(&HeaderMap::new()));

        // A change in the same second keeps Last-Modified (never after Date) and moves the
        // ETag; If-Modified-Since at that second can no longer tell, so it does not match.
        let before = r.last_modified;
        r.change(None, None, before + Duration::from_millis(500));
        assert_eq!(r.last_modified, before);
        assert!(!r.not_modified(&headers(&[("if-none-match", &etag)])));
        assert!(!r.not_modified(&headers(&[("if-modified-since", &lm)])));
        assert!(r.not_modified(&headers(&[("if-modified-since", &later)])));
        // A change in a later second moves it to that second.
        r.change(None, None, now + Duration::from_millis(2500));
        assert_eq!(r.last_modified, now + Duration::from_secs(2));
        let lm = httpdate::fmt_http_date(r.last_modified);
        assert!(r.not_modified(&headers(&[("if-modified-since", &lm)])));
    }

    #[test]
    fn quota_refills_at_reset() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut r = Conditional::new(now);
        r.set_quota(2, Duration::from_secs(10), now);
        r.quota.remaining = 0;
        r.refill(now + Duration::from_secs(9));
        assert_eq!(r.quota.remaining, 0);
        r.refill(now + Duration::from_secs(10));
        assert_eq!(r.quota.remaining, 2);
        assert_eq!(r.quota.reset_at, now + Duration::from_secs(20));
    }
}

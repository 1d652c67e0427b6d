//! Which requests may be sent more than once.
//!
//! RFC 9110 section 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent; sending them
//! twice has the intended effect of sending them once. POST and PATCH are not, unless the request
//! carries an `Idempotency-Key` that the server uses to replay the first result.

use http::{HeaderMap, HeaderName, Method};

/// The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Whether RFC 9110 calls `method` idempotent.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Whether the headers carry a usable (non-empty) `Idempotency-Key`: neither blank nor the
/// empty string `""` (the field is a structured-field string), which tells a server nothing
/// to tell one request from another by.
pub fn has_idempotency_key(headers: &HeaderMap) -> bool {
    headers.get(&IDEMPOTENCY_KEY).is_some_and(|v| {
        let key = v.as_bytes().trim_ascii();
        !key.is_empty() && key != b"\"\""
    })
}

/// A request extension saying "this request may be sent again": the caller knows that
/// repeating it is harmless (a gRPC method that reads, a POST the server deduplicates by its
/// own means). The retry layer then treats it as it treats an idempotent method.
///
/// ```
/// use courier_core::idempotency::RetrySafe;
///
/// let mut req = http::Request::post("http://api.example/search").body(()).unwrap();
/// req.extensions_mut().insert(RetrySafe);
/// assert!(RetrySafe::is_marked(req.extensions()));
/// ```
///
/// With tonic, set it on the `tonic::Request`'s extensions: they travel with the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetrySafe;

impl RetrySafe {
    /// Whether `extensions` hold the marker.
    pub fn is_marked(extensions: &http::Extensions) -> bool {
        extensions.get::<Self>().is_some()
    }
}

/// Whether a request may be repeated after it may have reached the server: its method is
/// idempotent, or it carries an `Idempotency-Key`.
pub fn is_retry_safe(method: &Method, headers: &HeaderMap) -> bool {
    is_idempotent(method) || has_idempotency_key(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_9110_methods() {
        for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            assert!(is_idempotent(&m.parse().unwrap()), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT", "PURGE"] {
            assert!(!is_idempotent(&m.parse().unwrap()), "{m}");
        }
    }

    #[test]
    fn a_blank_or_empty_key_does_not_make_post_safe() {
        for blank in ["", "   ", "\"\"", " \"\" "] {
            let mut h = HeaderMap::new();
            h.insert(IDEMPOTENCY_KEY, blank.parse().unwrap());
            assert!(!is_retry_safe(&Method::POST, &h), "{blank:?}");
        }
        let mut h = HeaderMap::new();
        h.insert(IDEMPOTENCY_KEY, "\" \"".parse().unwrap());
        assert!(is_retry_safe(&Method::POST, &h), "a space is a key");
    }

    #[test]
    fn key_makes_post_safe() {
        let mut h = HeaderMap::new();
        assert!(!is_retry_safe(&Method::POST, &h));
        h.insert(IDEMPOTENCY_KEY, "k-1".parse().unwrap());
        assert!(is_retry_safe(&Method::POST, &h));
        h.insert(IDEMPOTENCY_KEY, " ".parse().unwrap());
        assert!(
            !is_retry_safe(&Method::PATCH, &h),
            "a blank key identifies nothing"
        );
    }
}

//! What the server received.

use http::request::Parts;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Header values replaced by [`REDACTED`] in [`Hit::headers`].
const SENSITIVE: [http::HeaderName; 3] = [
    http::header::AUTHORIZATION,
    http::header::PROXY_AUTHORIZATION,
    http::header::COOKIE,
];

/// What a redacted header value reads as.
pub const REDACTED: &str = "[redacted]";

/// One request the server received.
///
/// In JSON (`GET /__hits/{name}`):
/// `{"t_ms": 1520.4, "method": "POST", "path": "/s/orders", "query": "a=1",
/// "idempotency_key": "..." or null, "headers": [["host", "127.0.0.1:8080"], ...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// When the request's head arrived, in milliseconds since the server started, on the
    /// monotonic clock (`tokio::time::Instant`).
    pub t_ms: f64,
    /// The method, e.g. `"GET"`.
    pub method: String,
    /// The path, without the query, e.g. `"/s/orders"`.
    pub path: String,
    /// The query string without `?`, or `None` when the target had none.
    pub query: Option<String>,
    /// The `Idempotency-Key` header, if the request carried one.
    pub idempotency_key: Option<String>,
    /// The request headers in order, names lowercase; `Authorization`, `Proxy-Authorization`
    /// and `Cookie` values read [`REDACTED`]. Values that are not UTF-8 are converted lossily.
    pub headers: Vec<(String, String)>,
}

// === impl Hit ===

impl Hit {
    pub(crate) fn from_parts(parts: &Parts, started: Instant) -> Self {
        let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
        let headers = parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = if SENSITIVE.contains(name) {
                    REDACTED.to_owned()
                } else {
                    text(value)
                };
                (name.as_str().to_owned(), value)
            })
            .collect();
        Self {
            t_ms: started.elapsed().as_secs_f64() * 1000.0,
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            idempotency_key: parts
                .headers
                .get(courier_core::idempotency::IDEMPOTENCY_KEY)
                .map(text),
            headers,
        }
    }

    /// The first value of header `name` (case-insensitive), as recorded.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The body of `GET /__hits/{name}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HitsBody {
    /// The hits, oldest first.
    pub hits: Vec<Hit>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn records_and_redacts() {
        let started = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(1500)).await;
        let (parts, ()) = http::Request::post("/s/orders?a=1")
            .header("authorization", "Bearer secret")
            .header("cookie", "session=secret")
            .header("idempotency-key", "k-1")
            .header("x-bytes", &b"\xff"[..])
            .body(())
            .unwrap()
            .into_parts();
        let hit = Hit::from_parts(&parts, started);
        assert_eq!(hit.t_ms, 1500.0);
        assert_eq!(hit.method, "POST");
        assert_eq!(hit.path, "/s/orders");
        assert_eq!(hit.query.as_deref(), Some("a=1"));
        assert_eq!(hit.idempotency_key.as_deref(), Some("k-1"));
        assert_eq!(hit.header("Authorization"), Some(REDACTED));
        assert_eq!(hit.header("cookie"), Some(REDACTED));
        assert_eq!(hit.header("x-bytes"), Some("\u{fffd}"));
        let json = serde_json::to_string(&hit).unwrap();
        assert!(!json.contains("secret"), "{json}");
    }
}

//! A plain hyper client for the loopback tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The longest any test waits for an answer that should come: a bound, not a measurement.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

pub fn http1() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2c() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Builds a request.
pub fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Request<Full<Bytes>> {
    let mut builder = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("test requests are well formed")
}

/// Sends a request and reads the whole answer, within [`PATIENCE`].
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<Answer, BoxError> {
    tokio::time::timeout(PATIENCE, async {
        let resp = client.request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Answer {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
        })
    })
    .await
    .map_err(|_| -> BoxError { "no answer within the test's patience".into() })?
}

pub async fn get(client: &Client<HttpConnector, Full<Bytes>>, url: &str) -> Answer {
    send(client, request(Method::GET, url, &[], ""))
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

pub async fn post(client: &Client<HttpConnector, Full<Bytes>>, url: &str, body: &str) -> Answer {
    send(client, request(Method::POST, url, &[], body))
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

//! A real HTTP server that misbehaves on request, for tests, demos and benchmarks.
//!
//! It listens on loopback, serves HTTP/1.1 (keep-alive) and HTTP/2 without TLS (h2c, prior
//! knowledge) on the same port, fails exactly as a *plan* tells it to, and records every request
//! it receives: the one count no client can get wrong. Run it inside a test with
//! [`FaultServer::start`], or from the command line with `courier serve [--port P]`.
//!
//! # HTTP API
//!
//! | endpoint | what it does |
//! | --- | --- |
//! | `POST /__plan/{name}` | body `{"plan": [step, ...]}`: replaces the plan for `name` (hits stay). 200 `{"name": .., "requests": n}`; 400 with the reason for a bad plan |
//! | `DELETE /__plan/{name}` | clears the plan and the hits for `name` |
//! | `ANY /s/{name}` | answers by the plan's next step and records the hit; 200 with an empty body once the plan is used up |
//! | `GET /__hits/{name}` | `{"hits": [{"t_ms": 1520.4, "method": "POST", "path": "/s/orders", "query": "a=1", "idempotency_key": "k" \| null, "headers": [["name", "value"], ...]}]}` |
//! | `GET /items?page=&per_page=` | 23 items `[{"id": 1}, ...]`, `per_page` 10 by default and at most; `Link` with `rel="next"` (not on the last page) and `rel="last"`, plus `first` and `prev` past page 1, as relative URLs |
//! | `GET /cursor?limit=&cursor=` | `{"items": [...], "next_cursor": "<opaque>" \| null}` over the same items; a cursor this server did not give out is a 400 |
//! | `GET /conditional` | a resource with a strong `ETag`, `Last-Modified` and GitHub-style `x-ratelimit-limit`, `-remaining`, `-used`, `-reset` (epoch seconds); `If-None-Match` / `If-Modified-Since` per RFC 9110 answer 304 without spending quota; a 200 spends one; an empty quota answers 403 with `x-ratelimit-remaining: 0`. `Cache-Control: no-cache`, or `max-age=N` with `?max_age=N` |
//! | `POST /conditional` | changes the resource: the request body (or a generated one) with a new `ETag` and `Last-Modified`; spends no quota |
//! | `ANY /limited/{name}?rate=&burst=` | a token bucket per name (`rate` tokens per second, default 1; `burst` default 1): 200, or 429 with `Retry-After` in whole seconds, rounded up |
//! | `GET /` | lists the endpoints |
//!
//! A step (every field optional, unknown fields refused):
//!
//! | field | meaning | default |
//! | --- | --- | --- |
//! | `status` | 200-999 (1xx cannot end a response) | 200 |
//! | `headers` | `{"name": "value"}`, sent as given, replacing the defaults (`Date`, `Content-Type`); a `content-length` above the body's length cuts the body short, one below it is refused | none |
//! | `body` | the body text | empty |
//! | `delay_ms` | wait before the headers (or before the reset), at most 3 600 000 (an hour) | 0 |
//! | `drip_ms` | send the body one byte at a time, this far apart, at most 3 600 000 | 0 |
//! | `reset` | close the TCP connection with a reset, sending no response byte | false |
//! | `times` | how many requests the step answers | 1 |
//!
//! Every response carries a `Date` unless the plan sets its own. `/s/{name}` records its hits
//! under `name`; the built-in endpoints record theirs under `items`, `cursor`, `conditional`
//! and `limited/{name}`. A reset closes the whole connection, every HTTP/2 stream on it too.
//! A body cut short (`"headers": {"content-length": "100"}, "body": "ab"`) sends its bytes and
//! then ends the response: over HTTP/1.1 the connection closes; over HTTP/2 the stream ends
//! short of the announced length, which the client must treat as an error.
//!
//! # Example
//!
//! A test plans two 503s and a reset, points the client under test at `/s/{name}`, and then
//! asks the server what it received:
//!
//! ```
//! use courier_faultserver::{FaultServer, Step};
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::{client::legacy::Client, rt::TokioExecutor};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = FaultServer::start().await?;
//! server.set_plan("orders", vec![
//!     Step::status(503).header("retry-after", "0").times(2),
//!     Step::reset(),
//! ]);
//! let url = format!("{}/s/orders", server.url());
//!
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
//! let send = |key: &'static str| {
//!     let req = http::Request::post(&url)
//!         .header("idempotency-key", key)
//!         .body(Full::default())
//!         .unwrap();
//!     client.request(req)
//! };
//! let resp = send("k-1").await?;
//! assert_eq!(resp.status(), 503);
//! resp.into_body().collect().await?;
//! assert_eq!(send("k-1").await?.status(), 503);
//! assert!(send("k-1").await.is_err(), "the third request is reset");
//! assert_eq!(send("k-1").await?.status(), 200, "the plan is used up");
//!
//! let hits = server.hits("orders");
//! assert_eq!(hits.len(), 4);
//! assert!(hits.iter().all(|hit| hit.idempotency_key.as_deref() == Some("k-1")));
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! The server's timers are `tokio::time`, so a plan's `delay_ms` and `drip_ms` follow a paused
//! test clock too. Logs go through `tracing`; the library installs no subscriber.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod conditional;
mod hits;
mod limited;
mod pages;
mod plan;
mod routes;
mod server;

pub use hits::{Hit, HitsBody, REDACTED};
pub use plan::{MAX_STEP_WAIT, PlanError, Step, parse_plan};
pub use server::FaultServer;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<FaultServer>();
        check::<Step>();
        check::<Hit>();
        check::<PlanError>();
    }
}

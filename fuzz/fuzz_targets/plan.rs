#![no_main]
//! The fault server's plan JSON, read and then served. Nothing may panic, in the reader or in
//! the server (a panic in any of its tasks aborts the run); a plan taken reads back the same
//! once written; every step of a plan taken gets an answer or a clean failure, over HTTP/1.1
//! and HTTP/2, and the server keeps serving.
//!
//! Serving ignores the waits (`delay_ms`, `drip_ms`): a valid wait is at most an hour, and
//! timing is not what this target checks. The first byte picks the protocol; the rest is the
//! JSON.

use bytes::Bytes;
use courier_faultserver::{FaultServer, MAX_STEP_WAIT, Step, parse_plan};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;
use std::time::Duration;

/// How many steps of a plan are served: enough for every kind to meet the others.
const SERVED_STEPS: usize = 8;
/// How long one answer may take; a step without waits answers in far less.
const PATIENCE: Duration = Duration::from_secs(10);

struct Harness {
    runtime: tokio::runtime::Runtime,
    server: FaultServer,
    http1: Client<HttpConnector, Full<Bytes>>,
    h2c: Client<HttpConnector, Full<Bytes>>,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = runtime
        .block_on(FaultServer::start())
        .expect("the fault server binds to 127.0.0.1");
    let (http1, h2c) = runtime.block_on(async {
        (
            Client::builder(TokioExecutor::new()).build_http(),
            Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        )
    });
    Harness {
        runtime,
        server,
        http1,
        h2c,
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, json)) = data.split_first() else {
        return;
    };
    let steps = match parse_plan(json) {
        Ok(steps) => steps,
        Err(e) => {
            assert!(!e.message().is_empty());
            return;
        }
    };
    for step in &steps {
        assert!((200..=999).contains(&step.status) && step.times >= 1);
        assert!(u128::from(step.delay_ms.max(step.drip_ms)) <= MAX_STEP_WAIT.as_millis());
    }
    let written = serde_json::to_vec(&serde_json::json!({ "plan": steps })).expect("steps encode");
    assert_eq!(
        parse_plan(&written).as_ref(),
        Ok(&steps),
        "the plan reads back the same"
    );

    let served: Vec<Step> = steps
        .into_iter()
        .take(SERVED_STEPS)
        .map(|step| Step {
            delay_ms: 0,
            drip_ms: 0,
            times: 1,
            ..step
        })
        .collect();
    let count = served.len();
    let h = &*HARNESS;
    h.server.clear("fuzz");
    h.server
        .try_set_plan("fuzz", served)
        .expect("a plan taken once is taken again");
    let client = if selector & 1 == 0 { &h.http1 } else { &h.h2c };
    let url = format!("{}/s/fuzz", h.server.url());
    h.runtime.block_on(async {
        for i in 0..=count {
            let method = ["GET", "HEAD", "POST"][(usize::from(selector >> 1) + i) % 3];
            let req = http::Request::builder()
                .method(method)
                .uri(&url)
                .body(Full::new(Bytes::from_static(b"x")))
                .expect("a valid request");
            let answer = tokio::time::timeout(PATIENCE, async {
                let resp = client.request(req).await?;
                let status = resp.status();
                resp.into_body().collect().await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(status)
            })
            .await
            .unwrap_or_else(|_| panic!("step {i} of {count} got no answer within {PATIENCE:?}"));
            if i == count {
                // The plan is used up: a plain 200, whatever came before.
                assert_eq!(
                    answer.ok().map(|s| s.as_u16()),
                    Some(200),
                    "the server stopped serving"
                );
            }
        }
    });
    assert_eq!(h.server.hits("fuzz").len(), count + 1);
});

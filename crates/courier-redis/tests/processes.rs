//! Four OS processes, each its own [`RedisStore`] and token bucket, send to one real HTTP
//! server (`courier-faultserver`) through one shared limit. The server records when each
//! request arrived, on its one clock: in every window, arrivals stay within
//! `burst + rate × window`, plus the spread of the path from the slot's moment to the server.
//!
//! The test runs itself again as the workers: `COURIER_REDIS_WORKER` set makes it one. How
//! long the workers send is `COURIER_REDIS_PROCESS_SECS` (default 10).

use bytes::Bytes;
use common::quota;
use courier_core::BoxError;
use courier_faultserver::FaultServer;
use courier_ratelimit::TokenBucketRateLimitLayer;
use courier_redis::RedisStore;
use courier_testkit::redis::{redis, unique_prefix};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt, service_fn};

mod common;

const WORKER_ENV: &str = "COURIER_REDIS_WORKER";
const SECS_ENV: &str = "COURIER_REDIS_PROCESS_SECS";
const PROCESSES: usize = 4;
const RATE: f64 = 20.0;
const BURST: u32 = 5;

fn run_for() -> Duration {
    let secs = std::env::var(SECS_ENV)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(10)
        .clamp(1, 300);
    Duration::from_secs(secs)
}

/// One worker: two loops sending through one token bucket over one store until
/// `run_for` has passed.
async fn worker(spec: &str) {
    let mut parts = spec.split('|');
    let (Some(redis_url), Some(prefix), Some(target)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("{WORKER_ENV} is `redis_url|prefix|target`: {spec}");
    };
    let store: RedisStore<courier_core::HostKey> = RedisStore::builder(redis_url)
        .prefix(prefix)
        .command_timeout(common::PATIENT)
        .connect()
        .await
        .expect("redis answers");
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let svc = ServiceBuilder::new()
        .layer(TokenBucketRateLimitLayer::with_quota(quota(RATE, BURST)).store_in(store.clone()))
        .service(service_fn(move |req: http::Request<()>| {
            let client = client.clone();
            async move {
                let (parts, ()) = req.into_parts();
                let resp = client
                    .request(http::Request::from_parts(parts, Empty::new()))
                    .await?;
                Ok::<_, BoxError>(resp.map(drop))
            }
        }));
    let t0 = Instant::now();
    tokio::join!(
        send_loop(svc.clone(), target, t0),
        send_loop(svc, target, t0)
    );
    assert_eq!(store.outages(), 0, "every decision came from redis");
}

/// Calls `svc` one request after another until `run_for` has passed since `t0`.
async fn send_loop<S>(svc: S, target: &str, t0: Instant)
where
    S: tower::Service<http::Request<()>, Response = http::Response<()>, Error = BoxError> + Clone,
{
    let run_for = run_for();
    let mut n = 0u32;
    while t0.elapsed() < run_for && n < 10_000 {
        let req = http::Request::get(target).body(()).unwrap();
        let resp = timeout(Duration::from_secs(5), svc.clone().oneshot(req))
            .await
            .expect("each call within 5 s")
            .expect("admitted and answered");
        assert_eq!(resp.status(), 200);
        n += 1;
    }
}

/// Kills a worker left running (the test failed before it ended).
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_limit() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        worker(&spec).await;
        return;
    }
    let Some(redis) = redis("four_processes_share_one_limit").await else {
        return;
    };
    let server = FaultServer::start().await.expect("the fault server starts");
    let spec = format!(
        "{}|{}|{}",
        redis.url(),
        unique_prefix("processes"),
        server.url_for("/s/shared")
    );
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut workers: Vec<Worker> = (0..PROCESSES)
        .map(|_| {
            let child = Command::new(&exe)
                .args(["four_processes_share_one_limit", "--exact", "--nocapture"])
                .env(WORKER_ENV, &spec)
                .stdout(Stdio::null())
                .spawn()
                .expect("the test binary runs again");
            Worker(child)
        })
        .collect();
    let limit = run_for() + Duration::from_secs(30);
    let waited = Instant::now();
    for w in &mut workers {
        loop {
            if let Some(status) = w.0.try_wait().expect("the worker's status") {
                assert!(status.success(), "a worker failed: {status}");
                break;
            }
            assert!(waited.elapsed() < limit, "the workers end within {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let mut arrivals: Vec<f64> = server.hits("shared").iter().map(|h| h.t_ms).collect();
    arrivals.sort_by(f64::total_cmp);
    let n = arrivals.len();
    // The slack every window needs: for arrivals i..=j, how much longer than their span the
    // limit would need to admit them all (`(count - burst) / rate - span`).
    let mut needed_ms = f64::NEG_INFINITY;
    for i in 0..n {
        for j in i..n {
            let count = (j - i + 1) as f64;
            let need = (count - f64::from(BURST)) / RATE * 1000.0 - (arrivals[j] - arrivals[i]);
            needed_ms = needed_ms.max(need);
        }
    }
    let span_s = (arrivals.last().unwrap_or(&0.0) - arrivals.first().unwrap_or(&0.0)) / 1000.0;
    eprintln!(
        "{n} arrivals over {span_s:.2} s from {PROCESSES} processes at {RATE}/s burst {BURST}: \
         at most burst + rate x (window + {needed_ms:.1} ms) in every window"
    );
    // Slack: the spread, between requests, of the path from the slot's moment on Redis's
    // clock to the server (the reply, the wake-up, the HTTP request): a few ms on loopback,
    // more on a busy machine.
    assert!(
        needed_ms <= 25.0,
        "a window held {needed_ms:.1} ms worth of requests beyond burst + rate x window"
    );
    let allowed = f64::from(BURST) + RATE * run_for().as_secs_f64();
    assert!(
        n as f64 >= 0.8 * allowed,
        "the shared limit lets traffic through: {n} of {allowed}"
    );
    server.shutdown().await;
}

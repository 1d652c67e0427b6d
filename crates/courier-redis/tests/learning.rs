//! A measurement, not run by default: ten replicas, each with an adaptive pacing layer and a
//! retry layer of its own, call a host that serves 50 requests a second (burst 10) and answers
//! a bare 503 beyond that, until every call has ended. Three ways: the replicas' slots in one
//! [`RedisStore`] (each replica its own connection and its own estimate: only the slots are
//! shared); each replica's slots in process (strangers); one layer for all ten (one estimate,
//! one bucket: what sharing the estimate too would come to). Prints the requests the host saw,
//! the calls served and refused, when the last call ended, and the learned rates:
//!
//! ```text
//! cargo test -p courier-redis --test learning -- --ignored --nocapture
//! ```

use bytes::Bytes;
use courier_core::PerHost;
use courier_core::{BoxError, HostKey};
use courier_ratelimit::RateLimitStore;
use courier_ratelimit::adaptive::AdaptivePacingLayer;
use courier_redis::RedisStore;
use courier_retry::RetryLayer;
use courier_testkit::redis::{redis, unique_prefix};
use http_body_util::Empty;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

mod common;

const REPLICAS: usize = 10;
/// Calls each replica makes at once.
const CALLS: usize = 50;
const HOST_RATE: f64 = 50.0;
const HOST_BURST: f64 = 10.0;
/// The host's round trip.
const RTT: Duration = Duration::from_millis(10);

/// A host serving `HOST_RATE` a second from a bucket of `HOST_BURST`, a bare 503 beyond;
/// counts the requests it saw.
#[derive(Clone)]
struct Host {
    bucket: Arc<Mutex<(f64, Instant)>>,
    seen: Arc<AtomicUsize>,
}

impl Host {
    fn new() -> Self {
        Self {
            bucket: Arc::new(Mutex::new((HOST_BURST, Instant::now()))),
            seen: Arc::default(),
        }
    }

    fn serves(&self) -> bool {
        self.seen.fetch_add(1, Ordering::Relaxed);
        let mut bucket = self.bucket.lock().unwrap();
        let now = Instant::now();
        let (tokens, last) = *bucket;
        let tokens = (tokens + (now - last).as_secs_f64() * HOST_RATE).min(HOST_BURST);
        let (tokens, served) = if tokens >= 1.0 {
            (tokens - 1.0, true)
        } else {
            (tokens, false)
        };
        *bucket = (tokens, now);
        served
    }

    async fn answer(self) -> Result<http::Response<Empty<Bytes>>, BoxError> {
        let served = self.serves();
        tokio::time::sleep(RTT).await;
        let mut resp = http::Response::new(Empty::new());
        if !served {
            *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        }
        Ok(resp)
    }
}

#[derive(Debug)]
struct Outcome {
    sent: usize,
    served: usize,
    /// Calls that failed with `RateLimited`: no slot within pacing's longest wait.
    refused: usize,
    finish: Duration,
    /// Each second, the median of the replicas' learned rates (0 for an unpaced replica).
    median_rates: Vec<f64>,
}

/// Every replica's calls at once, each retried (up to 100 attempts, no budget) until served.
async fn herd<St>(layers: Vec<AdaptivePacingLayer<PerHost, St>>) -> Outcome
where
    St: RateLimitStore<HostKey>,
{
    let host = Host::new();
    let t0 = Instant::now();
    let mut calls = Vec::new();
    for (i, pacing) in layers.iter().enumerate() {
        let pacing = pacing.clone();
        let host = host.clone();
        let svc = ServiceBuilder::new()
            .layer(
                RetryLayer::new()
                    .attempts(100)
                    .without_budget()
                    .seed(i as u64),
            )
            .layer(pacing)
            .service(service_fn(move |_req: http::Request<()>| {
                host.clone().answer()
            }));
        for _ in 0..CALLS {
            calls.push(call(svc.clone()));
        }
    }
    let done = AtomicBool::new(false);
    let key = common::host();
    let sample = async {
        let mut medians = Vec::new();
        while !done.load(Ordering::Relaxed) && medians.len() < 300 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut rates: Vec<f64> = layers
                .iter()
                .map(|l| l.learned_rate(&key).unwrap_or(0.0))
                .collect();
            rates.sort_by(f64::total_cmp);
            medians.push(rates[rates.len() / 2]);
        }
        medians
    };
    let run = async {
        let ends = timeout(Duration::from_secs(300), join_all(calls))
            .await
            .expect("every call ends within 300 s");
        done.store(true, Ordering::Relaxed);
        (ends, t0.elapsed())
    };
    let ((ends, finish), median_rates) = tokio::join!(run, sample);
    Outcome {
        sent: host.seen.load(Ordering::Relaxed),
        served: ends.iter().filter(|e| **e == End::Served).count(),
        refused: ends.iter().filter(|e| **e == End::RateLimited).count(),
        finish,
        median_rates,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Served,
    RateLimited,
    Other,
}

async fn call<S>(svc: S) -> End
where
    S: Service<http::Request<()>, Response = http::Response<Empty<Bytes>>, Error = BoxError>,
{
    let req = http::Request::get("https://api.example/x")
        .body(())
        .unwrap();
    match svc.oneshot(req).await {
        Ok(resp) if resp.status() == http::StatusCode::OK => End::Served,
        Err(e) if courier_core::is_caused_by::<courier_core::RateLimited>(&*e) => End::RateLimited,
        _ => End::Other,
    }
}

/// Runs the futures together on this task.
async fn join_all<F: std::future::Future<Output = End> + 'static>(futures: Vec<F>) -> Vec<End> {
    tokio::task::LocalSet::new()
        .run_until(async move {
            let handles: Vec<_> = futures.into_iter().map(tokio::task::spawn_local).collect();
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                out.push(h.await.unwrap_or(End::Other));
            }
            out
        })
        .await
}

fn print(name: &str, o: &Outcome) {
    let rates: Vec<String> = o.median_rates.iter().map(|r| format!("{r:.1}")).collect();
    eprintln!(
        "{name}: {} requests for {} calls; {} served, {} refused (no slot within 60 s); the \
         last ended at {:.2} s; median learned rate each second: {}",
        o.sent,
        REPLICAS * CALLS,
        o.served,
        o.refused,
        o.finish.as_secs_f64(),
        rates.join(", ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of a minute or more: run it with --ignored"]
async fn ten_replicas_learn_a_host_together() {
    let Some(redis) = redis("ten_replicas_learn_a_host_together").await else {
        return;
    };
    let prefix = unique_prefix("learning");
    let mut stores = Vec::new();
    for _ in 0..REPLICAS {
        let store: RedisStore<HostKey> = RedisStore::builder(redis.url())
            .prefix(&prefix)
            .command_timeout(common::PATIENT)
            .connect()
            .await
            .expect("redis answers");
        stores.push(store);
    }
    let layers = stores
        .iter()
        .map(|s| AdaptivePacingLayer::new().store_in(s.clone()));
    let shared = herd(layers.collect()).await;
    print("slots shared through redis", &shared);
    let strangers = herd((0..REPLICAS).map(|_| AdaptivePacingLayer::new()).collect()).await;
    print("strangers (slots in process)", &strangers);
    // What sharing the estimate too would come to: one layer (one estimate, one bucket) for
    // all ten replicas.
    let one = AdaptivePacingLayer::new();
    let together = herd(vec![one; REPLICAS]).await;
    print("one estimate and one bucket for all", &together);
    for o in [&strangers, &together] {
        assert_eq!(o.served, REPLICAS * CALLS, "every call is served");
    }
    assert_eq!(
        shared.served + shared.refused,
        REPLICAS * CALLS,
        "every call through redis is served or refused for want of a slot"
    );
    assert!(stores.iter().all(|s| s.outages() == 0));
}

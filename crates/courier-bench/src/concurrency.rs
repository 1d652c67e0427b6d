//! The concurrency-limit simulations, on paused time: a host that queues what it cannot serve
//! at once, called by a crowd in a loop (with no limit, a fixed one, and each adaptive
//! algorithm), and a slow host beside a healthy one behind one client.
//!
//! A [`QueueingHost`] has a number of workers, each serving one request for a fixed time;
//! requests beyond the workers wait in its queue (first come, first served), so its latency
//! grows with the calls in flight. It counts the calls in flight to it and the latency of each
//! (queue and service). Every figure comes from tokio's paused clock: the same on every run.

use crate::host::Body;
use bytes::Bytes;
use courier::core::HostKey;
use courier_concurrency::{AdaptiveLimit, Algorithm, ConcurrencyLimit, ConcurrencyLimitLayer};
use http::{Request, Response};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::{Instant, sleep};
use tower::{Service, ServiceExt};

/// What one bucket of time measured.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    in_flight_sum: f64,
    limit_sum: f64,
    limits: u32,
    samples: u32,
    latency_sum: Duration,
    answers: u32,
}

/// A host with `workers` workers, each serving a request in `service`; the rest queue.
#[derive(Debug, Clone)]
pub struct QueueingHost {
    workers: Arc<Semaphore>,
    service: Duration,
    /// Service times drawn uniformly from 3, 4, 5, 6 and 7 fifths of `service` (seeded).
    jitter: Option<Arc<Mutex<SmallRng>>>,
    in_flight: Arc<AtomicUsize>,
    start: Instant,
    bucket: Duration,
    acc: Arc<Mutex<Vec<Acc>>>,
}

impl QueueingHost {
    /// A host with `workers` workers (`None`: as many as there are calls), each request served
    /// in `service`; latency is summed per `bucket` of time from now.
    pub fn new(workers: Option<usize>, service: Duration, bucket: Duration) -> Self {
        let workers = workers.unwrap_or(Semaphore::MAX_PERMITS);
        Self {
            workers: Arc::new(Semaphore::new(workers)),
            service,
            jitter: None,
            in_flight: Arc::default(),
            start: Instant::now(),
            bucket,
            acc: Arc::default(),
        }
    }

    /// The same host with each service time drawn uniformly from 3, 4, 5, 6 and 7 fifths of
    /// its service time (the same mean; whole milliseconds for 5 ms, tokio's timer
    /// resolution), from a generator seeded with `seed`.
    pub fn jittered(mut self, seed: u64) -> Self {
        self.jitter = Some(Arc::new(Mutex::new(SmallRng::seed_from_u64(seed))));
        self
    }

    fn service_time(&self) -> Duration {
        match &self.jitter {
            Some(rng) => {
                let fifths: u32 = rng
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .random_range(3..=7);
                self.service * fifths / 5
            }
            None => self.service,
        }
    }

    /// The calls in flight to the host now (queued at it or served).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn with_bucket(&self, at: Instant, f: impl FnOnce(&mut Acc)) {
        let i =
            (at.saturating_duration_since(self.start).as_nanos() / self.bucket.as_nanos()) as usize;
        let mut acc = self.acc.lock().unwrap_or_else(PoisonError::into_inner);
        if acc.len() <= i {
            acc.resize(i + 1, Acc::default());
        }
        f(&mut acc[i]);
    }

    fn sample(&self, limit: Option<usize>) {
        let n = self.in_flight() as f64;
        self.with_bucket(Instant::now(), |a| {
            a.in_flight_sum += n;
            if let Some(l) = limit {
                a.limit_sum += l as f64;
                a.limits += 1;
            }
            a.samples += 1;
        });
    }

    fn buckets(&self) -> Vec<Acc> {
        self.acc
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Service<Request<Body>> for QueueingHost {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        let host = self.clone();
        host.in_flight.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            let start = Instant::now();
            {
                let _worker = host.workers.acquire().await;
                sleep(host.service_time()).await;
            }
            host.in_flight.fetch_sub(1, Ordering::Relaxed);
            let end = Instant::now();
            host.with_bucket(end, |a| {
                a.latency_sum += end - start;
                a.answers += 1;
            });
            Ok(Response::new(Body::new(Bytes::from_static(b"ok"))))
        })
    }
}

/// How the client limits its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No limit: the layer passes through.
    Off,
    /// A fixed limit.
    Fixed(usize),
    /// An adaptive limit learned by this algorithm, with the default bounds.
    Adaptive(Algorithm),
}

impl Variant {
    /// Every variant the queueing table compares.
    pub const ALL: [Variant; 5] = [
        Variant::Off,
        Variant::Fixed(8),
        Variant::Adaptive(Algorithm::LatencyAimd),
        Variant::Adaptive(Algorithm::Gradient2),
        Variant::Adaptive(Algorithm::Vegas),
    ];

    /// The variant's name in the tables.
    pub fn name(&self) -> String {
        match self {
            Variant::Off => "no limit".to_owned(),
            Variant::Fixed(n) => format!("fixed {n}"),
            Variant::Adaptive(a) => format!("adaptive {a:?}"),
        }
    }
}

/// One second of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Second {
    /// Mean calls in flight to the host.
    pub in_flight: f64,
    /// Mean limit (NaN with no limit, or before the first call).
    pub limit: f64,
    /// Mean latency at the host (its queue and its service), ms.
    pub host_latency_ms: f64,
    /// Answers per second.
    pub goodput: f64,
}

/// A queueing-host run: each second, and the summary over its steady part.
#[derive(Debug, Clone)]
pub struct QueueingRun {
    /// The variant.
    pub variant: Variant,
    /// Whether the host's service times were jittered.
    pub jittered: bool,
    /// Each second of the run.
    pub seconds: Vec<Second>,
    /// The first second from which the mean in-flight of every later second stays within
    /// 20 % of the workers; `None` when it never does.
    pub settled_at: Option<usize>,
    /// Mean in-flight from the 5th second on.
    pub in_flight: f64,
    /// Mean host latency from the 5th second on, ms.
    pub host_latency_ms: f64,
    /// The worst second's host latency from the 5th second on, ms.
    pub worst_latency_ms: f64,
    /// Goodput from the 5th second on, as a share of the host's capacity.
    pub goodput_share: f64,
    /// Mean latency the callers saw (the client's queue included), ms.
    pub caller_latency_ms: f64,
    /// Calls refused.
    pub refused: u64,
}

/// The queueing host: 8 workers, 5 ms each.
pub const WORKERS: usize = 8;
/// The queueing host's service time.
pub const SERVICE: Duration = Duration::from_millis(5);

/// `callers` tasks call a [`QueueingHost`] (8 workers, 5 ms) in a loop for `duration`,
/// through the layer `variant` picks; the client queues every caller (no refusals). Run it on
/// paused time.
pub async fn queueing_host(
    variant: Variant,
    callers: usize,
    duration: Duration,
    jitter: Option<u64>,
) -> QueueingRun {
    let mut host = QueueingHost::new(Some(WORKERS), SERVICE, Duration::from_secs(1));
    if let Some(seed) = jitter {
        host = host.jittered(seed);
    }
    let layer = ConcurrencyLimitLayer::new()
        .max_queue(callers)
        .max_wait(Duration::from_secs(60));
    let (svc, handle) = match variant {
        Variant::Off => (ConcurrencyLimit::pass_through(host.clone()), None),
        Variant::Fixed(n) => {
            let layer = layer.fixed(NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN));
            (
                ConcurrencyLimit::new(host.clone(), layer.clone()),
                Some(layer.handle()),
            )
        }
        Variant::Adaptive(a) => {
            let layer = layer.adaptive(AdaptiveLimit::new().algorithm(a));
            (
                ConcurrencyLimit::new(host.clone(), layer.clone()),
                Some(layer.handle()),
            )
        }
    };
    let key = HostKey::from_request(&request());
    let end = Instant::now() + duration;
    let sampler = {
        let host = host.clone();
        let key = key.clone();
        tokio::spawn(async move {
            while Instant::now() < end {
                let limit = handle
                    .as_ref()
                    .and_then(|h| h.status(&key))
                    .map(|s| s.limit);
                host.sample(limit);
                sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let caller_stats = Arc::new(Mutex::new((Duration::ZERO, 0u64, 0u64)));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let svc = svc.clone();
            let stats = caller_stats.clone();
            tokio::spawn(async move {
                while Instant::now() < end {
                    let start = Instant::now();
                    let ok = svc.clone().oneshot(request()).await.is_ok();
                    {
                        let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
                        if ok {
                            s.0 += start.elapsed();
                            s.1 += 1;
                        } else {
                            s.2 += 1;
                        }
                    }
                    if !ok {
                        sleep(Duration::from_millis(1)).await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let _ = sampler.await;
    let (latency, answered, refused) = *caller_stats.lock().unwrap_or_else(PoisonError::into_inner);
    let mut run = summarize(variant, &host, duration, latency, answered, refused);
    run.jittered = jitter.is_some();
    run
}

fn request() -> Request<Body> {
    Request::get("http://queueing.example/work")
        .body(Body::default())
        .unwrap_or_default()
}

fn summarize(
    variant: Variant,
    host: &QueueingHost,
    duration: Duration,
    latency: Duration,
    answered: u64,
    refused: u64,
) -> QueueingRun {
    let secs = duration.as_secs() as usize;
    let buckets = host.buckets();
    let seconds: Vec<Second> = (0..secs)
        .map(|i| {
            let a = buckets.get(i).copied().unwrap_or_default();
            let n = f64::from(a.samples.max(1));
            Second {
                in_flight: a.in_flight_sum / n,
                limit: if a.limits == 0 {
                    f64::NAN
                } else {
                    a.limit_sum / f64::from(a.limits)
                },
                host_latency_ms: a.latency_sum.as_secs_f64() * 1e3 / f64::from(a.answers.max(1)),
                goodput: f64::from(a.answers),
            }
        })
        .collect();
    let near = |s: &Second| (s.in_flight - WORKERS as f64).abs() <= 0.2 * WORKERS as f64;
    let settled_at = (0..secs).find(|&i| seconds[i..].iter().all(near));
    let steady = &seconds[5.min(secs)..];
    let n = steady.len().max(1) as f64;
    let capacity = WORKERS as f64 / SERVICE.as_secs_f64();
    QueueingRun {
        variant,
        jittered: false,
        settled_at,
        in_flight: steady.iter().map(|s| s.in_flight).sum::<f64>() / n,
        host_latency_ms: steady.iter().map(|s| s.host_latency_ms).sum::<f64>() / n,
        worst_latency_ms: steady.iter().map(|s| s.host_latency_ms).fold(0.0, f64::max),
        goodput_share: steady.iter().map(|s| s.goodput).sum::<f64>() / n / capacity,
        caller_latency_ms: latency.as_secs_f64() * 1e3 / answered.max(1) as f64,
        refused,
        seconds,
    }
}

/// The slow-host run: what the healthy host's callers saw, and the slow host's in-flight.
#[derive(Debug, Clone, Copy)]
pub struct TwoHostsRun {
    /// Whether the client also called the slow host.
    pub with_slow: bool,
    /// The fixed limit, or `None` for the adaptive one.
    pub fixed: Option<usize>,
    /// Mean latency of the healthy host's calls, ms.
    pub healthy_latency_ms: f64,
    /// The healthy host's calls that failed.
    pub healthy_failed: u64,
    /// The most calls in flight to the slow host at once.
    pub slow_max_in_flight: usize,
    /// The slow host's limit at the end.
    pub slow_limit: usize,
    /// The highest limit the slow host had while the run lasted (sampled every 10 ms).
    pub slow_max_limit: usize,
    /// Calls to the slow host refused.
    pub slow_refused: u64,
    /// The longest a refused call took to fail on the wall clock (its first poll), µs.
    pub slowest_refusal_us: u128,
}

/// A healthy host (5 ms, as many workers as calls) and, with `with_slow`, a slow one (every
/// answer after 5 s) behind one client with the default layer (adaptive, no queue) or a
/// `fixed` limit: `rate` calls per second to each for `duration`. Run it on paused time.
pub async fn two_hosts(
    with_slow: bool,
    fixed: Option<usize>,
    rate: u32,
    duration: Duration,
) -> TwoHostsRun {
    let healthy = QueueingHost::new(None, SERVICE, Duration::from_secs(1));
    let slow = QueueingHost::new(None, Duration::from_secs(5), Duration::from_secs(1));
    let layer = match fixed.and_then(NonZeroUsize::new) {
        Some(n) => ConcurrencyLimitLayer::new().fixed(n),
        None => ConcurrencyLimitLayer::new(),
    };
    let handle = layer.handle();
    // One client: one layer whose key tells the hosts apart, over a router to the two hosts.
    let router = tower::service_fn({
        let (healthy, slow) = (healthy.clone(), slow.clone());
        move |req: Request<Body>| {
            let mut host = if req.uri().host() == Some("slow.example") {
                slow.clone()
            } else {
                healthy.clone()
            };
            host.call(req)
        }
    });
    let svc = ConcurrencyLimit::new(router, layer);
    let healthy_stats = Arc::new(Mutex::new((Duration::ZERO, 0u64, 0u64)));
    let slow_stats = Arc::new(Mutex::new((0u64, 0u128, 0usize, 0usize)));
    let slow_key = HostKey::from_request(
        &Request::get("http://slow.example/")
            .body(())
            .unwrap_or_default(),
    );
    let interval = Duration::from_secs(1) / rate;
    let end = Instant::now() + duration;
    let mut tick = tokio::time::interval(interval);
    let mut calls = Vec::new();
    let mut next_sample = Instant::now();
    while Instant::now() < end {
        tick.tick().await;
        if Instant::now() >= next_sample {
            next_sample += Duration::from_millis(10);
            let mut s = slow_stats.lock().unwrap_or_else(PoisonError::into_inner);
            s.2 = s.2.max(slow.in_flight());
            s.3 = s.3.max(handle.status(&slow_key).map_or(0, |st| st.limit));
        }
        let healthy_call = svc.clone().oneshot(
            Request::get("http://healthy.example/")
                .body(Body::default())
                .unwrap_or_default(),
        );
        let stats = healthy_stats.clone();
        calls.push(tokio::spawn(async move {
            let start = Instant::now();
            let res = healthy_call.await;
            let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
            match res {
                Ok(_) => {
                    s.0 += start.elapsed();
                    s.1 += 1;
                }
                Err(_) => s.2 += 1,
            }
        }));
        if with_slow {
            // Polled once here: a refusal is an answer on the first poll, timed on the wall
            // clock (the paused one would say zero whatever it cost).
            let mut slow_call = Box::pin(
                svc.clone().oneshot(
                    Request::get("http://slow.example/")
                        .body(Body::default())
                        .unwrap_or_default(),
                ),
            );
            let wall = std::time::SystemTime::now();
            let polled = slow_call
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()));
            let took = wall.elapsed().unwrap_or_default().as_micros();
            match polled {
                Poll::Ready(Err(_)) => {
                    let mut s = slow_stats.lock().unwrap_or_else(PoisonError::into_inner);
                    s.0 += 1;
                    s.1 = s.1.max(took);
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => calls.push(tokio::spawn(async move {
                    let _ = slow_call.await;
                })),
            }
        }
    }
    for c in calls {
        let _ = c.await;
    }
    let (latency, answered, failed) = *healthy_stats.lock().unwrap_or_else(PoisonError::into_inner);
    let (slow_refused, slowest, slow_max, max_limit) =
        *slow_stats.lock().unwrap_or_else(PoisonError::into_inner);
    TwoHostsRun {
        with_slow,
        fixed,
        healthy_latency_ms: latency.as_secs_f64() * 1e3 / answered.max(1) as f64,
        healthy_failed: failed,
        slow_max_in_flight: slow_max,
        slow_limit: handle.status(&slow_key).map_or(0, |s| s.limit),
        slow_max_limit: max_limit,
        slow_refused,
        slowest_refusal_us: slowest,
    }
}

/// Every figure of the concurrency tables, on a fresh paused runtime.
pub fn run_all() -> (Vec<QueueingRun>, Vec<TwoHostsRun>) {
    crate::sim::on_paused_time(async {
        let mut queueing = Vec::new();
        for jitter in [None, Some(7)] {
            for v in Variant::ALL {
                queueing.push(queueing_host(v, 200, Duration::from_secs(30), jitter).await);
            }
        }
        let two = vec![
            two_hosts(false, None, 1000, Duration::from_secs(10)).await,
            two_hosts(true, None, 1000, Duration::from_secs(10)).await,
            two_hosts(true, Some(1000), 1000, Duration::from_secs(10)).await,
        ];
        (queueing, two)
    })
}

/// Whether the tables show every second of a variant's run (the one the layer uses), or the
/// first six and every fifth.
fn all_seconds(v: Variant) -> bool {
    v == Variant::Adaptive(Algorithm::LatencyAimd)
}

/// The tables, as Markdown.
pub fn report(queueing: &[QueueingRun], two: &[TwoHostsRun]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Queueing host: {WORKERS} workers, {} ms each ({:.0} answers/s), 200 callers in a loop for 30 s; from the 5th second on:\n",
        SERVICE.as_millis(),
        WORKERS as f64 / SERVICE.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| client | settled (in-flight within 20 % of {WORKERS}) at | in-flight | host latency (worst second) | goodput | callers' latency |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    for r in queueing {
        let _ = writeln!(
            out,
            "| {}{} | {} | {:.1} | {:.2} ms ({:.2} ms) | {:.1} % | {:.1} ms |",
            r.variant.name(),
            if r.jittered { ", jittered host" } else { "" },
            r.settled_at
                .map_or("never".to_owned(), |s| format!("{s} s")),
            r.in_flight,
            r.host_latency_ms,
            r.worst_latency_ms,
            r.goodput_share * 100.0,
            r.caller_latency_ms,
        );
    }
    for r in queueing {
        let _ = writeln!(
            out,
            "\n{}{} over time:\n",
            r.variant.name(),
            if r.jittered { ", jittered host" } else { "" }
        );
        let _ = writeln!(
            out,
            "| second | in-flight | limit | host latency | answers/s |"
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for (i, s) in r.seconds.iter().enumerate() {
            if all_seconds(r.variant) || i < 6 || i % 5 == 4 {
                let limit = if s.limit.is_nan() {
                    "-".to_owned()
                } else {
                    format!("{:.1}", s.limit)
                };
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {limit} | {:.2} ms | {:.0} |",
                    i + 1,
                    s.in_flight,
                    s.host_latency_ms,
                    s.goodput
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\nA slow host (every answer after 5 s) and a healthy one (5 ms) behind one client, 1000 calls/s to each for 10 s:\n"
    );
    let _ = writeln!(
        out,
        "| client calls | limit | healthy latency | healthy failed | slow: most in flight | slow: highest limit | slow: refused | slowest refusal |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in two {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} ms | {} | {} | {} | {} | {} µs |",
            if r.with_slow {
                "both hosts"
            } else {
                "the healthy host only"
            },
            r.fixed
                .map_or("adaptive (default)".to_owned(), |n| format!("fixed {n}")),
            r.healthy_latency_ms,
            r.healthy_failed,
            r.slow_max_in_flight,
            r.slow_max_limit,
            r.slow_refused,
            r.slowest_refusal_us,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_adaptive_limit_holds_a_queueing_host_at_its_capacity() {
        let r = queueing_host(
            Variant::Adaptive(Algorithm::LatencyAimd),
            200,
            Duration::from_secs(30),
            None,
        )
        .await;
        assert!(r.settled_at.is_some_and(|s| s <= 5), "{r:?}");
        assert!(
            r.worst_latency_ms <= 2.0 * SERVICE.as_secs_f64() * 1e3,
            "{r:?}"
        );
        assert!(r.goodput_share >= 0.9, "{r:?}");
        assert_eq!(r.refused, 0);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn with_no_limit_latency_grows_with_the_queue() {
        let r = queueing_host(Variant::Off, 200, Duration::from_secs(10), None).await;
        // 200 calls in flight over 8 workers of 5 ms: 125 ms.
        assert!(r.host_latency_ms > 100.0, "{r:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_slow_host_stays_within_its_limit_and_the_healthy_one_is_untouched() {
        let alone = two_hosts(false, None, 1000, Duration::from_secs(10)).await;
        let both = two_hosts(true, None, 1000, Duration::from_secs(10)).await;
        assert!(
            both.healthy_latency_ms <= alone.healthy_latency_ms * 1.1,
            "{alone:?} {both:?}"
        );
        assert_eq!(both.healthy_failed, 0);
        assert!(both.slow_max_in_flight <= both.slow_max_limit, "{both:?}");
        assert!(both.slow_refused > 0);
    }
}

//! Hedging against a slow tail over 127.0.0.1 (BENCHMARKS.md, section 8): the preset without
//! hedging, the preset with `HedgeLayer::new()`, and tower's `Hedge`, each making 10 000 GETs
//! from 16 tasks to a host that answers 5 % of its requests after 500 ms and the others after
//! 5 ms, drawn per request ([`courier_bench::hedge`]).
//!
//! ```text
//! cargo bench -p courier-bench --bench hedge
//! ```
//!
//! The server ([`LoopbackServer`] waiting what [`Tail`] draws) runs on a thread and a
//! current-thread runtime of its own; the clients on another current-thread runtime, so on
//! two cores each side has one. `ROUNDS` rounds, each running every variant once, in an order
//! rotated by one each round; before each run the tail is reseeded with the round's seed, so
//! the variants of a round meet the same sequence of waits. Each run builds its client anew:
//! connections, the hedge layer's learned latencies and its budget start from nothing, as in
//! a process that has just started.
//!
//! A call's latency runs from asking the client for readiness to the whole body read. The
//! load is the requests the server received during the run (every hedge that reached it,
//! answered or given up on), counted [`SETTLE`] after the last call ended, over the calls.
//! Every call must end with the server's `ok`.
//!
//! The variants:
//!
//! - **the preset**: `CourierLayer::new().cache(None)` over hyper-util. The cache is off:
//!   every call is a GET of the same URL, which it would otherwise answer itself.
//! - **the preset, hedged**: the same with `.hedge(HedgeLayer::new())`: a hedge after the
//!   host's learned 95th percentile, 2 requests per call at most, a budget of 10 % of the
//!   requests per host over 10 s with no floor.
//! - **tower's `Hedge`** over the same hyper-util client (courier's `hyper_client()`, plain):
//!   latency percentile 0.95, at least [`MIN_DATA_POINTS`] latencies (courier's
//!   `MIN_LATENCIES`), its histogram rotated every [`TOWER_PERIOD`]. Its policy clones every
//!   GET, so it hedges every call still out after its delay; it has no budget. `Hedge` is not
//!   `Clone`: the tasks share one through tower's `Buffer`.
//!
//! Printed: each round's table; the median and the range over the rounds; each variant
//! against the goals; and, for the hedged preset, the hedges it sent, read from the
//! [`Hedged`] record on its answers. The CDF of every call of every round, per variant, is
//! drawn in `docs/bench/hedge.svg`.
//!
//! `COURIER_BENCH_HEDGE_CALLS` sets the calls per run (default 10 000, at least 16) and
//! `COURIER_BENCH_HEDGE_ROUNDS` the rounds (default 3).

#![allow(missing_docs)]

use bytes::Bytes;
use courier::CourierLayer;
use courier::retry::hedge::{HedgeLayer, Hedged};
use courier::transport::hyper_client;
use courier_bench::charts;
use courier_bench::hedge::{self, Latencies, SEED, Summary, Tail};
use courier_bench::server::{BODY, LoopbackServer};
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use tokio::time::Instant;
use tower::buffer::Buffer;
use tower::{Service, ServiceExt};

type Body = Full<Bytes>;

const TASKS: usize = 16;

/// How long after a run's last call the server's count is read: a hedge given up on just
/// before may still be on its way to the server.
const SETTLE: Duration = Duration::from_millis(50);

/// tower's `Hedge`: the latencies its histogram needs before it hedges, as courier's layer.
const MIN_DATA_POINTS: u64 = courier::retry::hedge::MIN_LATENCIES as u64;

/// tower's `Hedge`: how often its histogram rotates. It reads the percentile of the last whole
/// period only, so it hedges nothing until one period has passed with `MIN_DATA_POINTS`
/// answers in it. At the 1 200 to 1 500 calls a second of a hedged run here, a tenth of a
/// second holds well over a hundred answers, enough for a 95th percentile, and leaves under
/// 2 % of a run unhedged; at 1 s, about an eighth would be.
const TOWER_PERIOD: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Preset,
    Hedged,
    Tower,
}

const VARIANTS: [Variant; 3] = [Variant::Preset, Variant::Hedged, Variant::Tower];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Preset => "courier preset, no hedging",
            Self::Hedged => "courier preset + HedgeLayer::new()",
            Self::Tower => "tower Hedge (p95, no budget)",
        }
    }
}

/// tower's hedge policy: every request may be hedged.
#[derive(Debug, Clone, Copy)]
struct EveryRequest;

impl tower::hedge::Policy<Request<Body>> for EveryRequest {
    fn clone_request(&self, req: &Request<Body>) -> Option<Request<Body>> {
        let mut copy = Request::new(req.body().clone());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        Some(copy)
    }

    fn can_retry(&self, _req: &Request<Body>) -> bool {
        true
    }
}

/// What one task saw.
#[derive(Default)]
struct Task {
    ok: usize,
    times: Vec<Duration>,
    hedged: Vec<Hedged>,
    error: Option<String>,
}

/// `n` GETs of `uri` one after the other through `svc`.
async fn calls<S, RB>(mut svc: S, uri: Uri, n: usize) -> Task
where
    S: Service<Request<Body>, Response = Response<RB>>,
    S::Error: std::fmt::Display,
    RB: http_body::Body,
{
    let mut task = Task {
        times: Vec::with_capacity(n),
        ..Task::default()
    };
    for _ in 0..n {
        let sent = Instant::now();
        let ready = match svc.ready().await {
            Ok(ready) => ready,
            Err(e) => {
                task.error.get_or_insert(e.to_string());
                break;
            }
        };
        let mut req = Request::new(Body::default());
        *req.uri_mut() = uri.clone();
        match ready.call(req).await {
            Ok(resp) => {
                if let Some(h) = resp.extensions().get::<Hedged>() {
                    task.hedged.push(h.clone());
                }
                let body = resp.into_body().collect().await.ok();
                task.ok += usize::from(body.is_some_and(|b| b.to_bytes() == BODY));
            }
            Err(e) => {
                task.error.get_or_insert(e.to_string());
            }
        }
        task.times.push(sent.elapsed());
    }
    task
}

/// One variant's run.
struct Run {
    latencies: Latencies,
    summary: Summary,
    hedged: Vec<Hedged>,
    took: Duration,
}

/// `n` calls of `variant` over [`TASKS`] tasks, against `server`.
async fn run(server: &LoopbackServer, variant: Variant, n: usize) -> Run {
    let uri: Uri = server.url("/items").parse().expect("a valid uri");
    let per_task = n / TASKS;
    let before = server.served();
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    match variant {
        Variant::Preset | Variant::Hedged => {
            let mut layer = CourierLayer::new().cache(None);
            if variant == Variant::Hedged {
                layer = layer.hedge(HedgeLayer::new());
            }
            let svc = layer.hyper::<Body>();
            for _ in 0..TASKS {
                set.spawn(calls(svc.clone(), uri.clone(), per_task));
            }
        }
        Variant::Tower => {
            let hedge = tower::hedge::Hedge::new(
                hyper_client::<Body>(),
                EveryRequest,
                MIN_DATA_POINTS,
                0.95,
                TOWER_PERIOD,
            );
            let svc = Buffer::new(hedge, TASKS);
            for _ in 0..TASKS {
                set.spawn(calls(svc.clone(), uri.clone(), per_task));
            }
        }
    }
    let mut ok = 0;
    let mut times = Vec::with_capacity(per_task * TASKS);
    let mut hedged = Vec::new();
    let mut error = None;
    while let Some(done) = set.join_next().await {
        let task = done.expect("a task of calls");
        ok += task.ok;
        times.extend(task.times);
        hedged.extend(task.hedged);
        error = error.or(task.error);
    }
    let took = start.elapsed();
    tokio::time::sleep(SETTLE).await;
    let requests = server.served() - before;
    let calls = per_task * TASKS;
    assert_eq!(
        ok,
        calls,
        "{}: {} of {calls} calls failed (first error: {})",
        variant.name(),
        calls - ok,
        error
            .as_deref()
            .unwrap_or("none; a body was not the server's")
    );
    let latencies = Latencies::new(times);
    let summary = Summary::of(&latencies, calls as u64, requests);
    Run {
        latencies,
        summary,
        hedged,
        took,
    }
}

/// The hedges the layer sent in a run, from the records on its answers.
fn hedge_line(run: &Run) -> String {
    let calls = run.summary.calls.max(1) as f64;
    let sent = run.hedged.len();
    let won = run
        .hedged
        .iter()
        .filter(|h| h.winner().is_some_and(|w| w.attempt > 1))
        .count();
    let delays = Latencies::new(
        run.hedged
            .iter()
            .filter_map(|h| h.requests().iter().find(|r| r.attempt == 2))
            .map(|r| r.offset)
            .collect(),
    );
    format!(
        "hedged calls {sent} ({:.1} % of the calls), won by the hedge {won}; hedge sent after \
         {} (median; p10 {}, p90 {})",
        sent as f64 / calls * 100.0,
        hedge::millis(delays.quantile(0.5)),
        hedge::millis(delays.quantile(0.1)),
        hedge::millis(delays.quantile(0.9)),
    )
}

fn env_count(name: &str, default: usize, least: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= least)
        .unwrap_or(default)
}

fn main() {
    if !courier_bench::selected("hedge") {
        return;
    }
    let n = env_count("COURIER_BENCH_HEDGE_CALLS", 10_000, TASKS);
    let rounds = env_count("COURIER_BENCH_HEDGE_ROUNDS", 3, 1);

    let tail = Tail::new(SEED);
    let server = tail.serve().expect("the tail server starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    println!(
        "hedging over 127.0.0.1: {} GETs per run from {TASKS} tasks; the host answers {} % of \
         the requests after {} ms, the others after {} ms; {rounds} rounds, rotating order\n",
        n / TASKS * TASKS,
        hedge::SLOW_PER_100,
        hedge::SLOW.as_millis(),
        hedge::FAST.as_millis(),
    );
    // runs[v][round]
    let mut runs: Vec<Vec<Run>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    let total = Instant::now();
    for round in 0..rounds {
        let mut order = Vec::new();
        for k in 0..VARIANTS.len() {
            let v = (round + k) % VARIANTS.len();
            tail.reseed(SEED + round as u64);
            let done = rt.block_on(run(&server, VARIANTS[v], n));
            order.push(v);
            runs[v].push(done);
        }
        println!("#### round {} (seed {})\n", round + 1, SEED + round as u64);
        let rows: Vec<(&str, Summary)> = VARIANTS
            .iter()
            .zip(&runs)
            .map(|(v, r)| (v.name(), r[round].summary))
            .collect();
        println!("{}", hedge::round_table(&rows));
        let took: Vec<String> = order
            .iter()
            .map(|&v| {
                format!(
                    "{} {:.1} s",
                    VARIANTS[v].name(),
                    runs[v][round].took.as_secs_f64()
                )
            })
            .collect();
        println!("in order: {}", took.join(", "));
        let hedged = VARIANTS
            .iter()
            .position(|&v| v == Variant::Hedged)
            .expect("a hedged variant");
        println!("courier: {}\n", hedge_line(&runs[hedged][round]));
    }

    let rows: Vec<(&str, Vec<Summary>)> = VARIANTS
        .iter()
        .zip(&runs)
        .map(|(v, r)| (v.name(), r.iter().map(|run| run.summary).collect()))
        .collect();
    println!(
        "#### {rounds} rounds ({:.1} s in all)\n",
        total.elapsed().as_secs_f64()
    );
    println!("{}", hedge::summary_table(&rows));
    println!("{}", hedge::goals(&rows));
    draw(&runs, n / TASKS * TASKS, rounds);
    drop(rt);
    drop(server);
}

/// The CDF of every call of every round, one line per variant.
fn draw(runs: &[Vec<Run>], calls: usize, rounds: usize) {
    let path = charts::chart_dir().join("hedge.svg");
    let curves: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| Latencies::merged(r.iter().map(|run| &run.latencies)).curve(4, 20))
        .collect();
    let series: Vec<(&str, Vec<(f64, f64)>)> = VARIANTS
        .iter()
        .zip(curves)
        .map(|(v, c)| (v.name(), c))
        .collect();
    let title = format!(
        "Latency by percentile: {calls} GETs from {TASKS} tasks, {} % of answers after {} ms \
         ({rounds} rounds)",
        hedge::SLOW_PER_100,
        hedge::SLOW.as_millis(),
    );
    match charts::percentiles_log(&path, &title, "latency, ms (log scale)", &series) {
        Ok(()) => println!("chart: {}", path.display()),
        Err(e) => eprintln!("chart {}: {e}", path.display()),
    }
}

//! End to end over 127.0.0.1: requests per second of the raw clients, of the preset over
//! them, of the preset's floor over them (`courier_bench::floors::preset_floor`), of
//! reqwest-middleware with reqwest-retry, and of the same features built from peers
//! (`courier_bench::peer`) over them, sequential and with 16 concurrent tasks; the medians are
//! drawn in `docs/bench/loopback.svg`. Every run checks that the server saw one request per
//! call.
//!
//! ```text
//! cargo bench -p courier-bench --bench loopback
//! ```
//!
//! The server ([`LoopbackServer`]: hyper, HTTP/1.1 keep-alive, `200 ok`) runs on a thread and
//! a current-thread runtime of its own; the clients run on another current-thread runtime, so
//! on two cores each side has one. One warm-up round, then `ROUNDS` rounds; each round runs
//! every variant once, starting one variant later than the round before (rotating order), so
//! a slow moment of the machine does not always hit the same variant. Reported: the median
//! requests per second over the rounds, the slowest and fastest round, and the ratio to the
//! raw client of the same transport and concurrency, taken per round (both ran within the same
//! second or two) and then the median of those.
//!
//! Counts: `COURIER_BENCH_SEQ` requests per sequential run (default 3000), and
//! `COURIER_BENCH_CONC` per concurrent run (default 8000, split over 16 tasks).
//!
//! Then latency with 256 tasks in flight, raw hyper-util against the preset (with its cache
//! and without), its floor, `courier::Client` and the peer stack over it: p50 and p99 of every request of
//! three runs each (`COURIER_BENCH_LAT` requests per run, default 51 200: 200 per task, as
//! fewer leave a run's p99 to a few stalls of the machine), each run's p99, its spread between
//! runs and its ratio to raw's in the same round. The latency table is made twice: with the
//! clients on the one thread they ran on above, and with fresh clients on a multi-thread
//! runtime of as many workers as the machine has cores (a service's usual runtime), sharing
//! them with the server's thread.
//!
//! `courier::Client` (the preset's defaults over hyper-util, called as reqwest is: a URL
//! string, `get(url).send()`, `bytes()`) runs beside the preset over hyper-util; after the
//! table, its cost over the preset per request (`1/rate` of the client minus `1/rate` of the
//! preset in the same round, the median of the rounds) is printed for each concurrency.
//!
//! `COURIER_BENCH_ONLY=a,b` runs only the variants named `a` or `b` (a part that is no whole
//! name picks every name containing it) and the raw client of their transport, which the
//! ratios need; the latency table is restricted the same way, and no chart is drawn (the
//! checked-in chart is of the whole bench):
//!
//! ```text
//! COURIER_BENCH_ONLY='courier preset over hyper-util,courier::Client' \
//!     cargo bench -p courier-bench --bench loopback
//! ```

#![allow(missing_docs)]

use bytes::Bytes;
use courier::CourierLayer;
use courier::transport::{ReqwestService, hyper_client, reqwest_client_builder};
use courier_bench::charts;
use courier_bench::peer::{self, PeerStack};
use courier_bench::server::{BODY, LoopbackServer};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

type Body = Full<Bytes>;

const ROUNDS: usize = 7;
const TASKS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    HyperRaw,
    HyperPreset,
    /// `courier::Client::new()`: the preset's defaults over hyper-util, behind the client's
    /// URL parsing, request building, redirect handling and response type.
    Courier,
    /// The preset over hyper-util with adaptive pacing off: what the pacing costs a healthy
    /// host.
    HyperPresetNoPacing,
    /// The preset over hyper-util without its cache, the case of most users: in the latency
    /// table beside the preset, so that what the cache does to the tail shows.
    HyperPresetNoCache,
    /// The floor of the preset without its cache ([`courier_bench::floors::preset_floor`])
    /// over hyper-util: what any stack keeping the preset's contracts over the peers' costs
    /// at least.
    HyperFloor,
    ReqwestRaw,
    ReqwestPreset,
    ReqwestMiddleware,
    /// The same floor over reqwest, through courier's adapter (which sends the preset's
    /// `User-Agent`).
    ReqwestFloor,
    /// The same features built from peers ([`courier_bench::peer`]) over the hyper-util client.
    HyperPeer,
    /// The same over reqwest, through courier's adapter (the preset's transport).
    ReqwestPeer,
    /// One layer alone over the hyper-util client: `HYPER_LAYERS[i]`.
    HyperLayer(usize),
}

/// With `COURIER_BENCH_LAYERS=1`: each layer alone over the hyper-util client, to see where
/// the preset's end-to-end cost comes from.
const HYPER_LAYERS: [&str; 7] = [
    "hyper-util + no layer (preset bare)",
    "hyper-util + deadline alone",
    "hyper-util + attempt timeout alone",
    "hyper-util + cache alone",
    "hyper-util + retry alone",
    "hyper-util + breaker alone",
    "hyper-util + no layer, no User-Agent",
];

fn hyper_layer(i: usize) -> CourierLayer {
    let bare = CourierLayer::bare();
    match i {
        1 => bare.deadline(courier::preset::DEFAULT_DEADLINE),
        2 => bare.attempt_timeout(courier::preset::DEFAULT_ATTEMPT_TIMEOUT),
        3 => bare.cache(courier::cache::EtagCacheLayer::new()),
        4 => bare.retry(courier::retry::RetryLayer::new()),
        5 => bare.circuit_breaker(courier::breaker::CircuitBreakerLayer::new()),
        6 => bare.user_agent(None),
        _ => bare,
    }
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Self::HyperRaw => "hyper-util client (raw)",
            Self::HyperPreset => "courier preset over hyper-util",
            Self::Courier => "courier::Client over hyper-util (get(url).send(), bytes())",
            Self::HyperPresetNoPacing => "courier preset over hyper-util, adaptive pacing off",
            Self::HyperPresetNoCache => "courier preset over hyper-util, no cache",
            Self::HyperFloor => "the preset's floor over hyper-util, no cache",
            Self::ReqwestRaw => "reqwest (raw)",
            Self::ReqwestPreset => "courier preset over reqwest",
            Self::ReqwestMiddleware => "reqwest-middleware + reqwest-retry",
            Self::ReqwestFloor => "the preset's floor over reqwest, no cache",
            Self::HyperPeer => "peer stack over hyper-util",
            Self::ReqwestPeer => "peer stack over reqwest (same adapter)",
            Self::HyperLayer(i) => HYPER_LAYERS[i],
        }
    }

    fn raw(self) -> Self {
        match self {
            Self::HyperRaw
            | Self::HyperPreset
            | Self::Courier
            | Self::HyperPresetNoPacing
            | Self::HyperPresetNoCache
            | Self::HyperFloor
            | Self::HyperPeer
            | Self::HyperLayer(_) => Self::HyperRaw,
            _ => Self::ReqwestRaw,
        }
    }
}

#[derive(Clone)]
struct Clients {
    url: String,
    uri: Uri,
    hyper: courier::transport::HyperClient<Body>,
    hyper_preset: courier::Courier<courier::transport::HyperService<Body>>,
    client: courier::Client,
    hyper_no_pacing: courier::Courier<courier::transport::HyperService<Body>>,
    hyper_no_cache: courier::Courier<courier::transport::HyperService<Body>>,
    hyper_layers: Vec<courier::Courier<courier::transport::HyperService<Body>>>,
    reqwest: reqwest::Client,
    reqwest_preset: courier::Courier<ReqwestService<Body>>,
    middleware: reqwest_middleware::ClientWithMiddleware,
    hyper_peer: PeerStack<courier::transport::HyperClient<Body>>,
    reqwest_peer: PeerStack<ReqwestService<Body>>,
}

impl Clients {
    /// Every client, over `server`. Built in the runtime that will drive them: their pools'
    /// connections run as tasks of the runtime that opened them.
    fn new(server: &LoopbackServer) -> Self {
        let url = server.url("/v1/items");
        let reqwest = reqwest_client_builder().build().expect("a reqwest client");
        Clients {
            uri: url.parse().expect("a valid uri"),
            hyper: hyper_client(),
            hyper_preset: CourierLayer::new().hyper(),
            client: courier::Client::new(),
            hyper_no_pacing: CourierLayer::new().adaptive_pacing(None).hyper(),
            hyper_no_cache: CourierLayer::new().cache(None).hyper(),
            hyper_layers: (0..HYPER_LAYERS.len())
                .map(|i| hyper_layer(i).hyper())
                .collect(),
            reqwest_preset: CourierLayer::new().reqwest(reqwest.clone()),
            middleware: reqwest_middleware::ClientBuilder::new(reqwest.clone())
                .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
                    reqwest_retry::policies::ExponentialBackoff::builder()
                        .build_with_max_retries(2),
                ))
                .build(),
            hyper_peer: peer::stack(hyper_client(), None),
            reqwest_peer: peer::stack(ReqwestService::new(reqwest.clone()), None),
            reqwest,
            url,
        }
    }
}

fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

/// `n` requests one after the other: the number answered with the whole body, and each
/// request's latency (sent to its whole body read).
async fn sequential(clients: Clients, client: Client, n: usize) -> (usize, Vec<Duration>) {
    let mut ok = 0;
    let mut times = Vec::with_capacity(n);
    match client {
        Client::HyperRaw => {
            for _ in 0..n {
                let sent = Instant::now();
                if let Ok(resp) = clients.hyper.request(request(&clients.uri)).await {
                    ok += usize::from(body_ok(resp.into_body().collect().await.ok()));
                }
                times.push(sent.elapsed());
            }
        }
        Client::HyperPreset
        | Client::HyperPresetNoPacing
        | Client::HyperPresetNoCache
        | Client::HyperLayer(_) => {
            let svc = match client {
                Client::HyperLayer(i) => clients.hyper_layers[i].clone(),
                Client::HyperPresetNoPacing => clients.hyper_no_pacing.clone(),
                Client::HyperPresetNoCache => clients.hyper_no_cache.clone(),
                _ => clients.hyper_preset.clone(),
            };
            return through(svc, &clients.uri, n).await;
        }
        Client::Courier => {
            for _ in 0..n {
                let sent = Instant::now();
                if let Ok(resp) = clients.client.get(&clients.url).send().await {
                    ok += usize::from(resp.bytes().await.is_ok_and(|b| b == BODY));
                }
                times.push(sent.elapsed());
            }
        }
        Client::HyperFloor => {
            // Built per task: each task's hosts' states are its own, which keeps the floor
            // below the preset, whose states every task shares.
            let floor = courier_bench::floors::preset_floor(
                courier_bench::floors::with_user_agent(clients.hyper.clone()),
            );
            return through(floor, &clients.uri, n).await;
        }
        Client::HyperPeer => return through(clients.hyper_peer.clone(), &clients.uri, n).await,
        Client::ReqwestPeer => return through(clients.reqwest_peer.clone(), &clients.uri, n).await,
        Client::ReqwestFloor => {
            // Built per task, as the floor over hyper-util is.
            let floor =
                courier_bench::floors::preset_floor(ReqwestService::new(clients.reqwest.clone()));
            return through(floor, &clients.uri, n).await;
        }
        Client::ReqwestPreset => {
            return through(clients.reqwest_preset.clone(), &clients.uri, n).await;
        }
        Client::ReqwestRaw => {
            for _ in 0..n {
                let sent = Instant::now();
                if let Ok(resp) = clients.reqwest.get(&clients.url).send().await {
                    ok += usize::from(resp.bytes().await.is_ok_and(|b| b == BODY));
                }
                times.push(sent.elapsed());
            }
        }
        Client::ReqwestMiddleware => {
            for _ in 0..n {
                let sent = Instant::now();
                if let Ok(resp) = clients.middleware.get(&clients.url).send().await {
                    ok += usize::from(resp.bytes().await.is_ok_and(|b| b == BODY));
                }
                times.push(sent.elapsed());
            }
        }
    }
    (ok, times)
}

/// `n` requests one after the other through `svc`, as [`sequential`] counts them.
async fn through<S, RB>(mut svc: S, uri: &Uri, n: usize) -> (usize, Vec<Duration>)
where
    S: Service<Request<Body>, Response = http::Response<RB>>,
    RB: http_body::Body,
    RB::Data: bytes::Buf,
{
    let mut ok = 0;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let sent = Instant::now();
        let Ok(ready) = svc.ready().await else { break };
        if let Ok(resp) = ready.call(request(uri)).await {
            ok += usize::from(body_ok(resp.into_body().collect().await.ok()));
        }
        times.push(sent.elapsed());
    }
    (ok, times)
}

fn body_ok<B: bytes::Buf>(collected: Option<http_body_util::Collected<B>>) -> bool {
    collected.is_some_and(|c| c.to_bytes() == BODY)
}

/// One run of `n` requests over `tasks` tasks: the requests per second. Checks that every
/// call reached `server` exactly once (nothing answered from a cache, nothing sent twice).
async fn run(
    server: &LoopbackServer,
    clients: &Clients,
    client: Client,
    tasks: usize,
    n: usize,
) -> f64 {
    let served = server.served();
    let start = Instant::now();
    let per_task = n / tasks;
    let ok = if tasks == 1 {
        sequential(clients.clone(), client, per_task).await.0
    } else {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            set.spawn(sequential(clients.clone(), client, per_task));
        }
        let mut ok = 0;
        while let Some(done) = set.join_next().await {
            ok += done.map_or(0, |(ok, _)| ok);
        }
        ok
    };
    let elapsed = start.elapsed();
    assert_eq!(
        server.served() - served,
        ok as u64,
        "{}: the server saw a different number of requests than calls",
        client.name()
    );
    assert_eq!(
        ok,
        per_task * tasks,
        "{}: {} of {} requests failed",
        client.name(),
        per_task * tasks - ok,
        per_task * tasks
    );
    ok as f64 / elapsed.as_secs_f64()
}

/// Tasks in flight for the latency table.
const LATENCY_TASKS: usize = 256;

/// `n` requests over [`LATENCY_TASKS`] tasks: every request's latency.
async fn latencies(clients: &Clients, client: Client, n: usize) -> Vec<Duration> {
    let per_task = (n / LATENCY_TASKS).max(1);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..LATENCY_TASKS {
        set.spawn(sequential(clients.clone(), client, per_task));
    }
    let mut all = Vec::with_capacity(per_task * LATENCY_TASKS);
    while let Some(done) = set.join_next().await {
        let (ok, times) = done.expect("a latency task");
        assert_eq!(ok, per_task, "{}: a request failed", client.name());
        all.extend(times);
    }
    all
}

/// The `q` quantile (0 to 1) of `v`, nearest rank.
fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort_unstable();
    let rank = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n >= TASKS)
        .unwrap_or(default)
}

fn main() {
    if !courier_bench::selected("loopback") {
        return;
    }
    let seq = env_count("COURIER_BENCH_SEQ", 3000);
    let conc = env_count("COURIER_BENCH_CONC", 8000);

    let server = LoopbackServer::start().expect("the loopback server starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _guard = rt.enter();
    let clients = Clients::new(&server);

    let mut variants = Vec::new();
    for tasks in [1, TASKS] {
        for client in [
            Client::HyperRaw,
            Client::HyperPreset,
            Client::Courier,
            Client::HyperPresetNoPacing,
            Client::HyperPresetNoCache,
            Client::HyperFloor,
            Client::ReqwestRaw,
            Client::ReqwestPreset,
            Client::ReqwestMiddleware,
            Client::ReqwestFloor,
            Client::HyperPeer,
            Client::ReqwestPeer,
        ] {
            variants.push((client, tasks));
        }
    }
    if std::env::var_os("COURIER_BENCH_LAYERS").is_some_and(|v| v == "1") {
        for i in 0..HYPER_LAYERS.len() {
            variants.push((Client::HyperLayer(i), TASKS));
        }
    }
    let only = only();
    if let Some(only) = &only {
        // A part that is a whole name picks that variant alone; any other, every name holding it.
        let names: Vec<&str> = variants.iter().map(|(c, _)| c.name()).collect();
        let chosen = |c: Client| {
            only.iter().any(|o| {
                if names.contains(&o.as_str()) {
                    c.name() == o
                } else {
                    c.name().contains(o.as_str())
                }
            })
        };
        let keep: Vec<(Client, usize)> = variants
            .iter()
            .copied()
            .filter(|&(c, t)| {
                chosen(c)
                    || variants
                        .iter()
                        .any(|&(o, ot)| ot == t && chosen(o) && o.raw() == c)
            })
            .collect();
        assert!(
            !keep.is_empty(),
            "COURIER_BENCH_ONLY={only:?} names no variant"
        );
        variants = keep;
    }
    let count = |tasks: usize| if tasks == 1 { seq } else { conc };

    // Warm-up: connections opened, pools filled, code paged in.
    rt.block_on(async {
        for &(client, tasks) in &variants {
            run(&server, &clients, client, tasks, count(tasks) / 5).await;
        }
    });

    // rates[v][round]
    let mut rates = vec![Vec::with_capacity(ROUNDS); variants.len()];
    let total = Instant::now();
    for round in 0..ROUNDS {
        for k in 0..variants.len() {
            let v = (round + k) % variants.len();
            let (client, tasks) = variants[v];
            let rate = rt.block_on(run(&server, &clients, client, tasks, count(tasks)));
            rates[v].push(rate);
        }
    }

    println!(
        "loopback end to end: {ROUNDS} rounds, rotating order, {seq} requests per sequential run, \
         {conc} per concurrent run ({TASKS} tasks); {:.1} s in all\n",
        total.elapsed().as_secs_f64()
    );
    println!(
        "| client | tasks | median req/s | slowest round | fastest round | ratio to raw (median) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut chart_rows: Vec<(&str, [Option<f64>; 2])> = Vec::new();
    for (v, &(client, tasks)) in variants.iter().enumerate() {
        let column = usize::from(tasks != 1);
        match chart_rows
            .iter_mut()
            .find(|(name, _)| *name == client.name())
        {
            Some((_, row)) => row[column] = Some(median(rates[v].clone())),
            None => {
                let mut row = [None, None];
                row[column] = Some(median(rates[v].clone()));
                chart_rows.push((client.name(), row));
            }
        }
        let raw = variants
            .iter()
            .position(|&(c, t)| c == client.raw() && t == tasks)
            .expect("every transport has a raw variant");
        let ratios: Vec<f64> = rates[v]
            .iter()
            .zip(&rates[raw])
            .map(|(r, base)| r / base)
            .collect();
        let sorted = {
            let mut s = rates[v].clone();
            s.sort_by(f64::total_cmp);
            s
        };
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.3} |",
            client.name(),
            tasks,
            median(rates[v].clone()),
            sorted[0],
            sorted[sorted.len() - 1],
            median(ratios),
        );
    }

    for (tasks, per_round) in client_over_preset(&variants, &rates) {
        println!(
            "courier::Client over the preset, {tasks} task(s): {:+.0} ns per request \
             (median of the rounds; rounds from {:+.0} to {:+.0} ns)",
            median(per_round.clone()),
            per_round.iter().copied().fold(f64::INFINITY, f64::min),
            per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        );
    }

    if only.is_none() {
        draw(&chart_rows);
    }

    // Latency with many callers: every request of 3 rounds (rotating order) per client.
    let lat_n = env_count("COURIER_BENCH_LAT", 51_200);
    let lat_clients: Vec<Client> = [
        Client::HyperRaw,
        Client::HyperPreset,
        Client::HyperPresetNoCache,
        Client::HyperFloor,
        Client::Courier,
        Client::HyperPeer,
    ]
    .into_iter()
    .filter(|&c| c == Client::HyperRaw || variants.iter().any(|&(v, _)| v == c))
    .collect();
    latency_table(
        &rt,
        &clients,
        &lat_clients,
        lat_n,
        "the client's one thread",
    );
    drop(clients);

    // The same on a multi-thread runtime, as `#[tokio::main]` makes one, with fresh clients.
    let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a runtime");
    let mt_clients = {
        let _mt = mt.enter();
        Clients::new(&server)
    };
    let on = format!("a multi-thread runtime of {threads} workers");
    latency_table(&mt, &mt_clients, &lat_clients, lat_n, &on);
    drop(mt_clients);
    drop(mt);
    drop(rt);
    drop(server);
}

/// `COURIER_BENCH_ONLY`: the parts of variant names to run, when set.
fn only() -> Option<Vec<String>> {
    let v = std::env::var("COURIER_BENCH_ONLY").ok()?;
    let parts: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    (!parts.is_empty()).then_some(parts)
}

/// For each concurrency where both ran: the client's time per request minus the preset's over
/// hyper-util, in ns, round by round.
fn client_over_preset(variants: &[(Client, usize)], rates: &[Vec<f64>]) -> Vec<(usize, Vec<f64>)> {
    let mut out = Vec::new();
    for tasks in [1, TASKS] {
        let at = |c: Client| variants.iter().position(|&v| v == (c, tasks));
        if let (Some(client), Some(preset)) = (at(Client::Courier), at(Client::HyperPreset)) {
            let per_round = rates[client]
                .iter()
                .zip(&rates[preset])
                .map(|(c, p)| 1e9 / c - 1e9 / p)
                .collect();
            out.push((tasks, per_round));
        }
    }
    out
}

fn draw(chart_rows: &[(&str, [Option<f64>; 2])]) {
    let path = charts::chart_dir().join("loopback.svg");
    let groups: Vec<&str> = chart_rows.iter().map(|(name, _)| *name).collect();
    let values: Vec<Vec<Option<f64>>> = chart_rows
        .iter()
        .map(|(_, row)| row.map(|v| v.map(f64::round)).to_vec())
        .collect();
    match charts::grouped_bars(
        &path,
        "Requests per second over 127.0.0.1 (median of the rounds)",
        "requests per second",
        &groups,
        &["1 task", &format!("{TASKS} tasks")],
        &values,
    ) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\nchart {}: {e}", path.display()),
    }
}

/// The latency table: every request of 3 runs of `lat_n` requests (rotating order) per client,
/// [`Client::HyperRaw`] first, after a run of each that is not counted. The p50 and p99 are
/// of the three runs' requests together; each run's p99 is printed too, with the spread
/// between runs.
fn latency_table(
    rt: &tokio::runtime::Runtime,
    clients: &Clients,
    lat_clients: &[Client],
    lat_n: usize,
    on: &str,
) {
    const RUNS: usize = 3;
    // A run per client first, not counted: each client's pool opens its connections for 256
    // tasks in flight (the throughput rounds opened 16), which would be the first run's tail.
    for &client in lat_clients {
        rt.block_on(latencies(clients, client, lat_n));
    }
    // lat[client][run]
    let mut lat: Vec<Vec<Vec<Duration>>> = vec![Vec::new(); lat_clients.len()];
    for round in 0..RUNS {
        for k in 0..lat_clients.len() {
            let v = (round + k) % lat_clients.len();
            let times = rt.block_on(latencies(clients, lat_clients[v], lat_n));
            lat[v].push(times);
        }
    }
    println!(
        "\nlatency with {LATENCY_TASKS} tasks in flight on {on}: {lat_n} requests per run, {RUNS} \
         runs per client (rotating order); each request from sent to its whole body read\n"
    );
    println!(
        "| client | p50 | p99 | p99 / p50 | p99 of each run | spread of p99 | p99 / raw's, per run |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let quantiles = |runs: &[Vec<Duration>]| {
        let mut all: Vec<Duration> = runs.concat();
        let p50 = quantile(&mut all, 0.5);
        let p99 = quantile(&mut all, 0.99);
        let each: Vec<Duration> = runs
            .iter()
            .map(|run| quantile(&mut run.clone(), 0.99))
            .collect();
        (p50, p99, each)
    };
    let (_, _, raw_each) = quantiles(&lat[0]);
    for (v, client) in lat_clients.iter().enumerate() {
        let (p50, p99, each) = quantiles(&lat[v]);
        let ms = |d: &Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        let lo = each.iter().min().expect("three runs");
        let hi = each.iter().max().expect("three runs");
        let ratios: Vec<String> = each
            .iter()
            .zip(&raw_each)
            .map(|(p, raw)| format!("{:.2}", p.as_secs_f64() / raw.as_secs_f64()))
            .collect();
        println!(
            "| {} | {} | {} | {:.2} | {} ms | {:.0} % | {} |",
            client.name(),
            micros(p50),
            micros(p99),
            p99.as_secs_f64() / p50.as_secs_f64(),
            each.iter().map(ms).collect::<Vec<_>>().join(", "),
            (hi.as_secs_f64() / lo.as_secs_f64() - 1.0) * 100.0,
            ratios.join(", "),
        );
    }
}

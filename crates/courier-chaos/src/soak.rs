//! The soak: callers that send random calls through one shared preset at fault servers on
//! loopback, a checker that reads each call's hits back from the server, a memory sampler, and
//! the recovery check at the end.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::{DiskStore, EtagCacheLayer};
use courier::core::BoxError;
use courier::retry::{RetryBudget, RetryLayer};
use courier_faultserver::FaultServer;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::check::{DROPPED, Finished, Invariant, Tally};
use crate::lag::{self, Lag};
use crate::memory::{self, Sample, Trend};
use crate::scenario::{self, Bounds, Mix};

// The shared preset: the defaults, with a deadline and an open duration short enough for a
// soak to see many calls end by them, and a cache small enough to fill during the warm-up.

/// The total budget of every call.
pub(crate) const DEADLINE: Duration = Duration::from_millis(1500);
/// The bound on one attempt.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
/// Attempts per call, the first included.
pub(crate) const ATTEMPTS: u32 = 3;
/// Retry backoff: full jitter from this base...
pub(crate) const BACKOFF_BASE: Duration = Duration::from_millis(20);
/// ...or from this one after a bare 503 or 429 (four times the base, as in the preset)...
pub(crate) const OVERLOAD_BASE: Duration = Duration::from_millis(80);
/// ...up to this cap.
pub(crate) const BACKOFF_CAP: Duration = Duration::from_millis(200);
/// The retry budget: this share of the calls...
pub(crate) const BUDGET_RATIO: f64 = 0.1;
/// ...plus this many retries per window and host...
pub(crate) const BUDGET_FLOOR: u32 = 10;
/// ...over this window.
pub(crate) const BUDGET_WINDOW: Duration = Duration::from_secs(10);
/// Consecutive failures that trip a host's breaker.
pub(crate) const BREAKER_FAILURES: NonZeroU32 = NonZeroU32::new(10).expect("10 > 0");
/// Failing answers open a breaker only after this long with no success (transport failures
/// at the count alone): the preset's rule, scaled to the soak's short outages.
pub(crate) const FAILING_ANSWERS_FOR: Duration = Duration::from_secs(1);
/// How long a tripped breaker stays open.
pub(crate) const OPEN_DURATION: Duration = Duration::from_secs(2);
/// The cache's size.
pub(crate) const CACHE_BYTES: u64 = 1024 * 1024;

/// Every host goes down for [`OUTAGE`] once per this period, the hosts a few seconds apart...
pub(crate) const OUTAGE_EVERY: Duration = Duration::from_secs(30);
/// ...for this long; and every host is down for the last stretch this long of the run, so that
/// the recovery check starts from open circuits.
pub(crate) const OUTAGE: Duration = Duration::from_secs(3);
/// How far apart the hosts' outages are.
const OUTAGE_STAGGER: Duration = Duration::from_secs(7);

/// How long after a call ends its hits are read: any attempt that comes later is late.
const SETTLE: Duration = Duration::from_secs(1);
/// How often resident memory is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// The least warm-up before memory must stay flat: pools, caches and the allocator's arenas
/// take about half a minute to reach their size under this load.
const MIN_WARM_UP: Duration = Duration::from_secs(30);
/// Resident memory is not flat when, after the warm-up, it grows faster than this (KiB per
/// minute)...
pub(crate) const MAX_SLOPE_KIB_PER_MIN: f64 = 1024.0;
/// ...and the fitted line grows by more than this over the samples (KiB): a step of the
/// allocator in a short run is no leak.
pub(crate) const MAX_GROWTH_KIB: u64 = 4 * 1024;

/// The transport under the preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Hyper,
    Reqwest,
}

impl Transport {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Transport::Hyper => "hyper",
            Transport::Reqwest => "reqwest",
        }
    }
}

type Client =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>;

/// The preset every call of a run goes through, one instance shared by all callers.
pub(crate) fn preset(seed: u64, cache: EtagCacheLayer) -> CourierLayer {
    CourierLayer::new()
        .deadline(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .retry(
            RetryLayer::new()
                .attempts(ATTEMPTS)
                .base(BACKOFF_BASE)
                .overload_base(OVERLOAD_BASE)
                .cap(BACKOFF_CAP)
                .seed(seed)
                .budget(
                    RetryBudget::new()
                        .ratio(BUDGET_RATIO)
                        .floor(BUDGET_FLOOR)
                        .window(BUDGET_WINDOW),
                ),
        )
        .circuit_breaker(
            CircuitBreakerLayer::new()
                .consecutive_failures(BREAKER_FAILURES)
                .failing_answers_for(FAILING_ANSWERS_FOR)
                .open_duration(OPEN_DURATION),
        )
        .cache(cache)
}

/// The soak's cache: [`CACHE_BYTES`] in memory, or in a [`DiskStore`] of that size in `dir`.
pub(crate) fn cache(disk: Option<&std::path::Path>) -> std::io::Result<EtagCacheLayer> {
    Ok(match disk {
        None => EtagCacheLayer::new().capacity(CACHE_BYTES),
        Some(dir) => EtagCacheLayer::new().store(DiskStore::open(dir, CACHE_BYTES)?),
    })
}

/// The preset of the broken-paths mix: the preset's defaults (breaker, adaptive pacing, retry
/// with its budget and backoff), with only the soak's deadline, attempt timeout and cache
/// size, so that a stall costs half a second, not half a minute.
pub(crate) fn defaults(seed: u64, cache: EtagCacheLayer) -> CourierLayer {
    CourierLayer::new()
        .deadline(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .retry(RetryLayer::new().seed(seed))
        .cache(cache)
}

/// The most calls to answering paths the breaker may refuse in the broken-paths mix.
pub(crate) const MAX_REFUSED_SHARE: f64 = 0.01;

fn client(transport: Transport, layer: &CourierLayer) -> Result<Client, BoxError> {
    Ok(match transport {
        Transport::Hyper => layer.hyper::<Full<Bytes>>().boxed(),
        Transport::Reqwest => {
            let client = courier::transport::reqwest_client_builder().build()?;
            layer.reqwest::<Full<Bytes>>(client).boxed()
        }
    })
}

/// What one run does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) transport: Transport,
    /// Which faults the calls meet.
    pub(crate) mix: Mix,
    /// How long callers start new calls.
    pub(crate) duration: Duration,
    /// The most calls started.
    pub(crate) max_calls: u64,
    /// Calls in flight at once.
    pub(crate) concurrency: usize,
    pub(crate) seed: u64,
    /// Fault servers, each its own host to the preset.
    pub(crate) hosts: usize,
}

/// What one run found.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) config: Config,
    pub(crate) tally: Tally,
    /// From the first call to the end of the last.
    pub(crate) chaos: Duration,
    pub(crate) warm_up: Duration,
    pub(crate) memory: Option<Trend>,
    /// How long each host took to answer a healthy plan after the chaos.
    pub(crate) recovery: Vec<Option<Duration>>,
    /// The most retries the budget can let through in this run.
    pub(crate) budget_bound: u64,
    /// The same with the ratio as written, as a steady load spends it.
    pub(crate) budget_nominal: u64,
    /// How late the runtime's timers fired during the chaos.
    pub(crate) lag: Arc<Lag>,
}

/// The fault servers, on a thread and runtime of their own so that a busy client cannot
/// starve them (and the other way round).
struct Servers {
    servers: Vec<FaultServer>,
    /// For each server, an instant at or before the one its hits' times count from.
    started: Vec<Instant>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Servers {
    fn start(hosts: usize) -> std::io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("fault-servers".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let mut started = Vec::with_capacity(hosts);
                    for _ in 0..hosts {
                        let before = Instant::now();
                        match FaultServer::start().await {
                            Ok(server) => started.push((server, before)),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        }
                    }
                    let _ = ready_tx.send(Ok(started));
                    let _ = stopped.await;
                });
            })?;
        let started = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the fault server thread ended early"))??;
        let (servers, started) = started.into_iter().unzip();
        Ok(Self {
            servers,
            started,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // Dropping the handles aborts the servers' tasks; then the thread may end.
        self.servers.clear();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(tally: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    // A panic is counted by the hook; the counts it left behind are still the run's.
    tally.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the soak with `config` through one `layer` ([`preset`] but in tests). Panics anywhere
/// are counted by the hook in `main`.
pub(crate) async fn run(config: Config, layer: &CourierLayer) -> Result<Report, BoxError> {
    let servers = Arc::new(Servers::start(config.hosts)?);
    let client = client(config.transport, layer)?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let bounds = Bounds {
        deadline: DEADLINE,
        attempt_timeout: ATTEMPT_TIMEOUT,
        hosts: config.hosts,
    };

    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let checker = tokio::spawn(checker(done_rx, Arc::clone(&servers), Arc::clone(&tally)));

    let sampling = Arc::new(AtomicBool::new(true));
    let began = Instant::now();
    let sampler = tokio::spawn(sample_memory(began, Arc::clone(&sampling)));
    let lag = Arc::new(Lag::default());
    let lag_monitor = tokio::spawn(lag::monitor(Arc::clone(&lag), began, Arc::clone(&sampling)));

    let next = Arc::new(AtomicU64::new(0));
    let stop_at = began + config.duration;
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..config.concurrency {
        let caller = Caller {
            client: client.clone(),
            servers: Arc::clone(&servers),
            tally: Arc::clone(&tally),
            done: done_tx.clone(),
            seed: config.seed,
            mix: config.mix,
            bounds,
            began,
            length: config.duration,
        };
        let next = Arc::clone(&next);
        callers.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= config.max_calls || Instant::now() >= stop_at {
                    break;
                }
                caller.call(index).await;
            }
        });
    }
    drop(done_tx);
    while let Some(joined) = callers.join_next().await {
        if let Err(e) = joined {
            lock(&tally).violate(Invariant::Harness, format!("a caller failed: {e}"));
        }
    }
    let chaos = began.elapsed();
    let chaos_end = Instant::now();
    sampling.store(false, Ordering::Relaxed);
    let samples = sampler.await.unwrap_or_default();
    let _ = lag_monitor.await;

    let recovery = recover(config.mix, &client, &servers, &tally, chaos_end).await;

    if let Err(e) = checker.await {
        lock(&tally).violate(Invariant::Harness, format!("the checker failed: {e}"));
    }
    // Whatever reached the server after a call's check came later still.
    tokio::time::sleep(SETTLE).await;
    let issued = next.load(Ordering::Relaxed).min(config.max_calls);
    {
        let mut tally = lock(&tally);
        for index in 0..issued {
            let name = scenario::name(index);
            let server = &servers.servers[(index % config.hosts as u64) as usize];
            let late = server.hits(&name);
            if !late.is_empty() {
                server.clear(&name);
                tally.hits_after_check(index, &late);
            }
        }
    }

    let warm_up = MIN_WARM_UP.max(chaos / 4);
    let memory = memory::trend(&samples, warm_up);
    let tally = Arc::try_unwrap(tally)
        .map_err(|_| "every task holding the tally has ended")?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    let mut report = Report {
        config,
        budget_bound: budget_bound(tally.calls, config.hosts, chaos, 2.0 * BUDGET_RATIO),
        budget_nominal: budget_bound(tally.calls, config.hosts, chaos, BUDGET_RATIO),
        tally,
        chaos,
        warm_up,
        memory,
        recovery,
        lag,
    };
    judge(&mut report);
    Ok(report)
}

/// The most retries a sliding-window budget lets through over `elapsed`: per host, the floor
/// once per 0.9 window (an entry stays between 0.9 and 1.0 window), plus `ratio` of the
/// calls. With `ratio` twice the budget's it is a hard bound: a deposit counts in at most two
/// stretches of 0.9 window; with the budget's own ratio it is what a steady load can spend.
fn budget_bound(calls: u64, hosts: usize, elapsed: Duration, ratio: f64) -> u64 {
    let stretches = (elapsed.as_secs_f64() / (0.9 * BUDGET_WINDOW.as_secs_f64())).floor() + 1.0;
    let floor = hosts as f64 * f64::from(BUDGET_FLOOR) * stretches;
    (floor + ratio * calls as f64).ceil() as u64
}

/// The invariants judged on the whole run: memory, recovery, budget.
fn judge(report: &mut Report) {
    // Too short a run to tell leaves `memory` empty; the summary says so.
    if let Some(trend) = report.memory
        && trend.slope_kib_per_min > MAX_SLOPE_KIB_PER_MIN
        && trend.growth_kib() > MAX_GROWTH_KIB as f64
    {
        report.tally.violate(
            Invariant::FlatMemory,
            format!(
                "resident memory grows {:.0} KiB/min after the warm-up ({} -> {} KiB)",
                trend.slope_kib_per_min, trend.first_kib, trend.last_kib
            ),
        );
    }
    let bound = recovery_bound(report.config.mix);
    for (host, took) in report.recovery.clone().into_iter().enumerate() {
        if took.is_none_or(|took| took > bound) {
            report.tally.violate(
                Invariant::Recovers,
                format!("host {host} did not answer a healthy plan within {bound:?}: {took:?}"),
            );
        }
    }
    let share = report.tally.refused_share();
    if report.config.mix == Mix::BrokenPaths && share > MAX_REFUSED_SHARE {
        let t = &report.tally;
        report.tally.violate(
            Invariant::HealthyServed,
            format!(
                "the breaker refused {} of {} calls to answering paths ({:.2} %)",
                t.answering_refused,
                t.answering_calls,
                share * 100.0
            ),
        );
    }
    if report.tally.retries > report.budget_bound {
        let (retries, bound) = (report.tally.retries, report.budget_bound);
        report.tally.violate(
            Invariant::Budget,
            format!("the server saw {retries} retries; the budget allows at most {bound}"),
        );
    }
}

/// How long after the chaos each host must answer a healthy plan: the open duration of the
/// run's breaker (the soak's; the preset's 30 s in the broken-paths mix), plus 5 s.
pub(crate) fn recovery_bound(mix: Mix) -> Duration {
    let open = match mix {
        Mix::Chaos => OPEN_DURATION,
        Mix::BrokenPaths => Duration::from_secs(30),
    };
    open + Duration::from_secs(5)
}

/// Whether `host` is down `since` the start of a run of `length`.
fn in_outage(host: usize, since: Duration, length: Duration) -> bool {
    if since + OUTAGE >= length {
        return true;
    }
    let phase = (since + OUTAGE_STAGGER * host as u32).as_millis() % OUTAGE_EVERY.as_millis();
    phase >= (OUTAGE_EVERY - OUTAGE).as_millis()
}

/// One of the concurrent callers.
struct Caller {
    client: Client,
    servers: Arc<Servers>,
    tally: Arc<Mutex<Tally>>,
    done: mpsc::UnboundedSender<Finished>,
    seed: u64,
    mix: Mix,
    bounds: Bounds,
    began: Instant,
    length: Duration,
}

impl Caller {
    async fn call(&self, index: u64) {
        let host = scenario::host(index, self.bounds.hosts);
        let outage = self.mix == Mix::Chaos && in_outage(host, self.began.elapsed(), self.length);
        let call = scenario::call(
            self.seed,
            index,
            SystemTime::now(),
            self.bounds,
            outage,
            self.mix,
        );
        tokio::time::sleep(call.think).await;
        let server = &self.servers.servers[call.host];
        let name = call.name();
        if let Err(e) = server.try_set_plan(&name, call.plan.clone()) {
            lock(&self.tally).violate(
                Invariant::Harness,
                format!("call {index}: plan refused: {e}"),
            );
            return;
        }
        let mut req = Request::builder()
            .method(call.method.clone())
            .uri(server.url_for(&format!("/s/{name}")));
        if let Some(key) = &call.key {
            req = req.header("idempotency-key", key);
        }
        let req = match req.body(Full::new(call.body.clone())) {
            Ok(req) => req,
            Err(e) => {
                lock(&self.tally).violate(Invariant::Harness, format!("call {index}: {e}"));
                return;
            }
        };
        let client = self.client.clone();
        let start = Instant::now();
        let work = async move {
            match client.oneshot(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    match resp.into_body().collect().await {
                        Ok(_) => status.as_str().to_owned(),
                        Err(e) => format!("{status}, then body: {}", describe(e)),
                    }
                }
                Err(e) => describe(e),
            }
        };
        let outcome = match call.drop_after {
            Some(after) => tokio::time::timeout(after, work)
                .await
                .unwrap_or_else(|_| DROPPED.to_owned()),
            None => work.await,
        };
        let ended = Instant::now();
        let at = ended.duration_since(self.began);
        lock(&self.tally).outcome(index, &outcome, ended - start, at, DEADLINE);
        if call.kind.answers() {
            lock(&self.tally).answering(outcome == REFUSED);
        }
        let _ = self.done.send(Finished {
            index,
            host: call.host,
            method: call.method,
            key: call.key,
            kind: call.kind,
            ended,
            dropped: outcome == DROPPED,
        });
    }
}

/// The outcome name of a call the breaker refused.
const REFUSED: &str = "circuit open";

/// An error's name in the summary.
fn describe(err: BoxError) -> String {
    match courier::Error::from(err) {
        courier::Error::DeadlineExceeded(_) => "deadline exceeded".to_owned(),
        courier::Error::AttemptTimedOut(_) => "attempt timed out".to_owned(),
        courier::Error::CircuitOpen(_) => REFUSED.to_owned(),
        courier::Error::RateLimited(_) => "rate limited".to_owned(),
        courier::Error::Transport { kind, .. } => format!("transport error ({kind:?})"),
        other => format!("other error: {other}"),
    }
}

/// Reads each finished call's hits once it has settled, checks them, and forgets the plan.
async fn checker(
    mut done: mpsc::UnboundedReceiver<Finished>,
    servers: Arc<Servers>,
    tally: Arc<Mutex<Tally>>,
) {
    while let Some(call) = done.recv().await {
        tokio::time::sleep_until(call.ended + SETTLE).await;
        let name = scenario::name(call.index);
        let server = &servers.servers[call.host];
        let hits = server.hits(&name);
        server.clear(&name);
        lock(&tally).hits(&call, &hits, servers.started[call.host]);
    }
}

async fn sample_memory(began: Instant, sampling: Arc<AtomicBool>) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    while sampling.load(Ordering::Relaxed) {
        tick.tick().await;
        if let Some(kib) = memory::rss_kib() {
            samples.push((began.elapsed().as_secs_f64(), kib));
        }
    }
    samples
}

/// After the chaos: how long each host takes to answer a healthy plan through the same preset,
/// counted from the end of the chaos; `None` when it did not within the bound and then some.
async fn recover(
    mix: Mix,
    client: &Client,
    servers: &Servers,
    tally: &Mutex<Tally>,
    chaos_end: Instant,
) -> Vec<Option<Duration>> {
    let give_up = recovery_bound(mix) + Duration::from_secs(5);
    let mut recovered = Vec::with_capacity(servers.servers.len());
    for server in &servers.servers {
        server.set_plan("recovery", Vec::new());
        let url = server.url_for("/s/recovery");
        let mut took = None;
        while chaos_end.elapsed() < give_up {
            let req = match Request::get(&url).body(Full::default()) {
                Ok(req) => req,
                Err(e) => {
                    lock(tally).violate(Invariant::Harness, format!("recovery request: {e}"));
                    break;
                }
            };
            if let Ok(resp) = client.clone().oneshot(req).await
                && resp.status().is_success()
                && resp.into_body().collect().await.is_ok()
            {
                took = Some(chaos_end.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        recovered.push(took);
    }
    recovered
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soak is only as good as what it catches: a preset that retries POST without a key
    /// and has no deadline breaks (a) and (c) within seconds.
    #[test]
    fn a_preset_that_breaks_its_promises_fails_the_soak() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let broken = preset(1, cache(None).unwrap()).deadline(None).retry(
            RetryLayer::new()
                .base(BACKOFF_BASE)
                .cap(BACKOFF_CAP)
                .without_budget()
                .idempotent_methods([http::Method::GET, http::Method::POST, http::Method::PATCH]),
        );
        let config = Config {
            transport: Transport::Hyper,
            mix: Mix::Chaos,
            duration: Duration::from_secs(4),
            max_calls: u64::MAX,
            concurrency: 16,
            seed: 1,
            hosts: 2,
        };
        let report = runtime.block_on(run(config, &broken)).unwrap();
        let t = &report.tally;
        assert!(!t.passed());
        assert!(
            t.violations(Invariant::SentOnce).0 > 0,
            "{:?}",
            t.violations(Invariant::SentOnce)
        );
        assert!(
            t.violations(Invariant::Deadline).0 > 0,
            "slowest {:?}",
            t.slowest
        );
        assert_eq!(t.violations(Invariant::SameKey).0, 0);
        assert_eq!(t.violations(Invariant::Harness).0, 0);
        assert!(t.calls > 100 && t.reached > 50, "{t:?}");
    }

    #[test]
    fn outages_are_staggered_and_the_run_ends_in_one() {
        let length = Duration::from_secs(120);
        let down = |host, secs: f64| in_outage(host, Duration::from_secs_f64(secs), length);
        assert!(!down(0, 26.9) && down(0, 27.0) && down(0, 29.9) && !down(0, 30.0));
        // Host 1 is 7 s ahead: down from 20 s to 23 s.
        assert!(!down(1, 19.9) && down(1, 20.0) && !down(1, 23.0));
        for host in 0..4 {
            assert!(down(host, 117.0) && down(host, 119.9), "host {host}");
            let share = (0..1170)
                .filter(|t| down(host, f64::from(*t) / 10.0))
                .count();
            assert!(
                (90..=120).contains(&share),
                "host {host} down {share} of 1170 ticks"
            );
        }
    }

    #[test]
    fn the_budget_bound_counts_floors_per_stretch_and_the_ratio() {
        // 60 s is 7 stretches of 9 s (and a part): 4 hosts * 10 * 7 + 10 % of 1000.
        let bound = budget_bound(1000, 4, Duration::from_secs(60), 0.1);
        assert_eq!(bound, 280 + 100);
        assert_eq!(budget_bound(0, 1, Duration::ZERO, 0.2), 10);
    }
}

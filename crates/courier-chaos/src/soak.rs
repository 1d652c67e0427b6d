//! The soak: callers that send random calls through two shared stacks (the preset, and the
//! preset with hedging) at fault servers on loopback, a checker that reads each call's hits
//! back from the server, a memory sampler, and the recovery and permit checks at the end.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::{DiskStore, EtagCacheLayer};
use courier::concurrency::ConcurrencyHandle;
use courier::core::{Attempts, BoxError, HostKey};
use courier::retry::hedge::{HedgeLayer, Hedged};
use courier::retry::{RetryBudget, RetryLayer};
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::bounds::{budget_bound, extra_bound};
use crate::check::{DROPPED, Finished, HostLoad, Invariant, Part, Tally};
use crate::lag::{self, Lag};
use crate::memory::{self, Sample, Trend};
use crate::scenario::{self, Bounds, Mix};
use crate::servers::Servers;

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

// The hedging of the callers with hedging is `HedgeLayer::new()`, as a user would switch it
// on; these are its defaults, which the bound of (j) is worked out from.

/// The hedge budget: this share of the attempts retry sends, per host, over
/// [`BUDGET_WINDOW`] (the same 10 s), with no floor.
pub(crate) const HEDGE_RATIO: f64 = 0.1;
/// The callers with hedging: this share of all the callers, by default.
pub(crate) const HEDGED_SHARE: f64 = 0.25;
/// Hedges must have been sent once the callers with hedging made this many calls per host: a
/// host's delay is learned from 20 answers in 10 s, and its budget earns a hedge per ten.
pub(crate) const MIN_HEDGED_CALLS_PER_HOST: u64 = 100;

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

/// The two stacks of a run: the preset for the callers without hedging, the preset with
/// hedging for the others.
#[derive(Clone)]
pub(crate) struct Presets {
    pub(crate) plain: CourierLayer,
    pub(crate) hedged: CourierLayer,
}

impl Presets {
    /// The mix's preset twice: as it is, and with `.hedge(HedgeLayer::new())`. Each
    /// has its own retry budget, breaker, pacing and concurrency limit (two clients in one
    /// process); they share the one cache, whose size the memory check counts on.
    pub(crate) fn of(mix: Mix, seed: u64, cache: EtagCacheLayer) -> Self {
        let make = match mix {
            Mix::Chaos => preset,
            Mix::BrokenPaths => defaults,
        };
        Self {
            plain: make(seed, cache.clone()),
            hedged: make(seed, cache).hedge(HedgeLayer::new()),
        }
    }

    fn client(&self, part: Part, transport: Transport) -> Result<Client, BoxError> {
        match part {
            Part::Plain => client(transport, &self.plain),
            Part::Hedged => client(transport, &self.hedged),
        }
    }

    /// The layer whose concurrency limit the calls of `part` pass.
    fn limited(&self, part: Part) -> &CourierLayer {
        match part {
            Part::Plain => &self.plain,
            Part::Hedged => &self.hedged,
        }
    }
}

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
    /// How many of the callers go through the preset with hedging.
    pub(crate) hedged_callers: usize,
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
    /// For each stack in use, how long each host took to answer a healthy plan through it
    /// after the chaos.
    pub(crate) recovery: Vec<(Part, Vec<Option<Duration>>)>,
    /// For each stack in use, each host's concurrency permits still held (in flight and
    /// queued) once every call has ended.
    pub(crate) permits: Vec<(Part, Vec<usize>)>,
    /// The most retries the budget can let through in this run, for the callers without
    /// hedging.
    pub(crate) budget_bound: u64,
    /// The same with the ratio as written, as a steady load spends it.
    pub(crate) budget_nominal: u64,
    /// For each host, the most requests beyond their calls' first that the callers with
    /// hedging may add, and the same at a steady load
    /// ([`extra_bound`]).
    pub(crate) hedged_bounds: Vec<(u64, u64)>,
    /// How late the runtime's timers fired during the chaos.
    pub(crate) lag: Arc<Lag>,
}

fn lock(tally: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    // A panic is counted by the hook; the counts it left behind are still the run's.
    tally.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the soak with `config` through `presets` ([`Presets::of`] but in tests): the first
/// `config.hedged_callers` callers through the one with hedging, the others through the other.
/// Panics anywhere are counted by the hook in `main`.
pub(crate) async fn run(config: Config, presets: &Presets) -> Result<Report, BoxError> {
    let servers = Arc::new(Servers::start(config.hosts)?);
    let hedged_callers = config.hedged_callers.min(config.concurrency);
    let parts: Vec<Part> = Part::ALL
        .into_iter()
        .filter(|part| match part {
            Part::Plain => hedged_callers < config.concurrency,
            Part::Hedged => hedged_callers > 0,
        })
        .collect();
    let mut clients = Vec::with_capacity(parts.len());
    for part in &parts {
        clients.push((*part, presets.client(*part, config.transport)?));
    }
    let client_of = |part: Part| {
        clients
            .iter()
            .find(|(p, _)| *p == part)
            .map(|(_, c)| c.clone())
    };
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
    for i in 0..config.concurrency {
        let part = if i < hedged_callers {
            Part::Hedged
        } else {
            Part::Plain
        };
        let Some(client) = client_of(part) else {
            continue;
        };
        let caller = Caller {
            client,
            part,
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

    // Through each stack side by side: both are timed from the end of the chaos.
    let mut recovering = tokio::task::JoinSet::new();
    for (part, client) in &clients {
        let (part, client) = (*part, client.clone());
        let (servers, tally) = (Arc::clone(&servers), Arc::clone(&tally));
        recovering.spawn(async move {
            let took = recover(config.mix, &client, &servers, &tally, chaos_end).await;
            (part, took)
        });
    }
    let mut recovery = Vec::with_capacity(clients.len());
    while let Some(joined) = recovering.join_next().await {
        match joined {
            Ok(recovered) => recovery.push(recovered),
            Err(e) => lock(&tally).violate(Invariant::Harness, format!("a recovery failed: {e}")),
        }
    }
    recovery.sort_by_key(|(part, _)| *part);

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

    // Every call has ended, its body read or dropped: no permit may still be held.
    let permits = parts
        .iter()
        .map(|part| (*part, held_permits(presets.limited(*part), &servers)))
        .collect();
    drop(clients);

    let warm_up = MIN_WARM_UP.max(chaos / 4);
    let memory = memory::trend(&samples, warm_up);
    let mut tally = Arc::try_unwrap(tally)
        .map_err(|_| "every task holding the tally has ended")?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    if hedged_callers > 0 && tally.hedged_hosts.len() < config.hosts {
        tally.hedged_hosts.resize(config.hosts, HostLoad::default());
    }
    let plain_calls = tally.part(Part::Plain).calls;
    let hedged_bounds = tally
        .hedged_hosts
        .iter()
        .map(|h| {
            (
                extra_bound(h.calls, h.attempts, chaos, 2.0),
                extra_bound(h.calls, h.attempts, chaos, 1.0),
            )
        })
        .collect();
    let mut report = Report {
        config,
        budget_bound: budget_bound(plain_calls, config.hosts, chaos, 2.0 * BUDGET_RATIO),
        budget_nominal: budget_bound(plain_calls, config.hosts, chaos, BUDGET_RATIO),
        hedged_bounds,
        tally,
        chaos,
        warm_up,
        memory,
        recovery,
        permits,
        lag,
    };
    judge(&mut report);
    Ok(report)
}

/// Each host's concurrency permits that `layer`'s limit still counts: in flight or queued.
fn held_permits(layer: &CourierLayer, servers: &Servers) -> Vec<usize> {
    let Some(handle): Option<ConcurrencyHandle<HostKey>> =
        layer.concurrency_layer().map(|l| l.handle())
    else {
        return Vec::new();
    };
    servers
        .servers
        .iter()
        .map(|server| {
            let key = Request::get(server.url_for("/"))
                .body(())
                .map(|req| HostKey::from_request(&req));
            key.ok()
                .and_then(|key| handle.status(&key))
                .map_or(0, |s| s.in_flight + s.queued)
        })
        .collect()
}

/// The invariants judged on the whole run: memory, recovery, the breaker's refusals, the
/// budgets, the hedges sent and the permits left.
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
    for (part, recovery) in report.recovery.clone() {
        for (host, took) in recovery.into_iter().enumerate() {
            if took.is_none_or(|took| took > bound) {
                report.tally.violate(
                    Invariant::Recovers,
                    format!(
                        "host {host} did not answer a healthy plan (the preset {}) within \
                         {bound:?}: {took:?}",
                        part.name()
                    ),
                );
            }
        }
    }
    for part in Part::ALL {
        let p = report.tally.part(part);
        let share = p.refused_share();
        if report.config.mix == Mix::BrokenPaths && share > MAX_REFUSED_SHARE {
            let message = format!(
                "the breaker refused {} of {} calls to answering paths {} ({:.2} %)",
                p.answering_refused,
                p.answering_calls,
                part.name(),
                share * 100.0
            );
            report.tally.violate(Invariant::HealthyServed, message);
        }
    }
    if report.tally.retries > report.budget_bound {
        let (retries, bound) = (report.tally.retries, report.budget_bound);
        report.tally.violate(
            Invariant::Budget,
            format!("the server saw {retries} retries; the budget allows at most {bound}"),
        );
    }
    let hedged = report.tally.hedged_hosts.clone();
    for (host, (load, (bound, _))) in hedged.iter().zip(report.hedged_bounds.clone()).enumerate() {
        if load.extra > bound {
            report.tally.violate(
                Invariant::HedgeBudget,
                format!(
                    "host {host}: the callers with hedging made {} calls ({} attempts, hedges \
                     aside) and the server saw {} more requests; the budgets allow {bound}",
                    load.calls, load.attempts, load.extra
                ),
            );
        }
    }
    if hedged_judged(report) && report.tally.hedges.sent == 0 {
        let calls = report.tally.part(Part::Hedged).calls;
        report.tally.violate(
            Invariant::Hedged,
            format!("the callers with hedging made {calls} calls and no answer carried a hedge"),
        );
    }
    for (part, held) in report.permits.clone() {
        for (host, held) in held.into_iter().enumerate() {
            if held > 0 {
                report.tally.violate(
                    Invariant::NoPermitHeld,
                    format!(
                        "host {host}: {held} permit(s) of the preset {} still held after the run",
                        part.name()
                    ),
                );
            }
        }
    }
}

/// Whether the callers with hedging made calls enough to judge (k): at least
/// [`MIN_HEDGED_CALLS_PER_HOST`] per host.
pub(crate) fn hedged_judged(report: &Report) -> bool {
    let calls = report.tally.part(Part::Hedged).calls;
    calls >= MIN_HEDGED_CALLS_PER_HOST * report.config.hosts as u64
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
    /// Which stack `client` is.
    part: Part,
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
                    let attempts = resp.extensions().get::<Attempts>().map(Attempts::count);
                    let hedged = resp.extensions().get::<Hedged>().cloned();
                    let status = resp.status();
                    let outcome = match resp.into_body().collect().await {
                        Ok(_) => status.as_str().to_owned(),
                        Err(e) => format!("{status}, then body: {}", describe(e)),
                    };
                    (outcome, attempts, hedged)
                }
                Err(e) => {
                    let attempts = courier::core::attempts_of(&*e).map(Attempts::count);
                    (describe(e), attempts, None)
                }
            }
        };
        let (outcome, attempts, hedged) = match call.drop_after {
            Some(after) => tokio::time::timeout(after, work)
                .await
                .unwrap_or_else(|_| (DROPPED.to_owned(), None, None)),
            None => work.await,
        };
        let ended = Instant::now();
        let at = ended.duration_since(self.began);
        {
            let mut tally = lock(&self.tally);
            tally.outcome(self.part, index, &outcome, ended - start, at, DEADLINE);
            if call.kind.answers() {
                tally.answering(self.part, outcome == REFUSED);
            }
            if let Some(hedged) = &hedged {
                tally.hedges.record(hedged);
            }
        }
        let _ = self.done.send(Finished {
            index,
            host: call.host,
            part: self.part,
            method: call.method,
            key: call.key,
            kind: call.kind,
            ended,
            dropped: outcome == DROPPED,
            // Unknown: as many as a call may make.
            attempts: attempts.map_or(u64::from(ATTEMPTS), |n| n as u64),
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
mod tests;

//! Replicas of one service and one host that goes down: does sharing the breaker's open state
//! between the replicas pay?
//!
//! [`REPLICAS`] replicas each run the whole preset ([`CourierLayer::new`], nothing shared
//! between them) with [`CALLERS`] callers making a GET every [`PERIOD`]; the host refuses every
//! connection (nothing listening) from [`DOWN_FROM`] to [`UP_AT`] and serves before and after.
//! The same run is made twice: with [`Breakers::Separate`], each replica's own
//! [`preset_breaker`] (as the preset has it), and with [`Breakers::Shared`], every replica on
//! one clone of one `preset_breaker()` (a layer's clones share state): the ideal of an open
//! state shared through a store, without the store's round trip. [`Cost`] puts the round
//! trips such a store would add next to the attempts the sharing saves.
//!
//! Paused time: every figure is the same on every run and every machine. Every loop is bounded.

use crate::host::Body;
use crate::overload::{End, call};
use crate::sim::{RTT, on_paused_time, secs};
use courier::CourierLayer;
use courier::breaker::{BreakerHandle, CircuitBreakerLayer};
use courier::core::HostKey;
use courier::core::classify::{FailureKind, TransportError};
use courier::preset::{DEFAULT_HALF_OPEN_TRIALS, DEFAULT_OPEN_BACKOFF_CAP, preset_breaker};
use courier::retry::RetryLayer;
use http::{Request, Response};
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Replicas of the calling service.
pub const REPLICAS: usize = 10;
/// Callers in each replica.
pub const CALLERS: usize = 10;
/// Each caller makes one GET this often, whatever its earlier calls are doing.
pub const PERIOD: Duration = Duration::from_millis(100);
/// When the host stops listening.
pub const DOWN_FROM: Duration = Duration::from_secs(10);
/// When it listens again.
pub const UP_AT: Duration = Duration::from_secs(250);
/// One bare round trip over loopback, in µs (BENCHMARKS.md, "No Redis store for the cache"):
/// what reading a shared open state from Redis costs a call at the least.
pub const STORE_ROUND_TRIP_US: f64 = 18.0;

/// The calls keep coming after the recovery until every replica has served one, and this much
/// longer (the calls refused while the last trials are judged are counted).
const SETTLE: Duration = Duration::from_secs(5);
/// The most a replica can wait for its next trial once the host is back: the preset's
/// longest open time, and the trials judged.
const RECOVERY_MAX: Duration = DEFAULT_OPEN_BACKOFF_CAP.saturating_add(Duration::from_secs(30));

/// Whose breaker each replica calls through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakers {
    /// Each replica its own `preset_breaker()`, as the preset has it.
    Separate,
    /// Every replica one clone of the same `preset_breaker()`: an open state shared with no
    /// cost to read it.
    Shared,
}

impl fmt::Display for Breakers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Separate => "separate (each replica its own)",
            Self::Shared => "shared (one open state, read for free)",
        })
    }
}

/// The load and the outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// Replicas.
    pub replicas: usize,
    /// Callers per replica.
    pub callers: usize,
    /// Each caller's period.
    pub period: Duration,
    /// When the host stops listening.
    pub down_from: Duration,
    /// When it listens again.
    pub up_at: Duration,
    /// Seeds every breaker's open-time jitter and every retry's backoff.
    pub seed: u64,
}

impl Scenario {
    /// The scenario of the bench: [`REPLICAS`] x [`CALLERS`] callers every [`PERIOD`], the
    /// host down from [`DOWN_FROM`] to [`UP_AT`].
    pub const fn bench(seed: u64) -> Self {
        Self {
            replicas: REPLICAS,
            callers: CALLERS,
            period: PERIOD,
            down_from: DOWN_FROM,
            up_at: UP_AT,
            seed,
        }
    }

    /// Calls per second over every replica.
    pub fn calls_per_second(&self) -> f64 {
        (self.replicas * self.callers) as f64 / self.period.as_secs_f64()
    }

    /// How long the host is down.
    pub fn outage(&self) -> Duration {
        self.up_at.saturating_sub(self.down_from)
    }
}

/// What one replica met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaOutcome {
    /// Calls it started while the host was down.
    pub calls_in_outage: usize,
    /// Attempts that reached the host's socket (and were refused) while it was down.
    pub reached: usize,
    /// Calls started while the host was down that its breaker refused at once
    /// (`CircuitOpen` at the first attempt, no time spent).
    pub refused: usize,
    /// Its breaker's trips in a row when the host came back.
    pub trips_at_recovery: u32,
    /// How long its breaker still had to stay open when the host came back (zero when it was
    /// not open).
    pub open_for_at_recovery: Duration,
    /// From the recovery to the end of its first call served after it; `None`: none within
    /// the bound.
    pub first_served: Option<Duration>,
    /// Calls it started after the recovery that were not served.
    pub failed_after: usize,
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The breakers.
    pub breakers: Breakers,
    /// The scenario.
    pub scenario: Scenario,
    /// Each replica.
    pub replicas: Vec<ReplicaOutcome>,
}

impl Outcome {
    /// Attempts that reached the host while it was down, every replica.
    pub fn reached(&self) -> usize {
        self.replicas.iter().map(|r| r.reached).sum()
    }

    /// Calls started while the host was down, every replica.
    pub fn calls_in_outage(&self) -> usize {
        self.replicas.iter().map(|r| r.calls_in_outage).sum()
    }

    /// Calls refused at once by the breaker while the host was down, every replica.
    pub fn refused(&self) -> usize {
        self.replicas.iter().map(|r| r.refused).sum()
    }

    /// Calls started after the recovery that were not served, every replica.
    pub fn failed_after(&self) -> usize {
        self.replicas.iter().map(|r| r.failed_after).sum()
    }

    /// From the recovery until every replica had served a call; `None`: some replica never did
    /// within the bound.
    pub fn all_serving(&self) -> Option<Duration> {
        self.replicas
            .iter()
            .map(|r| r.first_served)
            .try_fold(Duration::ZERO, |max, d| d.map(|d| max.max(d)))
    }

    /// From the recovery until the first replica served a call.
    pub fn first_serving(&self) -> Option<Duration> {
        self.replicas.iter().filter_map(|r| r.first_served).min()
    }
}

/// The host: refuses every connection while down, each refusal and each answer after one
/// [`RTT`]; counts the refused attempts of each replica.
#[derive(Debug)]
struct Upstream {
    start: Instant,
    down_from: Duration,
    up_at: Duration,
    reached: Vec<AtomicUsize>,
}

impl Upstream {
    fn transport(
        self: &Arc<Self>,
        replica: usize,
    ) -> impl tower::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = TransportError,
        Future = impl Future<Output = Result<Response<Body>, TransportError>> + Send + use<>,
    >
    + Clone
    + Send
    + 'static
    + use<> {
        let up = Arc::clone(self);
        tower::service_fn(move |_req: Request<Body>| {
            let now = up.start.elapsed();
            let down = now >= up.down_from && now < up.up_at;
            if down && let Some(n) = up.reached.get(replica) {
                n.fetch_add(1, Ordering::Relaxed);
            }
            async move {
                // A refused connection comes back after one round trip (SYN, RST).
                tokio::time::sleep(RTT).await;
                if down {
                    Err(TransportError::new(
                        FailureKind::Connect,
                        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                    ))
                } else {
                    Ok(Response::new(Body::from("page")))
                }
            }
        })
    }
}

/// What the callers of one replica saw, filled in as their calls end.
#[derive(Debug, Default)]
struct Seen {
    calls_in_outage: usize,
    refused: usize,
    first_served: Option<Duration>,
    failed_after: usize,
}

/// Runs `scenario` with `breakers`. Call it on a paused current-thread runtime.
pub async fn run(scenario: Scenario, breakers: Breakers) -> Outcome {
    let sc = scenario;
    let start = Instant::now();
    let upstream = Arc::new(Upstream {
        start,
        down_from: sc.down_from,
        up_at: sc.up_at,
        reached: (0..sc.replicas).map(|_| AtomicUsize::new(0)).collect(),
    });
    let seen: Arc<Vec<Mutex<Seen>>> =
        Arc::new((0..sc.replicas).map(|_| Mutex::default()).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let shared = preset_breaker().seed(sc.seed * 1_000);
    let mut handles: Vec<BreakerHandle> = Vec::new();
    let mut callers = tokio::task::JoinSet::new();
    let all = sc.replicas * sc.callers;
    for r in 0..sc.replicas {
        let replica_seed = sc.seed * 1_000 + 1 + r as u64;
        let breaker: CircuitBreakerLayer = match breakers {
            Breakers::Separate => preset_breaker().seed(replica_seed),
            Breakers::Shared => shared.clone(),
        };
        handles.push(breaker.handle());
        let svc = CourierLayer::new()
            .retry(RetryLayer::new().seed(replica_seed))
            .circuit_breaker(breaker)
            .service(upstream.transport(r));
        for c in 0..sc.callers {
            // The callers of every replica take turns, evenly spread over the period.
            let turn = (c * sc.replicas + r) as u32;
            let offset = sc.period * turn / all.max(1) as u32;
            let (svc, seen, stop) = (svc.clone(), Arc::clone(&seen), Arc::clone(&stop));
            callers.spawn(async move {
                let mut ticks = tokio::time::interval_at(start + offset, sc.period);
                let mut calls = tokio::task::JoinSet::new();
                let bound = sc.up_at + RECOVERY_MAX + SETTLE;
                for n in 0.. {
                    let at = ticks.tick().await;
                    if stop.load(Ordering::Relaxed) || at.duration_since(start) > bound {
                        break;
                    }
                    while calls.try_join_next().is_some() {}
                    let (svc, seen) = (svc.clone(), Arc::clone(&seen));
                    calls.spawn(async move {
                        let begun = Instant::now().duration_since(start);
                        let end = call(svc, format!("/items/{c}/{n}")).await;
                        let ended = Instant::now().duration_since(start);
                        let Some(seen) = seen.get(r) else { return };
                        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                        if begun >= sc.down_from && begun < sc.up_at {
                            seen.calls_in_outage += 1;
                            seen.refused += usize::from(end == End::CircuitOpen && ended == begun);
                        }
                        if begun >= sc.up_at && end != End::Served {
                            seen.failed_after += 1;
                        }
                        if ended >= sc.up_at && end == End::Served && seen.first_served.is_none() {
                            seen.first_served = Some(ended - sc.up_at);
                        }
                    });
                }
                while calls.join_next().await.is_some() {}
            });
        }
    }

    // At the recovery: where each breaker stands.
    tokio::time::sleep_until(start + sc.up_at).await;
    let key = HostKey::from_request(&get_root());
    let at_recovery: Vec<(u32, Duration)> = handles
        .iter()
        .map(|h| {
            h.status(&key).map_or((0, Duration::ZERO), |s| {
                (s.trips(), s.retry_in().unwrap_or_default())
            })
        })
        .collect();
    // Then until every replica has served once, and a little longer (bounded).
    let mut all_served_at = None;
    for _ in 0..(RECOVERY_MAX + SETTLE).as_secs() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = Instant::now();
        if all_served_at.is_none()
            && seen.iter().all(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .first_served
                    .is_some()
            })
        {
            all_served_at = Some(now);
        }
        if all_served_at.is_some_and(|t| now.duration_since(t) >= SETTLE) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    while callers.join_next().await.is_some() {}

    let replicas = (0..sc.replicas)
        .map(|r| {
            let s = seen
                .get(r)
                .map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(PoisonError::into_inner)))
                .unwrap_or_default();
            let (trips, open_for) = at_recovery.get(r).copied().unwrap_or_default();
            ReplicaOutcome {
                calls_in_outage: s.calls_in_outage,
                reached: upstream
                    .reached
                    .get(r)
                    .map_or(0, |n| n.load(Ordering::Relaxed)),
                refused: s.refused,
                trips_at_recovery: trips,
                open_for_at_recovery: open_for,
                first_served: s.first_served,
                failed_after: s.failed_after,
            }
        })
        .collect();
    Outcome {
        breakers,
        scenario: sc,
        replicas,
    }
}

fn get_root() -> Request<Body> {
    Request::get("http://api.example/")
        .body(Body::default())
        .unwrap_or_default()
}

/// The most attempts one breaker of the preset lets reach a host that refuses every
/// connection for `outage`, when `calls_per_rtt` calls start in one round trip: the calls
/// admitted until the first 5 refusals are back (one round trip's calls, and the 5), then
/// every half-open's trials, at most one half-open per shortest open time (half the growing
/// open time, the jitter's most).
pub fn attempts_bound(outage: Duration, calls_per_rtt: usize) -> usize {
    let trials = DEFAULT_HALF_OPEN_TRIALS.get() as usize;
    let first_trip = calls_per_rtt + 5;
    let (mut open, mut elapsed, mut half_opens) = (Duration::from_secs(30), Duration::ZERO, 0);
    loop {
        elapsed += open / 2;
        if elapsed >= outage {
            break;
        }
        half_opens += 1;
        open = (open * 2).min(DEFAULT_OPEN_BACKOFF_CAP);
    }
    first_trip + half_opens * trials
}

/// The same scenario run with separate breakers, then with the shared one.
pub type Pair = (Outcome, Outcome);

/// What a shared open state read from a store on every call would cost, against what it
/// saves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Store round trips per second: one per call of every replica.
    pub round_trips_per_second: f64,
    /// Round trips over the outage alone.
    pub round_trips_in_outage: f64,
    /// Round-trip time spent per second of calls, at [`STORE_ROUND_TRIP_US`] each.
    pub round_trip_ms_per_second: f64,
    /// Attempts that reached the down host with separate breakers, less with the shared one:
    /// the mean over the runs.
    pub attempts_saved: f64,
}

impl Cost {
    /// The cost of sharing at the load of `runs` (pairs of separate and shared runs of one
    /// scenario, seeds aside), against what the shared breaker saves on average.
    pub fn of(runs: &[Pair]) -> Self {
        let sc = runs
            .first()
            .map_or(Scenario::bench(1), |(separate, _)| separate.scenario);
        let per_second = sc.calls_per_second();
        let saved: f64 = runs
            .iter()
            .map(|(a, b)| a.reached() as f64 - b.reached() as f64)
            .sum();
        Self {
            round_trips_per_second: per_second,
            round_trips_in_outage: per_second * sc.outage().as_secs_f64(),
            round_trip_ms_per_second: per_second * STORE_ROUND_TRIP_US / 1_000.0,
            attempts_saved: saved / runs.len().max(1) as f64,
        }
    }
}

/// Both runs of the bench's scenario, and the cost of sharing.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Each replica its own breaker.
    pub separate: Outcome,
    /// One breaker for every replica.
    pub shared: Outcome,
    /// The store's cost against the attempts saved.
    pub cost: Cost,
    /// The same two runs over more seeds: (separate, shared) per seed.
    pub seeds: Vec<Pair>,
}

/// Seeds of the bench's runs; the first one's run is shown replica by replica.
pub const SEEDS: u64 = 20;

/// Runs the bench's scenario both ways, over [`SEEDS`] seeds. Call it on a paused
/// current-thread runtime.
pub async fn figures() -> Figures {
    let mut seeds = Vec::new();
    for seed in 1..=SEEDS {
        let sc = Scenario::bench(seed);
        seeds.push((
            run(sc, Breakers::Separate).await,
            run(sc, Breakers::Shared).await,
        ));
    }
    let (separate, shared) = seeds.first().cloned().unwrap_or_else(|| {
        let empty = |breakers| Outcome {
            breakers,
            scenario: Scenario::bench(1),
            replicas: Vec::new(),
        };
        (empty(Breakers::Separate), empty(Breakers::Shared))
    });
    let cost = Cost::of(&seeds);
    Figures {
        separate,
        shared,
        cost,
        seeds,
    }
}

/// Runs [`figures`] on a fresh paused current-thread runtime.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn run_all() -> Figures {
    on_paused_time(figures())
}

fn or_never(d: Option<Duration>) -> String {
    d.map_or_else(|| "never".to_owned(), secs)
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let sc = self.separate.scenario;
        let _ = writeln!(
            s,
            "### {} replicas x {} callers, a GET every {} ms each ({:.0} calls/s), one host refusing every connection from {} s to {} s, RTT {} ms, seed {}\n",
            sc.replicas,
            sc.callers,
            sc.period.as_millis(),
            sc.calls_per_second(),
            sc.down_from.as_secs(),
            sc.up_at.as_secs(),
            RTT.as_millis(),
            sc.seed
        );
        let _ = writeln!(
            s,
            "| breakers | calls in the outage | attempts that reached the host | per replica (min to max) | calls refused at once by the breaker | first replica serving | every replica serving | calls failed after recovery |"
        );
        let _ = writeln!(
            s,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for o in [&self.separate, &self.shared] {
            let min = o.replicas.iter().map(|r| r.reached).min().unwrap_or(0);
            let max = o.replicas.iter().map(|r| r.reached).max().unwrap_or(0);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {min} to {max} | {} | {} | {} | {} |",
                o.breakers,
                o.calls_in_outage(),
                o.reached(),
                o.refused(),
                or_never(o.first_serving()),
                or_never(o.all_serving()),
                o.failed_after()
            );
        }
        let _ = writeln!(
            s,
            "\nReplica by replica (separate / shared); \"open for\": how long its breaker still had to stay open at the recovery, after that many trips in a row.\n"
        );
        let _ = writeln!(
            s,
            "| replica | attempts that reached the host | calls refused at once by the breaker | trips, open for at the recovery | serving again after | calls failed after recovery |"
        );
        let _ = writeln!(s, "| ---: | ---: | ---: | ---: | ---: | ---: |");
        for (i, (a, b)) in self
            .separate
            .replicas
            .iter()
            .zip(&self.shared.replicas)
            .enumerate()
        {
            let _ = writeln!(
                s,
                "| {i} | {} / {} | {} / {} | {}, {} / {}, {} | {} / {} | {} / {} |",
                a.reached,
                b.reached,
                a.refused,
                b.refused,
                a.trips_at_recovery,
                secs(a.open_for_at_recovery),
                b.trips_at_recovery,
                secs(b.open_for_at_recovery),
                or_never(a.first_served),
                or_never(b.first_served),
                a.failed_after,
                b.failed_after
            );
        }
        let _ = writeln!(
            s,
            "\n### the same, seeds 1 to {} (separate / shared)\n",
            self.seeds.len()
        );
        let _ = writeln!(
            s,
            "| seed | attempts that reached the host | saved by sharing | first replica serving | every replica serving | calls failed after recovery |"
        );
        let _ = writeln!(s, "| ---: | ---: | ---: | ---: | ---: | ---: |");
        for (a, b) in &self.seeds {
            let _ = writeln!(
                s,
                "| {} | {} / {} | {} | {} / {} | {} / {} | {} / {} |",
                a.scenario.seed,
                a.reached(),
                b.reached(),
                a.reached() as isize - b.reached() as isize,
                or_never(a.first_serving()),
                or_never(b.first_serving()),
                or_never(a.all_serving()),
                or_never(b.all_serving()),
                a.failed_after(),
                b.failed_after()
            );
        }
        let n = self.seeds.len().max(1) as f64;
        let mean = |f: &dyn Fn(&Pair) -> (f64, f64)| {
            let (a, b) = self
                .seeds
                .iter()
                .map(f)
                .fold((0.0, 0.0), |(x, y), (a, b)| (x + a, y + b));
            (a / n, b / n)
        };
        let secs_of = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
        let reached = mean(&|(a, b)| (a.reached() as f64, b.reached() as f64));
        let first = mean(&|(a, b)| (secs_of(a.first_serving()), secs_of(b.first_serving())));
        let all = mean(&|(a, b)| (secs_of(a.all_serving()), secs_of(b.all_serving())));
        let failed = mean(&|(a, b)| (a.failed_after() as f64, b.failed_after() as f64));
        let _ = writeln!(
            s,
            "| mean | {:.1} / {:.1} | {:.1} | {:.2} s / {:.2} s | {:.2} s / {:.2} s | {:.0} / {:.0} |",
            reached.0,
            reached.1,
            reached.0 - reached.1,
            first.0,
            first.1,
            all.0,
            all.1,
            failed.0,
            failed.1
        );
        let c = self.cost;
        let outage = sc.outage().as_secs_f64();
        let _ = writeln!(
            s,
            "\n### what a shared open state read from Redis would cost (one round trip per call, {STORE_ROUND_TRIP_US} µs bare over loopback)\n"
        );
        let _ = writeln!(s, "| | figure |");
        let _ = writeln!(s, "| --- | ---: |");
        let _ = writeln!(
            s,
            "| round trips per second (every call of every replica) | {:.0} |",
            c.round_trips_per_second
        );
        let _ = writeln!(
            s,
            "| round trips over the {outage:.0} s outage | {:.0} |",
            c.round_trips_in_outage
        );
        let _ = writeln!(
            s,
            "| round-trip time per second of calls | {:.0} ms |",
            c.round_trip_ms_per_second
        );
        let _ = writeln!(
            s,
            "| attempts saved over the outage (mean of {} seeds) | {:.1} ({:.2} per second) |",
            self.seeds.len(),
            c.attempts_saved,
            c.attempts_saved / outage
        );
        let per_saved = if c.attempts_saved > 0.0 {
            format!("{:.0}", c.round_trips_in_outage / c.attempts_saved)
        } else {
            "no attempt saved".to_owned()
        };
        let _ = writeln!(s, "| round trips per attempt saved | {per_saved} |");
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bench's load on fewer replicas and a shorter outage, long enough for three trips
    /// in a row.
    fn short(seed: u64) -> Scenario {
        Scenario {
            replicas: 4,
            callers: 10,
            period: PERIOD,
            down_from: Duration::from_secs(5),
            up_at: Duration::from_secs(125),
            seed,
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn separate_breakers_stay_under_the_rule_and_a_shared_one_lets_fewer_through() {
        let sc = short(1);
        let separate = run(sc, Breakers::Separate).await;
        let shared = run(sc, Breakers::Shared).await;
        // One replica's calls in one round trip: 10 callers every 100 ms, 50 ms.
        let per_rtt = sc.callers * RTT.as_millis() as usize / sc.period.as_millis() as usize;
        let bound = attempts_bound(sc.outage(), per_rtt);
        for r in &separate.replicas {
            assert!(r.reached >= 5, "5 refusals open it: {separate:?}");
            assert!(r.reached <= bound, "{r:?} > {bound}");
            // Most calls never reach the host.
            assert!(r.refused * 10 >= r.calls_in_outage * 9, "{r:?}");
            assert!(r.trips_at_recovery >= 2, "{r:?}");
        }
        // Shared: the first trip lets every replica's calls of one round trip through, then
        // one half-open's trials at a time for them all.
        let shared_bound = attempts_bound(sc.outage(), per_rtt * sc.replicas);
        assert!(shared.reached() <= shared_bound, "{shared:?}");
        assert!(
            shared.reached() < separate.reached(),
            "{shared:?} {separate:?}"
        );
        // Every replica serves again, within the longest open time and the trials.
        for o in [&separate, &shared] {
            let all = o.all_serving().expect("every replica serves again");
            assert!(all <= RECOVERY_MAX, "{o:?}");
            assert_eq!(
                o.calls_in_outage(),
                sc.replicas * sc.callers * 1_200,
                "{o:?}"
            );
        }
        // One breaker: every replica serves again at the same trial.
        let first = shared.first_serving().expect("served");
        assert!(
            shared.all_serving().expect("served") - first <= RTT * 2,
            "{shared:?}"
        );
    }

    #[test]
    fn the_bound_counts_the_half_opens_the_outage_has_room_for() {
        // Half-open no sooner than 15, 30, 60, 120, 150 s after each trip.
        assert_eq!(attempts_bound(Duration::from_secs(14), 5), 10);
        assert_eq!(attempts_bound(Duration::from_secs(16), 5), 15);
        assert_eq!(attempts_bound(Duration::from_secs(240), 5), 10 + 4 * 5);
    }

    #[test]
    fn the_table_prints_both_runs_and_the_cost() {
        let sc = Scenario {
            replicas: 2,
            callers: 2,
            period: PERIOD,
            down_from: Duration::from_secs(1),
            up_at: Duration::from_secs(20),
            seed: 3,
        };
        let (separate, shared) = on_paused_time(async {
            (
                run(sc, Breakers::Separate).await,
                run(sc, Breakers::Shared).await,
            )
        });
        let seeds = vec![(separate.clone(), shared.clone())];
        let cost = Cost::of(&seeds);
        assert_eq!(cost.round_trips_per_second, 40.0);
        assert_eq!(
            cost.attempts_saved,
            separate.reached() as f64 - shared.reached() as f64
        );
        let text = Figures {
            separate,
            shared,
            cost,
            seeds,
        }
        .to_string();
        assert!(
            text.contains("| separate (each replica its own) |"),
            "{text}"
        );
        assert!(text.contains("| round trips per attempt saved |"), "{text}");
        // Replica 1's row, and seed 3's.
        assert!(
            text.contains("\n| 1 | ") && text.contains("\n| 3 | "),
            "{text}"
        );
    }
}

//! Overload through the whole preset: a host that serves 5 per second and refuses the rest
//! with a bare 503, a host with one broken path, a host that is down, a host that recovers.
//!
//! Every figure comes from courier's real preset ([`CourierLayer`]) over the mock [`Host`], on
//! paused time: the same on every machine and every run. Every loop is bounded.

use crate::host::{Body, Host, HostConfig, Refusal};
use crate::sim::{RTT, on_paused_time, secs};
use courier::CourierLayer;
use courier::core::{BoxError, CircuitOpen, HostKey, is_caused_by};
use courier::ratelimit::AdaptivePacingLayer;
use courier::retry::RetryLayer;
use http::{Request, Response, StatusCode};
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

/// The crowd of every herd here.
pub const CLIENTS: usize = 50;
/// Seeds the strangers' herd is run with; its figures are medians over them.
pub const SEEDS: u64 = 20;

fn get(path: &str) -> Request<Body> {
    Request::get(format!("http://api.example{path}"))
        .body(Body::default())
        .unwrap_or_default()
}

/// The preset with the herd's settings: retry raised to 100 attempts, no retry budget,
/// everything else (breaker and adaptive pacing included) as it comes.
fn preset(seed: u64) -> CourierLayer {
    CourierLayer::new().retry(RetryLayer::new().attempts(100).without_budget().seed(seed))
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Served,
    Status,
    CircuitOpen,
    OtherError,
}

/// Makes one GET of `path` through `svc`; how it ended.
pub(crate) async fn call<S, RB>(svc: S, path: String) -> End
where
    S: Service<Request<Body>, Response = Response<RB>, Error = BoxError>,
{
    match svc.oneshot(get(&path)).await {
        Ok(resp) if resp.status() == StatusCode::OK => End::Served,
        Ok(_) => End::Status,
        Err(e) if is_caused_by::<CircuitOpen>(&*e) => End::CircuitOpen,
        Err(_) => End::OtherError,
    }
}

/// What a herd cost.
#[derive(Debug, Clone, PartialEq)]
pub struct HerdOutcome {
    /// Requests the host saw.
    pub sent: usize,
    /// Calls answered 200.
    pub served: usize,
    /// Calls refused with `CircuitOpen`.
    pub circuit_open: usize,
    /// When the last call ended.
    pub finish: Duration,
}

fn five_per_second() -> Host {
    Host::new(HostConfig {
        burst: 5,
        rate: 5.0,
        refusal: Refusal::Unavailable,
        rtt: RTT,
    })
}

async fn herd_of<F, S, RB: Send + 'static>(host: &Host, mut client: F) -> HerdOutcome
where
    F: FnMut(usize) -> S,
    S: Service<Request<Body>, Response = Response<RB>, Error = BoxError> + Send + 'static,
    S::Future: Send,
{
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let svc = client(i);
        tasks.spawn(call(svc, format!("/orders/{i}")));
    }
    let (mut served, mut circuit_open) = (0, 0);
    while let Some(end) = tasks.join_next().await {
        match end.unwrap_or(End::OtherError) {
            End::Served => served += 1,
            End::CircuitOpen => circuit_open += 1,
            End::Status | End::OtherError => {}
        }
    }
    HerdOutcome {
        sent: host.sent(),
        served,
        circuit_open,
        finish: start.elapsed(),
    }
}

/// [`CLIENTS`] tasks of one service share one preset client (retry 100 attempts, no budget;
/// `layer` as given otherwise) and call at once; the host serves 5 per second and answers the
/// rest 503 without a hint.
pub async fn herd_shared(layer: CourierLayer) -> HerdOutcome {
    let host = five_per_second();
    let svc = layer.service(host.clone());
    herd_of(&host, |_| svc.clone()).await
}

/// The same crowd as [`CLIENTS`] strangers: each call through a preset client of its own
/// (its own breaker, pacing and backoff), seeded from `seed`.
pub async fn herd_strangers(seed: u64) -> HerdOutcome {
    let host = five_per_second();
    herd_of(&host, |i| {
        preset(seed * 1_000 + i as u64).service(host.clone())
    })
    .await
}

/// The strangers' herd over [`SEEDS`] seeds: the median requests, served calls and finish.
pub async fn herd_strangers_median() -> (HerdOutcome, Vec<HerdOutcome>) {
    let mut runs = Vec::new();
    for seed in 0..SEEDS {
        runs.push(herd_strangers(seed).await);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (v[(n - 1) / 2] + v[n / 2]) / 2.0
    };
    let med = HerdOutcome {
        sent: median(runs.iter().map(|r| r.sent as f64).collect()).round() as usize,
        served: median(runs.iter().map(|r| r.served as f64).collect()).round() as usize,
        circuit_open: median(runs.iter().map(|r| r.circuit_open as f64).collect()).round() as usize,
        finish: Duration::from_secs_f64(median(
            runs.iter().map(|r| r.finish.as_secs_f64()).collect(),
        )),
    };
    (med, runs)
}

// === one broken path ===

/// What the calls to each path met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathsOutcome {
    /// Calls to `/fine`.
    pub fine: usize,
    /// Of those, refused with `CircuitOpen`.
    pub fine_refused: usize,
    /// Calls to `/broken`.
    pub broken: usize,
    /// Of those, refused with `CircuitOpen`.
    pub broken_refused: usize,
}

/// One host, two paths, `calls` calls in a random order (seeded), one every 50 ms, through
/// one shared preset with its defaults: `/broken` always answers 500, `/fine` 200.
pub async fn one_broken_path(calls: usize, seed: u64) -> PathsOutcome {
    let host = tower::service_fn(|req: Request<Body>| async move {
        let status = if req.uri().path() == "/broken" {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        tokio::time::sleep(RTT).await;
        let mut resp = Response::new(Body::default());
        *resp.status_mut() = status;
        Ok::<_, std::convert::Infallible>(resp)
    });
    let svc = CourierLayer::new().service(host);
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = PathsOutcome {
        fine: 0,
        fine_refused: 0,
        broken: 0,
        broken_refused: 0,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..calls {
        // xorshift: a fixed order per seed, no dependency.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let broken = rng & 1 == 1;
        let path = if broken { "/broken" } else { "/fine" };
        let svc = svc.clone();
        tasks.spawn(async move { (broken, call(svc, path.to_owned()).await) });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Some(done) = tasks.join_next().await {
        let Ok((broken, end)) = done else { continue };
        let refused = usize::from(end == End::CircuitOpen);
        if broken {
            out.broken += 1;
            out.broken_refused += refused;
        } else {
            out.fine += 1;
            out.fine_refused += refused;
        }
    }
    out
}

// === a host that is down ===

/// What calls to a host that refuses every connection met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownOutcome {
    /// Connections the host refused (attempts that reached it).
    pub reached: usize,
    /// Calls made.
    pub calls: usize,
    /// Of those, refused with `CircuitOpen` without reaching the host.
    pub circuit_open: usize,
    /// How long the last call took.
    pub last_call: Duration,
}

/// `calls` calls one after the other through one preset with its defaults, to a host that
/// refuses every connection.
pub async fn down_host(calls: usize) -> DownOutcome {
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reached);
    let host = tower::service_fn(move |_req: Request<Body>| {
        counter.fetch_add(1, Ordering::Relaxed);
        async {
            Err::<Response<Body>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        }
    });
    let svc = CourierLayer::new().service(host);
    let (mut circuit_open, mut last_call) = (0, Duration::ZERO);
    for _ in 0..calls {
        let start = Instant::now();
        if call(svc.clone(), "/".into()).await == End::CircuitOpen {
            circuit_open += 1;
        }
        last_call = start.elapsed();
    }
    DownOutcome {
        reached: reached.load(Ordering::Relaxed),
        calls,
        circuit_open,
        last_call,
    }
}

// === a host that recovers ===

/// What the learned rate did when the host recovered.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryOutcome {
    /// The learned rate at each whole second (`None`: not paced).
    pub learned: Vec<Option<f64>>,
    /// Seconds after the recovery until the learned rate was above 50 per second (or the host
    /// no longer paced).
    pub back_above_50: Option<Duration>,
    /// Requests the host saw per second.
    pub per_second: Vec<usize>,
}

/// When the host recovers.
pub const RECOVERY_AT: Duration = Duration::from_secs(10);
const RECOVERY_SECONDS: usize = 20;

/// 20 callers of one shared preset call in a loop (each as soon as its last call ends, for 20
/// s); the host serves 5 per second for 10 s, then 100 per second.
pub async fn recovery() -> RecoveryOutcome {
    let host = five_per_second();
    let pacing = AdaptivePacingLayer::new();
    let svc = preset(1)
        .adaptive_pacing(pacing.clone())
        .service(host.clone());
    let start = Instant::now();
    let end = start + Duration::from_secs(RECOVERY_SECONDS as u64);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let svc = svc.clone();
        tasks.spawn(async move {
            // Bounded: at most one call per 50 ms round trip for 20 s.
            for _ in 0..(RECOVERY_SECONDS * 20) {
                if Instant::now() >= end {
                    break;
                }
                let _ = call(svc.clone(), format!("/r/{i}")).await;
            }
        });
    }
    let key = HostKey::from_request(&get("/"));
    let mut learned = Vec::new();
    let mut back_above_50 = None;
    for tick in 0..(RECOVERY_SECONDS * 10) {
        let at = Duration::from_millis(100 * tick as u64);
        tokio::time::sleep_until(start + at).await;
        if at == RECOVERY_AT {
            host.set_capacity(100, 100.0);
        }
        let rate = pacing.learned_rate(&key);
        if tick % 10 == 0 {
            learned.push(rate);
        }
        if at > RECOVERY_AT && back_above_50.is_none() && rate.is_none_or(|r| r > 50.0) {
            back_above_50 = Some(at - RECOVERY_AT);
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    RecoveryOutcome {
        learned,
        back_above_50,
        per_second: host.per_second(RECOVERY_SECONDS),
    }
}

// === all of them, as markdown ===

/// Every overload figure.
#[derive(Debug, Clone)]
pub struct Figures {
    /// One shared preset: without adaptive pacing (today's breaker), then the preset's
    /// defaults.
    pub shared: Vec<(&'static str, HerdOutcome)>,
    /// The strangers: the median over the seeds, and every run.
    pub strangers: (HerdOutcome, Vec<HerdOutcome>),
    /// One broken path among fine ones.
    pub paths: PathsOutcome,
    /// A host that is down.
    pub down: DownOutcome,
    /// A host that recovers.
    pub recovery: RecoveryOutcome,
}

/// Runs every overload simulation. Call it on a paused current-thread runtime.
pub async fn figures() -> Figures {
    let before = preset(7)
        .adaptive_pacing(None)
        .circuit_breaker(courier::breaker::CircuitBreakerLayer::new());
    Figures {
        shared: vec![
            (
                "no pacing, breaker opens at 5 failures (before)",
                herd_shared(before).await,
            ),
            ("the preset's defaults", herd_shared(preset(7)).await),
        ],
        strangers: herd_strangers_median().await,
        paths: one_broken_path(400, 1).await,
        down: down_host(10).await,
        recovery: recovery().await,
    }
}

/// Runs every overload simulation on a fresh paused current-thread runtime.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn run_all() -> Figures {
    on_paused_time(figures())
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "### {CLIENTS} calls at once through the preset (retry 100 attempts, no budget), host serves 5/s, the rest 503 without a hint, RTT {} ms\n",
            RTT.as_millis()
        );
        let _ = writeln!(
            s,
            "| clients | preset | requests | served | CircuitOpen | finish |"
        );
        let _ = writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: |");
        for (name, h) in &self.shared {
            let _ = writeln!(
                s,
                "| one shared | {name} | {} | {} | {} | {} |",
                h.sent,
                h.served,
                h.circuit_open,
                secs(h.finish)
            );
        }
        let (med, runs) = &self.strangers;
        let min = runs.iter().map(|r| r.sent).min().unwrap_or_default();
        let max = runs.iter().map(|r| r.sent).max().unwrap_or_default();
        let _ = writeln!(
            s,
            "| {CLIENTS} separate, median of {SEEDS} seeds (requests {min} to {max}) | the preset's defaults | {} | {} | {} | {} |",
            med.sent,
            med.served,
            med.circuit_open,
            secs(med.finish)
        );
        let p = self.paths;
        let _ = writeln!(
            s,
            "\n### one host, `/broken` always 500 and `/fine` always 200, {} calls in random order, one preset\n",
            p.fine + p.broken
        );
        let _ = writeln!(s, "| path | calls | refused (CircuitOpen) |");
        let _ = writeln!(s, "| --- | ---: | ---: |");
        let _ = writeln!(s, "| /fine | {} | {} |", p.fine, p.fine_refused);
        let _ = writeln!(s, "| /broken | {} | {} |", p.broken, p.broken_refused);
        let d = self.down;
        let _ = writeln!(
            s,
            "\n### a host refusing every connection, {} calls in a row, one preset\n",
            d.calls
        );
        let _ = writeln!(
            s,
            "| attempts that reached it | calls refused by the open circuit | the last call took |"
        );
        let _ = writeln!(s, "| ---: | ---: | ---: |");
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            d.reached,
            d.circuit_open,
            secs(d.last_call)
        );
        let r = &self.recovery;
        let _ = writeln!(
            s,
            "\n### 20 callers in a loop, host serves 5/s, then 100/s from {} s\n",
            RECOVERY_AT.as_secs()
        );
        let _ = write!(s, "| second |");
        for k in 0..r.learned.len() {
            let _ = write!(s, " {k} |");
        }
        let _ = write!(s, "\n| --- |");
        for _ in &r.learned {
            let _ = write!(s, " ---: |");
        }
        let _ = write!(s, "\n| learned rate (/s) |");
        for l in &r.learned {
            match l {
                Some(rate) => {
                    let _ = write!(s, " {rate:.1} |");
                }
                None => s.push_str(" unpaced |"),
            }
        }
        let _ = write!(s, "\n| requests sent |");
        for n in &r.per_second {
            let _ = write!(s, " {n} |");
        }
        let _ = writeln!(
            s,
            "\n\nBack above 50/s {} after the recovery.",
            r.back_above_50.map_or("never".to_owned(), secs)
        );
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn one_shared_client_paces_the_herd_instead_of_cutting_it_off() {
        let before = herd_shared(
            preset(7)
                .adaptive_pacing(None)
                .circuit_breaker(courier::breaker::CircuitBreakerLayer::new()),
        )
        .await;
        assert_eq!(before.circuit_open, 45, "{before:?}");
        let now = herd_shared(preset(7)).await;
        assert!(now.sent <= 100, "{now:?}");
        assert_eq!((now.served, now.circuit_open), (CLIENTS, 0), "{now:?}");
        assert!(now.finish <= Duration::from_secs(12), "{now:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn strangers_reach_the_best_published_figure() {
        let (median, runs) = herd_strangers_median().await;
        assert!(median.sent <= 168, "{median:?}");
        assert!(median.finish <= Duration::from_secs(20), "{median:?}");
        for run in &runs {
            assert_eq!(run.served, CLIENTS, "every call served: {run:?}");
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_broken_path_never_cuts_off_the_fine_one() {
        for seed in 0..3 {
            let p = one_broken_path(300, seed).await;
            assert_eq!((p.fine_refused, p.broken_refused), (0, 0), "{p:?}");
            assert!(p.fine > 100 && p.broken > 100, "{p:?}");
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_down_host_still_opens_the_circuit_and_then_fails_fast() {
        let d = down_host(10).await;
        // The first call's 3 attempts and the second's 2: 5 refused connections in a row.
        assert_eq!(d.reached, 5, "{d:?}");
        assert_eq!(d.circuit_open, 9, "{d:?}");
        assert_eq!(d.last_call, Duration::ZERO, "{d:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_learned_rate_recovers_with_the_host() {
        let r = recovery().await;
        let back = r.back_above_50.expect("back above 50/s");
        assert!(back <= Duration::from_secs(5), "{r:?}");
        // Paced while the host served 5/s: no second sent more than a short probe's worth.
        let before: usize = r.per_second[1..10].iter().sum();
        assert!(before <= 9 * 5 + 30, "{r:?}");
        // And the host sees its new capacity used within 5 s.
        assert!(r.per_second[10..16].iter().any(|&n| n >= 50), "{r:?}");
    }

    #[test]
    fn the_tables_print_every_row() {
        let text = run_all().to_string();
        assert!(
            text.contains("| one shared | the preset's defaults |"),
            "{text}"
        );
        assert!(text.contains("| /fine |"), "{text}");
        assert!(text.contains("Back above 50/s"), "{text}");
    }
}

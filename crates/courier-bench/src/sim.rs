//! The upstream-load simulations: what a client's retry and pacing choices cost the server.
//!
//! Each runs courier's real layers ([`RetryLayer`], [`TokenBucketRateLimitLayer`]) over a mock
//! [`Host`] on tokio's clock; run them on a paused runtime (see [`run_all`]) and every figure
//! is the same on every machine and every run. Every loop is bounded.

use crate::host::{Body, Host, HostConfig, Refusal};
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::retry::{Jitter, RetryBudget, RetryLayer};
use http::{Request, Response, StatusCode};
use std::fmt::{self, Write as _};
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// The round trip of every mock host.
pub const RTT: Duration = Duration::from_millis(50);

/// No simulated client sends more than this many requests for one result.
const MAX_TRIES: usize = 2_000;

fn get(path: &str) -> Request<Body> {
    Request::get(format!("http://api.example{path}"))
        .body(Body::default())
        .unwrap_or_default()
}

/// Calls `svc` until it answers 200 (bounded); the calls made, as the client saw them.
async fn until_ok<S, RB>(svc: &S, path: &str) -> usize
where
    S: Service<Request<Body>, Response = Response<RB>> + Clone,
{
    for tries in 1..=MAX_TRIES {
        match svc.clone().oneshot(get(path)).await {
            Ok(resp) if resp.status() == StatusCode::OK => return tries,
            _ => {}
        }
    }
    MAX_TRIES
}

// === pages: a burst of 5 then 1/s ===

/// How the pager reacts to a 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStrategy {
    /// Asks again as soon as the refusal arrives.
    AskAgainAtOnce,
    /// courier's `RetryLayer` (10 attempts, no budget): waits what `Retry-After` says.
    ObeyRetryAfter,
    /// courier's `TokenBucketRateLimitLayer` at burst 3, rate 0.9/s, under the same
    /// `RetryLayer`: paces below the host's quota.
    PaceWithBucket,
}

impl fmt::Display for PageStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AskAgainAtOnce => "ask again at once",
            Self::ObeyRetryAfter => "obey Retry-After (courier retry)",
            Self::PaceWithBucket => "pace: courier bucket, burst 3, 0.9/s",
        })
    }
}

/// What one pager run cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagesOutcome {
    /// The strategy.
    pub strategy: PageStrategy,
    /// Requests the host saw.
    pub sent: usize,
    /// Of those, answered 429.
    pub refused: usize,
    /// When the last page arrived.
    pub finish: Duration,
}

/// The page count of the pager simulation.
pub const PAGES: usize = 20;

/// Reads [`PAGES`] pages one after the other from a host that allows a burst of 5, then 1
/// request per second, and answers the rest 429 with `Retry-After` (whole seconds).
pub async fn pages(strategy: PageStrategy) -> PagesOutcome {
    let host = Host::new(HostConfig {
        burst: 5,
        rate: 1.0,
        refusal: Refusal::TooManyRequests,
        rtt: RTT,
    });
    let start = Instant::now();
    let retry = RetryLayer::new().attempts(10).without_budget().seed(1);
    let paths = (1..=PAGES).map(|p| format!("/items?page={p}"));
    match strategy {
        PageStrategy::AskAgainAtOnce => {
            for path in paths {
                until_ok(&host, &path).await;
            }
        }
        PageStrategy::ObeyRetryAfter => {
            let svc = retry.layer(host.clone());
            for path in paths {
                until_ok(&svc, &path).await;
            }
        }
        PageStrategy::PaceWithBucket => {
            let rate = Rate::per_second(0.9).expect("0.9/s is a valid rate");
            let bucket = TokenBucketRateLimitLayer::new(rate, NonZeroU32::new(3).expect("3 > 0"));
            let svc = retry.layer(bucket.layer(host.clone()));
            for path in paths {
                until_ok(&svc, &path).await;
            }
        }
    }
    PagesOutcome {
        strategy,
        sent: host.sent(),
        refused: host.refused(),
        finish: start.elapsed(),
    }
}

// === herd: 50 clients against 5/s ===

/// How long each of the herd waits before asking again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HerdBackoff {
    /// 1 s every time (`RetryLayer` with base = cap = 1 s, no jitter).
    Fixed1s,
    /// 2 s, 4 s, 8 s, ... capped at 30 s, no jitter (`Jitter::None`; a bare 503 backs off
    /// from the 2 s overload base).
    Exponential,
    /// courier's default: uniform in `[0, min(30 s, 2 s * 2^(n-1))]` after a bare 503
    /// (`Jitter::Full`).
    FullJitter,
}

impl fmt::Display for HerdBackoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Fixed1s => "fixed 1 s",
            Self::Exponential => "exponential 2 s x 2^n, no jitter",
            Self::FullJitter => "courier full jitter (default: from 2 s after a bare 503)",
        })
    }
}

/// What the herd cost.
#[derive(Debug, Clone, PartialEq)]
pub struct HerdOutcome {
    /// The backoff.
    pub backoff: HerdBackoff,
    /// Requests the host saw.
    pub sent: usize,
    /// Clients that got their 200 (all of them unless a bound was hit).
    pub served: usize,
    /// When the last client got its 200.
    pub finish: Duration,
    /// Requests the host saw in each of the first [`HERD_CHART_SECONDS`] seconds (the table
    /// shows the first [`HERD_SECONDS`]).
    pub per_second: Vec<usize>,
}

/// The herd size.
pub const CLIENTS: usize = 50;
/// Seconds of the herd's per-second profile in the table.
pub const HERD_SECONDS: usize = 16;
/// Seconds of the herd's per-second profile in the chart: up to the fifth wave of exponential
/// backoff without jitter (0, 2, 6, 14, 30 s).
pub const HERD_CHART_SECONDS: usize = 31;

/// [`CLIENTS`] clients each ask once at the same moment; the host serves 5 per second (a
/// bucket of 5 refilled at 5/s) and answers the rest 503 without `Retry-After`. Each client
/// retries (courier's `RetryLayer`, no budget) until it gets its 200.
pub async fn herd(backoff: HerdBackoff) -> HerdOutcome {
    let host = Host::new(HostConfig {
        burst: 5,
        rate: 5.0,
        refusal: Refusal::Unavailable,
        rtt: RTT,
    });
    let layer = RetryLayer::new().attempts(1_000).without_budget().seed(7);
    let layer = match backoff {
        HerdBackoff::Fixed1s => layer
            .base(Duration::from_secs(1))
            .cap(Duration::from_secs(1))
            .jitter(Jitter::None),
        HerdBackoff::Exponential => layer.jitter(Jitter::None),
        HerdBackoff::FullJitter => layer,
    };
    let svc = layer.layer(host.clone());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        let svc = svc.clone();
        tasks.spawn(async move { until_ok(&svc, &format!("/orders/{i}")).await < MAX_TRIES });
    }
    let mut served = 0;
    while let Some(done) = tasks.join_next().await {
        served += usize::from(done.unwrap_or(false));
    }
    HerdOutcome {
        backoff,
        sent: host.sent(),
        served,
        finish: start.elapsed(),
        per_second: host.per_second(HERD_CHART_SECONDS),
    }
}

// === outage: everything 503 ===

/// Which retry budget the outage runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageBudget {
    /// No budget: only the attempt count bounds retries.
    None,
    /// courier's budget at 10 % with no floor.
    NoFloor,
    /// courier's default budget: 10 % plus a floor of 10 retries per 10 s.
    Default,
}

impl fmt::Display for OutageBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::NoFloor => "courier budget 10 %, no floor",
            Self::Default => "courier default: 10 % plus 10 retries per 10 s",
        })
    }
}

/// What the outage cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutageOutcome {
    /// The retry budget.
    pub budget: OutageBudget,
    /// Calls made by the callers.
    pub calls: usize,
    /// Requests the host saw.
    pub sent: usize,
}

/// Callers in the outage simulation.
pub const OUTAGE_CALLS: usize = 100;

/// [`OUTAGE_CALLS`] calls, one every 10 ms, to a host that answers every request 503;
/// courier's `RetryLayer` with 3 attempts, under `budget`.
pub async fn outage(budget: OutageBudget) -> OutageOutcome {
    let host = Host::new(HostConfig {
        burst: 0,
        rate: 0.0,
        refusal: Refusal::Unavailable,
        rtt: RTT,
    });
    let layer = RetryLayer::new().attempts(3).seed(3);
    let layer = match budget {
        OutageBudget::None => layer.without_budget(),
        OutageBudget::NoFloor => layer.budget(RetryBudget::new().ratio(0.1).floor(0)),
        OutageBudget::Default => layer,
    };
    let svc = layer.layer(host.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..OUTAGE_CALLS {
        let svc = svc.clone();
        tasks.spawn(async move {
            let _ = svc.oneshot(get(&format!("/orders/{i}"))).await;
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while tasks.join_next().await.is_some() {}
    OutageOutcome {
        budget,
        calls: OUTAGE_CALLS,
        sent: host.sent(),
    }
}

// === all three, as markdown ===

/// Every simulation's figures.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The pager, one row per strategy.
    pub pages: Vec<PagesOutcome>,
    /// The herd, one row per backoff.
    pub herd: Vec<HerdOutcome>,
    /// The outage, without then with the budget.
    pub outage: Vec<OutageOutcome>,
}

/// Runs every simulation. Call it on a paused current-thread runtime (see [`run_all`]).
pub async fn figures() -> Figures {
    let mut out = Figures {
        pages: Vec::new(),
        herd: Vec::new(),
        outage: Vec::new(),
    };
    for s in [
        PageStrategy::AskAgainAtOnce,
        PageStrategy::ObeyRetryAfter,
        PageStrategy::PaceWithBucket,
    ] {
        out.pages.push(pages(s).await);
    }
    for b in [
        HerdBackoff::Fixed1s,
        HerdBackoff::Exponential,
        HerdBackoff::FullJitter,
    ] {
        out.herd.push(herd(b).await);
    }
    for budget in [
        OutageBudget::None,
        OutageBudget::NoFloor,
        OutageBudget::Default,
    ] {
        out.outage.push(outage(budget).await);
    }
    out
}

/// Runs every simulation on a fresh paused current-thread runtime.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn run_all() -> Figures {
    on_paused_time(figures())
}

/// Runs `f` to its end on a fresh paused current-thread runtime.
///
/// # Panics
///
/// When the runtime cannot be built.
pub(crate) fn on_paused_time<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
        .block_on(f)
}

/// A duration for the tables: seconds with two decimals.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "### {PAGES} pages, host allows a burst of 5 then 1/s (429 + Retry-After), RTT {} ms\n",
            RTT.as_millis()
        );
        let _ = writeln!(
            s,
            "| strategy | requests sent | refused (429) | x pages | finish |"
        );
        let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: |");
        for p in &self.pages {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {} |",
                p.strategy,
                p.sent,
                p.refused,
                p.sent as f64 / PAGES as f64,
                secs(p.finish)
            );
        }
        let _ = writeln!(
            s,
            "\n### {CLIENTS} clients at once, host serves 5/s, the rest 503 without Retry-After, RTT {} ms\n",
            RTT.as_millis()
        );
        let _ = write!(s, "| backoff | requests | x clients | served | finish |");
        for k in 0..HERD_SECONDS {
            let _ = write!(s, " {k}s |");
        }
        let _ = write!(s, "\n| --- | ---: | ---: | ---: | ---: |");
        for _ in 0..HERD_SECONDS {
            let _ = write!(s, " ---: |");
        }
        s.push('\n');
        for h in &self.herd {
            let _ = write!(
                s,
                "| {} | {} | {:.2} | {} | {} |",
                h.backoff,
                h.sent,
                h.sent as f64 / CLIENTS as f64,
                h.served,
                secs(h.finish)
            );
            for n in h.per_second.iter().take(HERD_SECONDS) {
                let _ = write!(s, " {n} |");
            }
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "\n### outage: {OUTAGE_CALLS} calls (one every 10 ms), every answer 503, 3 attempts each\n"
        );
        let _ = writeln!(s, "| retry budget | calls | requests sent | x calls |");
        let _ = writeln!(s, "| --- | ---: | ---: | ---: |");
        for o in &self.outage {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} |",
                o.budget,
                o.calls,
                o.sent,
                o.sent as f64 / o.calls as f64
            );
        }
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn pacing_below_the_quota_is_never_refused_and_asking_at_once_is() {
        let at_once = pages(PageStrategy::AskAgainAtOnce).await;
        let obey = pages(PageStrategy::ObeyRetryAfter).await;
        let pace = pages(PageStrategy::PaceWithBucket).await;
        assert_eq!(pace.refused, 0, "{pace:?}");
        assert_eq!(pace.sent, PAGES);
        // 3 at once, then one every 1/0.9 s.
        let paced = Duration::from_secs_f64(17.0 / 0.9);
        assert!(pace.finish >= paced && pace.finish < paced + Duration::from_secs(1));
        assert!(obey.refused > 0 && obey.refused <= PAGES, "{obey:?}");
        assert!(at_once.refused > 10 * obey.refused, "{at_once:?} {obey:?}");
        for o in [at_once, obey, pace] {
            assert_eq!(o.sent - o.refused, PAGES, "{o:?}");
        }
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn full_jitter_spreads_the_herd_and_every_client_is_served() {
        let fixed = herd(HerdBackoff::Fixed1s).await;
        let exp = herd(HerdBackoff::Exponential).await;
        let jitter = herd(HerdBackoff::FullJitter).await;
        for h in [&fixed, &exp, &jitter] {
            assert_eq!(h.served, CLIENTS, "{h:?}");
            assert!(h.per_second[0] >= CLIENTS, "{h:?}");
        }
        // Without jitter the herd comes back in waves: whole seconds see nobody.
        assert!(
            exp.per_second.iter().filter(|&&n| n == 0).count() >= 5,
            "{exp:?}"
        );
        // Full jitter finishes well before un-jittered exponential backoff.
        assert!(jitter.finish < exp.finish, "{jitter:?} {exp:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_budget_caps_an_outage_near_one_point_one() {
        let without = outage(OutageBudget::None).await;
        let with = outage(OutageBudget::NoFloor).await;
        assert_eq!(without.sent, 3 * OUTAGE_CALLS);
        assert!(with.sent >= OUTAGE_CALLS, "{with:?}");
        assert!(with.sent <= OUTAGE_CALLS + OUTAGE_CALLS / 10, "{with:?}");
        // The default's floor lets 10 more through per 10 s, which a 1 s outage spends whole
        // (the 10 % is counted over the requests, the retries included).
        let default = outage(OutageBudget::Default).await;
        assert!(default.sent > with.sent, "{default:?}");
        assert!(default.sent <= with.sent + 2 * 10, "{default:?}");
    }

    #[test]
    fn the_tables_print_every_row() {
        let figures = run_all();
        let text = figures.to_string();
        assert_eq!(text.matches("\n| ").count(), 3 * 2 + 3 + 3 + 3, "{text}");
        assert!(text.contains("ask again at once"));
    }
}

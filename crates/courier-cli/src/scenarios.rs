//! The scenario table (docs/ARCHITECTURE.md), run through the preset against the fault server.
//!
//! Shared by `courier demo` and the crate's tests, so the demo and CI check the same rows the
//! same way: attempts are counted by the server.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::{Attempts, BoxError};
use courier::retry::RetryLayer;
use courier_faultserver::{FaultServer, Hit, Step};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// A boxed preset client, whatever its transport.
pub type Client = BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<UnsyncBoxBody<Bytes, BoxError>>,
    BoxError,
>;

/// The transport under the preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// courier's hyper-util client.
    Hyper,
    /// A `reqwest::Client` through the adapter.
    Reqwest,
}

impl Transport {
    /// Builds the preset `layer` over this transport, boxed.
    pub fn client(self, layer: &CourierLayer) -> Client {
        match self {
            Self::Hyper => layer.hyper::<Full<Bytes>>().boxed(),
            Self::Reqwest => {
                let client = courier::transport::reqwest_client_builder()
                    .build()
                    .expect("reqwest builds a plain-HTTP client");
                layer.reqwest::<Full<Bytes>>(client).boxed()
            }
        }
    }
}

/// What the server counted for one row, and whether it is what the row expects.
#[derive(Debug, Clone)]
pub struct RowResult {
    /// The scenario, as docs/ARCHITECTURE.md words it.
    pub scenario: &'static str,
    /// What courier must do.
    pub expected: &'static str,
    /// Requests the server received.
    pub attempts: usize,
    /// The final status, or the error.
    pub outcome: String,
    /// Seconds between consecutive requests, as the server saw them.
    pub waits: Vec<f64>,
    /// Why the call stopped, from the attempt records.
    pub reason: Option<String>,
    /// Whether every expectation held.
    pub pass: bool,
    /// What failed, when something did.
    pub problem: String,
}

struct Row {
    scenario: &'static str,
    expected: &'static str,
    method: http::Method,
    key: Option<&'static str>,
    plan: Vec<Step>,
    layer: CourierLayer,
    check: fn(&Observed) -> Result<(), String>,
}

struct Observed {
    hits: Vec<Hit>,
    status: Option<u16>,
    error: Option<String>,
    attempts: Option<Attempts>,
    elapsed: Duration,
    /// Wall-clock seconds from when the call started to the reset the plan named (row 4).
    reset_in: f64,
}

impl Observed {
    fn gaps(&self) -> Vec<f64> {
        self.hits
            .windows(2)
            .map(|w| (w[1].t_ms - w[0].t_ms) / 1000.0)
            .collect()
    }

    fn expect(&self, attempts: usize, status: u16) -> Result<(), String> {
        if self.hits.len() != attempts {
            return Err(format!(
                "server counted {} attempts, want {attempts}",
                self.hits.len()
            ));
        }
        match (self.status, &self.error) {
            (Some(s), _) if s == status => Ok(()),
            (Some(s), _) => Err(format!("final status {s}, want {status}")),
            (None, Some(e)) => Err(format!("error {e}, want status {status}")),
            (None, None) => Err("no outcome".into()),
        }
    }

    /// When the first attempt planned the second, in seconds since the call started: the end
    /// of its answer plus its wait.
    fn retry_planned_between(&self, lo: f64, hi: f64) -> Result<(), String> {
        let first = self.attempts.as_ref().and_then(|a| a.iter().next());
        match first {
            Some(r) => {
                let at = (r.elapsed + r.wait).as_secs_f64();
                if at >= lo && at <= hi {
                    Ok(())
                } else {
                    Err(format!(
                        "retry planned {at:.3} s in, want between {lo} and {hi} s"
                    ))
                }
            }
            None => Err("no attempt recorded".into()),
        }
    }

    fn gap_between(&self, lo: f64, hi: f64) -> Result<(), String> {
        match self.gaps().first() {
            Some(g) if *g >= lo && *g <= hi => Ok(()),
            Some(g) => Err(format!("waited {g:.3} s, want between {lo} and {hi} s")),
            None => Err("no second attempt".into()),
        }
    }
}

fn seeded(seed: u64) -> CourierLayer {
    CourierLayer::new().retry(RetryLayer::new().seed(seed))
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

fn rows() -> Vec<Row> {
    let now = SystemTime::now();
    let server_date = httpdate::fmt_http_date(now - Duration::from_secs(40));
    let retry_date = httpdate::fmt_http_date(now - Duration::from_secs(38));
    // Whole epoch seconds, at least 2 s ahead.
    let reset_epoch = (now_secs() + 2.0).ceil() as u64;
    vec![
        Row {
            scenario: "GET: 503, 503, 200",
            expected: "3 attempts, 200",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::status(503).times(2)],
            layer: seeded(1),
            check: |o| o.expect(3, 200),
        },
        Row {
            scenario: "GET: 500 five times",
            expected: "3 attempts, 500",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::status(500).times(5)],
            layer: seeded(2),
            check: |o| o.expect(3, 500),
        },
        Row {
            scenario: "GET: 429 with Retry-After: 2",
            expected: "2 attempts, 200, second 2 s after the first answer",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::status(429).header("retry-after", "2")],
            layer: seeded(3),
            check: |o| o.expect(2, 200).and(o.gap_between(2.0, 2.6)),
        },
        Row {
            scenario: "GET: 429 with x-ratelimit-remaining: 0 and a reset 2 s ahead",
            expected: "2 attempts, 200, waited until the reset",
            method: http::Method::GET,
            key: None,
            plan: vec![
                Step::status(429)
                    .header("x-ratelimit-remaining", "0")
                    .header("x-ratelimit-reset", reset_epoch.to_string()),
            ],
            layer: seeded(4),
            check: |o| {
                o.expect(2, 200)?;
                // The retry was planned for the reset: never before it, at most a second
                // after (the reset has whole seconds). Read from the first attempt's record
                // (when it ended and how long it waited), so that a first answer slow to come
                // on a busy machine shortens the wait without failing the row.
                o.retry_planned_between(o.reset_in - 0.05, o.reset_in + 1.1)
            },
        },
        Row {
            scenario: "GET: connection reset",
            expected: "2 attempts, 200",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::reset()],
            layer: seeded(5),
            check: |o| o.expect(2, 200),
        },
        Row {
            scenario: "GET: answer delayed 1.5 s, attempt timeout 0.5 s",
            expected: "2 attempts, 200",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::ok().delay(Duration::from_millis(1500))],
            layer: seeded(6).attempt_timeout(Duration::from_millis(500)),
            check: |o| o.expect(2, 200).and(o.gap_between(0.5, 1.5)),
        },
        Row {
            scenario: "POST: 503 without a key",
            expected: "1 attempt, 503",
            method: http::Method::POST,
            key: None,
            plan: vec![Step::status(503)],
            layer: seeded(7),
            check: |o| o.expect(1, 503),
        },
        Row {
            scenario: "POST: 503 with Idempotency-Key",
            expected: "2 attempts, 200, the same key on both",
            method: http::Method::POST,
            key: Some("order-7f3a"),
            plan: vec![Step::status(503)],
            layer: seeded(8),
            check: |o| {
                o.expect(2, 200)?;
                let keys: Vec<_> = o
                    .hits
                    .iter()
                    .map(|h| h.idempotency_key.as_deref())
                    .collect();
                if keys.iter().all(|k| *k == Some("order-7f3a")) {
                    Ok(())
                } else {
                    Err(format!("keys {keys:?}"))
                }
            },
        },
        Row {
            scenario: "GET: 429 with Retry-After: 120 (max wait 60 s)",
            expected: "1 attempt, 429 returned at once, reason logged",
            method: http::Method::GET,
            key: None,
            plan: vec![Step::status(429).header("retry-after", "120")],
            layer: seeded(9),
            check: |o| {
                o.expect(1, 429)?;
                if o.elapsed > Duration::from_secs(1) {
                    return Err(format!("took {:?}, want at once", o.elapsed));
                }
                match o.attempts.as_ref().and_then(Attempts::last) {
                    Some(r) if r.reason == courier::core::extensions::Reason::HintTooLong => Ok(()),
                    other => Err(format!(
                        "reason {:?}, want hint_exceeds_max_wait",
                        other.map(|r| r.reason)
                    )),
                }
            },
        },
        Row {
            scenario: "GET: 503 with Retry-After as an HTTP-date, server Date 40 s behind ours",
            expected: "2 attempts, 200, waits the server's delta (2 s)",
            method: http::Method::GET,
            key: None,
            plan: vec![
                Step::status(503)
                    .header("date", server_date)
                    .header("retry-after", retry_date),
            ],
            layer: seeded(10),
            check: |o| o.expect(2, 200).and(o.gap_between(2.0, 2.6)),
        },
    ]
}

/// Runs every row against `server` through the preset over `transport`, rows concurrently
/// (each with its own plan name and its own client, so no row's breaker or budget sees
/// another's failures). Returns the rows in table order.
pub async fn run_all(server: &FaultServer, transport: Transport) -> Vec<RowResult> {
    let tag = match transport {
        Transport::Hyper => "hyper",
        Transport::Reqwest => "reqwest",
    };
    let runs = rows().into_iter().enumerate().map(|(i, row)| {
        let name = format!("demo-{tag}-{i}");
        server.clear(&name);
        server.set_plan(&name, row.plan.clone());
        let url = server.url_for(&format!("/s/{name}"));
        let client = transport.client(&row.layer);
        async move {
            let mut req = http::Request::builder().method(row.method.clone()).uri(url);
            if let Some(key) = row.key {
                req = req.header("idempotency-key", key);
            }
            let req = req
                .body(Full::new(Bytes::from_static(b"{}")))
                .expect("a valid request");
            let started_wall = now_secs();
            let started = tokio::time::Instant::now();
            let result = client.oneshot(req).await;
            let mut observed = Observed {
                hits: Vec::new(),
                status: None,
                error: None,
                attempts: None,
                elapsed: started.elapsed(),
                reset_in: 0.0,
            };
            if let Some(reset) = row
                .plan
                .first()
                .and_then(|s| s.headers.get("x-ratelimit-reset"))
                .and_then(|r| r.parse::<f64>().ok())
            {
                observed.reset_in = reset - started_wall;
            }
            match result {
                Ok(resp) => {
                    observed.status = Some(resp.status().as_u16());
                    observed.attempts = resp.extensions().get::<Attempts>().cloned();
                    // Read the body through, as a caller would.
                    let _ = resp.into_body().collect().await;
                }
                Err(e) => observed.error = Some(courier::Error::from(e).to_string()),
            }
            (row, name, observed)
        }
    });
    let done = futures_util::future::join_all(runs).await;
    done.into_iter()
        .map(|(row, name, mut observed)| {
            observed.hits = server.hits(&name);
            let verdict = (row.check)(&observed);
            RowResult {
                scenario: row.scenario,
                expected: row.expected,
                attempts: observed.hits.len(),
                outcome: match (observed.status, &observed.error) {
                    (Some(s), _) => s.to_string(),
                    (None, Some(e)) => format!("error: {e}"),
                    (None, None) => "-".into(),
                },
                waits: observed.gaps(),
                reason: observed
                    .attempts
                    .as_ref()
                    .and_then(Attempts::last)
                    .map(|r| r.reason.to_string()),
                pass: verdict.is_ok(),
                problem: verdict.err().unwrap_or_default(),
            }
        })
        .collect()
}

/// The results as a plain-text table.
pub fn table(results: &[RowResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<70} {:>8} {:>6} {:<16} {:<24} {:<48} result",
        "scenario", "attempts", "status", "waits (s)", "stopped because", "expected"
    );
    for r in results {
        let waits = if r.waits.is_empty() {
            "-".to_owned()
        } else {
            r.waits
                .iter()
                .map(|w| format!("{w:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "{:<70} {:>8} {:>6} {:<16} {:<24} {:<48} {}",
            r.scenario,
            r.attempts,
            r.outcome,
            waits,
            r.reason.as_deref().unwrap_or("-"),
            r.expected,
            if r.pass {
                "pass".to_owned()
            } else {
                format!("FAIL: {}", r.problem)
            }
        );
    }
    out
}

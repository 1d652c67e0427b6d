//! Random calls: a method, maybe an `Idempotency-Key`, a fault plan for the server, and maybe a
//! moment at which the caller drops the call. Each call is a pure function of the seed and its
//! number, so a run's plans can be replayed.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use courier_faultserver::Step;
use http::Method;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// The share of callers that drop their call at a random moment.
pub(crate) const DROP_SHARE: f64 = 0.10;

/// The longest a caller pauses before its next call: callers think, as real ones do, so that
/// calls refused at once by an open circuit do not spin the process.
pub(crate) const MAX_THINK: Duration = Duration::from_millis(10);

/// What a call's plan does to it; the soak counts outcomes and load by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// 200, with or without a body and cache headers.
    Healthy,
    /// 500, 502, 503 or 504 on every attempt.
    ServerErrors,
    /// One or two 5xx, then 200.
    ServerErrorsThenOk,
    /// 429 or 503 with a `Retry-After` in one of its forms, valid or not, then 200.
    RetryAfter,
    /// Quota headers: `x-ratelimit-*`, `RateLimit`, `RateLimit-Policy`, on 429, 403, 503 or 200.
    Quota,
    /// A connection reset, sometimes after a wait, then 200.
    Reset,
    /// Headers late, by up to past the deadline.
    SlowHeaders,
    /// A body dripped a byte at a time, by up to past the deadline.
    Dripped,
    /// A 304 nobody asked for, then 200.
    NotModified,
    /// A body short of its `content-length`: the connection closes mid-body.
    CutShort,
    /// A few of the steps above, in any order.
    Mixed,
    /// The host is down: 503 on every attempt, for every call while the outage lasts.
    Outage,
    /// A broken path: the connection reset on every attempt.
    BrokenReset,
    /// A broken path: headers later than the attempt timeout on every attempt.
    Stall,
}

impl Kind {
    pub(crate) const ALL: [Kind; 14] = [
        Kind::Healthy,
        Kind::ServerErrors,
        Kind::ServerErrorsThenOk,
        Kind::RetryAfter,
        Kind::Quota,
        Kind::Reset,
        Kind::SlowHeaders,
        Kind::Dripped,
        Kind::NotModified,
        Kind::CutShort,
        Kind::Mixed,
        Kind::Outage,
        Kind::BrokenReset,
        Kind::Stall,
    ];

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Kind::Healthy => "healthy",
            Kind::ServerErrors => "5xx only",
            Kind::ServerErrorsThenOk => "5xx then 200",
            Kind::RetryAfter => "Retry-After",
            Kind::Quota => "quota headers",
            Kind::Reset => "reset",
            Kind::SlowHeaders => "slow headers",
            Kind::Dripped => "dripped body",
            Kind::NotModified => "unasked 304",
            Kind::CutShort => "body cut short",
            Kind::Mixed => "mixed",
            Kind::Outage => "host outage",
            Kind::BrokenReset => "always reset",
            Kind::Stall => "always stalls",
        }
    }

    /// Whether the path answers (every kind the broken-paths mix picks but the two broken
    /// ones): a call to it that the breaker refuses is one refused for nothing.
    pub(crate) const fn answers(self) -> bool {
        !matches!(self, Kind::BrokenReset | Kind::Stall | Kind::Outage)
    }

    /// Picks a kind of the broken-paths mix: one path in six resets or stalls on every
    /// attempt, the others answer (200; 5xx then 200; 429 or 503 with a hint, then 200; an
    /// unasked 304, then 200).
    fn pick_broken_paths(rng: &mut SmallRng) -> Self {
        match rng.random_range(0..12) {
            0 => Kind::BrokenReset,
            1 => Kind::Stall,
            2 | 3 => Kind::ServerErrorsThenOk,
            4 => Kind::RetryAfter,
            5 => Kind::NotModified,
            _ => Kind::Healthy,
        }
    }

    /// Picks a kind outside an outage, healthy calls the most common.
    fn pick(rng: &mut SmallRng) -> Self {
        const WEIGHTS: [(Kind, u32); 11] = [
            (Kind::Healthy, 40),
            (Kind::ServerErrors, 8),
            (Kind::ServerErrorsThenOk, 10),
            (Kind::RetryAfter, 10),
            (Kind::Quota, 8),
            (Kind::Reset, 6),
            (Kind::SlowHeaders, 6),
            (Kind::Dripped, 5),
            (Kind::NotModified, 3),
            (Kind::CutShort, 3),
            (Kind::Mixed, 1),
        ];
        let total: u32 = WEIGHTS.iter().map(|(_, w)| w).sum();
        let mut roll = rng.random_range(0..total);
        for (kind, weight) in WEIGHTS {
            if roll < weight {
                return kind;
            }
            roll -= weight;
        }
        unreachable!("the roll is below the total of the weights")
    }
}

/// One call of the soak.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The call's number in the run.
    pub(crate) index: u64,
    /// Which fault server (host) it goes to.
    pub(crate) host: usize,
    pub(crate) method: Method,
    /// The `Idempotency-Key` the caller sends, if any.
    pub(crate) key: Option<String>,
    pub(crate) body: Bytes,
    pub(crate) kind: Kind,
    /// What the server answers, attempt by attempt; once used up it answers 200.
    pub(crate) plan: Vec<Step>,
    /// When the caller drops the call, counted from its start; `None` waits for the end.
    pub(crate) drop_after: Option<Duration>,
    /// How long the caller pauses before it.
    pub(crate) think: Duration,
}

impl Call {
    /// The plan's name on the server, and the path `/s/{name}`.
    pub(crate) fn name(&self) -> String {
        name(self.index)
    }
}

/// The plan name of call `index`.
pub(crate) fn name(index: u64) -> String {
    format!("c{index}")
}

/// Which faults a run's calls meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mix {
    /// Every kind of fault, and every host down for a while now and then.
    Chaos,
    /// Many paths of one host, each call its own: one in six resets or stalls on every
    /// attempt, the others answer. The host is up all along.
    BrokenPaths,
}

impl Mix {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Mix::Chaos => "chaos",
            Mix::BrokenPaths => "broken paths",
        }
    }
}

/// What the generator needs to know of the preset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The preset's total budget per call.
    pub(crate) deadline: Duration,
    /// The preset's bound on one attempt.
    pub(crate) attempt_timeout: Duration,
    /// How many fault servers there are.
    pub(crate) hosts: usize,
}

/// The host call `index` goes to.
pub(crate) fn host(index: u64, hosts: usize) -> usize {
    (index % hosts.max(1) as u64) as usize
}

/// Call `index` of the run seeded with `seed`. `now` dates the HTTP-dates in its plan; during
/// an `outage` of its host the plan is the outage's; `mix` picks the kinds.
pub(crate) fn call(
    seed: u64,
    index: u64,
    now: SystemTime,
    bounds: Bounds,
    outage: bool,
    mix: Mix,
) -> Call {
    // A distinct stream per call: the golden-ratio step spreads neighbouring indexes apart.
    let mut rng = SmallRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let method = match rng.random_range(0..100) {
        0..35 => Method::GET,
        35..40 => Method::HEAD,
        40..43 => Method::OPTIONS,
        43..53 => Method::PUT,
        53..58 => Method::DELETE,
        58..88 => Method::POST,
        _ => Method::PATCH,
    };
    let keyed = matches!(method, Method::POST | Method::PATCH) && rng.random_bool(0.5);
    let key = keyed.then(|| format!("chaos-{seed:x}-{index}"));
    let body = if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
        Bytes::from(format!("{{\"call\": {index}}}"))
    } else {
        Bytes::new()
    };
    let kind = match (outage, mix) {
        (true, _) => Kind::Outage,
        (false, Mix::Chaos) => Kind::pick(&mut rng),
        (false, Mix::BrokenPaths) => Kind::pick_broken_paths(&mut rng),
    };
    let plan = plan(kind, &mut rng, now, bounds);
    let drop_after = rng.random_bool(DROP_SHARE).then(|| {
        let latest = bounds.deadline + Duration::from_millis(200);
        Duration::from_micros(rng.random_range(0..latest.as_micros() as u64))
    });
    let think = Duration::from_micros(rng.random_range(0..=MAX_THINK.as_micros() as u64));
    Call {
        index,
        host: host(index, bounds.hosts),
        method,
        key,
        body,
        kind,
        plan,
        drop_after,
        think,
    }
}

fn plan(kind: Kind, rng: &mut SmallRng, now: SystemTime, bounds: Bounds) -> Vec<Step> {
    let deadline = bounds.deadline;
    match kind {
        Kind::Healthy => vec![healthy(rng)],
        Kind::ServerErrors => vec![server_error(rng).times(rng.random_range(3..=6))],
        Kind::ServerErrorsThenOk => {
            let errors = rng.random_range(1..=2);
            vec![server_error(rng).times(errors), healthy(rng)]
        }
        Kind::RetryAfter => vec![retry_after(rng, now), healthy(rng)],
        Kind::Quota => vec![quota(rng, now), healthy(rng)],
        Kind::Reset => {
            let mut reset = Step::reset();
            if rng.random_bool(0.3) {
                reset = reset.delay(millis(rng, 0, deadline.as_millis() as u64));
            }
            vec![reset.times(rng.random_range(1..=2)), healthy(rng)]
        }
        Kind::SlowHeaders => {
            let late = millis(rng, 50, deadline.as_millis() as u64 * 3 / 2);
            vec![healthy(rng).delay(late), healthy(rng)]
        }
        Kind::Dripped => {
            let len = rng.random_range(2..200);
            let gap = millis(rng, 1, 25);
            vec![Step::ok().body(text(rng, len)).drip(gap), healthy(rng)]
        }
        Kind::NotModified => {
            let etag = format!("\"v{}\"", rng.random_range(0..1000));
            vec![Step::status(304).header("etag", etag), healthy(rng)]
        }
        Kind::CutShort => vec![cut_short(rng), healthy(rng)],
        Kind::Outage => vec![Step::status(503).body("down").times(10)],
        Kind::BrokenReset => vec![Step::reset().times(10)],
        Kind::Stall => {
            let late = bounds.attempt_timeout + millis(rng, 100, 1_000);
            vec![healthy(rng).delay(late).times(10)]
        }
        Kind::Mixed => {
            let steps = rng.random_range(2..=5);
            (0..steps)
                .map(|_| match rng.random_range(0..7) {
                    0 => server_error(rng),
                    1 => retry_after(rng, now),
                    2 => quota(rng, now),
                    3 => Step::reset(),
                    4 => healthy(rng).delay(millis(rng, 0, deadline.as_millis() as u64)),
                    5 => cut_short(rng),
                    _ => healthy(rng),
                })
                .collect()
        }
    }
}

fn millis(rng: &mut SmallRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(rng.random_range(low..=high))
}

fn text(rng: &mut SmallRng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(rng.random_range(b'a'..=b'z')))
        .collect()
}

/// A 200: empty, short or long; sometimes cacheable, sometimes not to be stored.
fn healthy(rng: &mut SmallRng) -> Step {
    let len = match rng.random_range(0..10) {
        0..3 => 0,
        3..9 => rng.random_range(1..64),
        _ => rng.random_range(1_000..20_000),
    };
    let mut step = Step::ok().body(text(rng, len));
    match rng.random_range(0..10) {
        0..3 => {
            step = step
                .header("etag", format!("\"{}\"", rng.random_range(0..u32::MAX)))
                .header("cache-control", "max-age=60");
        }
        3 => step = step.header("cache-control", "no-store"),
        4 => step = step.header("etag", "W/\"weak\""),
        _ => {}
    }
    step
}

fn server_error(rng: &mut SmallRng) -> Step {
    let status = [500, 502, 503, 504][rng.random_range(0..4)];
    let step = Step::status(status).body("unavailable");
    if rng.random_bool(0.2) {
        step.header("retry-after", "0")
    } else {
        step
    }
}

/// A 429 or 503 with one of the forms `Retry-After` takes, sensible or not.
fn retry_after(rng: &mut SmallRng, now: SystemTime) -> Step {
    let status = if rng.random_bool(0.7) { 429 } else { 503 };
    let at = |secs: i64| {
        let at = if secs >= 0 {
            now + Duration::from_secs(secs as u64)
        } else {
            now - Duration::from_secs(secs.unsigned_abs())
        };
        httpdate::fmt_http_date(at)
    };
    let mut step = Step::status(status);
    let value = match rng.random_range(0..16) {
        0 => "0".to_owned(),
        1 => "1".to_owned(),
        2 => "2".to_owned(),
        3 => "3600".to_owned(),
        4 => " 1 ".to_owned(),
        5 => at(1),
        6 => at(3),
        7 => at(-10),
        8 => "Fri, 31 Dec 9999 23:59:59 GMT".to_owned(),
        9 => rfc850(&at(1)),
        10 => asctime(&at(2)),
        11 => {
            // The server's clock is 40 s behind ours: its own delta of 1 s is what counts.
            let server_now = now - Duration::from_secs(40);
            step = step.header("date", httpdate::fmt_http_date(server_now));
            httpdate::fmt_http_date(server_now + Duration::from_secs(1))
        }
        12 => "soon".to_owned(),
        13 => "-1".to_owned(),
        14 => "1.5".to_owned(),
        _ => "99999999999999999999999".to_owned(),
    };
    step.header("retry-after", value)
}

/// The quota headers servers send: GitHub's, the IETF draft's (list and dictionary forms, and
/// the separate fields of early drafts), on a refusal or on a success.
fn quota(rng: &mut SmallRng, now: SystemTime) -> Step {
    let status = [429, 429, 403, 503, 200][rng.random_range(0..5)];
    let epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let reset_in = rng.random_range(0..=3u64);
    let step = Step::status(status);
    match rng.random_range(0..6) {
        0 => step
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", (epoch + reset_in).to_string()),
        1 => step
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", ((epoch + reset_in) * 1000).to_string()),
        2 => step
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", reset_in.to_string()),
        3 => step
            .header("ratelimit", format!("\"default\";r=0;t={reset_in}"))
            .header("ratelimit-policy", "\"default\";q=100;w=10"),
        4 => step.header(
            "ratelimit",
            format!("limit=10, remaining=0, reset={reset_in}"),
        ),
        _ => step
            .header("ratelimit-remaining", "0")
            .header("ratelimit-reset", reset_in.to_string()),
    }
}

/// A body short of the `content-length` announced.
fn cut_short(rng: &mut SmallRng) -> Step {
    let len = rng.random_range(0..100);
    let announced = len + rng.random_range(1..1000);
    Step::ok()
        .header("content-length", announced.to_string())
        .body(text(rng, len))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` as RFC 850 writes it: `Sunday, 06-Nov-94 08:49:37 GMT`.
fn rfc850(imf: &str) -> String {
    let parts: Vec<&str> = imf.split(' ').collect();
    let [day, date, month, year, time, _] = parts[..] else {
        return imf.to_owned();
    };
    let day = match day.trim_end_matches(',') {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    let year = &year[year.len().saturating_sub(2)..];
    format!("{day}, {date}-{month}-{year} {time} GMT")
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` as C's asctime writes it: `Sun Nov  6 08:49:37 1994`.
fn asctime(imf: &str) -> String {
    let parts: Vec<&str> = imf.split(' ').collect();
    let [day, date, month, year, time, _] = parts[..] else {
        return imf.to_owned();
    };
    let date = date.trim_start_matches('0');
    format!(
        "{} {month} {date:>2} {time} {year}",
        day.trim_end_matches(',')
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const BOUNDS: Bounds = Bounds {
        deadline: Duration::from_millis(1500),
        attempt_timeout: Duration::from_millis(500),
        hosts: 4,
    };

    #[test]
    fn a_call_is_a_function_of_seed_and_index() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let a = call(7, 42, now, BOUNDS, false, Mix::Chaos);
        let b = call(7, 42, now, BOUNDS, false, Mix::Chaos);
        assert_eq!(
            (a.method.clone(), a.key.clone(), a.kind),
            (b.method, b.key, b.kind)
        );
        assert_eq!((a.plan.clone(), a.drop_after), (b.plan, b.drop_after));
        let other = (0..50).any(|i| {
            call(8, i, now, BOUNDS, false, Mix::Chaos).plan
                != call(7, i, now, BOUNDS, false, Mix::Chaos).plan
        });
        assert!(other, "another seed gives other plans");
    }

    #[test]
    fn every_plan_is_one_the_server_takes_and_every_kind_comes_up() {
        let now = SystemTime::now();
        let mut kinds = BTreeSet::new();
        let (mut keyed, mut once, mut dropped) = (0, 0, 0);
        for index in 0..5_000 {
            let mix = if index % 2 == 0 {
                Mix::Chaos
            } else {
                Mix::BrokenPaths
            };
            let call = call(1, index, now, BOUNDS, index % 100 == 0, mix);
            let json = serde_json::to_vec(&serde_json::json!({ "plan": call.plan })).unwrap();
            if let Err(e) = courier_faultserver::parse_plan(&json) {
                panic!("call {index}: {:?} is refused: {e}", call.plan);
            }
            assert_eq!(call.host, host(index, BOUNDS.hosts));
            assert_eq!(call.kind == Kind::Outage, index % 100 == 0);
            if let Some(after) = call.drop_after {
                assert!(after <= BOUNDS.deadline + Duration::from_millis(200));
                dropped += 1;
            }
            keyed += usize::from(call.key.is_some());
            once += usize::from(
                call.key.is_none() && matches!(call.method, Method::POST | Method::PATCH),
            );
            kinds.insert(call.kind);
        }
        assert_eq!(kinds.len(), Kind::ALL.len(), "{kinds:?}");
        // 40 % of the calls are POST or PATCH, half of those keyed; 10 % dropped.
        assert!((800..1200).contains(&keyed), "{keyed}");
        assert!((800..1200).contains(&once), "{once}");
        assert!((350..650).contains(&dropped), "{dropped}");
    }

    #[test]
    fn dates_in_every_format() {
        let imf = "Sun, 06 Nov 1994 08:49:37 GMT";
        let at = httpdate::parse_http_date(imf).unwrap();
        assert_eq!(rfc850(imf), "Sunday, 06-Nov-94 08:49:37 GMT");
        assert_eq!(asctime(imf), "Sun Nov  6 08:49:37 1994");
        assert_eq!(httpdate::parse_http_date(&rfc850(imf)).unwrap(), at);
        assert_eq!(httpdate::parse_http_date(&asctime(imf)).unwrap(), at);
    }

    #[test]
    fn one_path_in_six_is_broken_in_the_broken_paths_mix() {
        let now = SystemTime::now();
        let broken = (0..6_000)
            .map(|i| call(3, i, now, BOUNDS, false, Mix::BrokenPaths))
            .filter(|c| !c.kind.answers())
            .count();
        assert!((850..1150).contains(&broken), "{broken} of 6000");
    }
}

//! The README's table of defaults ("Options and defaults") says what the code does: every
//! number and every on / off in a row's default cell is read from the code's own defaults (the
//! layers' `new()`, the preset's `CourierLayer::new()`, the public constants), and a row the
//! table lacks, or a value it states differently, fails.

use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::EtagCacheLayer;
use courier::concurrency::ConcurrencyLimitLayer;
use courier::core::Classifier;
use courier::deadline::{AttemptTimeoutLayer, DeadlineLayer, DeadlineScopeLayer};
use courier::ratelimit::{AdaptivePacingLayer, Rate, TokenBucketRateLimitLayer};
use courier::retry::{RetryBudget, RetryLayer};
use std::time::Duration;

/// One value as the table writes it, normalised: a duration, a size, a share, a rate, a plain
/// number, or a keyword.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Dur(Duration),
    Bytes(u64),
    Share(f64),
    Rate(f64),
    Num(f64),
    Word(&'static str),
}

use Tok::{Bytes, Dur, Num, Rate as PerSec, Share, Word};

/// The words a default cell may state; any other word is prose.
const KEYWORDS: &[&str] = &[
    "on",
    "off",
    "none",
    "Wait",
    "Reject",
    "GET",
    "HEAD",
    "OPTIONS",
    "TRACE",
    "PUT",
    "DELETE",
    "UNAVAILABLE",
    "RESOURCE_EXHAUSTED",
    "Authorization",
    "Cookie",
];

/// `s` seconds, to the nearest nanosecond.
fn secs_f64(s: f64) -> Duration {
    Duration::from_nanos((s * 1e9).round() as u64)
}

/// The values a default cell states, in order.
fn tokens(cell: &str) -> Vec<Tok> {
    let b = cell.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let mut j = i;
            let mut digits = String::new();
            loop {
                while j < b.len() && b[j].is_ascii_digit() {
                    digits.push(b[j] as char);
                    j += 1;
                }
                // "10 000": a group of three digits after a space, not followed by a digit.
                let group = j + 4 <= b.len()
                    && b[j] == b' '
                    && b[j + 1..j + 4].iter().all(u8::is_ascii_digit)
                    && b.get(j + 4).is_none_or(|c| !c.is_ascii_digit());
                if group {
                    j += 1;
                } else {
                    break;
                }
            }
            if j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
                digits.push('.');
                j += 1;
                while j < b.len() && b[j].is_ascii_digit() {
                    digits.push(b[j] as char);
                    j += 1;
                }
            }
            let value: f64 = digits.parse().unwrap();
            let rest = &cell[j..];
            let after_space = rest.strip_prefix(' ').unwrap_or(rest);
            let unit = |u: &str, s: &str| {
                s.strip_prefix(u)
                    .filter(|r| r.chars().next().is_none_or(|c| !c.is_ascii_alphanumeric()))
                    .map(|_| u.len())
            };
            let (tok, used) = if let Some(n) = unit("/s", rest) {
                (PerSec(value), n)
            } else if let Some(n) = unit("ms", after_space) {
                (
                    Dur(secs_f64(value / 1e3)),
                    n + rest.len() - after_space.len(),
                )
            } else if let Some(n) = unit("s", after_space) {
                (Dur(secs_f64(value)), n + rest.len() - after_space.len())
            } else if let Some(n) = unit("h", after_space) {
                (
                    Dur(secs_f64(value * 3600.0)),
                    n + rest.len() - after_space.len(),
                )
            } else if let Some(n) = unit("MiB", after_space) {
                (
                    Bytes((value * 1048576.0) as u64),
                    n + rest.len() - after_space.len(),
                )
            } else if let Some(n) = unit("%", after_space) {
                (Share(value / 100.0), n + rest.len() - after_space.len())
            } else {
                (Num(value), 0)
            };
            out.push(tok);
            i = j + used;
        } else if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if let Some(word) = KEYWORDS.iter().find(|k| **k == &cell[i..j]) {
                out.push(Word(word));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The value of the field `name` in a `Debug` text: from after `name: ` to the next `,` or
/// closing bracket at its own depth.
fn field<'a>(debug: &'a str, name: &str) -> &'a str {
    let start = [format!("{{ {name}: "), format!(", {name}: ")]
        .iter()
        .filter_map(|p| debug.find(p.as_str()).map(|at| at + p.len()))
        .min()
        .unwrap_or_else(|| panic!("no field {name} in {debug}"));
    let mut depth = 0i32;
    for (k, c) in debug[start..].char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' if depth == 0 => return debug[start..start + k].trim(),
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => return debug[start..start + k].trim(),
            _ => {}
        }
    }
    debug[start..].trim()
}

/// A `Debug`-printed duration (`500ms`, `2s`).
fn dur(debug: &str) -> Tok {
    let (number, scale) = if let Some(ms) = debug.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = debug.strip_suffix('s') {
        (s, 1.0)
    } else {
        panic!("not a duration: {debug}")
    };
    Dur(secs_f64(number.parse::<f64>().unwrap() * scale))
}

fn num(debug: &str) -> Tok {
    Num(debug
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {debug}")))
}

/// `true` / `false`, `Some(..)` / `None` as the table's on / off.
fn on_off(debug: &str) -> Tok {
    match debug {
        "true" => Word("on"),
        "false" | "None" => Word("off"),
        s if s.starts_with("Some") => Word("on"),
        other => panic!("not a switch: {other}"),
    }
}

/// The members of a `Debug`-printed set or list (`{408, 429}`, `[GET, HEAD]`).
fn members(debug: &str) -> Vec<Tok> {
    tokens(debug.trim_matches(|c| "{}[]\"".contains(c)))
}

fn secs(ns_field: &str) -> Tok {
    Dur(Duration::from_nanos(ns_field.parse().unwrap()))
}

/// The README's rows: (layer, option, default), the layer carried down from the row above.
fn table() -> Vec<(String, String, String)> {
    let readme = include_str!("../README.md");
    let section = readme
        .split("\n## Options and defaults\n")
        .nth(1)
        .expect("the README has its table of defaults");
    let section = section.split("\n## ").next().unwrap();
    let mut layer = String::new();
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        if !cells[0].is_empty() {
            layer = cells[0].to_owned();
        }
        rows.push((layer.clone(), cells[1].to_owned(), cells[2].to_owned()));
    }
    rows
}

#[test]
fn the_readme_table_of_defaults_says_what_the_code_does() {
    let preset = format!("{:?}", CourierLayer::new());
    let classifier = format!("{:?}", Classifier::new());
    let retry = format!("{:?}", RetryLayer::new());
    let hedge = format!("{:?}", courier::retry::hedge::HedgeLayer::new());
    let hedge_delay = field(&hedge, "delay");
    let hedge_budget = field(&hedge, "budget");
    let budget = format!("{:?}", RetryBudget::new());
    let bucket_layer =
        TokenBucketRateLimitLayer::new(Rate::per_second(1.0).unwrap(), 1.try_into().unwrap());
    let bucket = format!("{bucket_layer:?}");
    let breaker = format!("{:?}", CircuitBreakerLayer::new());
    let preset_breaker = field(&preset, "breaker");
    let pacing = format!("{:?}", AdaptivePacingLayer::new());
    let concurrency = format!("{:?}", ConcurrencyLimitLayer::new());
    let preset_concurrency = field(&preset, "concurrency").trim_start_matches("Some(");
    let cache = format!("{:?}", EtagCacheLayer::new());
    let deadline = format!("{:?}", DeadlineLayer::new(Duration::from_secs(1)));
    let attempt = format!("{:?}", AttemptTimeoutLayer::new(Duration::from_secs(1)));
    let scope = format!("{:?}", DeadlineScopeLayer::new());

    let preset_deadline = field(field(&preset, "deadline"), "budget");
    let preset_attempt = field(field(&preset, "attempt_timeout"), "per_attempt");
    let preset_rate = field(preset_breaker, "failure_rate");
    let trials = num(field(preset_breaker, "half_open_trials"));
    let Num(n) = trials.clone() else {
        unreachable!()
    };
    let majority = Num((n / 2.0).floor() + 1.0);
    let cat = |parts: Vec<Vec<Tok>>| parts.concat();

    // (layer, the option's start, what the code says)
    let expected: Vec<(&str, &str, Vec<Tok>)> = vec![
        (
            "preset",
            "total deadline",
            vec![dur(preset_deadline), dur(preset_attempt)],
        ),
        (
            "",
            "rate limiter",
            vec![on_off(field(&preset, "rate_limit"))],
        ),
        (
            "`Classifier`",
            "`retryable_statuses`",
            members(field(&classifier, "retryable_statuses")),
        ),
        (
            "",
            "`failure_statuses`",
            members(field(&classifier, "failure_statuses")),
        ),
        (
            "",
            "`overload_statuses`",
            members(field(&classifier, "overload_statuses")),
        ),
        (
            "",
            "`rate_limit_403`",
            vec![on_off(field(&classifier, "rate_limit_403"))],
        ),
        (
            "",
            "`grpc_retryable_codes`",
            cat(vec![
                members(field(&classifier, "grpc_retryable_codes")),
                members(field(&classifier, "grpc_failure_codes")),
                // The table names the signal first.
                members(field(&classifier, "grpc_overload_codes"))
                    .into_iter()
                    .rev()
                    .collect(),
            ]),
        ),
        (
            "",
            "`idempotent_methods`",
            members(field(&classifier, "idempotent_methods")),
        ),
        (
            "",
            "`classify_body`",
            vec![on_off(field(&classifier, "body"))],
        ),
        (
            "`RetryLayer`",
            "`attempts`",
            vec![num(field(&retry, "attempts"))],
        ),
        (
            "",
            "`base`, `cap`",
            vec![dur(field(&retry, "base")), dur(field(&retry, "cap"))],
        ),
        (
            "",
            "`overload_base`",
            vec![dur(field(&retry, "overload_base"))],
        ),
        ("", "`max_wait`", vec![dur(field(&retry, "max_wait"))]),
        (
            "",
            "`budget`",
            vec![
                Share(field(&budget, "ratio").parse().unwrap()),
                dur(field(&budget, "window")),
                num(field(&budget, "floor")),
            ],
        ),
        (
            "",
            "`RetryBudget::max_keys`",
            vec![num(field(&budget, "max_hosts"))],
        ),
        (
            "",
            "`generate_idempotency_keys`",
            vec![on_off(field(&retry, "generate_keys"))],
        ),
        ("", "`seed`", vec![]),
        (
            "",
            "`record_url_query`",
            vec![on_off(field(&retry, "url_query"))],
        ),
        (
            "`HedgeLayer`",
            "delay",
            vec![
                Num((field(hedge_delay, "q").parse::<f64>().unwrap() * 100.0).round()),
                dur(field(&hedge, "window")),
                dur(field(hedge_delay, "min")),
                dur(field(hedge_delay, "max")),
                Num(f64::from(courier::retry::hedge::MIN_LATENCIES)),
            ],
        ),
        ("", "`attempts`", vec![num(field(&hedge, "attempts"))]),
        (
            "",
            "`budget`",
            vec![
                Share(field(hedge_budget, "ratio").parse().unwrap()),
                dur(field(hedge_budget, "window")),
                num(field(hedge_budget, "floor")),
            ],
        ),
        ("`TokenBucketRateLimitLayer`", "`mode`", vec![Word("Wait")]),
        ("", "`max_wait`", vec![dur(field(&bucket, "max_wait"))]),
        (
            "",
            "`obey_server_hints`",
            vec![on_off(field(&bucket, "hints"))],
        ),
        (
            "",
            "`max_keys`",
            vec![Num(bucket_layer.store().max_keys() as f64)],
        ),
        (
            "`CircuitBreakerLayer`",
            "`consecutive_failures`",
            vec![num(field(&breaker, "consecutive_failures"))],
        ),
        (
            "",
            "`failure_rate`",
            vec![
                on_off(field(&breaker, "failure_rate")),
                Share(field(preset_rate, "threshold").parse().unwrap()),
                num(field(preset_rate, "min_calls")),
                dur(field(preset_rate, "window")),
            ],
        ),
        (
            "",
            "`open_duration`",
            vec![
                dur(field(&breaker, "open_duration")),
                on_off(field(&breaker, "open_backoff")),
                dur(field(field(preset_breaker, "open_backoff"), "cap")),
                num(field(field(preset_breaker, "open_backoff"), "jitter")),
            ],
        ),
        (
            "",
            "`half_open_trials`",
            vec![
                num(field(&breaker, "half_open_trials")),
                trials,
                majority.clone(),
                majority,
            ],
        ),
        (
            "",
            "`slow_call_threshold`",
            vec![on_off(field(&breaker, "slow_call"))],
        ),
        (
            "",
            "`failing_answers_for`",
            vec![
                Dur(Duration::from_millis(
                    field(&breaker, "answers_for_ms").parse().unwrap(),
                )),
                Dur(Duration::from_millis(
                    field(preset_breaker, "answers_for_ms").parse().unwrap(),
                )),
            ],
        ),
        ("", "`max_keys`", vec![num(field(&breaker, "max_hosts"))]),
        (
            "`AdaptivePacingLayer`",
            "`overload_share`",
            vec![num(field(&pacing, "overload_share"))],
        ),
        (
            "",
            "`min_answers`",
            vec![num(field(&pacing, "min_answers"))],
        ),
        (
            "",
            "`min_rate`",
            vec![
                PerSec(field(&pacing, "min_rate").parse().unwrap()),
                PerSec(field(&pacing, "max_rate").parse().unwrap()),
            ],
        ),
        (
            "",
            "`hold`",
            vec![
                secs(field(&pacing, "hold_ns")),
                secs(field(&pacing, "ramp_ns")),
            ],
        ),
        (
            "",
            "`recover_after`",
            vec![secs(field(&pacing, "recover_ns"))],
        ),
        (
            "",
            "`max_wait`",
            vec![
                dur(field(&pacing, "max_wait")),
                num(field(&pacing, "max_hosts")),
            ],
        ),
        (
            "`ConcurrencyLimitLayer`",
            "limit",
            vec![
                num(field(field(&concurrency, "limit"), "initial")),
                num(field(field(&concurrency, "limit"), "min")),
                num(field(field(&concurrency, "limit"), "max")),
                num(field(field(preset_concurrency, "config"), "limit")
                    .trim_start_matches("Fixed(")
                    .trim_end_matches(')')),
            ],
        ),
        (
            "",
            "`max_queue`",
            vec![
                num(field(&concurrency, "max_queue")),
                dur(field(&concurrency, "max_wait")),
            ],
        ),
        (
            "",
            "`release_at_headers`",
            vec![on_off(field(&concurrency, "release_at_headers"))],
        ),
        ("", "`max_keys`", vec![num(field(&concurrency, "max_keys"))]),
        (
            "`EtagCacheLayer`",
            "`capacity`",
            vec![
                Bytes(field(&cache, "capacity").parse().unwrap()),
                Bytes(field(&cache, "max_entry_bytes").parse().unwrap()),
            ],
        ),
        (
            "",
            "`always_revalidate`",
            vec![on_off(field(&cache, "always_revalidate"))],
        ),
        ("", "`stale_if_error`", vec![Word("none")]),
        (
            "",
            "`credential_headers`",
            vec![Word("Authorization"), Word("Cookie")],
        ),
        ("", "`statuses`", members(field(&cache, "statuses"))),
        (
            "",
            "`single_flight`",
            vec![dur(field(&cache, "single_flight")
                .trim_start_matches("Some(")
                .trim_end_matches(')'))],
        ),
        ("", "`store`", vec![]),
        (
            "",
            "stale-while-revalidate",
            vec![Dur(courier::cache::BACKGROUND_REVALIDATION_TIMEOUT)],
        ),
        (
            "`DeadlineLayer`",
            "`propagate(header)`",
            vec![on_off(field(&deadline, "header"))],
        ),
        (
            "",
            "`headers_bounded_below`",
            vec![on_off(field(&deadline, "headers_bounded_below"))],
        ),
        (
            "`AttemptTimeoutLayer`",
            "`through_body`",
            vec![on_off(field(&attempt, "through_body"))],
        ),
        (
            "`DeadlineScopeLayer`",
            "`header`",
            vec![dur(field(&scope, "max")), Word("none")],
        ),
        (
            "transports",
            "connect timeout",
            vec![Dur(courier::transport::CONNECT_TIMEOUT)],
        ),
        ("", "`User-Agent`", vec![]),
    ];

    // Every check has its row, and says what the row says.
    let rows = table();
    let mut layer = "";
    let mut checked = 0;
    for (l, option, code) in &expected {
        if !l.is_empty() {
            layer = l;
        }
        let row = rows
            .iter()
            .find(|(rl, ro, _)| rl.starts_with(layer) && ro.starts_with(option))
            .unwrap_or_else(|| panic!("the README has no row for {layer} {option}"));
        assert_eq!(
            &tokens(&row.2),
            code,
            "{layer} {option}: the README says {:?}",
            row.2
        );
        checked += 1;
    }
    // The deadline scope's header, the User-Agent and the stale-if-error defaults are text.
    let text = |layer: &str, option: &str| {
        &rows
            .iter()
            .find(|(rl, ro, _)| rl.starts_with(layer) && ro.starts_with(option))
            .unwrap()
            .2
    };
    assert!(
        text("`DeadlineScopeLayer`", "`header`")
            .starts_with(&format!("`{}`", field(&scope, "header").trim_matches('"')))
    );
    assert!(text("transports", "`User-Agent`").contains("`courier/<version>`"));
    assert!(courier::transport::DEFAULT_USER_AGENT.starts_with("courier/"));
    assert_eq!(field(&cache, "stale_if_error"), "None");
    assert_eq!(field(&scope, "default_budget"), "None");
    assert_eq!(
        field(&cache, "credential_headers"),
        "[\"authorization\", \"cookie\"]"
    );
    assert_eq!(field(&bucket, "mode"), "Wait");

    // And every row of the table is checked.
    assert_eq!(
        checked,
        rows.iter()
            .filter(|(_, o, _)| !o.starts_with("keys:") && !o.starts_with("`new(rate"))
            .count(),
        "a row of the README's table is not checked here: add it"
    );
}

#[test]
fn the_tokenizer_reads_the_tables_forms() {
    assert_eq!(
        tokens("30 s / off (the preset: doubling to 300 s, jitter 0.5)"),
        vec![
            Dur(Duration::from_secs(30)),
            Word("off"),
            Dur(Duration::from_secs(300)),
            Num(0.5)
        ]
    );
    assert_eq!(
        tokens("1/s / 10 000/s"),
        vec![PerSec(1.0), PerSec(10_000.0)]
    );
    assert_eq!(
        tokens("64 MiB / 1 MiB"),
        vec![Bytes(64 << 20), Bytes(1 << 20)]
    );
    assert_eq!(
        tokens("10 % per host over 10 s, floor 10 retries per window"),
        vec![Share(0.1), Dur(Duration::from_secs(10)), Num(10.0)]
    );
    assert_eq!(
        tokens("1 (the preset: 5; 3 successes close)"),
        vec![Num(1.0), Num(5.0), Num(3.0)]
    );
    assert_eq!(tokens("3.05 s"), vec![Dur(Duration::from_millis(3050))]);
}

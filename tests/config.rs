//! `courier::config` read from files: every example of the docs parses, round-trips and
//! builds; each bad file is refused with the path of the bad field and its value; random
//! mutations of a valid file never panic, and a file that does not validate is never applied,
//! not even in part; environment overrides.

use courier::CourierLayer;
use courier::config::{Config, ConfigError, OrOff, RateSpec};
use proptest::prelude::*;
use std::time::Duration;

/// The example of `courier::config`'s module docs, word for word (checked against them by
/// [`the_module_docs_example_is_this_one`]).
const DOCS_EXAMPLE: &str = r#"[default]
deadline = "10s"
attempt_timeout = "2s"
retry = { attempts = 3, max_wait = "5s" }

[[routes]]
name = "internal"
match = { host = "*.internal.example" }
deadline = "200ms"
retry = { attempts = 2 }

[[routes]]
name = "partner"
match = { scheme = "https", host = "api.partner.example" }
deadline = "30s"
rate_limit = { rate = "25/s", burst = 25 }

[[routes]]
name = "payments"
match = { host = "pay.example", path_prefix = "/payments", methods = ["POST"] }
retry = { attempts = 1 }
breaker = { key = "route" }
"#;

/// Every section and every field, each switched on or off somewhere.
const EVERY_FIELD: &str = r#"
[default]
deadline = "1m"
attempt_timeout = "5s"
pacing = true
cache = true

[default.retry]
attempts = 4
statuses = [408, 429, "500-504"]
retry_safe_paths = ["/search", "/users.v1.Users/GetUser"]
base = "250ms"
max_wait = "30s"
budget = 0.2

[default.breaker]
key = "host"
consecutive_failures = 7
failure_rate = 0.6
min_calls = 50
window = "1m"
failing_answers_for = "45s"
open_for = "10s"
max_open_for = "10m"
half_open_trials = 3

[default.concurrency]
limit = 200

[default.hedge]
percentile = 90
attempts = 3
budget = 0.05

[[routes]]
name = "reports"
match = { scheme = "http", host = "reports.example", port = 8080, methods = ["GET", "head"], path_prefix = "/v1/" }
deadline = false
attempt_timeout = false
retry = false
breaker = { key = "route", consecutive_failures = 2 }
pacing = false
cache = false
concurrency = { adaptive = true }
hedge = false

[[routes]]
name = "quota"
match = { host = "*.quota.example" }
rate_limit = { rate = "5/100ms", burst = 10, mode = "reject", max_wait = "2s" }
retry = { budget = false, statuses = [503] }
concurrency = false
hedge = { delay = "50ms", non_fatal_grpc_codes = ["UNAVAILABLE"] }

[[routes]]
match = { grpc_service = "users.v1.Users", grpc_method = "GetUser" }
deadline = "300ms"
retry = { attempts = 5, base = "50ms" }
breaker = false
rate_limit = false
"#;

/// A gRPC service config's `methodConfig`, written as routes.
const GRPC: &str = r#"
[default]
deadline = "5s"

[[routes]]
name = "users"
match = { grpc_service = "users.v1.Users" }
deadline = "1s"
retry = { attempts = 4, base = "100ms", retry_safe_paths = ["/users.v1.Users/ListUsers"] }

[[routes]]
name = "users-get"
match = { grpc_service = "users.v1.Users", grpc_method = "GetUser" }
deadline = "200ms"
hedge = { delay = "20ms", attempts = 3, non_fatal_grpc_codes = ["UNAVAILABLE", "INTERNAL"] }

[[routes]]
name = "billing"
match = { scheme = "https", host = "billing.internal", port = 443, grpc_service = "billing.v2.Billing" }
breaker = { key = "route", failure_rate = 0.25, min_calls = 20, window = "10s" }
rate_limit = { rate = "600/m", burst = 20 }
"#;

/// Three upstreams, as JSON.
const JSON: &str = r#"{
  "default": {
    "deadline": "10s",
    "retry": { "attempts": 3, "statuses": [429, "500-599"], "budget": 0.1 },
    "breaker": { "consecutive_failures": 5 }
  },
  "routes": [
    {
      "name": "internal",
      "match": { "host": "*.internal.example" },
      "deadline": "200ms",
      "retry": { "attempts": 2 }
    },
    {
      "name": "partner",
      "match": { "scheme": "https", "host": "api.partner.example" },
      "deadline": "30s",
      "rate_limit": { "rate": "25/s", "burst": 25, "mode": "wait", "max_wait": "10s" },
      "cache": false
    },
    {
      "name": "payments",
      "match": { "host": "pay.example", "path_prefix": "/payments", "methods": ["POST"] },
      "retry": false,
      "breaker": { "key": "route" },
      "concurrency": { "limit": 16 }
    }
  ]
}"#;

fn from_toml(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).unwrap_or_else(|e| panic!("not TOML: {e}\n{text}"));
    Config::from_deserializer(de)
}

fn from_json(text: &str) -> Result<Config, ConfigError> {
    Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))
}

/// Each bad field of a TOML file that must be refused, one `path: message` line each.
///
/// A message is compared by its last line: the toml crate writes the line of the file it
/// refers to (and where in it) before the message of an error it met while reading.
fn toml_error(text: &str) -> String {
    let err = match from_toml(text) {
        Ok(config) => panic!("accepted: {config:?}\n{text}"),
        Err(e) => e,
    };
    // What does not validate does not build either.
    if let Ok(config) = toml::from_str::<Config>(text) {
        assert!(CourierLayer::from_config(&config).is_err(), "{text}");
    }
    assert!(
        err.to_string().starts_with(&err.errors()[0].to_string()),
        "{err}"
    );
    err.errors()
        .iter()
        .map(|field| {
            let message = field.message.lines().rev().find(|l| !l.trim().is_empty());
            let line = format!("{}: {}", field.path, message.unwrap_or_default());
            line.trim_start_matches(": ").to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// === the examples ===

#[test]
fn the_module_docs_example_is_this_one() {
    let source = include_str!("../src/config/mod.rs");
    let mut lines = source
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```toml")
        .skip(1);
    let block: String = lines
        .by_ref()
        .take_while(|l| *l != "```")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        block, DOCS_EXAMPLE,
        "the docs' example drifted from this test's"
    );
    assert!(
        !lines.any(|l| l == "```toml"),
        "the module docs hold a second TOML example: check it here too"
    );
}

#[test]
fn every_example_round_trips_and_builds() {
    for (name, text) in [
        ("docs", DOCS_EXAMPLE),
        ("every field", EVERY_FIELD),
        ("grpc", GRPC),
    ] {
        let config = from_toml(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let written = toml::to_string(&config).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = from_toml(&written).unwrap_or_else(|e| panic!("{name}: {e}\n{written}"));
        assert_eq!(again, config, "{name} through TOML:\n{written}");
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            from_json(&json).unwrap(),
            config,
            "{name} through JSON: {json}"
        );
        CourierLayer::from_config(&config).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (_, handle) = CourierLayer::from_config_reloadable(&config).unwrap();
        assert_eq!(handle.config(), config);
    }
    let config = from_json(JSON).unwrap();
    let written = serde_json::to_string_pretty(&config).unwrap();
    assert_eq!(from_json(&written).unwrap(), config, "{written}");
    let through_toml = toml::to_string(&config).unwrap();
    assert_eq!(from_toml(&through_toml).unwrap(), config, "{through_toml}");
    CourierLayer::from_config(&config).unwrap();
}

#[test]
fn the_examples_read_as_written() {
    let docs = from_toml(DOCS_EXAMPLE).unwrap();
    assert_eq!(docs.routes.len(), 3);
    let partner = &docs.routes[1];
    assert_eq!(partner.name.as_deref(), Some("partner"));
    let Some(OrOff::On(limit)) = &partner.rate_limit else {
        panic!("{partner:?}");
    };
    assert_eq!(limit.rate, Some(RateSpec::new(25, Duration::from_secs(1))));
    assert_eq!(limit.burst, Some(25));

    let every = from_toml(EVERY_FIELD).unwrap();
    let reports = &every.routes[0];
    assert_eq!(reports.retry, Some(OrOff::Off));
    assert_eq!(reports.deadline, Some(OrOff::Off));
    assert_eq!(reports.cache, Some(false));
    let Some(OrOff::On(quota)) = &every.routes[1].rate_limit else {
        panic!("{:?}", every.routes[1]);
    };
    assert_eq!(
        quota.rate,
        Some(RateSpec::new(5, Duration::from_millis(100)))
    );

    // The JSON file and its TOML twin are one configuration.
    let json = from_json(JSON).unwrap();
    assert_eq!(json.routes[2].retry, Some(OrOff::Off));
    assert_eq!(json.routes[0], docs.routes[0]);
}

// === bad files ===

#[test]
fn bad_files_name_the_field_and_its_value() {
    let cases: &[(&str, &str)] = &[
        // Unknown keys, at each level.
        (
            "colour = 1",
            "colour: unknown field `colour`, expected `default` or `routes`",
        ),
        (
            "[default]\nretries = 3",
            "default.retries: unknown field `retries`, expected one of `name`, `match`, `deadline`, \
             `attempt_timeout`, `retry`, `rate_limit`, `breaker`, `pacing`, `cache`, \
             `concurrency`, `hedge`",
        ),
        (
            "[[routes]]\nmatch = {}\ntimeout = \"1s\"",
            "routes[0].timeout: unknown field `timeout`, expected one of `name`, `match`, `deadline`, \
             `attempt_timeout`, `retry`, `rate_limit`, `breaker`, `pacing`, `cache`, \
             `concurrency`, `hedge`",
        ),
        (
            "[default.retry]\nmax_attempts = 3",
            "default.retry.max_attempts: unknown field `max_attempts`, expected one of `attempts`, \
             `statuses`, `retry_safe_paths`, `base`, `max_wait`, `budget`",
        ),
        (
            "[[routes]]\nmatch = { hostname = \"a.example\" }",
            "routes[0].match.hostname: unknown field `hostname`, expected one of `scheme`, `host`, \
             `port`, `methods`, `path_prefix`, `grpc_service`, `grpc_method`",
        ),
        // Wrong types.
        (
            "[default]\nretry = { attempts = \"three\" }",
            "default.retry.attempts: invalid type: string \"three\", expected u32",
        ),
        (
            "[default]\ncache = \"no\"",
            "default.cache: invalid type: string \"no\", expected a boolean",
        ),
        (
            "routes = { name = \"x\" }",
            "routes: invalid type: map, expected a sequence",
        ),
        // Durations.
        (
            "[default]\ndeadline = \"30\"",
            "default.deadline: \"30\" has no unit: write \"250ms\", \"30s\", \"5m\" or \"1h\"",
        ),
        (
            "[default]\ndeadline = \"1.5s\"",
            "default.deadline: \"1.5s\" has an unknown unit \".5s\": use ms, s, m or h",
        ),
        (
            "[default]\nattempt_timeout = \"30 sec\"",
            "default.attempt_timeout: \"30 sec\" has an unknown unit \" sec\": use ms, s, m or h",
        ),
        (
            "[default]\ndeadline = 30",
            "default.deadline: invalid type: integer `30`, expected a duration such as \"250ms\" \
             or \"30s\"",
        ),
        (
            "[default]\ndeadline = \"0s\"",
            "default.deadline: must be at least 1ms, got 0s",
        ),
        // Rates.
        (
            "[default]\nrate_limit = { rate = \"25\" }",
            "default.rate_limit.rate: \"25\" is not a rate: write so many per period, \"25/s\", \
             \"600/m\"",
        ),
        (
            "[default]\nrate_limit = { rate = \"25/parsec\" }",
            "default.rate_limit.rate: \"1parsec\" has an unknown unit \"parsec\": use ms, s, m \
             or h",
        ),
        (
            "[default]\nrate_limit = { rate = \"0/s\" }",
            "default.rate_limit.rate: must be at least 1 per period, got 0 (got 0/s)",
        ),
        // Statuses.
        (
            "[default]\nretry = { statuses = [600] }",
            "default.retry.statuses[0]: must be within 400-599 (a success or a redirect is an \
             answer), got 600",
        ),
        (
            "[default]\nretry = { statuses = [\"599-500\"] }",
            "default.retry.statuses[0]: the range 599-500 runs backwards",
        ),
        (
            "[default]\nretry = { statuses = [503, 200] }",
            "default.retry.statuses[1]: must be within 400-599 (a success or a redirect is an \
             answer), got 200",
        ),
        (
            "[default]\nretry = { statuses = [\"5xx\"] }",
            "default.retry.statuses[0]: \"5xx\" is not a status or a range: write 503 or \
             \"500-599\"",
        ),
        // `true` for a section.
        (
            "[default]\nretry = true",
            "default.retry: true says nothing: give the settings, or false for off",
        ),
        // Matches.
        (
            "[[routes]]\nname = \"nowhere\"\ndeadline = \"1s\"",
            "routes[0].match: a route needs a match (an empty one takes every call)",
        ),
        (
            "[default]\nmatch = { host = \"a.example\" }",
            "default.match: the default policy takes every call no route takes: give the match \
             to a route",
        ),
        (
            "[[routes]]\nmatch = { host = \"ex ample\" }\n[[routes]]\nmatch = { host = \"*.\" }",
            "routes[0].match.host: must be a host (api.example) or every subdomain of one \
             (*.example), got \"ex ample\"\nroutes[1].match.host: must be a host \
             (api.example) or every subdomain of one (*.example), got \"*.\"",
        ),
        (
            "[[routes]]\nmatch = { methods = [\"GET\", \"GE T\"] }",
            "routes[0].match.methods[1]: is not a method, got \"GE T\"",
        ),
        (
            "[[routes]]\nmatch = { path_prefix = \"payments\" }",
            "routes[0].match.path_prefix: must start with '/', got \"payments\"",
        ),
        (
            "[[routes]]\nmatch = { grpc_method = \"GetUser\" }",
            "routes[0].match.grpc_method: names a method of no service: give grpc_service too \
             (for \"GetUser\")",
        ),
        (
            "[[routes]]\nmatch = { scheme = \"ftp\" }",
            "routes[0].match.scheme: must be \"http\" or \"https\", got \"ftp\"",
        ),
        (
            "[[routes]]\nmatch = { port = 0 }",
            "routes[0].match.port: must be 1 to 65535, got 0",
        ),
        (
            "[[routes]]\nmatch = { port = 70000 }",
            "routes[0].match.port: invalid value: integer `70000`, expected u16",
        ),
        // Duplicate routes.
        (
            "[[routes]]\nname = \"a\"\nmatch = { host = \"a.example\" }\n\
             [[routes]]\nname = \"a\"\nmatch = { host = \"b.example\" }",
            "routes[1].name: the name \"a\" is given to an earlier route too",
        ),
        (
            "[[routes]]\nmatch = { host = \"a.example\" }\n[[routes]]\nmatch = { host = \"a.example\" }",
            "routes[1].match: an earlier route has the same match and no name: it takes every \
             call this one would",
        ),
        // Breaker.
        (
            "[default]\nbreaker = { failure_rate = 0.0 }",
            "default.breaker.failure_rate: invalid setting: a failure rate threshold must be in \
             (0, 1], got 0; use 0.5 for half the calls",
        ),
        (
            "[default]\nbreaker = { failure_rate = 1.5 }",
            "default.breaker.failure_rate: invalid setting: a failure rate threshold must be in \
             (0, 1], got 1.5; use 0.5 for half the calls",
        ),
        (
            "[default]\nbreaker = { key = \"path\" }",
            "default.breaker.key: must be \"host\" or \"route\", got \"path\"",
        ),
        (
            "[default]\nbreaker = { open_for = \"1m\", max_open_for = \"30s\" }",
            "default.breaker.max_open_for: must be at least open_for (1m), got 30s",
        ),
        // Concurrency.
        (
            "[default]\nconcurrency = { limit = 0 }",
            "default.concurrency.limit: must be at least 1, got 0",
        ),
        (
            "[default]\nconcurrency = { limit = 10, adaptive = true }",
            "default.concurrency.adaptive: a fixed limit and a learned one exclude each other: \
             give limit or adaptive = true",
        ),
        // Rate limit.
        (
            "[default]\nrate_limit = { burst = 5 }",
            "default.rate_limit.rate: is required where the rate limit is on: \"25/s\"",
        ),
        (
            "[default]\nrate_limit = { rate = \"5/s\", burst = 0 }",
            "default.rate_limit.burst: must be at least 1, got 0",
        ),
        (
            "[default]\nrate_limit = { rate = \"5/s\", mode = \"later\" }",
            "default.rate_limit.mode: must be \"wait\" or \"reject\", got \"later\"",
        ),
        // Retry.
        (
            "[default]\nretry = { budget = 2.0 }",
            "default.retry.budget: must be a share from 0 to 1 (or false), got 2",
        ),
        (
            "[[routes]]\nmatch = {}\n[[routes]]\nmatch = { host = \"a.example\" }\n\
             [[routes]]\nmatch = { host = \"b.example\" }\nretry = { attempts = 0 }",
            "routes[2].retry.attempts: must be at least 1, got 0",
        ),
        (
            "[default]\nretry = { attempts = 101 }",
            "default.retry.attempts: must be at most 100, got 101",
        ),
        (
            "[default]\nretry = { retry_safe_paths = [\"search\"] }",
            "default.retry.retry_safe_paths[0]: must start with '/', got \"search\"",
        ),
        (
            "[default]\nhedge = { delay = \"50ms\", percentile = 95 }",
            "default.hedge.percentile: a fixed delay and a learned one exclude each other: give \
             delay or percentile",
        ),
        (
            "[default]\nhedge = { percentile = 100 }",
            "default.hedge.percentile: must be above 0 and below 100, got 100",
        ),
        (
            "[default]\nhedge = { delay = \"0ms\" }",
            "default.hedge.delay: must be at least 1ms, got 0s",
        ),
        (
            "[default]\nhedge = { delay = \"2h\" }",
            "default.hedge.delay: must be at most 1h, got 2h",
        ),
        (
            "[default]\nhedge = { attempts = 1 }",
            "default.hedge.attempts: must be at least 2 (the first and a hedge; hedge = false \
             for none), got 1",
        ),
        (
            "[default]\nhedge = { attempts = 6 }",
            "default.hedge.attempts: must be at most 5, got 6",
        ),
        (
            "[default]\nhedge = { budget = 1.5 }",
            "default.hedge.budget: must be a share of the requests, 0 to 1, got 1.5",
        ),
        (
            "[default]\nhedge = { non_fatal_grpc_codes = [\"UNAVAILBLE\", \"OK\"] }",
            "default.hedge.non_fatal_grpc_codes[0]: must name a gRPC code other than OK, such as \
             \"UNAVAILABLE\", got \"UNAVAILBLE\"\ndefault.hedge.non_fatal_grpc_codes[1]: must \
             name a gRPC code other than OK, such as \"UNAVAILABLE\", got \"OK\"",
        ),
        (
            "[default]\nhedge = true",
            "default.hedge: true says nothing: give the settings, or false for off",
        ),
        // Every bad field at once, in the order of the file.
        (
            "[default]\ndeadline = \"0ms\"\n[[routes]]\nmatch = { host = \"a.example\" }\n\
             retry = { attempts = 0 }\nrate_limit = { rate = \"1/s\", burst = 0 }",
            "default.deadline: must be at least 1ms, got 0s\nroutes[0].deadline: must be at \
             least 1ms, got 0s\nroutes[0].retry.attempts: must be at least 1, got 0\n\
             routes[0].rate_limit.burst: must be at least 1, got 0",
        ),
    ];
    assert!(cases.len() >= 20);
    let mut wrong = Vec::new();
    for (text, want) in cases {
        let got = toml_error(text);
        if got != *want {
            wrong.push(format!("file:\n{text}\nwant: {want}\ngot:  {got}\n"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn errors_list_each_bad_field_with_its_path() {
    let err = from_toml("[[routes]]\nmatch = { path_prefix = \"x\" }\nretry = { attempts = 0 }\n")
        .unwrap_err();
    let paths: Vec<&str> = err.errors().iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["routes[0].match.path_prefix", "routes[0].retry.attempts"]
    );
}

// === environment overrides ===

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn environment_overrides_apply_over_the_file() {
    let config = from_toml(DOCS_EXAMPLE).unwrap();
    let over = config
        .env_overrides(vars(&[
            ("COURIER_DEFAULT__RETRY__ATTEMPTS", "5"),
            ("COURIER_ROUTES__0__RATE_LIMIT__RATE", "10/s"),
            ("COURIER_ROUTES__2__BREAKER", "false"),
            ("PATH", "/usr/bin"),
            ("COURIER", "ignored: no prefix"),
            ("XCOURIER_DEFAULT__DEADLINE", "ignored: no prefix"),
            // Other tools' variables, courier's own included.
            ("COURIER_REQUIRE_REDIS", "1"),
            ("COURIER_BENCH_CALLS", "5000"),
        ]))
        .unwrap();
    let Some(OrOff::On(retry)) = &over.default.retry else {
        panic!("{over:?}");
    };
    assert_eq!(retry.attempts, Some(5));
    // The rest of the section is the file's.
    assert_eq!(retry.max_wait, Some(Duration::from_secs(5).into()));
    let Some(OrOff::On(limit)) = &over.routes[0].rate_limit else {
        panic!("{over:?}");
    };
    assert_eq!(limit.rate, Some(RateSpec::new(10, Duration::from_secs(1))));
    assert_eq!(over.routes[2].breaker, Some(OrOff::Off));
    // Nothing else moved.
    let mut back = over.clone();
    back.default.retry = config.default.retry.clone();
    back.routes[0].rate_limit = None;
    back.routes[2].breaker = config.routes[2].breaker.clone();
    assert_eq!(back, config);
    CourierLayer::from_config(&over).unwrap();

    // No variable with the prefix: the configuration as it was.
    assert_eq!(
        config.env_overrides(vars(&[("HOME", "/root")])).unwrap(),
        config
    );
}

#[test]
fn bad_environment_overrides_name_the_variable_or_the_field() {
    let config = from_toml(DOCS_EXAMPLE).unwrap();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("COURIER_ROUTES__3__DEADLINE", "1s")],
            "COURIER_ROUTES__3__DEADLINE: there is no route 3 (the file has 3)",
        ),
        (
            &[("COURIER_ROUTES__FIRST__DEADLINE", "1s")],
            "COURIER_ROUTES__FIRST__DEADLINE: \"first\" is not a route's index",
        ),
        (
            &[("COURIER_DEFAULT____DEADLINE", "1s")],
            "COURIER_DEFAULT____DEADLINE: an empty part in the name: join the parts with two \
             underscores",
        ),
        (
            &[("COURIER_DEFAULT__DEADLINE__SECONDS", "1")],
            "COURIER_DEFAULT__DEADLINE__SECONDS: \"seconds\" is inside a setting that is not a \
             table",
        ),
        (
            &[("COURIER_ROUTES__1__RETRY__ATTEMPTS", "0")],
            "routes[1].retry.attempts: must be at least 1, got 0 (set by \
             COURIER_ROUTES__1__RETRY__ATTEMPTS)",
        ),
        (
            &[("COURIER_DEFAULT__RETRY__ATTEMPTS", "many")],
            "default.retry.attempts: invalid type: string \"many\", expected u32 (set by \
             COURIER_DEFAULT__RETRY__ATTEMPTS)",
        ),
        (
            &[("COURIER_DEFAULT__DEADLINE", "30 sec")],
            "default.deadline: \"30 sec\" has an unknown unit \" sec\": use ms, s, m or h (set \
             by COURIER_DEFAULT__DEADLINE)",
        ),
        (
            &[("COURIER_DEFAULT__TIMEOUT", "1s")],
            "default.timeout: unknown field `timeout`, expected one of `name`, `match`, \
             `deadline`, `attempt_timeout`, `retry`, `rate_limit`, `breaker`, `pacing`, `cache`, \
             `concurrency`, `hedge` (set by COURIER_DEFAULT__TIMEOUT)",
        ),
        (
            &[("COURIER_DEFAULT__RETRY", r#"{"attempts": 0}"#)],
            // The route without a retry of its own inherits it: no variable named that field.
            "default.retry.attempts: must be at least 1, got 0 (set by COURIER_DEFAULT__RETRY)\n\
             routes[1].retry.attempts: must be at least 1, got 0 (after the environment \
             overrides)",
        ),
        (
            // The table set whole last: its value is the one refused.
            &[
                ("COURIER_DEFAULT__RETRY__ATTEMPTS", "2"),
                ("COURIER_DEFAULT__RETRY", r#"{"attempts": 0}"#),
            ],
            "default.retry.attempts: must be at least 1, got 0 (set by COURIER_DEFAULT__RETRY)\n\
             routes[1].retry.attempts: must be at least 1, got 0 (after the environment \
             overrides)",
        ),
    ];
    let mut wrong = Vec::new();
    for (pairs, want) in cases {
        match config.env_overrides(vars(pairs)) {
            Ok(c) => wrong.push(format!("{pairs:?}: accepted {c:?}")),
            Err(e) if e.to_string() != *want => {
                wrong.push(format!("{pairs:?}\nwant: {want}\ngot:  {e}\n"));
            }
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The field's path is the error's own, as a file's is.
    let err = config
        .env_overrides(vars(&[("COURIER_DEFAULT__RETRY__ATTEMPTS", "many")]))
        .unwrap_err();
    assert_eq!(err.errors()[0].path, "default.retry.attempts");
}

// === random mutations ===

/// What a mutation does to one line of [`EVERY_FIELD`].
#[derive(Debug, Clone)]
enum Mutation {
    /// The value after `=` becomes this.
    Value(String),
    /// The line goes.
    Delete,
    /// An unknown key is added after the line.
    Unknown(String),
    /// The text ends at this share of its length.
    Truncate(f64),
}

fn a_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9/ .]{0,8}".prop_map(|s| format!("{s:?}")),
        any::<i64>().prop_map(|n| n.to_string()),
        (0u32..1000).prop_map(|n| n.to_string()),
        (-2.0f64..3.0).prop_map(|f| format!("{f:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("\"0s\"".to_owned()),
        Just("\"0/s\"".to_owned()),
        Just("[600, \"599-500\"]".to_owned()),
        Just("{}".to_owned()),
        Just("[]".to_owned()),
    ]
}

fn a_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => a_value().prop_map(Mutation::Value),
        1 => Just(Mutation::Delete),
        1 => "[a-z_]{1,10}".prop_map(Mutation::Unknown),
        1 => (0.0f64..1.0).prop_map(Mutation::Truncate),
    ]
}

fn mutate(text: &str, mutations: &[(usize, Mutation)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cut = None;
    for (at, mutation) in mutations {
        if lines.is_empty() {
            break;
        }
        let i = at % lines.len();
        match mutation {
            Mutation::Value(v) => {
                if let Some((key, _)) = lines[i].split_once(" = ") {
                    lines[i] = format!("{key} = {v}");
                }
            }
            Mutation::Delete => {
                lines.remove(i);
            }
            Mutation::Unknown(key) => {
                let line = if lines[i].contains('{') {
                    lines[i].replacen('{', &format!("{{ {key} = 1,"), 1)
                } else {
                    format!("{key} = 1")
                };
                lines.insert(i + 1, line);
            }
            Mutation::Truncate(share) => cut = Some(*share),
        }
    }
    let mut out = lines.join("\n");
    if let Some(share) = cut {
        let mut end = (out.len() as f64 * share) as usize;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_mutated_file_is_refused_whole_or_builds(
        mutations in proptest::collection::vec((any::<usize>(), a_mutation()), 1..4)
    ) {
        let original = from_toml(EVERY_FIELD).unwrap();
        let (_layer, handle) = CourierLayer::from_config_reloadable(&original).unwrap();
        let text = mutate(EVERY_FIELD, &mutations);
        let Ok(de) = toml::Deserializer::parse(&text) else {
            // Not TOML any more: nothing to read.
            return Ok(());
        };
        match Config::from_deserializer(de) {
            Ok(config) => {
                prop_assert!(CourierLayer::from_config(&config).is_ok(), "{}", text);
                prop_assert!(handle.reload(&config).is_ok(), "{}", text);
                prop_assert_eq!(handle.config(), config);
            }
            Err(e) => {
                prop_assert!(!e.errors().is_empty());
                for field in e.errors() {
                    prop_assert!(!field.message.is_empty(), "{}", e);
                }
                if let Ok(config) = toml::from_str::<Config>(&text) {
                    // It reads, but does not validate: refused whole.
                    prop_assert!(config.validate().is_err(), "{}", text);
                    prop_assert!(CourierLayer::from_config(&config).is_err(), "{}", text);
                    prop_assert!(handle.reload(&config).is_err(), "{}", text);
                    prop_assert_eq!(handle.config(), original.clone());
                    prop_assert_eq!(handle.reloads(), 0);
                }
            }
        }
    }
}

#[test]
fn the_readme_example_file_builds_a_preset_with_its_three_rules() {
    let readme = include_str!("../README.md");
    let section = readme
        .split("## One client, many upstreams")
        .nth(1)
        .expect("the README has the section");
    let text = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has a TOML block");
    let config = from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.routes.len(), 3);
    assert!(config.routes[0].hedge.is_some(), "{text}");
    courier::CourierLayer::from_config(&config).unwrap();
}

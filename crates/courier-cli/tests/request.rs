//! `courier request`: exit codes, one JSON line per attempt, options reaching the stack and the
//! server, and `--dry-run`. Every request goes to a fault server on 127.0.0.1.

mod common;

use std::time::Duration;

use common::{TempFile, courier, courier_with_input, json_lines};
use courier_faultserver::{FaultServer, Step};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn server_with(name: &str, plan: Vec<Step>) -> (FaultServer, String) {
    let server = FaultServer::start().await.expect("fault server starts");
    server.set_plan(name, plan);
    let url = server.url_for(&format!("/s/{name}"));
    (server, url)
}

fn field<'a>(lines: &'a [serde_json::Value], name: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().map(|l| &l[name]).collect()
}

#[tokio::test]
async fn a_200_prints_the_body_on_stdout_and_exits_0() {
    let (server, url) = server_with("ok", vec![Step::ok().body("hello, courier")]).await;
    let run = courier(&["request", "GET", &format!("{url}?token=s3cret")]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "hello, courier");
    let lines = run.attempt_lines();
    assert_eq!(lines.len(), 1, "{run:?}");
    let line = &lines[0];
    assert_eq!(line["attempt"], 1);
    assert_eq!(line["method"], "GET");
    assert_eq!(line["path"], "/s/ok");
    assert_eq!(line["outcome"], "200");
    assert_eq!(line["decision"], "stop");
    assert_eq!(line["reason"], "final_status");
    assert!(line["elapsed_ms"].is_u64());
    assert!(
        !run.stderr.contains("s3cret"),
        "the query is never logged: {}",
        run.stderr
    );
    assert!(run.messages().is_empty(), "{run:?}");
    assert_eq!(server.hits("ok").len(), 1);
}

#[tokio::test]
async fn a_503_after_every_retry_exits_1_with_one_line_per_attempt() {
    let (server, url) = server_with("down", vec![Step::status(503).times(5)]).await;
    let run = courier(&["request", "GET", &url, "--seed", "1"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(server.hits("down").len(), 3, "2 retries by default");
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "attempt"), [1, 2, 3]);
    assert_eq!(field(&lines, "outcome"), ["503", "503", "503"]);
    assert_eq!(field(&lines, "decision"), ["retry", "retry", "stop"]);
    assert_eq!(
        field(&lines, "reason"),
        ["retryable_status", "retryable_status", "attempts_exhausted"]
    );
    assert_eq!(field(&lines, "wait_source"), ["backoff", "backoff", "none"]);
    // A bare 503: backoff from the overload base, 2 s.
    assert!(
        lines[0]["wait_ms"].as_u64().unwrap() <= 2000,
        "first ceiling"
    );
    assert!(
        lines[1]["wait_ms"].as_u64().unwrap() <= 4000,
        "second ceiling"
    );
    let messages = run.messages();
    assert_eq!(messages.len(), 1, "{run:?}");
    assert!(
        messages[0].starts_with("error: the server answered 503 Service Unavailable"),
        "{messages:?}"
    );
    assert!(messages[0].contains("3 attempts"), "{messages:?}");
    assert!(messages[0].contains("attempts_exhausted"), "{messages:?}");
}

#[tokio::test]
async fn retries_count_after_the_first_attempt() {
    let server = FaultServer::start().await.unwrap();
    for (retries, want) in [("0", 1), ("1", 2), ("3", 4)] {
        let name = format!("retries-{retries}");
        server.set_plan(&name, vec![Step::status(500).times(10)]);
        let url = server.url_for(&format!("/s/{name}"));
        let run = courier(&["request", "GET", &url, "--retries", retries, "--seed", "7"]).await;
        assert_eq!(run.code, 1, "{run:?}");
        assert_eq!(server.hits(&name).len(), want, "--retries {retries}");
        assert_eq!(run.attempt_lines().len(), want);
    }
}

#[tokio::test]
async fn a_refused_connection_exits_1_after_retrying() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("http://127.0.0.1:{port}/x");
    let run = courier(&["request", "POST", &url, "--retries", "1", "--seed", "3"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "outcome"), ["connect", "connect"]);
    // Nothing was sent, so even a POST without a key is tried again.
    assert_eq!(
        field(&lines, "reason"),
        ["retryable_failure", "attempts_exhausted"]
    );
    let messages = run.messages();
    assert_eq!(messages.len(), 1, "{run:?}");
    assert!(
        messages[0].starts_with("error: connect failure"),
        "{messages:?}"
    );
    assert!(run.stdout.is_empty());
}

#[tokio::test]
async fn usage_errors_exit_2_with_a_message_and_send_nothing() {
    let (server, url) = server_with("usage", vec![]).await;
    let u = url.as_str();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["request"], "required"),
        (vec!["request", "GET"], "required"),
        (vec!["request", "GE T", u], "method"),
        (vec!["request", "GET", "not a url"], "absolute URL"),
        (vec!["request", "GET", "/s/usage"], "absolute URL"),
        (
            vec!["request", "GET", "ftp://127.0.0.1/x"],
            "not http or https",
        ),
        (
            vec!["request", "GET", "http://me:pw@127.0.0.1/"],
            "Authorization",
        ),
        (
            vec!["request", "GET", u, "--deadline", "-1"],
            "0.001 or more",
        ),
        (
            vec!["request", "GET", u, "--deadline", "0"],
            "0.001 or more",
        ),
        (
            vec!["request", "GET", u, "--deadline", "1e-10"],
            "too small",
        ),
        (
            vec!["request", "GET", u, "--attempt-timeout", "0.0000000001"],
            "too small",
        ),
        (vec!["request", "GET", u, "--deadline", "nan"], "seconds"),
        (
            vec!["request", "GET", u, "--attempt-timeout", "inf"],
            "seconds",
        ),
        (
            vec!["request", "GET", u, "--attempt-timeout", "1e400"],
            "seconds",
        ),
        (vec!["request", "GET", u, "--max-wait", "-0.5"], "0 or more"),
        (vec!["request", "GET", u, "--max-wait", "soon"], "seconds"),
        (vec!["request", "GET", u, "--retries", "-1"], "0 or more"),
        (
            vec!["request", "GET", u, "--retries", "4294967295"],
            "at most 4294967294",
        ),
        (vec!["request", "GET", u, "-H", "no colon"], "Name: value"),
        (
            vec!["request", "GET", u, "-H", "bad name: v"],
            "header name",
        ),
        (
            vec!["request", "GET", u, "-H", "X-A: a\x01b"],
            "control character",
        ),
        (
            vec!["request", "GET", u, "-H", "Content-Length: 9"],
            "from -d",
        ),
        (vec!["request", "GET", u, "--rate", "5"], "--burst"),
        (vec!["request", "GET", u, "--burst", "5"], "--rate"),
        (
            vec!["request", "GET", u, "--rate", "0", "--burst", "1"],
            "rate",
        ),
        (
            vec!["request", "GET", u, "--rate", "-2", "--burst", "1"],
            "rate",
        ),
        (
            vec!["request", "GET", u, "--rate", "2", "--burst", "0"],
            "at least 1",
        ),
        (
            vec![
                "request",
                "POST",
                u,
                "--idempotency-key",
                "k",
                "--auto-idempotency-key",
            ],
            "cannot be used with",
        ),
        (
            vec!["request", "POST", u, "--idempotency-key", " "],
            "blank",
        ),
        (
            vec!["request", "GET", u, "--quiet", "--log", "x.log"],
            "cannot be used with",
        ),
        (
            vec![
                "request",
                "GET",
                u,
                "--log",
                "/nonexistent-dir/courier/x.log",
            ],
            "cannot open the log file",
        ),
        (vec!["request", "GET", u, "--bogus"], "unexpected argument"),
        (
            vec!["request", "POST", u, "-d", "a", "--data-raw", "b"],
            "cannot be used with",
        ),
        (vec!["teleport"], "unrecognized subcommand"),
    ];
    for (args, says) in cases {
        let run = courier(&args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        assert!(
            run.stderr.contains(says),
            "{args:?} should say {says:?}: {}",
            run.stderr
        );
        assert!(run.attempt_lines().is_empty(), "{args:?}");
    }
    assert!(
        server.hits("usage").is_empty(),
        "a usage error sends nothing"
    );
}

#[tokio::test]
async fn quiet_drops_the_attempt_lines_but_not_errors() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("q-ok", vec![Step::status(503)]);
    let run = courier(&[
        "request",
        "GET",
        &server.url_for("/s/q-ok"),
        "--quiet",
        "--seed",
        "1",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(server.hits("q-ok").len(), 2);
    assert!(run.stderr.is_empty(), "{run:?}");

    server.set_plan("q-fail", vec![Step::status(500).times(5)]);
    let run = courier(&[
        "request",
        "GET",
        &server.url_for("/s/q-fail"),
        "-q",
        "--retries",
        "1",
        "--seed",
        "1",
    ])
    .await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.attempt_lines().is_empty(), "{run:?}");
    assert_eq!(run.messages().len(), 1, "{run:?}");
    assert!(run.stderr.starts_with("error: the server answered 500"));
}

#[tokio::test]
async fn log_sends_the_attempt_lines_to_a_file() {
    let (server, url) = server_with("logged", vec![Step::status(503)]).await;
    let path = std::env::temp_dir().join(format!(
        "courier-cli-test-{}-{}.log",
        std::process::id(),
        server.addr().port()
    ));
    let _ = std::fs::remove_file(&path);
    let run = courier(&[
        "request",
        "GET",
        &url,
        "--log",
        path.to_str().unwrap(),
        "--seed",
        "2",
    ])
    .await;
    let logged = std::fs::read_to_string(&path).expect("the log file was written");
    let _ = std::fs::remove_file(&path);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    let lines = json_lines(&logged);
    assert_eq!(field(&lines, "attempt"), [1, 2]);
    assert_eq!(
        field(&lines, "reason"),
        ["retryable_status", "final_status"]
    );
    assert_eq!(logged.lines().count(), 2, "{logged}");
}

#[tokio::test]
async fn data_and_headers_reach_the_server() {
    let (server, url) = server_with("sent", vec![]).await;
    let run = courier(&[
        "request",
        "post",
        &url,
        "-d",
        r#"{"a":1}"#,
        "-H",
        "Content-Type: application/json",
        "-H",
        "X-Trace:  abc ",
        "--header",
        "X-Trace: def",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let hits = server.hits("sent");
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(hit.method, "POST", "the method is upper-cased");
    assert_eq!(hit.header("content-type"), Some("application/json"));
    assert_eq!(hit.header("content-length"), Some("7"));
    let traces: Vec<_> = hit
        .headers
        .iter()
        .filter(|(n, _)| n == "x-trace")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(traces, ["abc", "def"], "repeated -H appends");
}

/// Runs `courier request PUT <url> ARGS...` (with `input` on stdin) against a bare listener,
/// which shows the request's bytes as sent (the fault server records headers only). Returns
/// the run and the request's body.
async fn body_as_sent(args: &[&str], input: &[u8], body_len: usize) -> (common::Run, Vec<u8>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/raw", listener.local_addr().unwrap());
    let server = async {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let body_at = loop {
            let n = tcp.read(&mut buf).await.unwrap();
            assert_ne!(n, 0, "the client closed before its body: {got:?}");
            got.extend_from_slice(&buf[..n]);
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
                && got.len() >= end + 4 + body_len
            {
                break end + 4;
            }
        };
        tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .await
            .unwrap();
        let head = String::from_utf8(got[..body_at].to_vec()).unwrap();
        assert!(head.starts_with("PUT /raw HTTP/1.1\r\n"), "{head}");
        got.split_off(body_at)
    };
    let mut all = vec!["request", "PUT", url.as_str()];
    all.extend_from_slice(args);
    tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(courier_with_input(&all, input), server)
    })
    .await
    .expect("the exchange finishes")
}

#[tokio::test]
async fn the_body_is_sent_as_given() {
    let data = "name=a b&x=ü\n";
    let (run, body) = body_as_sent(&["-d", data], b"", data.len()).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "ok");
    assert_eq!(body, data.as_bytes());
}

/// Regression: `-d @FILE` was sent as the literal text `@FILE`.
#[tokio::test]
async fn data_at_file_sends_the_files_bytes() {
    let bytes: &[u8] = b"{\"a\": 1}\r\nline two\n\x00\xff end";
    let file = TempFile::with("body.bin", bytes);
    let at = format!("@{}", file.arg());
    for flag in ["-d", "--data", "--data-binary"] {
        let (run, body) = body_as_sent(&[flag, &at], b"", bytes.len()).await;
        assert_eq!(run.code, 0, "{flag}: {run:?}");
        assert_eq!(body, bytes, "{flag}: the file's bytes, newlines and all");
    }
}

#[tokio::test]
async fn data_at_dash_reads_stdin_and_data_raw_sends_an_at_as_is() {
    let (run, body) = body_as_sent(&["-d", "@-"], b"from\nstdin", 10).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(body, b"from\nstdin");
    let (run, body) = body_as_sent(&["--data-raw", "@handle"], b"", 7).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(body, b"@handle");
}

/// Regression: a missing `-d @FILE` went unnoticed and its name was sent as the body.
#[tokio::test]
async fn data_at_a_missing_file_exits_2_naming_it_and_sends_nothing() {
    let (server, url) = server_with("no-body", vec![]).await;
    let missing = TempFile::path("missing-body.json");
    let at = format!("@{}", missing.arg());
    let run = courier(&["request", "POST", &url, "-d", &at]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains(missing.arg()), "{run:?}");
    assert!(run.stderr.contains("--data-raw"), "{run:?}");
    assert!(run.stdout.is_empty());
    let run = courier(&["request", "POST", &url, "-d", "@"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("names no file"), "{run:?}");
    assert!(server.hits("no-body").is_empty(), "nothing was sent");
}

#[tokio::test]
async fn include_prints_the_status_line_and_headers_before_the_body() {
    let (_server, url) = server_with(
        "head",
        vec![Step::status(201).header("x-trace", "t-1").body("made")],
    )
    .await;
    let run = courier(&["request", "POST", &url, "-i", "-q"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let (head, body) = run.stdout.split_once("\r\n\r\n").expect("a blank line");
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some("HTTP/1.1 201 Created"));
    let headers: Vec<&str> = lines.collect();
    assert!(headers.contains(&"x-trace: t-1"), "{headers:?}");
    assert!(headers.contains(&"content-length: 4"), "{headers:?}");
    assert_eq!(body, "made");

    let run = courier(&["request", "GET", &url, "--include", "-q"]).await;
    assert!(run.stdout.starts_with("HTTP/1.1 200 OK\r\n"), "{run:?}");
}

#[tokio::test]
async fn a_body_cut_by_the_deadline_leaves_stdout_empty() {
    // Ten bytes, 100 ms apart: the 0.5 s deadline cuts the body after about five.
    let (_server, url) = server_with(
        "cut",
        vec![
            Step::ok()
                .body("abcdefghij")
                .drip(Duration::from_millis(100))
                .times(3),
        ],
    )
    .await;
    let run = courier(&["request", "GET", &url, "--deadline", "0.5", "-i"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.stdout, "", "nothing partial, not even the headers");
    let messages = run.messages();
    assert_eq!(messages.len(), 1, "{run:?}");
    assert!(
        messages[0].starts_with("error: the response body broke off: deadline exceeded"),
        "{messages:?}"
    );
    assert!(messages[0].contains("nothing was written"), "{messages:?}");

    let run = courier(&["request", "GET", &url, "--deadline", "0.5", "--partial"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        !run.stdout.is_empty() && "abcdefghij".starts_with(&run.stdout) && run.stdout.len() < 10,
        "the first part: {run:?}"
    );

    let out = TempFile::path("cut.out");
    let run = courier(&["request", "GET", &url, "--deadline", "0.5", "-o", out.arg()]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!out.0.exists(), "no file for a cut body");
    let dir = out.0.parent().unwrap();
    let name = out.0.file_name().unwrap().to_str().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(name))
        .collect();
    assert!(leftovers.is_empty(), "no staging file left: {leftovers:?}");
}

#[tokio::test]
async fn output_writes_the_whole_body_to_a_file() {
    let (_server, url) = server_with("saved", vec![Step::ok().body("saved body")]).await;
    let out = TempFile::with("saved.out", "old contents");
    let run = courier(&["request", "GET", &url, "-o", out.arg(), "-q"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert_eq!(std::fs::read_to_string(&out.0).unwrap(), "saved body");

    let run = courier(&[
        "request",
        "GET",
        &url,
        "-o",
        "/nonexistent-dir/courier/x",
        "-q",
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("/nonexistent-dir/courier/x"), "{run:?}");
}

#[tokio::test]
async fn help_lists_exit_codes_and_says_pacing_lasts_one_run() {
    let run = courier(&["request", "--help"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    for want in [
        "Exit status:",
        "  0  ",
        "  1  ",
        "  2  ",
        "one\ninvocation",
        "courier batch",
    ] {
        assert!(
            run.stdout.contains(want),
            "want {want:?} in\n{}",
            run.stdout
        );
    }
    let run = courier(&["--help"]).await;
    for want in ["Exit status:", "130", "batch", "completions"] {
        assert!(
            run.stdout.contains(want),
            "want {want:?} in\n{}",
            run.stdout
        );
    }
}

#[tokio::test]
async fn an_idempotency_key_is_the_same_on_every_attempt() {
    let (server, url) = server_with("keyed", vec![Step::status(503)]).await;
    let run = courier(&[
        "request",
        "POST",
        &url,
        "-d",
        "{}",
        "--idempotency-key",
        "order-7f3a",
        "--seed",
        "4",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let keys: Vec<_> = server
        .hits("keyed")
        .into_iter()
        .map(|h| h.idempotency_key)
        .collect();
    assert_eq!(keys, [Some("order-7f3a".into()), Some("order-7f3a".into())]);
}

#[tokio::test]
async fn a_post_without_a_key_is_sent_once() {
    let (server, url) = server_with("unkeyed", vec![Step::status(503).times(3)]).await;
    let run = courier(&["request", "POST", &url, "-d", "{}"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    let hits = server.hits("unkeyed");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].idempotency_key, None);
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "reason"), ["not_retry_safe"]);
    assert!(run.stderr.contains("error: the server answered 503"));
}

#[tokio::test]
async fn auto_idempotency_key_adds_one_key_for_every_attempt() {
    let (server, url) = server_with("auto", vec![Step::status(503)]).await;
    let run = courier(&[
        "request",
        "PATCH",
        &url,
        "-d",
        "{}",
        "--auto-idempotency-key",
        "--seed",
        "5",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let hits = server.hits("auto");
    assert_eq!(hits.len(), 2);
    let key = hits[0].idempotency_key.clone().expect("a key was added");
    assert_eq!(key.len(), 36, "a hyphenated UUID: {key}");
    assert_eq!(hits[1].idempotency_key.as_deref(), Some(key.as_str()));
}

#[tokio::test]
async fn dry_run_prints_the_plan_and_sends_nothing() {
    let (server, url) = server_with("dry", vec![]).await;

    let run = courier(&[
        "request",
        "POST",
        &url,
        "-d",
        "{}",
        "-H",
        "Authorization: Bearer s3cret",
        "--retries",
        "3",
        "--dry-run",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    let plan = &run.stdout;
    for want in [
        format!("POST {url}\n"),
        "retry-safe:      no: POST is not idempotent and carries no Idempotency-Key".into(),
        "attempts:        4 in all (3 retries)".into(),
        "ceilings: retry 1: 0.5 s, retry 2: 1 s, retry 3: 2 s\n".into(),
        "after a 503 or 429 without a hint: retry 1: 2 s, retry 2: 4 s, retry 3: 8 s\n".into(),
        "max wait:        60 s".into(),
        "deadline:        90 s".into(),
        "attempt timeout: 30 s".into(),
        "rate limit:      off".into(),
        concat!("user agent:      courier/", env!("CARGO_PKG_VERSION"), "\n").into(),
        "authorization: <redacted>".into(),
        "body: 2 bytes".into(),
        "nothing was sent".into(),
    ] {
        assert!(plan.contains(&want), "want {want:?} in\n{plan}");
    }
    assert!(!plan.contains("s3cret"), "{plan}");

    let run = courier(&[
        "request",
        "GET",
        &url,
        "--retries",
        "0",
        "--deadline",
        "2.5",
        "--attempt-timeout",
        "0.25",
        "--max-wait",
        "10",
        "--rate",
        "2",
        "--burst",
        "3",
        "--seed",
        "9",
        "-A",
        "",
        "--dry-run",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let plan = &run.stdout;
    for want in [
        "retry-safe:      yes: GET is idempotent",
        "attempts:        1 in all (0 retries)",
        "backoff:         none",
        "max wait:        10 s",
        "deadline:        2.5 s",
        "attempt timeout: 0.25 s",
        "rate limit:      2 requests per second, burst 3",
        "jitter seed:     9",
        "user agent:      none",
    ] {
        assert!(plan.contains(want), "want {want:?} in\n{plan}");
    }

    for (extra, says) in [
        (
            "--idempotency-key=k-1",
            "yes: POST carries an Idempotency-Key",
        ),
        (
            "--auto-idempotency-key",
            "yes: POST gets a UUID v4 Idempotency-Key",
        ),
    ] {
        let run = courier(&["request", "POST", &url, extra, "--dry-run"]).await;
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains(says), "{extra}: {}", run.stdout);
    }
    assert!(server.hits("dry").is_empty(), "a dry run sends nothing");
}

#[tokio::test]
async fn max_wait_returns_a_longer_server_wait_at_once() {
    let (server, url) = server_with(
        "patient",
        vec![Step::status(429).header("retry-after", "5")],
    )
    .await;
    let run = courier(&["request", "GET", &url, "--max-wait", "1"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(server.hits("patient").len(), 1);
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "reason"), ["hint_exceeds_max_wait"]);
    assert!(run.stderr.contains("error: the server answered 429"));
}

#[tokio::test]
async fn attempt_timeout_takes_fractional_seconds() {
    let (server, url) =
        server_with("slow", vec![Step::ok().delay(Duration::from_millis(1500))]).await;
    let run = courier(&[
        "request",
        "GET",
        &url,
        "--attempt-timeout",
        "0.2",
        "--retries",
        "1",
        "--seed",
        "1",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(server.hits("slow").len(), 2);
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "outcome"), ["timeout", "200"]);
}

#[tokio::test]
async fn a_spent_deadline_exits_1() {
    let (server, url) = server_with("late", vec![Step::ok().delay(Duration::from_secs(3))]).await;
    let run = courier(&["request", "GET", &url, "--deadline", "0.3"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(server.hits("late").len(), 1);
    let messages = run.messages();
    assert_eq!(messages.len(), 1, "{run:?}");
    assert!(
        messages[0].starts_with("error: deadline exceeded"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn an_open_circuit_exits_1() {
    // A host that refuses every connection: the breaker opens after 5 failures in a row, and
    // the sixth attempt is refused without trying.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/down");
    let run = courier(&["request", "GET", &url, "--retries", "6", "--seed", "1"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    let lines = run.attempt_lines();
    assert_eq!(lines.len(), 6, "{run:?}");
    for line in &lines[..5] {
        assert_eq!(line["outcome"], "connect", "{run:?}");
    }
    assert_eq!(lines[5]["outcome"], "local");
    let messages = run.messages();
    assert!(
        messages[0].starts_with("error: circuit open"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn failing_answers_from_a_host_that_answers_do_not_open_the_circuit() {
    // Retry-After: 0 retries at once: seven 503s in a second are a host answering, not a host
    // down (the preset's breaker waits 30 s of failing answers with no success).
    let (server, url) = server_with(
        "broken",
        vec![Step::status(503).header("retry-after", "0").times(10)],
    )
    .await;
    let run = courier(&["request", "GET", &url, "--retries", "6"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(server.hits("broken").len(), 7, "every attempt reached it");
    let lines = run.attempt_lines();
    assert_eq!(lines.len(), 7);
    assert_eq!(lines[6]["reason"], "attempts_exhausted");
}

#[tokio::test]
async fn rate_and_burst_pace_every_attempt() {
    // The server asks for no wait at all; only the limiter spaces the two attempts.
    let (server, url) =
        server_with("paced", vec![Step::status(503).header("retry-after", "0")]).await;
    let run = courier(&[
        "request",
        "GET",
        &url,
        "--rate",
        "2",
        "--burst",
        "1",
        "--retries",
        "1",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let hits = server.hits("paced");
    assert_eq!(hits.len(), 2);
    let gap_ms = hits[1].t_ms - hits[0].t_ms;
    // One token every 500 ms: the retry waits for its token (a lower bound only).
    assert!(
        gap_ms >= 450.0,
        "the retry came {gap_ms} ms after the first try"
    );
}

#[tokio::test]
async fn a_closed_stdout_does_not_turn_an_http_error_into_exit_0() {
    let (server, url) = server_with(
        "big-500",
        vec![Step::status(500).body("x".repeat(1 << 20)).times(3)],
    )
    .await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["request", "GET", &url, "--retries", "0", "--quiet"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(30), stdout.read_exact(&mut one))
        .await
        .expect("the body starts")
        .expect("one byte");
    // As `| head -c 1` does: the reader goes away.
    drop(stdout);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the binary ends")
        .expect("it ran");
    assert_eq!(server.hits("big-500").len(), 1);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the server answered 500: {:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn trace_prints_the_span_tree_of_the_call_on_stderr() {
    let (server, url) = server_with("traced", vec![Step::status(503), Step::ok()]).await;
    let run = courier(&["request", "GET", &url, "--seed", "1", "--trace", "--quiet"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(server.hits("traced").len(), 2);
    assert!(
        run.attempt_lines().is_empty(),
        "--quiet drops the JSON lines"
    );
    let tree: Vec<&str> = run.messages();
    assert_eq!(tree.len(), 3, "{run:?}");
    assert!(
        tree[0].starts_with(&format!("trace: courier.call GET {url}  ")),
        "{tree:?}"
    );
    assert!(
        tree[0].ends_with("  200 (2 attempts, final_status)  cache miss"),
        "{tree:?}"
    );
    assert!(tree[1].starts_with("  ├ GET #1  "), "{tree:?}");
    assert!(tree[1].contains("  503 (error 503)  retry in "), "{tree:?}");
    assert!(tree[1].ends_with(" ms (backoff)"), "{tree:?}");
    assert!(tree[2].starts_with("  └ GET #2  "), "{tree:?}");
    assert!(tree[2].ends_with("  200  stop (final_status)"), "{tree:?}");
}

#[tokio::test]
async fn trace_leaves_the_attempt_lines_as_they_were() {
    let (server, url) = server_with("traced-lines", vec![Step::status(503), Step::ok()]).await;
    let run = courier(&["request", "GET", &url, "--seed", "1", "--trace"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(server.hits("traced-lines").len(), 2);
    let lines = run.attempt_lines();
    assert_eq!(field(&lines, "attempt"), [1, 2]);
    assert_eq!(field(&lines, "outcome"), ["503", "200"]);
    assert_eq!(run.messages().len(), 3, "{run:?}");
}

/// The messages on stderr are bounded and hold no control character but their own newlines.
fn assert_quoted_safely(run: &common::Run, at_most: usize) {
    assert!(
        run.stderr.len() <= at_most,
        "{} bytes on stderr: {:.300}",
        run.stderr.len(),
        run.stderr
    );
    assert!(
        !run.stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{:?}",
        run.stderr
    );
}

#[tokio::test]
async fn refused_input_is_quoted_bounded_and_escaped() {
    let long_url = format!("http://h/{}\u{7}", "a".repeat(100_000));
    let long_name = format!("{}: v", "N y".repeat(33_000));
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["request", "GET", &long_url], "(100010 bytes)"),
        (
            vec!["request", "GET", "http://127.0.0.1:1/", "-H", &long_name],
            "bytes)",
        ),
        (
            vec![
                "request",
                "GET",
                "http://127.0.0.1:1/",
                "-H",
                "X-A: a\r\nInjected: 1",
            ],
            "X-A: a\\r\\nInjected: 1",
        ),
        (
            vec!["request", "GET", "http://exa\nmple.com/"],
            "control character",
        ),
    ];
    for (args, says) in cases {
        let run = courier(&args).await;
        assert_eq!(run.code, 2, "{:.300}", run.stderr);
        assert!(run.stderr.contains(says), "{says}: {:.600}", run.stderr);
        assert_quoted_safely(&run, 1500);
        assert_eq!(
            run.stderr.lines().count(),
            1,
            "one line: {:.600}",
            run.stderr
        );
    }
}

#[tokio::test]
async fn an_endless_body_stops_at_max_data_and_a_huge_cacert_is_refused() {
    let (server, url) =
        server_with("sink", vec![Step::ok().delay(Duration::from_millis(500))]).await;
    let run = courier(&[
        "request",
        "PUT",
        &url,
        "-d",
        "@/dev/zero",
        "--max-data",
        "64K",
        "-q",
    ])
    .await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("longer than --max-data allows (65536 bytes)"),
        "{run:?}"
    );
    assert!(
        server.hits("sink").is_empty(),
        "nothing past the cap was sent"
    );

    // A file larger than the cap is refused before anything is sent.
    let big = TempFile::with("big.bin", vec![7_u8; 100_000]);
    let run = courier(&[
        "request",
        "PUT",
        &url,
        "-d",
        &format!("@{}", big.arg()),
        "--max-data",
        "64K",
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("holds 100000 bytes"), "{run:?}");

    // The deadline covers reading the body: stdin held open with nothing written.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["request", "PUT", &url, "-d", "@-", "--deadline", "1", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let held = child.stdin.take();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the deadline ends the read")
        .unwrap();
    drop(held);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("spent reading the body"), "{stderr}");
    assert!(server.hits("sink").is_empty(), "{stderr}");

    let run = courier(&["request", "GET", &url, "--cacert", "/dev/zero"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("larger than 4 MiB"), "{run:?}");
    assert_quoted_safely(&run, 1000);
}

#[tokio::test]
async fn a_large_file_is_streamed_with_its_length() {
    // 20 MiB: larger than what is kept for a retry, so it is streamed and sent once.
    let bytes: Vec<u8> = (0..20_u32 << 20).map(|i| (i % 251) as u8).collect();
    let file = TempFile::with("large.bin", &bytes);
    let at = format!("@{}", file.arg());
    let (run, body) = body_as_sent(&["-d", &at, "-q"], b"", bytes.len()).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(body.len(), bytes.len());
    assert!(body == bytes, "the file's bytes, in order");
}

#[tokio::test]
async fn trace_marks_a_call_whose_body_broke_off() {
    let (_server, url) = server_with(
        "broke",
        vec![
            Step::ok()
                .body("abcdefghij")
                .drip(Duration::from_millis(100)),
        ],
    )
    .await;
    let run = courier(&["request", "GET", &url, "--deadline", "0.5", "--trace", "-q"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    let call = run
        .stderr
        .lines()
        .find(|l| l.starts_with("trace: courier.call"))
        .unwrap_or_else(|| panic!("a call line: {}", run.stderr));
    assert!(call.contains("body broke off after "), "{call}");
    let error = run.stderr.lines().position(|l| l.starts_with("error: "));
    let tree = run.stderr.lines().position(|l| l.starts_with("trace: "));
    assert!(tree < error, "the tree, then the error: {}", run.stderr);
}

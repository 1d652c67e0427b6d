//! `courier batch`: one client for the whole batch (a shared bucket, budget and breaker), one
//! JSON line per request, a summary, bad lines reported, and Ctrl-C. Every request goes to a
//! fault server on 127.0.0.1.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::{PATIENCE, TempFile, courier, courier_with_input};
use courier_faultserver::{FaultServer, Step};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

fn results(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn lines_of(n: usize, line: impl Fn(usize) -> String) -> String {
    (1..=n).map(|i| line(i) + "\n").collect()
}

#[tokio::test]
async fn a_paced_batch_stays_under_the_servers_limit() {
    let server = FaultServer::start().await.unwrap();
    let url = server.url_for("/limited/paced?rate=5&burst=5");
    let input = TempFile::with("paced.txt", lines_of(30, |_| url.clone()));
    let run = courier(&[
        "batch",
        input.arg(),
        "--rate",
        "4",
        "--burst",
        "5",
        "--parallel",
        "8",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let results = results(&run.stdout);
    assert_eq!(results.len(), 30);
    for r in &results {
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["attempts"], 1, "{r}");
        assert_eq!(r["method"], "GET");
        assert_eq!(r["url"], url.as_str());
        assert_eq!(r["bytes"], 3, "ok\\n: {r}");
        assert!(r["elapsed_ms"].is_u64(), "{r}");
    }
    let lines: BTreeSet<u64> = results
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, (1..=30).collect(), "one result per input line");
    assert_eq!(
        server.hits("limited/paced").len(),
        30,
        "no request sent twice"
    );
    assert!(
        run.stderr.starts_with("batch: 30 requests in "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("status 200 ×30; 0 failed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("0 answered 429"), "{}", run.stderr);
    assert_eq!(
        run.stderr.lines().count(),
        2,
        "the summary only: {}",
        run.stderr
    );
}

#[tokio::test]
async fn an_unpaced_batch_draws_429s_that_wait_for_the_servers_hint() {
    let server = FaultServer::start().await.unwrap();
    let url = server.url_for("/limited/unpaced?rate=5&burst=5");
    let input = lines_of(30, |_| url.clone());
    let run = courier_with_input(&["batch", "--parallel", "8"], input.as_bytes()).await;
    let results = results(&run.stdout);
    assert_eq!(results.len(), 30, "{run:?}");
    let refused: Vec<&Value> = results
        .iter()
        .flat_map(|r| r["tries"].as_array().unwrap())
        .filter(|t| t["outcome"] == "429")
        .collect();
    assert!(
        !refused.is_empty(),
        "8 at once against a burst of 5: {run:?}"
    );
    let retried: Vec<&&Value> = refused
        .iter()
        .filter(|t| t.get("wait_ms").is_some())
        .collect();
    assert!(!retried.is_empty(), "{run:?}");
    for t in retried {
        assert_eq!(t["wait_source"], "retry_after", "{t}");
        assert_eq!(t["wait_ms"], 1000, "Retry-After: 1: {t}");
    }
    let attempts: u64 = results
        .iter()
        .map(|r| r["attempts"].as_u64().unwrap())
        .sum();
    assert_eq!(server.hits("limited/unpaced").len() as u64, attempts);
    assert!(attempts > 30, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("attempts: {attempts} ({} retr", attempts - 30)),
        "{}",
        run.stderr
    );
    let failed = results.iter().any(|r| r["status"].as_u64() >= Some(400));
    assert_eq!(run.code, i32::from(failed), "{run:?}");
}

#[tokio::test]
async fn a_line_that_is_not_a_request_is_reported_and_the_batch_goes_on() {
    let server = FaultServer::start().await.unwrap();
    let ok = server.url_for("/s/fine");
    let input = format!(
        "{ok}\n\
         not a url\n\
         \n\
         # a comment\n\
         {{\"method\": \"PUT\", \"url\": \"{ok}\", \"headers\": {{\"X-Line\": \"5\"}}, \"body\": \"five\"}}\n\
         {{\"url\": 7}}\n\
         DELETE {ok}\n"
    );
    let run = courier_with_input(&["batch", "--body", "-H", "X-All: yes"], input.as_bytes()).await;
    assert_eq!(run.code, 1, "a bad line fails the batch: {run:?}");
    let results = results(&run.stdout);
    assert_eq!(results.len(), 5, "{run:?}");
    let by_line = |n: u64| {
        results
            .iter()
            .find(|r| r["line"] == n)
            .unwrap_or_else(|| panic!("no result for line {n}: {run:?}"))
    };
    assert!(
        by_line(2)["error"].as_str().unwrap().contains("write URL"),
        "{run:?}"
    );
    assert!(
        by_line(6)["error"]
            .as_str()
            .unwrap()
            .contains("url must be a string")
    );
    for (n, method) in [(1, "GET"), (5, "PUT"), (7, "DELETE")] {
        assert_eq!(by_line(n)["status"], 200, "{run:?}");
        assert_eq!(by_line(n)["method"], method);
        assert_eq!(by_line(n)["body"], "", "--body puts the (empty) body in");
    }
    let hits = server.hits("fine");
    let methods: Vec<&str> = hits.iter().map(|h| h.method.as_str()).collect();
    assert_eq!(methods.len(), 3, "{methods:?}");
    for h in &hits {
        assert_eq!(h.header("x-all"), Some("yes"), "-H goes on every request");
    }
    let put = hits.iter().find(|h| h.method == "PUT").unwrap();
    assert_eq!(put.header("x-line"), Some("5"));
    assert_eq!(put.header("content-length"), Some("4"));
    assert!(run.stderr.contains("2 bad lines"), "{}", run.stderr);
}

#[tokio::test]
async fn failures_and_error_statuses_are_reported_and_exit_1() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("gone", vec![Step::status(404).body("no such thing")]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}/x", closed.local_addr().unwrap());
    drop(closed);
    let input = format!(
        "{}\n{refused}\n{}\n",
        server.url_for("/s/gone"),
        server.url_for("/items")
    );
    let run = courier_with_input(&["batch", "--retries", "0"], input.as_bytes()).await;
    assert_eq!(run.code, 1, "{run:?}");
    let results = results(&run.stdout);
    let line = |n: u64| results.iter().find(|r| r["line"] == n).unwrap();
    assert_eq!(line(1)["status"], 404);
    assert_eq!(line(1)["bytes"], 13);
    assert!(line(1).get("body").is_none(), "bodies only with --body");
    assert_eq!(line(2)["status"], Value::Null);
    assert!(
        line(2)["error"]
            .as_str()
            .unwrap()
            .starts_with("connect failure")
    );
    assert_eq!(line(2)["attempts"], 1, "counted for an error too");
    assert_eq!(line(2)["tries"][0]["outcome"], "connect");
    assert_eq!(line(3)["status"], 200);
    assert!(
        run.stderr.contains("status 200 ×1, 404 ×1; 2 failed"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn batch_usage_errors_exit_2() {
    let missing = TempFile::path("no-such-batch.txt");
    for (args, says) in [
        (vec!["batch", missing.arg()], missing.arg()),
        (vec!["batch", "--parallel", "0"], "1 to 256"),
        (vec!["batch", "--parallel", "257"], "1 to 256"),
        (vec!["batch", "--rate", "2"], "--burst"),
        (
            vec!["batch", "--idempotency-key", "k"],
            "unexpected argument",
        ),
    ] {
        let run = courier(&args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let run = courier_with_input(&["batch"], b"").await;
    assert_eq!(run.code, 0, "an empty batch is done: {run:?}");
    assert!(run.stderr.starts_with("batch: 0 requests"), "{run:?}");
}

#[tokio::test]
async fn ctrl_c_stops_sending_lets_the_requests_in_flight_end_and_exits_130() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "slow",
        vec![
            Step::ok()
                .delay(Duration::from_millis(300))
                .body("x")
                .times(100),
        ],
    );
    let total = 40;
    let input = TempFile::with(
        "sigint.txt",
        lines_of(total, |i| server.url_for(&format!("/s/slow?i={i}"))),
    );
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["batch", input.arg(), "--parallel", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    // Two results: the batch is under way, its Ctrl-C handler in place.
    for _ in 0..2 {
        tokio::time::timeout(PATIENCE, stdout.read_line(&mut seen))
            .await
            .expect("results come")
            .unwrap();
    }
    let pid = child.id().expect("still running").to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let mut rest = String::new();
    tokio::time::timeout(PATIENCE, stdout.read_to_string(&mut rest))
        .await
        .expect("the batch ends")
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("the batch exits")
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");

    let results = results(&(seen + &rest));
    let hits = server.hits("slow");
    assert!(
        hits.len() < total,
        "sending stopped: {} of {total}",
        hits.len()
    );
    assert_eq!(results.len(), hits.len(), "every request sent was reported");
    for r in &results {
        assert_eq!(r["status"], 200, "in-flight requests finished: {r}");
        assert_eq!(r["attempts"], 1, "{r}");
    }
    let queries: BTreeSet<String> = hits.iter().map(|h| h.query.clone().unwrap()).collect();
    assert_eq!(queries.len(), hits.len(), "no request sent twice");
    let lines: BTreeSet<u64> = results
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    let sent = hits.len() as u64;
    assert_eq!(lines, (1..=sent).collect(), "lines are sent in order");
    assert!(
        stderr.contains("interrupted: nothing more is sent"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("batch: {sent} requests in ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("no request from line {} on was sent", sent + 1)),
        "{stderr}"
    );
}

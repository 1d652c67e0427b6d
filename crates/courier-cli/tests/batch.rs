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
    // Sent at 4/s to a server that takes 5/s, the requests leave in time; they reach the server
    // as late as the machine schedules each, so two may arrive closer together than they left
    // and draw a 429. Held whatever the scheduling: a few such refusals at most, each waited
    // out as the server asked and then served, and nothing else sent twice.
    let mut refused = 0;
    for r in &results {
        assert_eq!(r["status"], 200, "{r}");
        let attempts = r["attempts"].as_u64().unwrap();
        assert!(attempts <= 2, "{r}");
        if attempts == 2 {
            refused += 1;
            assert_eq!(r["tries"][0]["outcome"], "429", "{r}");
            assert_eq!(r["tries"][0]["wait_source"], "retry_after", "{r}");
        }
        assert_eq!(r["method"], "GET");
        assert_eq!(r["url"], url.as_str());
        assert_eq!(r["bytes"], 3, "ok\\n: {r}");
        assert!(r["elapsed_ms"].is_u64(), "{r}");
    }
    assert!(
        refused <= 5,
        "{refused} of 30 refused: the batch was not paced"
    );
    let lines: BTreeSet<u64> = results
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, (1..=30).collect(), "one result per input line");
    assert_eq!(
        server.hits("limited/paced").len(),
        30 + refused,
        "no request sent twice but those the server refused"
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
    assert!(
        run.stderr.contains(&format!("{refused} answered 429")),
        "{}",
        run.stderr
    );
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
async fn a_crowd_of_identical_lines_reaches_the_server_once() {
    let server = FaultServer::start().await.unwrap();
    // A cacheable answer that takes 300 ms: every line asks while the first is in flight.
    server.set_plan(
        "config",
        vec![
            Step::status(200)
                .header("cache-control", "max-age=60")
                .header("etag", "\"v1\"")
                .body("{\"flags\": []}")
                .delay(Duration::from_millis(300))
                .times(50),
        ],
    );
    let input = TempFile::with("crowd.txt", lines_of(50, |_| server.url_for("/s/config")));
    let run = courier(&["batch", input.arg(), "--parallel", "50"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let results = results(&run.stdout);
    assert_eq!(results.len(), 50);
    for r in &results {
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["bytes"], 13, "{r}");
        // The others' answer is the one request's (a miss shared while in flight), or a hit
        // for a line that started after it.
        let cache = r["cache"]
            .as_str()
            .expect("every line says how the cache answered");
        assert!(cache == "miss" || cache == "hit", "{r}");
    }
    let sent = results.iter().filter(|r| r["attempts"] != 0).count();
    assert_eq!(sent, 1, "one line made the request");
    assert_eq!(server.hits("config").len(), 1, "one request for the crowd");
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
    let mut child = common::spawn(&["batch", input.arg(), "--parallel", "2"], Stdio::null());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    // Two results: the batch is under way, its Ctrl-C handler in place.
    for _ in 0..2 {
        tokio::time::timeout(PATIENCE, stdout.read_line(&mut seen))
            .await
            .expect("results come")
            .unwrap();
    }
    common::signal("INT", child.id().expect("still running"));
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

/// A batch reading an open pipe: a line is written, its result read, and the pipe stays open
/// (a writer that sleeps). `signal` must end it at once, with the summary and `code`.
async fn a_batch_on_an_open_pipe_stops_at(signal: &str, code: i32, outcome: &str) {
    use tokio::io::AsyncWriteExt;
    let server = FaultServer::start().await.unwrap();
    let mut child = common::spawn(&["batch"], Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{}\n", server.url_for("/s/piped")).as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(PATIENCE, stdout.read_line(&mut first))
        .await
        .expect("the first result comes")
        .unwrap();
    assert_eq!(results(&first)[0]["status"], 200, "{first}");
    // The batch now waits for a line that will not come: the pipe is open, nobody writes.
    common::signal(signal, child.id().expect("still running"));
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the batch ends at the signal, though its input is still open")
        .unwrap();
    drop(stdin);
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("batch: 1 request in "), "{stderr}");
    assert!(
        stderr.contains(&format!("{outcome}: no request from line 2 on was sent")),
        "{stderr}"
    );
    assert_eq!(server.hits("piped").len(), 1);
}

#[tokio::test]
async fn ctrl_c_stops_a_batch_whose_pipe_is_still_open() {
    a_batch_on_an_open_pipe_stops_at("INT", 130, "interrupted").await;
}

#[tokio::test]
async fn sigterm_stops_a_batch_whose_pipe_is_still_open() {
    a_batch_on_an_open_pipe_stops_at("TERM", 143, "terminated").await;
}

/// Runs `courier batch` at a terminal of its own (script(1) gives it a pseudo-terminal), types a
/// line, then Ctrl-C as a person would: the terminal sends SIGINT.
#[tokio::test]
async fn ctrl_c_at_a_terminal_stops_a_batch_reading_it() {
    use tokio::io::AsyncWriteExt;
    let server = FaultServer::start().await.unwrap();
    let command = format!("{} batch", env!("CARGO_BIN_EXE_courier"));
    let mut child = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script(1) starts (util-linux / bsdutils)");
    let mut keys = child.stdin.take().unwrap();
    keys.write_all(format!("{}\n", server.url_for("/s/typed")).as_bytes())
        .await
        .unwrap();
    keys.flush().await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while server.hits("typed").is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the typed line is sent");
    // Its result is written before the next line is read; give the batch a moment to get back
    // to reading the terminal, then press Ctrl-C.
    tokio::time::sleep(Duration::from_millis(300)).await;
    keys.write_all(b"\x03").await.unwrap();
    keys.flush().await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the batch ends at Ctrl-C, though the terminal is still open")
        .unwrap();
    drop(keys);
    // The terminal carries stdout and stderr together.
    let screen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{screen}");
    assert!(screen.contains("batch: 1 request in "), "{screen}");
    assert!(screen.contains("\"status\":200"), "{screen}");
    assert_eq!(server.hits("typed").len(), 1);
}

/// A fault server whose `/s/{tag}` answers 200 after 50 ms, and a batch file of 300 requests
/// to it: more than a reader that stops after one line lets through.
async fn slow_batch(tag: &str) -> (FaultServer, TempFile, usize) {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        tag,
        vec![Step::ok().delay(Duration::from_millis(50)).times(1000)],
    );
    let total = 300;
    let input = TempFile::with(
        &format!("{tag}.txt"),
        lines_of(total, |i| server.url_for(&format!("/s/{tag}?i={i}"))),
    );
    (server, input, total)
}

#[tokio::test]
async fn a_closed_stdout_ends_a_batch_quietly() {
    let (server, input, total) = slow_batch("many").await;
    let mut child = common::spawn(&["batch", input.arg(), "--parallel", "64"], Stdio::null());
    // As `| head -1` does: read one line, then close the pipe.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(PATIENCE, stdout.read_line(&mut first))
        .await
        .expect("a result comes")
        .unwrap();
    drop(stdout);
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the batch ends")
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "exits as request does: {stderr}"
    );
    assert!(!stderr.contains("Ctrl-C"), "no signal was sent: {stderr}");
    assert!(!stderr.contains("abandoned"), "{stderr}");
    assert!(
        stderr.contains("stdout closed: nothing more was sent;"),
        "{stderr}"
    );
    assert!(
        server.hits("many").len() < total,
        "sending stopped once nobody read the results"
    );
}

/// As `courier batch 2>&1 | head -1` does: stdout and stderr are one pipe, closed after a line.
/// The summary and the notes on stderr are lost with it; the batch still ends quietly.
#[tokio::test]
async fn a_closed_pipe_for_stdout_and_stderr_ends_a_batch_quietly() {
    let (server, input, total) = slow_batch("both").await;
    let (reader, writer) = std::io::pipe().unwrap();
    let stderr = writer.try_clone().unwrap();
    // The command, and the parent's ends of the pipe it holds, are dropped once it is spawned.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["batch", input.arg(), "--parallel", "64"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let first = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(reader)
            .read_line(&mut line)
            .map(|_| line)
    });
    let first = tokio::time::timeout(PATIENCE, first)
        .await
        .expect("a line comes")
        .unwrap()
        .unwrap();
    assert!(first.contains("\"status\":200"), "{first}");
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("the batch ends")
        .unwrap();
    // 101 would be a panic: writing to the closed stderr.
    assert_eq!(status.code(), Some(0), "exits as with stderr open");
    assert!(
        server.hits("both").len() < total,
        "sending stopped once nobody read the results"
    );
}

#[tokio::test]
async fn a_huge_or_hostile_line_gets_a_bounded_error_line() {
    let url = format!("http://h/{}", "a".repeat(1_000_000));
    let bad_header = format!(
        "{{\"url\": \"http://127.0.0.1:1/\", \"headers\": {{\"{}\\r\\nX\": \"v\"}}}}",
        "N".repeat(100_000)
    );
    let run = courier_with_input(
        &["batch"],
        format!("ftp://{url}\n{bad_header}\n").as_bytes(),
    )
    .await;
    assert_eq!(run.code, 1, "{run:?}");
    let lines = results(&run.stdout);
    assert_eq!(lines.len(), 2, "{}", run.stdout.len());
    for line in &lines {
        let error = line["error"].as_str().expect("an error");
        assert!(error.len() < 1500, "{} bytes", error.len());
        assert!(!error.contains('\r') && !error.contains('\n'), "{error:?}");
        assert!(
            error.contains("bytes)"),
            "says how long the input was: {error}"
        );
    }
    assert!(run.stdout.len() < 4000, "{} bytes", run.stdout.len());
}

/// Four `courier batch` processes share one limit through Redis (`--redis`): against one fault
/// server for about 30 s, the arrivals in every window `t` stay within `burst + rate × t`,
/// where each process alone would send its own burst and rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_one_limit_through_redis() {
    let Some(redis) = courier_testkit::redis::redis("four_processes_share_one_limit").await else {
        return;
    };
    let prefix = courier_testkit::redis::unique_prefix("batches");
    let server = FaultServer::start().await.unwrap();
    let (rate, burst, per_process) = (10.0, 5.0, 75);
    let inputs: Vec<TempFile> = (0..4)
        .map(|p| {
            TempFile::with(
                &format!("shared-{p}.txt"),
                lines_of(per_process, |i| {
                    server.url_for(&format!("/s/shared?p={p}&i={i}"))
                }),
            )
        })
        .collect();
    let runs: Vec<_> = inputs
        .iter()
        .map(|input| {
            let (url, prefix) = (redis.url(), prefix.clone());
            let path = input.arg().to_owned();
            async move {
                common::courier(&[
                    "batch",
                    &path,
                    "--parallel",
                    "4",
                    "--rate",
                    "10",
                    "--burst",
                    "5",
                    "--redis",
                    &url,
                    "--redis-prefix",
                    &prefix,
                ])
                .await
            }
        })
        .collect();
    let mut it = runs.into_iter();
    let (a, b, c, d) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    );
    let (a, b, c, d) = tokio::join!(a, b, c, d);
    for run in [&a, &b, &c, &d] {
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(results(&run.stdout).len(), per_process);
    }
    let mut arrivals: Vec<f64> = server.hits("shared").iter().map(|h| h.t_ms).collect();
    assert_eq!(arrivals.len(), 4 * per_process, "every request once");
    arrivals.sort_by(f64::total_cmp);
    for window_s in [2.0, 5.0, 10.0, 25.0] {
        let window_ms = window_s * 1000.0;
        let busiest = (0..arrivals.len())
            .map(|i| {
                arrivals[i..]
                    .iter()
                    .take_while(|t| **t - arrivals[i] < window_ms)
                    .count()
            })
            .max()
            .unwrap_or(0);
        // One more than the bound: a slot at each end of a window.
        let bound = burst + rate * window_s + 1.0;
        assert!(
            busiest as f64 <= bound,
            "{busiest} arrivals in {window_s} s, more than {bound}"
        );
    }
    let span_s = (arrivals[arrivals.len() - 1] - arrivals[0]) / 1000.0;
    assert!(
        span_s >= (4.0 * per_process as f64 - burst) / rate - 1.0,
        "paced together: {span_s} s for {} requests",
        arrivals.len()
    );
}

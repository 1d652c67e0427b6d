//! `--config FILE`: the preset's policies from a TOML file, routes per destination, the
//! flags and the environment over its default policy, a bad file refused with its fields
//! named, and `batch --config` reloading on SIGHUP. Every request goes to fault servers on
//! 127.0.0.1, which count the attempts.

mod common;

use std::process::Stdio;

use common::{PATIENCE, TempFile, courier};
use courier_faultserver::{FaultServer, Step};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A server whose `/s/fail` answers 500 to everything.
async fn failing_server() -> FaultServer {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("fail", vec![Step::status(500).times(1000)]);
    server
}

/// Three attempts by default, quick backoff; one attempt for `port`.
fn one_attempt_for(port: u16) -> String {
    format!(
        "[default]\nretry = {{ attempts = 3, base = \"1ms\" }}\n\n\
         [[routes]]\nname = \"single\"\nmatch = {{ host = \"127.0.0.1\", port = {port} }}\n\
         retry = {{ attempts = 1 }}\n"
    )
}

#[tokio::test]
async fn a_route_gives_its_host_its_own_attempts() {
    let single = failing_server().await;
    let other = failing_server().await;
    let config = TempFile::with("route.toml", one_attempt_for(single.addr().port()));
    for server in [&single, &other] {
        let run = courier(&[
            "request",
            "GET",
            &server.url_for("/s/fail"),
            "--config",
            config.arg(),
            "-q",
        ])
        .await;
        assert_eq!(run.code, 1, "a 500 in the end: {run:?}");
    }
    assert_eq!(single.hits("fail").len(), 1, "the route's one attempt");
    assert_eq!(other.hits("fail").len(), 3, "the default's three");

    // --retries replaces the default policy's attempts, not the route's.
    for server in [&single, &other] {
        let run = courier(&[
            "request",
            "GET",
            &server.url_for("/s/fail"),
            "--config",
            config.arg(),
            "--retries",
            "1",
            "-q",
        ])
        .await;
        assert_eq!(run.code, 1, "{run:?}");
    }
    assert_eq!(single.hits("fail").len(), 1 + 1);
    assert_eq!(other.hits("fail").len(), 3 + 2);
}

#[tokio::test]
async fn the_environment_overrides_the_file() {
    let server = failing_server().await;
    let config = TempFile::with("env.toml", one_attempt_for(1));
    let out = tokio::time::timeout(
        PATIENCE,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(["request", "GET", &server.url_for("/s/fail"), "-q"])
            .args(["--config", config.arg()])
            .env("COURIER_DEFAULT__RETRY__ATTEMPTS", "2")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the run ends")
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(server.hits("fail").len(), 2);
}

#[tokio::test]
async fn a_bad_file_exits_2_naming_each_field() {
    let server = failing_server().await;
    let url = server.url_for("/s/fail");
    let cases = [
        (
            "[[routes]]\nmatch = { path_prefix = \"s\" }\nretry = { attempts = 0 }\n",
            vec![
                "routes[0].match.path_prefix: must start with '/', got \"s\"",
                "routes[0].retry.attempts: must be at least 1, got 0",
            ],
        ),
        (
            "[default]\ndeadline = \"30\"\n",
            vec![
                "default.deadline: \"30\" has no unit: write \"250ms\", \"30s\", \"5m\" or \"1h\"",
            ],
        ),
        (
            "[default]\nretries = 3\n",
            vec![
                "default.retries: unknown field `retries`, expected one of `name`, `match`, \
                 `deadline`, `attempt_timeout`, `retry`, `rate_limit`, `breaker`, `pacing`, \
                 `cache`, `concurrency`, `hedge`",
            ],
        ),
    ];
    for (i, (text, lines)) in cases.iter().enumerate() {
        let config = TempFile::with(&format!("bad-{i}.toml"), text);
        for args in [
            vec!["request", "GET", &url, "--config", config.arg()],
            vec!["paginate", &url, "--config", config.arg()],
        ] {
            let run = courier(&args).await;
            assert_eq!(run.code, 2, "{args:?}: {run:?}");
            let stderr: Vec<&str> = run.stderr.lines().collect();
            assert_eq!(
                stderr[0],
                format!("error: {} is refused:", config.arg()),
                "{}",
                run.stderr
            );
            assert_eq!(&stderr[1..], lines.as_slice(), "{}", run.stderr);
        }
        let run = common::courier_with_input(
            &["batch", "--config", config.arg()],
            format!("{url}\n").as_bytes(),
        )
        .await;
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains(lines[0]), "{}", run.stderr);
    }
    assert!(server.hits("fail").is_empty(), "nothing is sent");

    let not_toml = TempFile::with("not-toml.toml", "[default\n");
    let run = courier(&["request", "GET", &url, "--config", not_toml.arg()]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .starts_with(&format!("error: {} is not TOML: ", not_toml.arg())),
        "{}",
        run.stderr
    );
    let missing = TempFile::path("missing.toml");
    let run = courier(&["request", "GET", &url, "--config", missing.arg()]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("cannot read"), "{}", run.stderr);
    // What the file cannot say is refused beside it.
    let good = TempFile::with("good.toml", "");
    let run = courier(&[
        "request",
        "GET",
        &url,
        "--config",
        good.arg(),
        "--seed",
        "1",
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

/// Reads stderr lines until one starts with `prefix`; the lines read.
async fn stderr_until(
    stderr: &mut BufReader<tokio::process::ChildStderr>,
    prefix: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(PATIENCE, stderr.read_line(&mut line))
            .await
            .unwrap_or_else(|_| panic!("no {prefix:?} on stderr: {seen:?}"))
            .unwrap();
        assert!(n > 0, "stderr ended before {prefix:?}: {seen:?}");
        let done = line.starts_with(prefix);
        seen.push(line.trim_end().to_owned());
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn sighup_reloads_the_file_and_keeps_the_old_one_when_it_is_bad() {
    let server = failing_server().await;
    let config = TempFile::with(
        "hup.toml",
        "[default]\nretry = { attempts = 3, base = \"1ms\" }\n",
    );
    let mut child = common::spawn(&["batch", "--config", config.arg()], Stdio::piped());
    let pid = child.id().expect("running");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut attempts_of_next = async |i: u32| -> Value {
        stdin
            .write_all(format!("{}\n", server.url_for(&format!("/s/fail?i={i}"))).as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        let mut line = String::new();
        tokio::time::timeout(PATIENCE, stdout.read_line(&mut line))
            .await
            .expect("a result comes")
            .unwrap();
        let result: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(result["status"], 500, "{result}");
        result["attempts"].clone()
    };
    assert_eq!(attempts_of_next(1).await, 3);

    std::fs::write(
        &config.0,
        "[default]\nretry = { attempts = 1, base = \"1ms\" }\n",
    )
    .unwrap();
    common::signal("HUP", pid);
    let seen = stderr_until(&mut stderr, "config ").await;
    assert_eq!(seen.last().unwrap(), "config reloaded", "{seen:?}");
    assert_eq!(attempts_of_next(2).await, 1, "the new file's attempts");

    std::fs::write(
        &config.0,
        "[default]\nretry = { attempts = 0 }\ndeadline = \"soon\"\n",
    )
    .unwrap();
    common::signal("HUP", pid);
    let seen = stderr_until(&mut stderr, "config ").await;
    assert_eq!(
        seen.last().unwrap(),
        &format!("config not reloaded: {} is refused:", config.arg()),
        "{seen:?}"
    );
    let why = stderr_until(&mut stderr, "default.").await;
    assert_eq!(
        why,
        [
            "default.deadline: \"soon\" is not a duration: write a whole number and a unit, \
          \"250ms\", \"30s\""
        ]
    );
    assert_eq!(attempts_of_next(3).await, 1, "the previous file stays");

    drop(stdin);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("the batch ends with its input")
        .unwrap();
    assert_eq!(status.code(), Some(1), "the requests failed");
    assert_eq!(server.hits("fail").len(), 3 + 1 + 1);
}

//! `courier paginate`: Link headers and cursors, one item per line, through the preset.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{PATIENCE, courier};
use courier_faultserver::{FaultServer, Step};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

fn ids(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .map(|line| {
            let item: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(line, item.to_string(), "one compact JSON value per line");
            item["id"].as_u64().expect("an id")
        })
        .collect()
}

#[tokio::test]
async fn link_pages_print_every_item_once_per_line() {
    let server = FaultServer::start().await.unwrap();
    let run = courier(&["paginate", &server.url_for("/items")]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=23).collect::<Vec<_>>());
    assert_eq!(server.hits("items").len(), 3, "10 + 10 + 3");
    assert!(
        run.stderr.is_empty(),
        "no progress line off a terminal: {run:?}"
    );
}

#[tokio::test]
async fn cursor_pages_follow_the_field() {
    let server = FaultServer::start().await.unwrap();
    let url = server.url_for("/cursor");
    let run = courier(&["paginate", &url, "--cursor"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=23).collect::<Vec<_>>());
    let hits = server.hits("cursor");
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].query, None);
    assert!(
        hits[1]
            .query
            .as_deref()
            .is_some_and(|q| q.starts_with("cursor=")),
        "{hits:?}"
    );

    // The field named, both ways.
    for args in [
        vec!["paginate", url.as_str(), "--cursor", "next_cursor"],
        vec!["paginate", "--cursor=next_cursor", url.as_str()],
    ] {
        let run = courier(&args).await;
        assert_eq!(run.code, 0, "{args:?}: {run:?}");
        assert_eq!(ids(&run.stdout).len(), 23, "{args:?}");
    }

    // A field the body does not have: one page, no next.
    let run = courier(&["paginate", &url, "--cursor=after"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn max_pages_stops_early() {
    let server = FaultServer::start().await.unwrap();
    let run = courier(&["paginate", &server.url_for("/items"), "--max-pages", "2"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=20).collect::<Vec<_>>());
    assert_eq!(server.hits("items").len(), 2);

    let run = courier(&[
        "paginate",
        &server.url_for("/cursor?limit=4"),
        "--cursor",
        "--max-pages",
        "3",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=12).collect::<Vec<_>>());
    assert_eq!(server.hits("cursor").len(), 3);
}

#[tokio::test]
async fn a_page_that_is_not_2xx_exits_1() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("gone", vec![Step::status(404).body("[]")]);
    let run = courier(&["paginate", &server.url_for("/s/gone")]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(run.stderr.contains("404 Not Found"), "{run:?}");

    server.set_plan("not-json", vec![Step::ok().body("<html>")]);
    let run = courier(&["paginate", &server.url_for("/s/not-json")]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("not JSON"), "{run:?}");
}

#[tokio::test]
async fn paginate_usage_errors_exit_2() {
    let server = FaultServer::start().await.unwrap();
    let url = server.url_for("/items");
    for (args, says) in [
        (vec!["paginate"], "required"),
        (vec!["paginate", url.as_str(), "--max-pages", "0"], "0"),
        (
            vec!["paginate", "--cursor", url.as_str()],
            "put the URL before --cursor",
        ),
        (vec!["paginate", "items"], "absolute URL"),
    ] {
        let run = courier(&args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    assert!(server.hits("items").is_empty());
}

#[tokio::test]
async fn a_link_to_another_origin_needs_allow_cross_origin() {
    let api = FaultServer::start().await.unwrap();
    let other = FaultServer::start().await.unwrap();
    other.set_plan("more", vec![Step::ok().body(r#"[{"id":2}]"#)]);
    let link = format!("<{}>; rel=\"next\"", other.url_for("/s/more"));
    api.set_plan(
        "first",
        vec![
            Step::ok()
                .header("link", link.as_str())
                .body(r#"[{"id":1}]"#)
                .times(2),
        ],
    );
    let start = api.url_for("/s/first");

    let run = courier(&["paginate", &start]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        ids(&run.stdout),
        vec![1],
        "the first page's items are printed"
    );
    assert!(run.stderr.contains(&other.url()), "{run:?}");
    assert!(run.stderr.contains("--allow-cross-origin"), "{run:?}");
    assert!(other.hits("more").is_empty(), "nothing was sent there");

    let run = courier(&["paginate", &start, "--allow-cross-origin"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), vec![1, 2]);
    assert_eq!(other.hits("more").len(), 1);
}

#[tokio::test]
async fn a_cursor_in_the_url_is_sent_first() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "cur",
        vec![Step::ok().body(r#"{"items":[{"id":11}],"next_cursor":null}"#)],
    );
    let run = courier(&[
        "paginate",
        &server.url_for("/s/cur?cursor=opaque-7"),
        "--cursor",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), vec![11]);
    let hits = server.hits("cur");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].query.as_deref(), Some("cursor=opaque-7"));
}

/// The words of a command as a POSIX shell splits them (single quotes only, as printed).
fn shell_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut in_word = false;
    for c in command.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The arguments of the `resume with: courier ...` line on stderr.
fn resume_args(stderr: &str) -> Vec<String> {
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("resume with: courier ").map(|(_, c)| c))
        .unwrap_or_else(|| panic!("no resume line in {stderr:?}"));
    shell_words(line)
}

#[tokio::test]
async fn a_listing_stopped_by_max_pages_says_how_to_resume() {
    let server = FaultServer::start().await.unwrap();
    let run = courier(&["paginate", &server.url_for("/items"), "--max-pages", "1"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=10).collect::<Vec<_>>());
    let args = resume_args(&run.stderr);
    assert_eq!(
        args,
        ["paginate", &server.url_for("/items?page=2&per_page=10")]
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = courier(&args).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (11..=23).collect::<Vec<_>>());
    assert!(run.stderr.is_empty(), "the end was reached: {run:?}");
}

#[tokio::test]
async fn a_cursor_listing_resumes_from_the_printed_cursor() {
    let server = FaultServer::start().await.unwrap();
    let start = server.url_for("/cursor?limit=4");
    let run = courier(&["paginate", &start, "--cursor", "--max-pages", "2"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (1..=8).collect::<Vec<_>>());
    let args = resume_args(&run.stderr);
    assert_eq!(args[..3], ["paginate", start.as_str(), "--cursor"]);
    assert_eq!(args[3], "--resume-cursor", "{args:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = courier(&args).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), (9..=23).collect::<Vec<_>>());
    let hits = server.hits("cursor");
    assert_eq!(hits.len(), 2 + 4, "8 items, then 15 in pages of 4");
}

#[tokio::test]
async fn a_failed_page_says_how_to_ask_for_it_again() {
    let server = FaultServer::start().await.unwrap();
    let second = server.url_for("/s/second");
    server.set_plan(
        "first",
        vec![
            Step::ok()
                .header("link", format!("<{second}>; rel=\"next\"").as_str())
                .body(r#"[{"id":1}]"#),
        ],
    );
    server.set_plan(
        "second",
        vec![
            Step::status(503).header("retry-after", "0").times(3),
            Step::ok().body(r#"[{"id":2}]"#),
        ],
    );
    let run = courier(&["paginate", &server.url_for("/s/first")]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(ids(&run.stdout), vec![1]);
    assert!(run.stderr.contains("503"), "{run:?}");
    assert_eq!(resume_args(&run.stderr), ["paginate", second.as_str()]);
    let run = courier(&["paginate", &second]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), vec![2]);
}

#[tokio::test]
async fn ctrl_c_stops_a_listing_and_says_how_to_resume() {
    let server = FaultServer::start().await.unwrap();
    let second = server.url_for("/s/late");
    server.set_plan(
        "early",
        vec![
            Step::ok()
                .header("link", format!("<{second}>; rel=\"next\"").as_str())
                .body(r#"[{"id":1}]"#),
        ],
    );
    server.set_plan(
        "late",
        vec![Step::ok().delay(Duration::from_secs(20)).body("[]")],
    );
    let mut child = common::spawn(&["paginate", &server.url_for("/s/early")], Stdio::null());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(PATIENCE, stdout.read_line(&mut first))
        .await
        .expect("the first page comes")
        .unwrap();
    assert_eq!(first, "{\"id\":1}\n");
    // The second page is on its way: wait until the server has it, then interrupt.
    tokio::time::timeout(PATIENCE, async {
        while server.hits("late").is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the second page is asked for");
    common::signal("INT", child.id().expect("still running"));
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the listing stops at once")
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        out.stdout.is_empty(),
        "nothing after the first page: {out:?}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("interrupted\n"), "{stderr}");
    assert_eq!(resume_args(&stderr), ["paginate", second.as_str()]);
}

/// A server on 127.0.0.1 whose every page `/p?n=N` holds one item and links to `/p?n=N+1`,
/// forever. Answers keep the connection open; the server stops with the test's runtime.
async fn endless_pager() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0_u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let n: u64 = head
                        .split_once("n=")
                        .and_then(|(_, rest)| {
                            rest.split(|c: char| !c.is_ascii_digit())
                                .next()?
                                .parse()
                                .ok()
                        })
                        .unwrap_or(0);
                    let body = format!("[{{\"id\":{n}}}]");
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nlink: </p?n={}>; rel=\"next\"\r\n\r\n{body}",
                        body.len(),
                        n + 1
                    );
                    if stream.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/p?n=1")
}

#[tokio::test]
async fn an_endless_listing_stops_at_the_default_bound_and_says_how_to_go_on() {
    let start = endless_pager().await;
    let run = courier(&["paginate", &start]).await;
    assert_eq!(
        run.code, 1,
        "the default bound is not the end: {}",
        run.stderr
    );
    let got = ids(&run.stdout);
    assert_eq!(got.len(), 10_000, "one item a page, 10 000 pages");
    assert_eq!(got.first(), Some(&1));
    assert_eq!(got.last(), Some(&10_000));
    assert!(
        run.stderr
            .contains("stopped after 10000 pages, the default bound"),
        "{}",
        run.stderr
    );
    let args = resume_args(&run.stderr);
    assert_eq!(args, ["paginate", &start.replace("n=1", "n=10001")]);

    // A bound of the caller's own ends it as asked.
    let run = courier(&["paginate", &start, "--max-pages", "3"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(ids(&run.stdout), [1, 2, 3]);
}

#[tokio::test]
async fn an_unbounded_listing_reads_past_the_default_until_sigterm() {
    let start = endless_pager().await;
    let mut child = common::spawn(&["paginate", &start, "--max-pages", "none"], Stdio::null());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let wanted = 10_500;
    for _ in 0..wanted {
        line.clear();
        tokio::time::timeout(PATIENCE, stdout.read_line(&mut line))
            .await
            .expect("pages keep coming")
            .unwrap();
    }
    assert_eq!(
        line,
        format!("{{\"id\":{wanted}}}\n"),
        "past the default bound"
    );
    common::signal("TERM", child.id().expect("still running"));
    let out = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("the listing stops at once")
        .unwrap();
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("terminated\n"), "{stderr}");
    let args = resume_args(&stderr);
    assert_eq!(args[0], "paginate");
    assert!(args[1].starts_with(&start[..start.len() - 1]), "{args:?}");
}

//! `courier serve`: prints its URL, serves, and refuses bad arguments.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

const PATIENCE: Duration = Duration::from_secs(30);

fn courier() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_courier"));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

#[tokio::test]
async fn serve_prints_its_url_and_answers() {
    let mut child = courier().args(["serve", "--port", "0"]).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, BufReader::new(stdout).read_line(&mut line))
        .await
        .expect("the URL is printed promptly")
        .unwrap();
    let url = line
        .trim_end()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
    let addr = url.strip_prefix("http://127.0.0.1:").expect("loopback URL");
    let port: u16 = addr.parse().expect("a port and nothing else");
    assert_ne!(port, 0);

    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.write_all(b"GET /items?page=3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, tcp.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.contains("\r\ndate: "), "{answer}");
    assert!(
        answer.ends_with(r#"[{"id":21},{"id":22},{"id":23}]"#),
        "{answer}"
    );

    child.start_kill().unwrap();
    tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn serve_refuses_a_bad_port_as_a_usage_error() {
    let out = courier()
        .args(["serve", "--port", "99999"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port"));
}

#[tokio::test]
async fn serve_says_when_the_port_is_taken() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = tokio::time::timeout(
        PATIENCE,
        courier().args(["serve", "--port", &port]).output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot listen on 127.0.0.1:") && stderr.contains("--port"),
        "{stderr}"
    );
}

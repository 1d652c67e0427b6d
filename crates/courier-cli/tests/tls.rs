//! HTTPS by default: `--cacert` for a private CA, a refused certificate as a clear failure, and
//! the User-Agent (`-A`). The server is an HTTPS server on 127.0.0.1 whose CA each test makes;
//! it answers with the User-Agent it received.

mod common;

use common::{TempFile, courier, courier_with_input};
use courier_testkit::tls::{TestCa, TlsServer};

const DEFAULT_AGENT: &str = concat!("courier/", env!("CARGO_PKG_VERSION"));

async fn server(ca: &TestCa) -> TlsServer {
    TlsServer::start(ca.leaf(&["127.0.0.1"]))
        .await
        .expect("the TLS server starts")
}

#[tokio::test]
async fn cacert_trusts_a_private_ca() {
    let ca = TestCa::new();
    let server = server(&ca).await;
    let pem = TempFile::with("cacert-ok.pem", ca.pem());
    let run = courier(&["request", "GET", &server.url("/hi"), "--cacert", pem.arg()]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, DEFAULT_AGENT, "the body echoes the User-Agent");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn an_unknown_issuer_fails_once_with_a_tls_message() {
    let ca = TestCa::new();
    let server = server(&ca).await;
    let run = courier(&["request", "GET", &server.url("/hi"), "--retries", "3"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    let messages = run.messages();
    assert_eq!(messages.len(), 1, "{run:?}");
    let message = messages[0];
    assert!(message.starts_with("error: tls failure"), "{message}");
    assert!(message.contains("--cacert"), "says what to do: {message}");
    assert_eq!(
        server.connections(),
        1,
        "a refused certificate is not retried"
    );
    assert_eq!(server.requests(), 0);
    let lines = run.attempt_lines();
    assert_eq!(lines.len(), 1, "{run:?}");
    assert_eq!(lines[0]["outcome"], "tls");
    assert_eq!(lines[0]["reason"], "never_retried");
}

#[tokio::test]
async fn an_expired_certificate_fails_even_from_a_trusted_ca() {
    let ca = TestCa::new();
    let server = TlsServer::start(ca.expired_leaf(&["127.0.0.1"]))
        .await
        .unwrap();
    let pem = TempFile::with("cacert-expired.pem", ca.pem());
    let run = courier(&["request", "GET", &server.url("/"), "--cacert", pem.arg()]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("error: tls failure"), "{run:?}");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn user_agent_is_courier_unless_a_or_h_says_otherwise() {
    let ca = TestCa::new();
    let server = server(&ca).await;
    let pem = TempFile::with("cacert-agent.pem", ca.pem());
    let url = server.url("/agent");
    for (extra, seen) in [
        (vec![], DEFAULT_AGENT),
        (vec!["-A", "inventory-sync/2.1"], "inventory-sync/2.1"),
        (vec!["--user-agent=probe"], "probe"),
        (vec!["-A", ""], ""),
        (vec!["-A", "ignored", "-H", "User-Agent: from-h"], "from-h"),
    ] {
        let mut args = vec!["request", "GET", url.as_str(), "--cacert", pem.arg()];
        args.extend(&extra);
        let run = courier(&args).await;
        assert_eq!(run.code, 0, "{extra:?}: {run:?}");
        assert_eq!(run.stdout, seen, "{extra:?}");
    }
    let run = courier(&["request", "GET", &url, "-A", "bad\u{1}agent"]).await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("control character"), "{run:?}");
}

#[tokio::test]
async fn a_cacert_that_cannot_be_used_is_a_usage_error_naming_the_file() {
    let ca = TestCa::new();
    let server = server(&ca).await;
    let url = server.url("/");
    let missing = TempFile::path("cacert-missing.pem");
    let not_pem = TempFile::with("cacert-text.pem", "just some text\n");
    let broken = TempFile::with(
        "cacert-broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
    );
    for (file, says) in [
        (&missing, "cannot read"),
        (&not_pem, "no certificate"),
        (&broken, ""),
    ] {
        for sub in ["request", "batch", "paginate"] {
            let args: Vec<&str> = match sub {
                "request" => vec!["request", "GET", &url, "--cacert", file.arg()],
                "batch" => vec!["batch", "--cacert", file.arg()],
                _ => vec!["paginate", &url, "--cacert", file.arg()],
            };
            let run = courier_with_input(&args, url.as_bytes()).await;
            assert_eq!(run.code, 2, "{args:?}: {run:?}");
            assert!(run.stderr.contains(file.arg()), "{args:?}: {run:?}");
            assert!(run.stderr.contains(says), "{args:?}: {run:?}");
            assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        }
    }
    assert_eq!(server.connections(), 0, "nothing was sent");
}

#[tokio::test]
async fn batch_and_paginate_trust_cacert_and_send_a() {
    let ca = TestCa::new();
    let server = server(&ca).await;
    let pem = TempFile::with("cacert-batch.pem", ca.pem());
    let input = format!("{}\n{}\n", server.url("/1"), server.url("/2"));
    let run = courier_with_input(
        &["batch", "--cacert", pem.arg(), "-A", "batcher", "--body"],
        input.as_bytes(),
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let bodies: Vec<String> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["body"].to_string())
        .collect();
    assert_eq!(bodies, ["\"batcher\"", "\"batcher\""]);

    // The echoed User-Agent is the page: a JSON array of two items.
    let run = courier(&[
        "paginate",
        &server.url("/list"),
        "--cacert",
        pem.arg(),
        "-A",
        "[1,2]",
    ])
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, "1\n2\n");
    assert_eq!(server.requests(), 3);
}

//! Mutual TLS: `--cert FILE --key FILE` present a client identity to a server that requires
//! one. The server is an HTTPS server on 127.0.0.1 that accepts only client certificates of a
//! second CA, both CAs made by each test; it answers with the User-Agent it received.

mod common;

use common::{TempFile, courier, courier_with_input};
use courier_testkit::tls::{ClientIdentity, TestCa, TlsServer};

const DEFAULT_AGENT: &str = concat!("courier/", env!("CARGO_PKG_VERSION"));

/// A server trusting the client certificates of `clients`, and the files a client needs: the
/// server's CA, and an identity of `clients` (certificate, key).
struct Setup {
    server: TlsServer,
    cacert: TempFile,
    cert: TempFile,
    key: TempFile,
}

async fn setup(tag: &str, clients: &TestCa, identity: &ClientIdentity) -> Setup {
    let ca = TestCa::new();
    let server = TlsServer::start_requiring_client_certs(ca.leaf(&["127.0.0.1"]), clients)
        .await
        .expect("the TLS server starts");
    Setup {
        server,
        cacert: TempFile::with(&format!("mtls-{tag}-ca.pem"), ca.pem()),
        cert: TempFile::with(&format!("mtls-{tag}-cert.pem"), identity.cert_pem()),
        key: TempFile::with(&format!("mtls-{tag}-key.pem"), identity.key_pem()),
    }
}

#[tokio::test]
async fn cert_and_key_are_presented_to_a_server_that_requires_them() {
    let clients = TestCa::new();
    let s = setup("ok", &clients, &clients.client_identity("cli")).await;
    let url = s.server.url("/hi");
    let tls = [
        "--cacert",
        s.cacert.arg(),
        "--cert",
        s.cert.arg(),
        "--key",
        s.key.arg(),
    ];

    let mut args = vec!["request", "GET", url.as_str()];
    args.extend(tls);
    let run = courier(&args).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout, DEFAULT_AGENT, "the body echoes the User-Agent");

    let mut args = vec!["batch"];
    args.extend(tls);
    let input = format!("{url}\n{url}\n");
    let run = courier_with_input(&args, input.as_bytes()).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 2, "{run:?}");
    assert_eq!(s.server.requests(), 3);

    let mut args = vec!["request", "GET", url.as_str(), "--dry-run"];
    args.extend(tls);
    let run = courier(&args).await;
    assert_eq!(run.code, 0, "{run:?}");
    let shown = format!(
        "client cert:     {}, presented when the server asks for one",
        s.cert.arg()
    );
    assert!(run.stdout.contains(&shown), "{run:?}");
    assert_eq!(s.server.requests(), 3, "a dry run sends nothing");
}

#[tokio::test]
async fn without_an_accepted_cert_the_server_refuses_once_with_a_tls_message() {
    let (clients, strangers) = (TestCa::new(), TestCa::new());
    let s = setup("refused", &clients, &strangers.client_identity("stranger")).await;
    let url = s.server.url("/hi");
    let no_cert = vec![
        "request",
        "GET",
        &url,
        "--retries",
        "3",
        "--cacert",
        s.cacert.arg(),
    ];
    let mut foreign_cert = no_cert.clone();
    foreign_cert.extend(["--cert", s.cert.arg(), "--key", s.key.arg()]);
    for (call, args) in [no_cert, foreign_cert].iter().enumerate() {
        let run = courier(args).await;
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        let messages = run.messages();
        assert_eq!(messages.len(), 1, "{args:?}: {run:?}");
        let message = messages[0];
        assert!(message.starts_with("error: tls failure"), "{message}");
        assert!(
            message.contains("the server refused the TLS handshake")
                && message.contains("--cert FILE --key FILE"),
            "says what to do: {message}"
        );
        assert_eq!(
            s.server.connections(),
            call + 1,
            "{args:?}: a refused handshake is not retried: {run:?}"
        );
        let lines = run.attempt_lines();
        assert_eq!(lines.len(), 1, "{args:?}: {run:?}");
        assert_eq!(lines[0]["outcome"], "tls");
        assert_eq!(lines[0]["reason"], "never_retried");
    }
    assert_eq!(s.server.requests(), 0);
}

#[tokio::test]
async fn cert_without_key_or_key_without_cert_is_a_usage_error() {
    let clients = TestCa::new();
    let s = setup("half", &clients, &clients.client_identity("cli")).await;
    let url = s.server.url("/");
    for (given, file, missing) in [("--cert", &s.cert, "--key"), ("--key", &s.key, "--cert")] {
        for sub in ["request", "batch", "paginate"] {
            let args: Vec<&str> = match sub {
                "request" => vec!["request", "GET", &url, given, file.arg()],
                "batch" => vec!["batch", given, file.arg()],
                _ => vec!["paginate", &url, given, file.arg()],
            };
            let run = courier_with_input(&args, url.as_bytes()).await;
            assert_eq!(run.code, 2, "{args:?}: {run:?}");
            assert!(run.stderr.contains(missing), "{args:?}: {run:?}");
            assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        }
    }
    assert_eq!(s.server.connections(), 0, "nothing was sent");
}

#[tokio::test]
async fn a_key_that_does_not_match_its_cert_is_a_usage_error_before_anything_is_sent() {
    let clients = TestCa::new();
    let s = setup("mismatch", &clients, &clients.client_identity("cli")).await;
    let other_key = TempFile::with(
        "mtls-mismatch-other.pem",
        clients.client_identity("other").key_pem(),
    );
    let not_a_key = TempFile::with("mtls-mismatch-text.pem", "just some text\n");
    let url = s.server.url("/");
    for (key, says) in [
        (&other_key, "the private key does not match the certificate"),
        (&not_a_key, "no private key in the PEM text"),
    ] {
        for sub in ["request", "dry-run", "batch", "paginate"] {
            let tls = ["--cert", s.cert.arg(), "--key", key.arg()];
            let mut args: Vec<&str> = match sub {
                "request" => vec!["request", "GET", &url],
                "dry-run" => vec!["request", "GET", &url, "--dry-run"],
                "batch" => vec!["batch"],
                _ => vec!["paginate", &url],
            };
            args.extend(tls);
            let run = courier_with_input(&args, url.as_bytes()).await;
            assert_eq!(run.code, 2, "{args:?}: {run:?}");
            assert!(run.stderr.contains(says), "{args:?}: {run:?}");
            assert!(
                run.stderr.contains(s.cert.arg()) && run.stderr.contains(key.arg()),
                "names both files: {run:?}"
            );
            assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        }
    }
    let missing = TempFile::path("mtls-mismatch-missing.pem");
    let run = courier(&[
        "request",
        "GET",
        &url,
        "--cert",
        missing.arg(),
        "--key",
        s.key.arg(),
    ])
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("cannot read") && run.stderr.contains(missing.arg()),
        "{run:?}"
    );
    assert_eq!(s.server.connections(), 0, "nothing was sent");
}

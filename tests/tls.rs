//! HTTPS over both transports against a server on 127.0.0.1 whose CA is made in the test: a
//! trusted chain works; an unknown issuer, a certificate for another host and an expired one
//! each fail once with kind `tls`, are not retried, and leave the breaker as it was. The
//! server echoes the `User-Agent` it received, so the same tests check the default one.
//!
//! Mutual TLS: a server that requires a client certificate from a second CA of the test
//! accepts a client identity over either transport, and refuses a client without one (or with
//! one from another CA) the same way; a key that does not match its certificate is refused
//! before any client is built.

use bytes::Bytes;
use courier::core::extensions::{AttemptOutcome, Decision, Reason};
use courier::core::{FailureKind, HostKey};
use courier::rustls;
use courier::transport::{
    DEFAULT_USER_AGENT, hyper_client_with_tls, reqwest_client_builder_with_tls, tls,
};
use courier::{CourierLayer, Error};
use courier_testkit::tls::{ClientIdentity, Leaf, TestCa, TlsServer};
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;

#[derive(Clone, Copy, Debug)]
enum Transport {
    Hyper,
    Reqwest,
}

const BOTH: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

type Client = tower::util::BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<http_body_util::combinators::UnsyncBoxBody<Bytes, courier::core::BoxError>>,
    courier::core::BoxError,
>;

/// The preset over `transport`, trusting the system's roots and `extra_root` when given.
fn client(transport: Transport, layer: &CourierLayer, extra_root: Option<&TestCa>) -> Client {
    let config = tls::client_config(extra_root.map(TestCa::der)).expect("trust anchors");
    client_with(transport, layer, config)
}

/// The preset over `transport` with TLS settings `config`, given to either transport the one
/// documented way.
fn client_with(transport: Transport, layer: &CourierLayer, config: rustls::ClientConfig) -> Client {
    match transport {
        Transport::Hyper => layer
            .hyper_with(hyper_client_with_tls::<Full<Bytes>>(config))
            .boxed(),
        Transport::Reqwest => {
            let client = reqwest_client_builder_with_tls(config)
                .build()
                .expect("a reqwest client");
            layer.reqwest::<Full<Bytes>>(client).boxed()
        }
    }
}

/// TLS settings trusting `ca` and presenting `identity`.
fn mutual(ca: &TestCa, identity: &ClientIdentity) -> rustls::ClientConfig {
    let identity = tls::Identity::from_pem(
        identity.cert_pem().as_bytes(),
        identity.key_pem().as_bytes(),
    )
    .expect("a matching certificate and key");
    tls::client_config_with_identity([ca.der()], identity).expect("trust anchors")
}

fn get(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(url).body(Full::default()).unwrap()
}

#[tokio::test]
async fn a_trusted_chain_answers_with_the_default_user_agent_over_either_transport() {
    let ca = TestCa::new();
    let server = TlsServer::start(ca.leaf(&["127.0.0.1"])).await.unwrap();
    for transport in BOTH {
        let svc = client(transport, &CourierLayer::new(), Some(&ca));
        let resp = svc.oneshot(get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), 200, "{transport:?}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, DEFAULT_USER_AGENT.as_bytes(), "{transport:?}");
    }
    assert!(DEFAULT_USER_AGENT.starts_with("courier/"));
}

#[tokio::test]
async fn a_user_agent_of_the_callers_own_or_of_the_preset_is_kept() {
    let ca = TestCa::new();
    let server = TlsServer::start(ca.leaf(&["127.0.0.1"])).await.unwrap();
    for transport in BOTH {
        let svc = client(transport, &CourierLayer::new(), Some(&ca));
        let mut req = get(&server.url("/"));
        req.headers_mut()
            .insert(http::header::USER_AGENT, "mine/2".parse().unwrap());
        let body = svc.oneshot(req).await.unwrap().into_body().collect().await;
        assert_eq!(body.unwrap().to_bytes(), "mine/2", "{transport:?}");

        let layer = CourierLayer::new().user_agent(http::HeaderValue::from_static("preset/3"));
        let svc = client(transport, &layer, Some(&ca));
        let body = svc.oneshot(get(&server.url("/"))).await.unwrap();
        let body = body.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "preset/3", "{transport:?}");

        let svc = client(transport, &CourierLayer::new().user_agent(None), Some(&ca));
        let body = svc.oneshot(get(&server.url("/"))).await.unwrap();
        let body = body.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "", "{transport:?}: no User-Agent at all");
    }
}

/// Six calls, one more than the breaker's default of five consecutive failures: each fails
/// with kind `tls` after one connection (no retry), and the circuit stays as it was.
async fn refused(leaf: impl Fn(&TestCa) -> Leaf, trust_the_ca: bool, what: &str) {
    for transport in BOTH {
        let ca = TestCa::new();
        let server = TlsServer::start(leaf(&ca)).await.unwrap();
        let layer = CourierLayer::new();
        let breaker = layer.breaker_layer().expect("on by default").handle();
        let svc = client(transport, &layer, trust_the_ca.then_some(&ca));
        for call in 1..=6 {
            let err = svc
                .clone()
                .oneshot(get(&server.url("/")))
                .await
                .unwrap_err();
            let err = Error::from(err);
            assert_eq!(
                err.kind(),
                FailureKind::Tls,
                "{what} over {transport:?}, call {call}: {err:?}"
            );
            assert_eq!(
                server.connections(),
                call,
                "{what} over {transport:?}: one connection per call, no retry"
            );
        }
        assert_eq!(
            server.requests(),
            0,
            "{what}: no request crossed a refused handshake"
        );
        let host = HostKey::from_request(&get(&server.url("/")));
        let status = breaker.status(&host);
        assert!(
            status.is_none_or(|s| s.consecutive_failures() == 0),
            "{what} over {transport:?}: the breaker saw {status:?}"
        );
    }
}

#[tokio::test]
async fn an_unknown_issuer_fails_once_with_kind_tls() {
    refused(|ca| ca.leaf(&["127.0.0.1"]), false, "unknown issuer").await;
}

#[tokio::test]
async fn a_certificate_for_another_host_fails_once_with_kind_tls() {
    refused(|ca| ca.leaf(&["wrong.example"]), true, "wrong host name").await;
}

#[tokio::test]
async fn an_expired_certificate_fails_once_with_kind_tls() {
    refused(|ca| ca.expired_leaf(&["127.0.0.1"]), true, "expired").await;
}

#[test]
fn pem_without_a_certificate_is_a_clear_error() {
    let err = tls::pem_certificates(b"hello").unwrap_err();
    assert!(err.to_string().contains("no certificate"), "{err}");
    let ca = TestCa::new();
    let certs = tls::pem_certificates(ca.pem().as_bytes()).unwrap();
    assert_eq!(certs, vec![ca.der()]);
}

#[tokio::test]
async fn a_client_identity_is_accepted_over_either_transport() {
    let (ca, clients) = (TestCa::new(), TestCa::new());
    let server = TlsServer::start_requiring_client_certs(ca.leaf(&["127.0.0.1"]), &clients)
        .await
        .unwrap();
    let identity = clients.client_identity("checkout");
    let layer = CourierLayer::new().user_agent(http::HeaderValue::from_static("checkout/1"));
    for transport in BOTH {
        let svc = client_with(transport, &layer, mutual(&ca, &identity));
        let resp = svc.oneshot(get(&server.url("/"))).await;
        let resp = resp.unwrap_or_else(|e| panic!("{transport:?}: {:?}", Error::from(e)));
        assert_eq!(resp.status(), 200, "{transport:?}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "checkout/1", "{transport:?}: the layer's agent");
    }
    assert_eq!(server.requests(), 2, "one request per transport");
}

/// Six calls, one more than the breaker's default of five consecutive failures, by a client
/// the server does not authenticate: each fails with kind `tls` after one attempt, never
/// retried, and the circuit stays as it was.
#[tokio::test]
async fn a_client_without_an_accepted_identity_is_refused_once_with_kind_tls() {
    let (ca, clients, strangers) = (TestCa::new(), TestCa::new(), TestCa::new());
    let stranger = strangers.client_identity("stranger");
    let cases = [
        (
            "no identity",
            tls::client_config([ca.der()]).expect("trust anchors"),
        ),
        ("an identity of another CA", mutual(&ca, &stranger)),
    ];
    for (what, config) in cases {
        for transport in BOTH {
            let server = TlsServer::start_requiring_client_certs(ca.leaf(&["127.0.0.1"]), &clients)
                .await
                .unwrap();
            let layer = CourierLayer::new();
            let breaker = layer.breaker_layer().expect("on by default").handle();
            let svc = client_with(transport, &layer, config.clone());
            for call in 1..=6 {
                let err = svc
                    .clone()
                    .oneshot(get(&server.url("/")))
                    .await
                    .unwrap_err();
                let err = Error::from(err);
                let case = format!("{what} over {transport:?}, call {call}: {err:?}");
                assert_eq!(err.kind(), FailureKind::Tls, "{case}");
                let records: Vec<_> = err.attempts().iter().collect();
                assert_eq!(records.len(), 1, "{case}: one attempt");
                assert_eq!(
                    records[0].outcome,
                    AttemptOutcome::Failure(FailureKind::Tls),
                    "{case}"
                );
                assert_eq!(records[0].decision, Decision::Stop, "{case}");
                assert_eq!(records[0].reason, Reason::NeverRetried, "{case}");
                assert_eq!(server.connections(), call, "{case}: no retry");
            }
            assert_eq!(server.requests(), 0, "{what} over {transport:?}");
            let host = HostKey::from_request(&get(&server.url("/")));
            let status = breaker.status(&host);
            assert!(
                status.is_none_or(|s| s.consecutive_failures() == 0),
                "{what} over {transport:?}: the breaker saw {status:?}"
            );
        }
    }
}

#[test]
fn a_key_that_does_not_match_its_certificate_is_refused_before_any_client_is_built() {
    let clients = TestCa::new();
    let (mine, theirs) = (clients.client_identity("a"), clients.client_identity("b"));
    let err = tls::Identity::from_pem(mine.cert_pem().as_bytes(), theirs.key_pem().as_bytes())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the private key does not match the certificate (the first of the chain)"
    );

    let err = tls::Identity::from_pem(mine.cert_pem().as_bytes(), mine.cert_pem().as_bytes())
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no private key in the PEM text"),
        "{err}"
    );
    let err =
        tls::Identity::from_pem(mine.key_pem().as_bytes(), mine.key_pem().as_bytes()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no certificate in the PEM text"),
        "{err}"
    );

    // One file holding both the certificate and its key serves as either.
    let both = format!("{}{}", mine.cert_pem(), mine.key_pem());
    let identity = tls::Identity::from_pem(both.as_bytes(), both.as_bytes()).unwrap();
    assert!(
        format!("{identity:?}").contains("certificates: 1"),
        "{identity:?}"
    );
}

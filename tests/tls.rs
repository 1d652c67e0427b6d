//! HTTPS over both transports against a server on 127.0.0.1 whose CA is made in the test: a
//! trusted chain works; an unknown issuer, a certificate for another host and an expired one
//! each fail once with kind `tls`, are not retried, and leave the breaker as it was. The
//! server echoes the `User-Agent` it received, so the same tests check the default one.

use bytes::Bytes;
use courier::core::{FailureKind, HostKey};
use courier::transport::{DEFAULT_USER_AGENT, reqwest_client_builder, tls};
use courier::{CourierLayer, Error};
use courier_testkit::tls::{Leaf, TestCa, TlsServer};
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;

#[derive(Clone, Copy, Debug)]
enum Transport {
    Hyper,
    Reqwest,
}

const BOTH: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

/// The preset over `transport`, trusting the system's roots and `extra_root` when given.
fn client(
    transport: Transport,
    layer: &CourierLayer,
    extra_root: Option<&TestCa>,
) -> tower::util::BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<http_body_util::combinators::UnsyncBoxBody<Bytes, courier::core::BoxError>>,
    courier::core::BoxError,
> {
    match transport {
        Transport::Hyper => {
            let config = tls::client_config(extra_root.map(TestCa::der)).expect("trust anchors");
            layer
                .hyper_with(courier::transport::hyper_client_with_tls::<Full<Bytes>>(
                    config,
                ))
                .boxed()
        }
        Transport::Reqwest => {
            let mut builder = reqwest_client_builder();
            if let Some(ca) = extra_root {
                let cert = courier::reqwest::Certificate::from_pem(ca.pem().as_bytes())
                    .expect("the test CA in PEM");
                builder = builder.tls_certs_merge([cert]);
            }
            layer
                .reqwest::<Full<Bytes>>(builder.build().expect("a reqwest client"))
                .boxed()
        }
    }
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

//! Every way to build the preset over a transport sends the `User-Agent` it was given, checked
//! at a server on 127.0.0.1: `hyper()`, `hyper_with(..)` and `reqwest(..)` send the layer's
//! (`CourierLayer::user_agent`); a transport given to `service(..)` sends its own, set on it.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::BoxError;
use courier::transport::{
    DEFAULT_USER_AGENT, HyperService, ReqwestService, hyper_client, reqwest_client_builder,
};
use courier_faultserver::FaultServer;
use http::HeaderValue;
use http_body_util::Full;
use http_body_util::combinators::UnsyncBoxBody;
use std::time::Duration;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

type Boxed = BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<UnsyncBoxBody<Bytes, BoxError>>,
    BoxError,
>;

fn reqwest_client() -> courier::reqwest::Client {
    reqwest_client_builder()
        .build()
        .expect("reqwest builds a plain-HTTP client")
}

/// Each way to build the preset, named, with `agent` configured the way that path takes it.
fn every_path(agent: &HeaderValue) -> Vec<(&'static str, Boxed)> {
    let layer = CourierLayer::new().user_agent(agent.clone());
    vec![
        ("hyper()", layer.hyper::<Full<Bytes>>().boxed()),
        (
            "hyper_with(..)",
            layer.hyper_with(hyper_client::<Full<Bytes>>()).boxed(),
        ),
        (
            "reqwest(..)",
            layer.reqwest::<Full<Bytes>>(reqwest_client()).boxed(),
        ),
        (
            "service(HyperService::new(..).user_agent(..))",
            CourierLayer::new()
                .service(HyperService::new(hyper_client::<Full<Bytes>>()).user_agent(agent.clone()))
                .boxed(),
        ),
        (
            "service(ReqwestService::new(..).user_agent(..))",
            CourierLayer::new()
                .service(
                    ReqwestService::<Full<Bytes>>::new(reqwest_client()).user_agent(agent.clone()),
                )
                .boxed(),
        ),
    ]
}

/// The `User-Agent` the server saw on the one request `svc` sent to `/s/{name}`.
async fn seen(server: &FaultServer, name: &str, svc: Boxed) -> Option<String> {
    let req = http::Request::get(server.url_for(&format!("/s/{name}")))
        .body(Full::default())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), svc.oneshot(req))
        .await
        .expect("bounded")
        .unwrap_or_else(|e| panic!("{name}: {:?}", courier::Error::from(e)));
    assert_eq!(resp.status(), 200, "{name}");
    let hits = server.hits(name);
    assert_eq!(hits.len(), 1, "{name}");
    hits[0].header("user-agent").map(str::to_owned)
}

#[tokio::test]
async fn every_builder_path_sends_the_configured_user_agent() {
    let server = FaultServer::start().await.unwrap();
    let agent = HeaderValue::from_static("inventory-sync/2.1");
    for (i, (path, svc)) in every_path(&agent).into_iter().enumerate() {
        let name = format!("agent-{i}");
        let got = seen(&server, &name, svc).await;
        assert_eq!(got.as_deref(), Some("inventory-sync/2.1"), "{path}");
    }
}

/// The documented difference: `CourierLayer::user_agent` does not reach a transport made by
/// hand and given to `service`, which sends its own default.
#[tokio::test]
async fn a_transport_given_to_service_keeps_its_own_agent() {
    let server = FaultServer::start().await.unwrap();
    let layer = CourierLayer::new().user_agent(HeaderValue::from_static("ignored/1"));
    let hyper = layer
        .service(HyperService::new(hyper_client::<Full<Bytes>>()))
        .boxed();
    let reqwest = layer
        .service(ReqwestService::<Full<Bytes>>::new(reqwest_client()))
        .boxed();
    for (name, svc) in [("own-hyper", hyper), ("own-reqwest", reqwest)] {
        let got = seen(&server, name, svc).await;
        assert_eq!(got.as_deref(), Some(DEFAULT_USER_AGENT), "{name}");
    }
}

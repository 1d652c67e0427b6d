//! Hedging in the preset, over both transports and real sockets: a slow first answer is
//! overtaken by a hedge, the loser is dropped with its permit, and the host sees exactly the
//! requests that were sent.

mod common;

use common::{TRANSPORTS, bounded, get, over};
use courier::CourierLayer;
use courier::retry::RetryBudget;
use courier::retry::hedge::{HedgeLayer, Hedged};
use courier_faultserver::{FaultServer, Step};
use std::time::Duration;
use tower::ServiceExt;

#[tokio::test]
async fn a_slow_answer_is_overtaken_by_a_hedge_and_the_loser_leaves_nothing_behind() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("tail");
        server.set_plan(
            "tail",
            vec![
                Step::ok().delay(Duration::from_secs(5)).body("slow"),
                Step::ok().body("quick"),
            ],
        );
        let hedge = HedgeLayer::new()
            .after(Duration::from_millis(100))
            .budget(RetryBudget::new().floor(10));
        let layer = CourierLayer::new().cache(None).hedge(hedge);
        let client = over(transport, &layer);
        let started = tokio::time::Instant::now();
        let res = bounded(client.oneshot(get(&server.url_for("/s/tail"))))
            .await
            .unwrap();
        let took = started.elapsed();
        let hedged = res.extensions().get::<Hedged>().cloned();
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(body, "quick", "{transport:?}");
        assert!(took < Duration::from_secs(4), "{transport:?}: {took:?}");
        let hedged = hedged.unwrap_or_else(|| panic!("{transport:?}: no Hedged record"));
        assert_eq!(
            hedged.winner().unwrap().attempt,
            2,
            "{transport:?}: {hedged}"
        );
        assert_eq!(server.hits("tail").len(), 2, "{transport:?}");
        // The losing request's concurrency permit went back when it was dropped.
        let status = layer
            .concurrency_layer()
            .unwrap()
            .handle()
            .status(&courier::core::HostKey::from_request(&get(
                &server.url_for("/")
            )))
            .unwrap();
        assert_eq!(status.in_flight, 0, "{transport:?}");
    }
}

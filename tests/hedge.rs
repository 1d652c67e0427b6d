//! Hedging in the preset, over both transports and real sockets: a slow first answer is
//! overtaken by a hedge, the loser is dropped with its permit, the host sees exactly the
//! requests that were sent, and over HTTP/1.1 it sees the loser's connection closed.

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

/// A loopback HTTP/1.1 server that never answers its first request and answers every other
/// at once; it reports when the connection of the first is closed by the client.
async fn stalling_first_server() -> (String, tokio::sync::oneshot::Receiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/s", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut closed_tx = Some(closed_tx);
        for n in 0..8 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let first = n == 0;
            let closed = if first { closed_tx.take() } else { None };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    match conn.read(&mut buf).await {
                        // The client closed the connection.
                        Ok(0) | Err(_) => {
                            if let Some(tx) = closed {
                                let _ = tx.send(());
                            }
                            return;
                        }
                        Ok(_) if first => {} // never answered
                        Ok(_) => {
                            let answer = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nquick";
                            if conn.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (url, closed_rx)
}

#[tokio::test]
async fn over_http1_the_server_sees_the_losing_request_cancelled() {
    for transport in TRANSPORTS {
        let (url, closed) = stalling_first_server().await;
        let hedge = HedgeLayer::new()
            .after(Duration::from_millis(50))
            .budget(RetryBudget::new().floor(10));
        let client = over(transport, &CourierLayer::new().cache(None).hedge(hedge));
        let res = bounded(client.oneshot(get(&url))).await.unwrap();
        let hedged = res.extensions().get::<Hedged>().cloned().expect("hedged");
        let outcomes: Vec<_> = hedged
            .requests()
            .iter()
            .map(|r| r.outcome.as_str())
            .collect();
        assert_eq!(outcomes, ["cancelled", "won"], "{transport:?}: {hedged}");
        // The stalled request's connection is closed once the hedge has won: the server reads
        // its end.
        bounded(closed)
            .await
            .unwrap_or_else(|_| panic!("{transport:?}: the server never saw the cancel"));
    }
}

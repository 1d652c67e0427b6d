//! The preset's concurrency limit over both transports, through the fault server on loopback:
//! a host that holds its answers holds no more attempts than the limit, the calls over it fail
//! at once with a refusal that sent nothing, and neither the breaker nor another host feels it.

mod common;

use common::{TRANSPORTS, bounded, get, over};
use courier::CourierLayer;
use courier::concurrency::ConcurrencyLimitLayer;
use courier::core::HostKey;
use courier::core::extensions::Reason;
use courier_faultserver::{FaultServer, Step};
use futures_util::future::join_all;
use std::num::NonZeroUsize;
use std::time::Duration;
use tower::ServiceExt;

const LIMIT: usize = 2;
const CALLS: usize = 6;
const HELD: Duration = Duration::from_millis(800);

#[tokio::test]
async fn a_host_holding_its_answers_holds_no_more_than_the_limit() {
    let slow = FaultServer::start().await.unwrap();
    let healthy = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        slow.clear("held");
        slow.set_plan("held", vec![Step::ok().delay(HELD).body("late"); CALLS]);
        healthy.clear("quick");
        healthy.set_plan("quick", vec![Step::ok().body("quick")]);
        let limit = ConcurrencyLimitLayer::new().fixed(NonZeroUsize::new(LIMIT).unwrap());
        let layer = CourierLayer::new().cache(None).concurrency_limit(limit);
        let client = over(transport, &layer);

        let url = slow.url_for("/s/held");
        let calls = (0..CALLS).map(|_| {
            let call = client.clone().oneshot(get(&url));
            async move {
                let result = call.await;
                (result, tokio::time::Instant::now())
            }
        });
        let started = tokio::time::Instant::now();
        // While the slow host holds its two, a call to another host goes through.
        let quick = async {
            tokio::time::sleep(HELD / 4).await;
            let resp = client
                .clone()
                .oneshot(get(&healthy.url_for("/s/quick")))
                .await;
            (resp, tokio::time::Instant::now())
        };
        let (results, (quick, quick_at)) =
            bounded(async { tokio::join!(join_all(calls), quick) }).await;

        let first_served = results
            .iter()
            .filter(|(r, _)| r.is_ok())
            .map(|(_, at)| *at)
            .min()
            .expect("some were served");
        let quick = quick.expect("the other host answers");
        assert_eq!(quick.status(), 200, "{transport:?}");
        assert!(
            quick_at < first_served,
            "{transport:?}: not held behind the slow host"
        );

        let (served, refused): (Vec<_>, Vec<_>) = results.into_iter().partition(|(r, _)| r.is_ok());
        assert_eq!(served.len(), LIMIT, "{transport:?}");
        assert_eq!(refused.len(), CALLS - LIMIT, "{transport:?}");
        assert_eq!(
            slow.hits("held").len(),
            LIMIT,
            "{transport:?}: only the limit was sent"
        );
        for (result, at) in refused {
            let err = courier::Error::from(result.err().unwrap());
            let courier::Error::ConcurrencyLimited(limited) = &err else {
                panic!("{transport:?}: a concurrency refusal, got {err}")
            };
            assert_eq!((limited.in_flight(), limited.limit()), (LIMIT, LIMIT));
            assert!(err.nothing_sent(), "{transport:?}");
            // Refused at once: before the held answers come.
            assert!(
                at < first_served,
                "{transport:?}: refused after {:?}",
                at - started
            );
            let records = err.attempts();
            assert_eq!(records.count(), 1, "{transport:?}: never retried");
            assert_eq!(records.last().unwrap().reason, Reason::NeverRetried);
        }
        for (result, at) in served {
            assert!(at - started >= HELD, "{transport:?}");
            let body = result.unwrap();
            assert_eq!(body.status(), 200, "{transport:?}");
        }

        // The refusals say nothing about the host: its circuit stays closed.
        let host = HostKey::from_request(&get(&url));
        let breaker = layer.breaker_layer().unwrap().handle();
        assert_eq!(
            breaker.state(&host),
            Some(courier::breaker::CircuitState::Closed),
            "{transport:?}"
        );
        // And every permit came back once the answers were read.
        let status = layer
            .concurrency_layer()
            .unwrap()
            .handle()
            .status(&host)
            .unwrap();
        assert_eq!(status.in_flight, 0, "{transport:?}");
    }
}

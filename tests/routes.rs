//! One preset, many upstreams: rules per destination read from a configuration, through fault
//! servers on loopback, and reloads that keep what did not change.

mod common;

use common::{bounded, get};
use courier::CourierLayer;
use courier::config::Config;
use courier_faultserver::{FaultServer, Step};
use futures_util::future::join_all;
use std::time::Duration;
use tower::ServiceExt;

fn config(text: &str) -> Config {
    Config::from_deserializer(toml::Deserializer::parse(text).expect("TOML")).expect("valid")
}

/// The hits at `server`'s `/s/{name}`.
fn hits(server: &FaultServer, name: &str) -> usize {
    server.hits(name).len()
}

async fn call(
    client: &courier::Courier<courier::transport::HyperService<http_body_util::Full<bytes::Bytes>>>,
    url: &str,
) -> Result<u16, courier::Error> {
    client
        .clone()
        .oneshot(get(url))
        .await
        .map(|r| r.status().as_u16())
        .map_err(courier::Error::from)
}

#[tokio::test]
async fn three_upstreams_each_see_their_own_attempts_deadline_and_pacing() {
    let internal = FaultServer::start().await.unwrap();
    let partner = FaultServer::start().await.unwrap();
    let other = FaultServer::start().await.unwrap();
    let layer = CourierLayer::from_config(&config(&format!(
        r#"
        [default]
        cache = false
        retry = {{ attempts = 3, base = "1ms" }}

        [[routes]]
        name = "internal"
        match = {{ host = "127.0.0.1", port = {internal} }}
        deadline = "300ms"
        retry = {{ attempts = 2 }}

        [[routes]]
        name = "partner"
        match = {{ port = {partner} }}
        rate_limit = {{ rate = "4/s", burst = 1 }}
        retry = {{ attempts = 4 }}
        "#,
        internal = internal.addr().port(),
        partner = partner.addr().port(),
    )))
    .unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();

    for server in [&internal, &partner, &other] {
        server.set_plan("failing", vec![Step::status(500).times(10)]);
    }
    internal.set_plan("slow", vec![Step::ok().delay(Duration::from_secs(3))]);
    partner.set_plan("paced", vec![Step::ok().times(4)]);

    bounded(async {
        for server in [&internal, &partner, &other] {
            let status = call(&client, &server.url_for("/s/failing")).await.unwrap();
            assert_eq!(status, 500);
        }
        // Attempts: 2 for the internal host, 4 for the partner, the default's 3 elsewhere.
        assert_eq!(hits(&internal, "failing"), 2);
        assert_eq!(hits(&partner, "failing"), 4);
        assert_eq!(hits(&other, "failing"), 3);

        // The internal host's 300 ms deadline ends a slow call; the server saw one attempt.
        let started = tokio::time::Instant::now();
        let err = call(&client, &internal.url_for("/s/slow"))
            .await
            .unwrap_err();
        assert!(matches!(err, courier::Error::DeadlineExceeded(_)), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(hits(&internal, "slow"), 1);

        // The partner's 4/s pacing: four calls at once are sent 250 ms apart.
        let url = partner.url_for("/s/paced");
        let ended = ended_after(tokio::time::Instant::now(), 4, || call(&client, &url)).await;
        assert_paced(&ended, Duration::from_millis(250));
    })
    .await;
    assert_eq!(hits(&partner, "paced"), 4);
}

/// A timer fires at its instant or later, but a bucket's instants are rounded to the
/// millisecond: a few of slack.
const SLACK: Duration = Duration::from_millis(5);

/// Makes `n` calls at once, each asserted to answer 200: the time each one ended after
/// `since`, the soonest first.
async fn ended_after<F, Fut>(since: tokio::time::Instant, n: usize, call: F) -> Vec<Duration>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<u16, courier::Error>>,
{
    let calls = (0..n).map(|_| {
        let call = call();
        async move { (call.await, since.elapsed()) }
    });
    let mut ended = Vec::new();
    for (result, elapsed) in join_all(calls).await {
        assert_eq!(result.unwrap(), 200);
        ended.push(elapsed);
    }
    ended.sort();
    ended
}

/// Asserts that calls started together were sent `gap` apart: the k-th to end (from 0) cannot
/// have ended before k gaps had passed. Counted on the caller's side, a lower bound holds
/// however late a loaded machine runs; the gaps between the server's records of arrival do
/// not (one arrival delayed shortens the gap to the next).
fn assert_paced(ended: &[Duration], gap: Duration) {
    for (k, elapsed) in (0_u32..).zip(ended) {
        assert!(*elapsed + SLACK >= gap * k, "sent {gap:?} apart: {ended:?}");
    }
}

#[tokio::test]
async fn a_payments_route_repeats_nothing_while_search_on_the_same_host_is_retried() {
    let server = FaultServer::start().await.unwrap();
    let layer = CourierLayer::from_config(&config(
        r#"
        [default]
        cache = false
        retry = { base = "1ms" }

        [[routes]]
        match = { path_prefix = "/s/payments" }
        retry = false
        "#,
    ))
    .unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("search", vec![Step::status(500).times(5)]);
    server.set_plan("payments", vec![Step::status(500).times(5)]);
    server.set_plan("paymentsfoo", vec![Step::status(500).times(5)]);
    bounded(async {
        call(&client, &server.url_for("/s/search")).await.unwrap();
        call(&client, &server.url_for("/s/payments")).await.unwrap();
        call(&client, &server.url_for("/s/paymentsfoo"))
            .await
            .unwrap();
    })
    .await;
    assert_eq!(hits(&server, "search"), 3);
    assert_eq!(hits(&server, "payments"), 1);
    // Whole segments only: `/s/paymentsfoo` is not under `/s/payments`.
    assert_eq!(hits(&server, "paymentsfoo"), 3);
}

const BROKEN_ROUTE: &str = r#"
    [default]
    cache = false
    retry = false

    [[routes]]
    name = "broken"
    match = { path_prefix = "/s/broken" }
    breaker = { key = "route", failing_answers_for = "1ms" }
"#;

/// Opens the route-keyed breaker of `/s/broken`: failing answers with no success between.
async fn open_broken(
    client: &courier::Courier<courier::transport::HyperService<http_body_util::Full<bytes::Bytes>>>,
    server: &FaultServer,
) {
    server.set_plan("broken", vec![Step::status(500).times(50)]);
    for _ in 0..20 {
        match call(client, &server.url_for("/s/broken")).await {
            Ok(status) => assert_eq!(status, 500),
            Err(courier::Error::CircuitOpen(_)) => return,
            Err(e) => panic!("a 500 or an open circuit, got {e}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the route's breaker never opened");
}

#[tokio::test]
async fn a_route_keyed_breaker_opens_for_its_paths_only() {
    let server = FaultServer::start().await.unwrap();
    let layer = CourierLayer::from_config(&config(BROKEN_ROUTE)).unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("fine", vec![Step::ok().times(10)]);
    bounded(async {
        open_broken(&client, &server).await;
        let sent = hits(&server, "broken");
        assert!(matches!(
            call(&client, &server.url_for("/s/broken")).await,
            Err(courier::Error::CircuitOpen(_))
        ));
        assert_eq!(hits(&server, "broken"), sent, "refused without sending");
        // The rest of the host is served.
        for _ in 0..5 {
            assert_eq!(
                call(&client, &server.url_for("/s/fine")).await.unwrap(),
                200
            );
        }
    })
    .await;
}

#[tokio::test]
async fn an_open_breaker_stays_open_across_a_reload() {
    let server = FaultServer::start().await.unwrap();
    let (layer, handle) = CourierLayer::from_config_reloadable(&config(BROKEN_ROUTE)).unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    bounded(async {
        open_broken(&client, &server).await;
        // A reload that changes another route and the default's deadline.
        let next = format!(
            "{BROKEN_ROUTE}\n[[routes]]\nname = \"other\"\nmatch = {{ port = 1 }}\ndeadline = \"1s\"\n"
        );
        handle.reload(&config(&next)).unwrap();
        assert_eq!(handle.reloads(), 1);
        let sent = hits(&server, "broken");
        assert!(matches!(
            call(&client, &server.url_for("/s/broken")).await,
            Err(courier::Error::CircuitOpen(_))
        ));
        assert_eq!(hits(&server, "broken"), sent);
    })
    .await;
}

fn limited(other_deadline: &str, rate: &str) -> String {
    format!(
        r#"
        [default]
        cache = false
        retry = false

        [[routes]]
        name = "limited"
        match = {{ path_prefix = "/s/limited" }}
        rate_limit = {{ rate = "{rate}", burst = 10, mode = "reject" }}

        [[routes]]
        name = "other"
        match = {{ path_prefix = "/s/other" }}
        deadline = "{other_deadline}"
        "#
    )
}

#[tokio::test]
async fn a_bucket_keeps_its_level_across_a_reload_that_changed_another_route() {
    let server = FaultServer::start().await.unwrap();
    let (layer, handle) =
        CourierLayer::from_config_reloadable(&config(&limited("5s", "10/m"))).unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("limited", vec![Step::ok().times(20)]);
    bounded(async {
        for _ in 0..8 {
            assert_eq!(
                call(&client, &server.url_for("/s/limited")).await.unwrap(),
                200
            );
        }
        // 2 of 10 tokens left; another route changes.
        handle.reload(&config(&limited("7s", "10/m"))).unwrap();
        for _ in 0..2 {
            assert_eq!(
                call(&client, &server.url_for("/s/limited")).await.unwrap(),
                200
            );
        }
        let err = call(&client, &server.url_for("/s/limited"))
            .await
            .unwrap_err();
        assert!(matches!(err, courier::Error::RateLimited(_)), "{err}");
    })
    .await;
    assert_eq!(hits(&server, "limited"), 10);
}

#[tokio::test]
async fn a_rate_cut_takes_effect_at_once_with_no_refill_burst() {
    let server = FaultServer::start().await.unwrap();
    let wait = |rate: &str| limited("5s", rate).replace("\"reject\"", "\"wait\"");
    let (layer, handle) = CourierLayer::from_config_reloadable(&config(&wait("10/s"))).unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("limited", vec![Step::ok().times(20)]);
    bounded(async {
        // Spend the burst of 10.
        let url = server.url_for("/s/limited");
        let burst = tokio::time::Instant::now();
        let calls = (0..10).map(|_| call(&client, &url));
        for result in join_all(calls).await {
            assert_eq!(result.unwrap(), 200);
        }
        handle.reload(&config(&wait("2/s"))).unwrap();
        let cut = tokio::time::Instant::now();
        // Until the cut the bucket refilled at 10/s (at most its burst of 10): a loaded
        // machine can take that long between the burst and the cut. From the cut, each token
        // more takes 500 ms, with no refill burst: the k-th of the next three (from 0) cannot
        // end before its (k + 1)-th token beyond those could have come.
        let refilled = ((cut - burst).as_secs_f64() * 10.0).min(10.0);
        let ended = ended_after(cut, 3, || call(&client, &url)).await;
        for (k, elapsed) in (1_u32..).zip(&ended) {
            let owed = (f64::from(k) - refilled).max(0.0);
            assert!(
                elapsed.as_secs_f64() + SLACK.as_secs_f64() >= owed * 0.5,
                "{refilled:.1} tokens refilled at the cut; ended {ended:?} after it"
            );
        }
    })
    .await;
    assert_eq!(hits(&server, "limited"), 13);
}

#[tokio::test]
async fn a_thousand_reloads_under_load_fail_no_call_and_keep_unchanged_state() {
    let server = FaultServer::start().await.unwrap();
    let (layer, handle) =
        CourierLayer::from_config_reloadable(&config(&limited("5s", "10/h"))).unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("limited", vec![Step::ok().times(10)]);
    server.set_plan("load", vec![Step::ok().times(100_000)]);
    bounded(async {
        // Drain the limited route's bucket: its state must survive every reload.
        for _ in 0..10 {
            call(&client, &server.url_for("/s/limited")).await.unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let client = client.clone();
                let url = server.url_for("/s/load");
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut served = 0u32;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && served < 5_000 {
                        let status = call(&client, &url).await.expect("no call fails");
                        assert_eq!(status, 200);
                        served += 1;
                    }
                    served
                })
            })
            .collect();
        let (a, b) = (
            config(&limited("5s", "10/h")),
            config(&limited("6s", "10/h")),
        );
        for i in 0..1000 {
            handle.reload(if i % 2 == 0 { &b } else { &a }).unwrap();
            tokio::task::yield_now().await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut served = 0;
        for task in tasks {
            served += task.await.unwrap();
        }
        assert!(served > 0);
        assert_eq!(handle.reloads(), 1000);
        let err = call(&client, &server.url_for("/s/limited"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, courier::Error::RateLimited(_)),
            "the drained bucket stayed drained: {err}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_bad_configuration_is_refused_whole_and_the_old_one_stays() {
    let server = FaultServer::start().await.unwrap();
    let (layer, handle) = CourierLayer::from_config_reloadable(&config(
        "[default]\ncache = false\nretry = { attempts = 2, base = \"1ms\" }\n",
    ))
    .unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    let before = handle.config();
    let mut bad = before.clone();
    bad.default.retry = Some(courier::config::OrOff::On(courier::config::RetryConfig {
        attempts: Some(5),
        ..Default::default()
    }));
    bad.routes.push(courier::config::Policy {
        matches: Some(courier::config::Match::default()),
        deadline: Some(courier::config::OrOff::On(courier::config::Dur(
            Duration::ZERO,
        ))),
        ..Default::default()
    });
    let err = handle.reload(&bad).unwrap_err();
    assert_eq!(
        err.to_string(),
        "routes[0].deadline: must be at least 1ms, got 0s"
    );
    assert_eq!(handle.config(), before);
    assert_eq!(handle.reloads(), 0);
    server.set_plan("failing", vec![Step::status(500).times(10)]);
    bounded(call(&client, &server.url_for("/s/failing")))
        .await
        .unwrap();
    assert_eq!(hits(&server, "failing"), 2, "still the old attempts");
}

#[tokio::test]
async fn rules_in_code_take_their_calls_and_share_what_they_keep() {
    use courier::retry::RetryLayer;
    use courier::routes::Route;
    let server = FaultServer::start().await.unwrap();
    let layer = CourierLayer::new()
        .cache(None)
        .retry(RetryLayer::new().base(Duration::from_millis(1)))
        .route(Route::new().path_prefix("/s/once"), |l| {
            l.retry(RetryLayer::new().attempts(1))
        });
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    server.set_plan("once", vec![Step::status(500).times(5)]);
    server.set_plan("thrice", vec![Step::status(500).times(5)]);
    bounded(async {
        call(&client, &server.url_for("/s/once")).await.unwrap();
        call(&client, &server.url_for("/s/thrice")).await.unwrap();
    })
    .await;
    assert_eq!(hits(&server, "once"), 1);
    assert_eq!(hits(&server, "thrice"), 3);
}

/// First match wins, whichever kind of host each rule names: rules for one exact host are
/// looked up by it, the others scanned, and the earlier of the two takes the call.
#[tokio::test]
async fn the_first_rule_that_matches_takes_the_call_whatever_host_each_names() {
    use courier::retry::RetryLayer;
    use courier::routes::Route;
    let server = FaultServer::start().await.unwrap();
    let attempts = |n| {
        move |l: CourierLayer| l.retry(RetryLayer::new().attempts(n).base(Duration::from_millis(1)))
    };
    let layer = CourierLayer::new()
        .cache(None)
        .retry(RetryLayer::new().attempts(5).base(Duration::from_millis(1)))
        .route(Route::new().host("elsewhere.example"), attempts(1))
        .route(Route::new().path_prefix("/s/any"), attempts(1))
        .route(
            Route::new().host("127.0.0.1").path_prefix("/s/exact"),
            attempts(2),
        )
        .route(Route::new().host("*.0.0.1"), attempts(3))
        .route(Route::new().host("127.0.0.1"), attempts(4))
        .route(Route::new().path_prefix("/s/late"), attempts(1));
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    let cases = [("any", 1), ("exact", 2), ("late", 3), ("other", 3)];
    for (name, _) in cases {
        server.set_plan(name, vec![Step::status(500).times(9)]);
    }
    bounded(async {
        for (name, _) in cases {
            call(&client, &server.url_for(&format!("/s/{name}")))
                .await
                .unwrap();
        }
    })
    .await;
    for (name, want) in cases {
        assert_eq!(hits(&server, name), want, "/s/{name}");
    }
}

#[tokio::test]
async fn a_route_hedges_its_slow_calls_and_another_does_not() {
    let hedged = FaultServer::start().await.unwrap();
    let plain = FaultServer::start().await.unwrap();
    let layer = CourierLayer::from_config(&config(&format!(
        r#"
        [default]
        cache = false
        hedge = {{ delay = "100ms", budget = 1.0 }}

        [[routes]]
        name = "plain"
        match = {{ port = {plain} }}
        hedge = false
        "#,
        plain = plain.addr().port(),
    )))
    .unwrap();
    let client = layer.hyper::<http_body_util::Full<bytes::Bytes>>();
    for server in [&hedged, &plain] {
        server.set_plan(
            "tail",
            vec![Step::ok().delay(Duration::from_millis(1500)), Step::ok()],
        );
    }
    bounded(async {
        let started = tokio::time::Instant::now();
        assert_eq!(
            call(&client, &hedged.url_for("/s/tail")).await.unwrap(),
            200
        );
        assert!(started.elapsed() < Duration::from_millis(1200));
        assert_eq!(hits(&hedged, "tail"), 2, "the slow request and its hedge");

        let started = tokio::time::Instant::now();
        assert_eq!(call(&client, &plain.url_for("/s/tail")).await.unwrap(), 200);
        assert!(started.elapsed() >= Duration::from_millis(1500));
        assert_eq!(hits(&plain, "tail"), 1, "no hedge on this route");
    })
    .await;
}

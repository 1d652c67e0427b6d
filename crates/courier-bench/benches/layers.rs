//! The happy path, side by side in one run: what each courier layer adds over a bare
//! `service_fn`, next to its floor (`courier_bench::floors`) and its peer (tower's own
//! middleware, failsafe, tower-resilience, governor, http-cache-tower), and the preset next to
//! the same stack built from those peers (`courier_bench::peer`); courier's bucket next to
//! governor; and the preset over reqwest next to reqwest-middleware + reqwest-retry and the
//! peer stack, over loopback. Writes `docs/bench/layers.svg`.
//!
//! ```text
//! cargo bench -p courier-bench --bench layers
//! ```
//!
//! The happy-path variants and what "added" means are in `courier_bench::happy`. After the
//! measurements it prints the criterion tables of BENCHMARKS.md sections 1 to 5
//! (`courier_bench::report`), from the estimates criterion wrote for each benchmark that ran.

#![allow(missing_docs)]

use courier::CourierLayer;
use courier::core::HostKey;
use courier::ratelimit::{InMemoryStore, Quota, Rate};
use courier::transport::{ReqwestService, reqwest_client_builder};
use courier_bench::charts;
use courier_bench::happy::{self, Body, request};
use courier_bench::report::{self, Estimate};
use courier_bench::server::{BODY, LoopbackServer};
use criterion::{Criterion, criterion_group};
use http::{Request, Uri};
use http_body_util::BodyExt;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

fn happy_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _rt = rt.enter();
    let mut g = c.benchmark_group("happy_path");
    for v in happy::variants() {
        let name = v.name;
        let mut call = v.build();
        assert!(call(), "{name}: not ready on the first poll");
        g.bench_function(name, |b| b.iter(|| black_box(call())));
    }
    g.finish();
}

// === courier's bucket next to governor ===

const HOSTS: usize = 1000;

fn quota() -> Quota {
    Quota::new(
        Rate::per_second(1e9).expect("a valid rate"),
        NonZeroU32::MAX,
    )
}

fn gov_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::MAX).allow_burst(NonZeroU32::MAX)
}

fn hosts() -> Vec<HostKey> {
    (0..HOSTS)
        .map(|i| {
            let req = Request::get(format!("https://host{i}.example.com/v1"))
                .body(())
                .expect("a valid request");
            HostKey::from_request(&req)
        })
        .collect()
}

/// `iters` calls of `f`, split over two threads; the time both took.
fn two_threads(iters: u64, f: impl Fn() + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    f();
                }
            });
        }
    });
    start.elapsed()
}

fn bucket(c: &mut Criterion) {
    let q = quota();
    let keys = hosts();

    let mut g = c.benchmark_group("bucket_uncontended");
    let global = InMemoryStore::<()>::new();
    g.bench_function("courier decide (one bucket)", |b| {
        b.iter(|| black_box(global.decide(black_box(&()), q, Duration::MAX)))
    });
    let direct = governor::RateLimiter::direct(gov_quota());
    g.bench_function("governor check", |b| b.iter(|| black_box(direct.check())));
    g.finish();

    let mut g = c.benchmark_group("bucket_1000_keys");
    let store = InMemoryStore::<HostKey>::new();
    let keyed = governor::RateLimiter::keyed(gov_quota());
    for k in &keys {
        store.decide(k, q, Duration::MAX);
        let _ = keyed.check_key(k);
    }
    let mut i = 0;
    g.bench_function("courier decide", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(store.decide(&keys[i], q, Duration::MAX))
        })
    });
    let mut i = 0;
    g.bench_function("governor check_key", |b| {
        b.iter(|| {
            i = (i + 1) % HOSTS;
            black_box(keyed.check_key(&keys[i]))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("bucket_2_threads_1_key");
    let key = &keys[0];
    g.bench_function("courier decide", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                black_box(store.decide(key, q, Duration::MAX));
            })
        })
    });
    g.bench_function("governor check_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(keyed.check_key(key));
            })
        })
    });
    g.bench_function("governor check (direct)", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, || {
                let _ = black_box(direct.check());
            })
        })
    });
    g.finish();
}

// === over reqwest, loopback ===

fn reqwest_loopback(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = LoopbackServer::start().expect("the loopback server starts");
    let url = server.url("/v1/items");
    let uri: Uri = url.parse().expect("a valid uri");
    let client = reqwest_client_builder().build().expect("a reqwest client");
    let mut g = c.benchmark_group("reqwest_loopback");

    g.bench_function("reqwest raw", |b| {
        b.to_async(&rt).iter(|| async {
            let resp = client.get(&url).send().await.expect("sent");
            black_box(resp.bytes().await.expect("read").len())
        })
    });

    let middleware = reqwest_middleware::ClientBuilder::new(client.clone())
        .with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
            reqwest_retry::policies::ExponentialBackoff::builder().build_with_max_retries(2),
        ))
        .build();
    g.bench_function("reqwest-middleware + reqwest-retry", |b| {
        b.to_async(&rt).iter(|| async {
            let resp = middleware.get(&url).send().await.expect("sent");
            black_box(resp.bytes().await.expect("read").len())
        })
    });

    let adapter = ReqwestService::<Body>::new(client.clone());
    g.bench_function("courier adapter alone (ReqwestService)", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(get_and_read(adapter.clone(), &uri).await) })
    });

    let preset = CourierLayer::new().reqwest::<Body>(client.clone());
    g.bench_function("courier preset over reqwest", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(get_and_read(preset.clone(), &uri).await) })
    });

    let peer = courier_bench::peer::stack(ReqwestService::<Body>::new(client.clone()), None);
    g.bench_function("peer stack over reqwest (same adapter)", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(get_and_read(peer.clone(), &uri).await) })
    });
    g.finish();
    // Every variant sends each call to the server: none is answered from a cache.
    let served = server.served();
    for _ in 0..2 {
        assert_eq!(rt.block_on(get_and_read(preset.clone(), &uri)), BODY.len());
    }
    assert_eq!(
        server.served() - served,
        2,
        "every call of the preset over reqwest reaches the server"
    );
    drop(server);
}

/// One GET through `svc`, the body read whole; its length.
async fn get_and_read<S, RB>(svc: S, uri: &Uri) -> usize
where
    S: tower::Service<Request<Body>, Response = http::Response<RB>>,
    S::Error: std::fmt::Debug,
    RB: http_body::Body,
    RB::Error: std::fmt::Debug,
{
    let resp = svc.oneshot(request(uri)).await.expect("sent");
    resp.into_body()
        .collect()
        .await
        .expect("read")
        .to_bytes()
        .len()
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = happy_path, bucket, reqwest_loopback
}

/// Where criterion keeps its estimates: `$CARGO_TARGET_DIR/criterion`, else `criterion` beside
/// the `release` directory this bench runs from (`target/release/deps/layers-*`).
fn criterion_dir() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(std::path::PathBuf::from(dir).join("criterion"));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// The estimates of `names` in `group` that ran, in order.
fn estimates<'a>(
    dir: &std::path::Path,
    group: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<(&'a str, Estimate)> {
    names
        .into_iter()
        .filter_map(|n| Some((n, report::read_estimate(dir, group, n)?)))
        .collect()
}

fn print_tables() {
    let Some(dir) = criterion_dir() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let names: Vec<&str> = {
        let _rt = rt.enter();
        happy::variants().iter().map(|v| v.name).collect()
    };
    println!("\n### happy_path\n");
    let happy = estimates(&dir, "happy_path", names);
    print!("{}", report::happy_table(&happy));
    let rows = report::layer_rows(&happy);
    println!("\n### each layer against its floor and its peer\n");
    print!("{}", report::layer_table(&rows));
    // Single layers in one chart, the preset and the caches (microseconds) in another.
    let (whole, single): (Vec<_>, Vec<_>) = rows
        .iter()
        .partition(|r| r.name.contains("preset") || r.name.contains("cache"));
    for (file, title, rows) in [
        (
            "layers.svg",
            "Each layer's added cost per call: courier, its floor, its peer",
            single,
        ),
        (
            "stack.svg",
            "The preset and the cache per call: courier, and the same from peers",
            whole,
        ),
    ] {
        if rows.is_empty() {
            continue;
        }
        let path = charts::chart_dir().join(file);
        let groups: Vec<&str> = rows
            .iter()
            .map(|r| r.name.strip_prefix("courier ").unwrap_or(&r.name))
            .collect();
        let values: Vec<Vec<Option<f64>>> = rows
            .iter()
            .map(|r| {
                [
                    Some(r.added),
                    r.floor.as_ref().map(|f| f.1),
                    r.peer.as_ref().map(|p| p.1),
                ]
                .map(|v| v.map(f64::round))
                .to_vec()
            })
            .collect();
        match charts::grouped_bars(
            &path,
            title,
            "ns added over a bare service_fn",
            &groups,
            &["courier", "floor", "peer"],
            &values,
        ) {
            Ok(()) => println!("\nchart: {}", path.display()),
            Err(e) => eprintln!("\nchart {}: {e}", path.display()),
        }
    }
    for (group, names, ratio_to) in [
        (
            "bucket_uncontended",
            &["courier decide (one bucket)", "governor check"][..],
            "ratio to courier decide (one bucket)",
        ),
        (
            "bucket_1000_keys",
            &["courier decide", "governor check_key"][..],
            "ratio to courier decide",
        ),
        (
            "bucket_2_threads_1_key",
            &[
                "courier decide",
                "governor check_key",
                "governor check (direct)",
            ][..],
            "ratio to courier decide",
        ),
        (
            "reqwest_loopback",
            &[
                "reqwest raw",
                "reqwest-middleware + reqwest-retry",
                "courier adapter alone (ReqwestService)",
                "courier preset over reqwest",
                "peer stack over reqwest (same adapter)",
            ][..],
            "ratio to reqwest raw",
        ),
    ] {
        let times = estimates(&dir, group, names.iter().copied());
        print!("\n{}", report::group_table(group, ratio_to, &times));
    }
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; `cargo test --benches` runs each benchmark once and
    // writes no estimates.
    if std::env::args().any(|a| a == "--bench") {
        print_tables();
    }
}

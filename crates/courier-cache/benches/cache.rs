//! A fresh hit and a revalidated hit against a plain loopback round trip, and the in-memory
//! store (quick_cache) against moka for the same weighted get/insert.
//!
//! `cargo bench -p courier-cache --bench cache -- --warm-up-time 1 --measurement-time 3`

#![allow(missing_docs)]

use bytes::Bytes;
use courier_cache::{EtagCacheLayer, MemoryStore, Variants};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

const ETAG: &str = "\"bench-v1\"";

/// A minimal origin: 1 KiB with an ETag, or a 304 when `If-None-Match` matches. With
/// `?fresh` the answer also carries `max-age=3600`.
async fn origin(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    static BODY: [u8; 1024] = [b'x'; 1024];
    let fresh = req.uri().query() == Some("fresh");
    let cc = if fresh { "max-age=3600" } else { "no-cache" };
    let matches = req
        .headers()
        .get("if-none-match")
        .is_some_and(|v| v.as_bytes() == ETAG.as_bytes());
    let response = if matches {
        Response::builder()
            .status(StatusCode::NOT_MODIFIED)
            .header("etag", ETAG)
            .header("cache-control", cc)
            .body(Full::default())
    } else {
        Response::builder()
            .header("etag", ETAG)
            .header("cache-control", cc)
            .header("content-length", BODY.len())
            .body(Full::new(Bytes::from_static(&BODY)))
    };
    Ok(response.expect("a valid response"))
}

async fn start_origin() -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(origin))
                    .await;
            });
        }
    });
    format!("http://{addr}/thing")
}

async fn call<S, B>(svc: &S, url: &str) -> Bytes
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let req = Request::get(url)
        .body(Empty::new())
        .expect("a valid request");
    let response = svc
        .clone()
        .oneshot(req)
        .await
        .expect("the loopback origin answers");
    response
        .into_body()
        .collect()
        .await
        .expect("the body arrives")
        .to_bytes()
}

fn round_trips(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let url = rt.block_on(start_origin());
    let fresh_url = format!("{url}?fresh");
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let fresh = EtagCacheLayer::new().layer(client.clone());
    let revalidating = EtagCacheLayer::new().layer(client.clone());
    rt.block_on(async {
        assert_eq!(call(&client, &url).await.len(), 1024);
        assert_eq!(call(&fresh, &fresh_url).await.len(), 1024);
        assert_eq!(call(&revalidating, &url).await.len(), 1024);
    });

    let mut group = c.benchmark_group("get_1KiB");
    group.bench_function("plain_loopback_round_trip", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(call(&client, &url).await) })
    });
    group.bench_function("cache_fresh_hit", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(call(&fresh, &fresh_url).await) })
    });
    group.bench_function("cache_revalidated_304", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(call(&revalidating, &url).await) })
    });
    group.finish();
}

/// The cache's own cost, without a network: the same three calls against an in-process origin.
fn in_process(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let origin = tower::service_fn(|req: Request<()>| async move {
        static BODY: [u8; 1024] = [b'x'; 1024];
        let fresh = req.uri().query() == Some("fresh");
        let cc = if fresh { "max-age=3600" } else { "no-cache" };
        let response = if req.headers().contains_key("if-none-match") {
            Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header("etag", ETAG)
                .header("cache-control", cc)
                .body(Full::default())
        } else {
            Response::builder()
                .header("etag", ETAG)
                .header("cache-control", cc)
                .header("content-length", BODY.len())
                .body(Full::new(Bytes::from_static(&BODY)))
        };
        Ok::<_, Infallible>(response.expect("a valid response"))
    });
    let cached = EtagCacheLayer::new().layer(origin);
    let get = |uri: &'static str| Request::get(uri).body(()).expect("a valid request");
    async fn read<S, B>(svc: &S, req: Request<()>) -> Bytes
    where
        S: Service<Request<()>, Response = Response<B>> + Clone,
        S::Error: std::fmt::Debug,
        B: http_body::Body<Data = Bytes>,
        B::Error: std::fmt::Debug,
    {
        let response = svc.clone().oneshot(req).await.expect("infallible");
        response
            .into_body()
            .collect()
            .await
            .expect("a full body")
            .to_bytes()
    }
    rt.block_on(async {
        read(&cached, get("http://h/x?fresh")).await;
        read(&cached, get("http://h/x")).await;
    });
    let mut group = c.benchmark_group("in_process_1KiB");
    group.bench_function("plain_service", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(read(&origin, get("http://h/x")).await) })
    });
    group.bench_function("cache_fresh_hit", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(read(&cached, get("http://h/x?fresh")).await) })
    });
    group.bench_function("cache_revalidated_304", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(read(&cached, get("http://h/x")).await) })
    });
    group.finish();
}

/// The same weighted store, quick_cache (what `MemoryStore` uses) against moka's sync cache.
fn stores(c: &mut Criterion) {
    const KEYS: usize = 1000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Build one real entry to store under every key.
    let layer = EtagCacheLayer::new();
    let svc = layer.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(
            Response::builder()
                .header("etag", ETAG)
                .header("content-length", 1024)
                .body(Full::new(Bytes::from(vec![b'x'; 1024])))
                .expect("a valid response"),
        )
    }));
    let variants: Arc<Variants> = rt.block_on(async {
        let response = svc
            .oneshot(
                Request::get("http://h/x")
                    .body(())
                    .expect("a valid request"),
            )
            .await
            .expect("infallible");
        let _ = response.into_body().collect().await;
        layer.store_ref().get("http://h/x").await.expect("stored")
    });
    let keys: Vec<String> = (0..KEYS).map(|i| format!("http://h/items/{i}")).collect();

    let quick = MemoryStore::new(64 * 1024 * 1024);
    let moka: moka::sync::Cache<String, Arc<Variants>> = moka::sync::Cache::builder()
        .max_capacity(64 * 1024 * 1024)
        .weigher(|k: &String, v: &Arc<Variants>| {
            u32::try_from(64 + k.len() as u64 + v.weight()).unwrap_or(u32::MAX)
        })
        .build();
    for k in &keys {
        quick.insert(k.clone(), variants.clone());
        moka.insert(k.clone(), variants.clone());
    }

    let mut group = c.benchmark_group("store");
    let mut i = 0usize;
    group.bench_function("quick_cache_get", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(quick.get(&keys[i]))
        })
    });
    group.bench_function("moka_get", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(moka.get(&keys[i]))
        })
    });
    group.bench_function("quick_cache_insert", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            quick.insert(keys[i].clone(), variants.clone())
        })
    });
    group.bench_function("moka_insert", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            moka.insert(keys[i].clone(), variants.clone())
        })
    });
    group.finish();
}

criterion_group!(benches, round_trips, in_process, stores);
criterion_main!(benches);

//! One keep-alive round trip on loopback: the fault server beside a bare hyper server.
//!
//! The bare server answers 200 with an empty body and a `Date`, the least any server does; the
//! difference is what routing, plan lookup and hit recording cost.
#![allow(missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use courier_faultserver::{FaultServer, Step};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

async fn bare_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = service_fn(|_req| async {
                    let mut resp = Response::new(Full::new(Bytes::new()));
                    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
                    resp.headers_mut().insert("date", date.parse().unwrap());
                    Ok::<_, Infallible>(resp)
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn round_trip(client: &Client<HttpConnector, Full<Bytes>>, url: &str) {
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().as_u16() < 600);
    resp.into_body().collect().await.unwrap();
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (bare, server) = rt.block_on(async {
        let server = FaultServer::start().await.unwrap();
        server.set_plan(
            "busy",
            vec![Step::status(503).header("retry-after", "1").times(u32::MAX)],
        );
        (bare_server().await, server)
    });
    for (proto, client) in [
        ("http1", Client::builder(TokioExecutor::new()).build_http()),
        (
            "h2c",
            Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        ),
    ] {
        let mut group = c.benchmark_group(format!("round_trip_{proto}"));
        let targets = [
            ("bare_hyper", format!("http://{bare}/")),
            ("faultserver_used_up_plan", server.url_for("/s/free")),
            ("faultserver_503_plan", server.url_for("/s/busy")),
            ("faultserver_items", server.url_for("/items?page=2")),
            (
                "faultserver_conditional_304",
                server.url_for("/conditional"),
            ),
        ];
        for (name, url) in targets {
            let client = client.clone();
            if name.ends_with("304") {
                let etag = rt.block_on(async {
                    let req = Request::get(&url).body(Full::new(Bytes::new())).unwrap();
                    let resp = client.request(req).await.unwrap();
                    resp.headers()["etag"].clone()
                });
                group.bench_function(name, |b| {
                    b.to_async(&rt).iter(|| async {
                        let req = Request::get(&url)
                            .header("if-none-match", etag.clone())
                            .body(Full::new(Bytes::new()))
                            .unwrap();
                        let resp = client.request(req).await.unwrap();
                        assert_eq!(resp.status(), 304);
                        resp.into_body().collect().await.unwrap();
                    });
                });
            } else {
                group.bench_function(name, |b| b.to_async(&rt).iter(|| round_trip(&client, &url)));
            }
            // Hits pile up; keep memory flat between targets.
            server.clear("free");
            server.clear("items");
            server.clear("conditional");
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

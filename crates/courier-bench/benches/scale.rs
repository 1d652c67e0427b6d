//! Memory at scale, counted by the allocator: what each keyed layer keeps per host when 100 000
//! distinct hosts pass through it, whether eviction at its maximum of keys keeps it bounded, and
//! what the cache holds when filled far past its capacity.
//!
//! `cargo bench -p courier-bench --bench scale`
//!
//! A counting global allocator tracks the bytes live; each figure is the difference between
//! the bytes live after the run (the layer and its state still alive) and before it. Prints
//! markdown tables (BENCHMARKS.md, "Memory at scale").

use bytes::Bytes;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::{DiskStore, EtagCacheLayer};
use courier::core::BoxError;
use courier::ratelimit::{AdaptivePacingLayer, Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use std::alloc::System;
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

/// Counts the bytes live: `cap` wraps the system allocator and keeps the total allocated.
#[global_allocator]
static ALLOCATOR: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

fn live() -> isize {
    ALLOCATOR.allocated() as isize
}

const HOSTS: usize = 100_000;

type Body = Full<Bytes>;

fn request(host: usize) -> Request<Body> {
    Request::get(format!("http://h{host}.example/items"))
        .body(Body::default())
        .expect("a valid request")
}

type Answer = std::future::Ready<Result<Response<Body>, BoxError>>;

fn answer(_req: Request<Body>) -> Answer {
    std::future::ready(Ok(Response::new(Body::default())))
}

/// An upstream that answers 200 at once.
fn ok() -> tower::util::ServiceFn<fn(Request<Body>) -> Answer> {
    service_fn(answer as fn(Request<Body>) -> Answer)
}

/// One row: the bytes a layer's state holds after `HOSTS` hosts, and how many keys it kept.
struct Row {
    layer: &'static str,
    max_keys: usize,
    /// Keys kept after the run, where the layer tells; else at most `max_keys`.
    kept: Option<usize>,
    bytes: isize,
}

impl Row {
    fn per_key(&self) -> isize {
        self.bytes / (self.kept.unwrap_or(self.max_keys).max(1) as isize)
    }
}

/// Sends one request to each of `HOSTS` hosts through `svc`, `pause` after every 10 000 (for
/// layers whose idle keys become evictable with time); the bytes live afterwards, over `base`.
async fn run<S>(svc: S, pause: Duration) -> isize
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone,
    S::Error: std::fmt::Debug,
{
    let base = live();
    for host in 0..HOSTS {
        let resp = svc.clone().oneshot(request(host)).await.expect("answered");
        drop(resp);
        if host % 10_000 == 9_999 && !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    live() - base
}

async fn keyed_layers() -> Vec<Row> {
    let mut rows = Vec::new();

    let limiter = TokenBucketRateLimitLayer::new(
        Rate::per_second(1_000.0).expect("a valid rate"),
        NonZeroU32::new(1).expect("not zero"),
    );
    let store = limiter.store().clone();
    let bytes = run(limiter.layer(ok()), Duration::from_millis(5)).await;
    rows.push(Row {
        layer: "rate limiter (bucket per host)",
        max_keys: store.max_keys(),
        kept: Some(store.len()),
        bytes,
    });

    let breaker = CircuitBreakerLayer::new();
    let handle = breaker.handle();
    let bytes = run(breaker.layer(ok()), Duration::ZERO).await;
    rows.push(Row {
        layer: "circuit breaker",
        max_keys: 4_096,
        kept: Some(handle.len()),
        bytes,
    });

    let retry = RetryLayer::new();
    let bytes = run(retry.layer(ok()), Duration::ZERO).await;
    rows.push(Row {
        layer: "retry budget (per host)",
        // A hard bound: past it the least recently used keys go.
        max_keys: 1_024,
        kept: None,
        bytes,
    });

    let pacing = AdaptivePacingLayer::new();
    // Idle (unpaced, nothing accepted in the last second) keys are forgotten past the maximum:
    // a pause every 10 000 hosts longer than the accept counter's window (a second and up to
    // a quarter more) lets the sweep find them.
    let bytes = run(pacing.layer(ok()), Duration::from_millis(1_300)).await;
    rows.push(Row {
        layer: "adaptive pacing",
        max_keys: 10_000,
        kept: Some(pacing.len()),
        bytes,
    });
    rows
}

/// Sends `entries` GETs of distinct URLs through `layer`, each answered with a fresh,
/// storable `size`-byte body, and reads every body.
async fn fill(layer: EtagCacheLayer, size: usize, entries: usize) {
    let body = Bytes::from(vec![b'x'; size]);
    let upstream = service_fn(move |_req: Request<Body>| {
        let body = body.clone();
        async move {
            let resp = Response::builder()
                .header("cache-control", "max-age=3600")
                .header("etag", "\"v1\"")
                .body(Body::new(body))
                .expect("a valid response");
            Ok::<_, BoxError>(resp)
        }
    });
    let svc = layer.layer(upstream);
    for i in 0..entries {
        let req = Request::get(format!("http://cache.example/item/{i}"))
            .body(Body::default())
            .expect("a valid request");
        let resp = svc.clone().oneshot(req).await.expect("answered");
        let _ = resp.into_body().collect().await.expect("the body");
    }
}

/// What the cache holds after `entries` responses of `size` bytes each, all fresh and
/// storable, were read through it: (bytes live over the start, entries kept).
async fn fill_cache(capacity: u64, size: usize, entries: usize) -> (isize, usize) {
    let layer = EtagCacheLayer::new().capacity(capacity);
    let store = std::sync::Arc::clone(layer.store_ref());
    let base = live();
    fill(layer, size, entries).await;
    (live() - base, store.len())
}

/// What a [`DiskStore`] bounded at `max_bytes` holds after `entries` responses of `size` bytes
/// each went through the cache: (bytes of its files, files kept).
async fn fill_disk(max_bytes: u64, size: usize, entries: usize) -> (u64, usize) {
    let dir = std::env::temp_dir().join(format!("courier-scale-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = DiskStore::open(&dir, max_bytes).expect("a disk store in the temporary directory");
    fill(EtagCacheLayer::new().store(store.clone()), size, entries).await;
    store.flush().await;
    let (mut bytes, mut files) = (0, 0);
    for item in std::fs::read_dir(&dir).expect("the store's directory") {
        let meta = item.expect("an entry").metadata().expect("its size");
        bytes += meta.len();
        files += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    (bytes, files)
}

fn mib(bytes: isize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn main() {
    if !courier_bench::selected("scale") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let started = Instant::now();

    let rows = rt.block_on(keyed_layers());
    println!(
        "### {HOSTS} distinct hosts through each keyed layer (bytes live after, counted by the allocator)\n"
    );
    println!("| layer | maximum of keys | keys kept | bytes held | bytes per key kept |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let kept = r
            .kept
            .map_or_else(|| format!("at most {}", r.max_keys), |k| k.to_string());
        println!(
            "| {} | {} | {kept} | {} | {} |",
            r.layer,
            r.max_keys,
            mib(r.bytes),
            r.per_key()
        );
    }

    const CAP: u64 = 64 * 1024 * 1024;
    println!("\n### the cache (capacity 64 MiB) filled far past its capacity\n");
    println!("| entries | entry size | entries kept | bytes held | held / capacity |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for (size, entries) in [
        (64usize, 320_000),
        (1024, 4 * 64 * 1024),
        (512 * 1024, 4 * 128),
    ] {
        let (bytes, kept) = rt.block_on(fill_cache(CAP, size, entries));
        let size_text = if size < 1024 {
            format!("{size} B")
        } else {
            format!("{} KiB", size / 1024)
        };
        println!(
            "| {entries} | {size_text} | {kept} | {} | {:.2} |",
            mib(bytes),
            bytes as f64 / CAP as f64
        );
    }
    const DISK: u64 = 16 * 1024 * 1024;
    println!("\n### a disk store (bound 16 MiB) filled four times over\n");
    println!("| entries | entry size | files kept | bytes on disk | on disk / bound |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for (size, entries) in [(1024usize, 64 * 1024), (64 * 1024, 1024)] {
        let (bytes, files) = rt.block_on(fill_disk(DISK, size, entries));
        println!(
            "| {entries} | {} KiB | {files} | {} | {:.2} |",
            size / 1024,
            mib(bytes as isize),
            bytes as f64 / DISK as f64,
        );
    }
    println!("\n({:.1} s in all)", started.elapsed().as_secs_f64());
}

//! The no-retry path: courier's `Retry` next to tower's `Retry` with a `TpsBudget` policy, over
//! the same ready `service_fn`, in one run. The floor the contract sets (the one-record
//! `Attempts` extension alone) is measured next to retry in
//! `cargo bench -p courier-bench --bench layers`.
//!
//! `cargo bench -p courier-retry --bench retry -- --warm-up-time 1 --measurement-time 3`

#![allow(missing_docs)]

use courier_core::classify::is_retryable_status;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::sync::Arc;
use tower::retry::Policy;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Layer, Service, ServiceExt, service_fn};

fn request() -> Request<String> {
    Request::get("http://api.example/v1/items?page=2")
        .header("accept", "application/json")
        .header("user-agent", "courier-bench")
        .body(String::new())
        .unwrap()
}

fn upstream()
-> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(|_req: Request<String>| {
        ready(Ok::<_, Infallible>(
            Response::builder()
                .status(StatusCode::OK)
                .body(String::new())
                .unwrap(),
        ))
    })
}

/// The usual tower policy: retry retryable statuses and errors while the budget allows.
#[derive(Clone)]
struct TpsPolicy {
    budget: Arc<TpsBudget>,
    left: usize,
}

impl<B: Clone, RB, E> Policy<Request<B>, Response<RB>, E> for TpsPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _req: &mut Request<B>,
        result: &mut Result<Response<RB>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(res) if !is_retryable_status(res.status()) => {
                self.budget.deposit();
                None
            }
            _ if self.left > 0 && self.budget.withdraw() => {
                self.left -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        Some(req.clone())
    }
}

fn no_retry_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("no_retry_path");

    let bare = upstream();
    group.bench_function("bare_service_fn", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(bare.clone().oneshot(request()).await.unwrap()) })
    });

    let courier = courier_retry::RetryLayer::new().layer(upstream());
    group.bench_function("courier_retry", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(courier.clone().oneshot(request()).await.unwrap()) })
    });

    let tower = tower::retry::RetryLayer::new(TpsPolicy {
        budget: Arc::new(TpsBudget::default()),
        left: 2,
    })
    .layer(upstream());
    group.bench_function("tower_retry_tps_budget", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(tower.clone().oneshot(request()).await.unwrap()) })
    });
    group.finish();
}

criterion_group!(benches, no_retry_path);
criterion_main!(benches);

//! Instruction counts of the no-retry path, for callgrind: `retry_count <bare|courier|tower> <n>`
//! runs n calls; the difference of two runs divided by the difference of n is the cost of one.
#![allow(missing_docs)]
use courier_core::classify::is_retryable_status;
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

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    match which.as_str() {
        "bare" => {
            let s = upstream();
            rt.block_on(async {
                for _ in 0..n {
                    black_box(s.clone().oneshot(request()).await.unwrap());
                }
            });
        }
        "courier" => {
            let s = courier_retry::RetryLayer::new().layer(upstream());
            rt.block_on(async {
                for _ in 0..n {
                    black_box(s.clone().oneshot(request()).await.unwrap());
                }
            });
        }
        "tower" => {
            let s = tower::retry::RetryLayer::new(TpsPolicy {
                budget: Arc::new(TpsBudget::default()),
                left: 2,
            })
            .layer(upstream());
            rt.block_on(async {
                for _ in 0..n {
                    black_box(s.clone().oneshot(request()).await.unwrap());
                }
            });
        }
        _ => panic!(),
    }
}

//! No permit leaks: calls dropped at every await point (queued, in the call, between body
//! frames), bodies dropped midway, failures and deadlines, in a random mix from a seeded
//! generator, leave every key with nothing in flight and nothing queued.

use bytes::Bytes;
use courier_concurrency::{AdaptiveLimit, ConcurrencyLimitLayer};
use courier_core::{ConcurrencyLimited, HostKey};
use courier_testkit::body::ScriptedBody;
use http::{Request, Response};
use http_body_util::BodyExt;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};

const HOSTS: [&str; 3] = [
    "http://a.example/",
    "http://b.example/",
    "http://c.example/",
];

/// What one call does, drawn from the generator.
#[derive(Debug, Clone, Copy)]
struct Plan {
    host: usize,
    /// The inner service's delay before it answers, ms.
    delay: u64,
    /// The inner service fails instead of answering.
    fails: bool,
    /// Body frames, and whether the body fails after them.
    frames: usize,
    body_fails: bool,
    /// The caller drops the call after this long, ms (`None`: waits for the answer).
    give_up: Option<u64>,
    /// The caller reads this many frames, then drops the body (`None`: reads it all).
    read: Option<usize>,
    /// A deadline this far ahead, ms.
    deadline: Option<u64>,
}

impl Plan {
    fn draw(rng: &mut SmallRng) -> Self {
        Self {
            host: rng.random_range(0..HOSTS.len()),
            delay: rng.random_range(0..20),
            fails: rng.random_bool(0.1),
            frames: rng.random_range(0..4),
            body_fails: rng.random_bool(0.1),
            give_up: rng.random_bool(0.3).then(|| rng.random_range(0..30)),
            read: rng.random_bool(0.3).then(|| rng.random_range(0..3)),
            deadline: rng.random_bool(0.2).then(|| rng.random_range(0..40)),
        }
    }
}

/// What happened to the calls of a run: the paths it took, each of which must be taken.
#[derive(Debug, Default)]
struct Seen {
    refused: AtomicUsize,
    dropped_in_call: AtomicUsize,
    body_dropped_midway: AtomicUsize,
    answered: AtomicUsize,
    /// Calls inside the inner service now, per host, and the most seen at once on any host.
    in_call: [AtomicUsize; HOSTS.len()],
    peak: AtomicUsize,
}

/// One call inside the inner service, counted out when its future ends or is dropped.
struct InCall(Arc<Seen>, usize);

impl InCall {
    fn enter(seen: &Arc<Seen>, host: usize) -> Self {
        let now = seen.in_call[host].fetch_add(1, Ordering::SeqCst) + 1;
        seen.peak.fetch_max(now, Ordering::SeqCst);
        Self(seen.clone(), host)
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        self.0.in_call[self.1].fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sends `plans` through `layer` from `tasks` tasks at once; the answers are dropped at the
/// points the plans say.
async fn run<K>(layer: ConcurrencyLimitLayer<K>, plans: Vec<Plan>, tasks: usize) -> Arc<Seen>
where
    K: courier_core::KeyFn + Clone,
{
    let seen = Arc::new(Seen::default());
    let counted = seen.clone();
    let inner = service_fn(move |req: Request<Plan>| {
        let counted = counted.clone();
        async move {
            let plan = *req.body();
            let _in_call = InCall::enter(&counted, plan.host);
            tokio::time::sleep(Duration::from_millis(plan.delay)).await;
            if plan.fails {
                return Err::<Response<ScriptedBody<io::Error>>, io::Error>(io::Error::other(
                    "upstream failed",
                ));
            }
            let mut body = ScriptedBody::chunks((0..plan.frames).map(|_| Bytes::from_static(b"x")))
                .gap(Duration::from_millis(plan.delay / 4 + 1));
            if plan.body_fails {
                body = body.error(io::Error::other("body failed"));
            }
            Ok(Response::new(body))
        }
    });
    let svc = layer.layer(inner);
    let chunks: Vec<Vec<Plan>> = plans
        .chunks(plans.len().div_ceil(tasks))
        .map(<[Plan]>::to_vec)
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|plans| {
            let svc = svc.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                for plan in plans {
                    let mut req = Request::get(HOSTS[plan.host]).body(plan).unwrap();
                    if let Some(ms) = plan.deadline {
                        courier_core::CallContext::get_or_insert(&mut req)
                            .shrink_deadline_after(Duration::from_millis(ms));
                    }
                    let call = svc.clone().oneshot(req);
                    let res = match plan.give_up {
                        Some(ms) => {
                            match tokio::time::timeout(Duration::from_millis(ms), call).await {
                                Ok(res) => res,
                                Err(_) => {
                                    seen.dropped_in_call.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                            }
                        }
                        None => call.await,
                    };
                    let res = match res {
                        Ok(res) => res,
                        Err(e) => {
                            if e.is::<ConcurrencyLimited>() {
                                seen.refused.fetch_add(1, Ordering::Relaxed);
                            }
                            continue;
                        }
                    };
                    seen.answered.fetch_add(1, Ordering::Relaxed);
                    let mut body = res.into_body();
                    match plan.read {
                        Some(frames) => {
                            for _ in 0..frames {
                                if !matches!(body.frame().await, Some(Ok(_))) {
                                    break;
                                }
                            }
                            if body.holds_permit() {
                                seen.body_dropped_midway.fetch_add(1, Ordering::Relaxed);
                            }
                            drop(body);
                        }
                        None => drop(body.collect().await),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    seen
}

fn plans(seed: u64, n: usize) -> Vec<Plan> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| Plan::draw(&mut rng)).collect()
}

fn assert_idle<K: courier_core::KeyFn<Key = HostKey>>(layer: &ConcurrencyLimitLayer<K>) {
    let handle = layer.handle();
    for host in HOSTS {
        let key = HostKey::from_request(&Request::get(host).body(()).unwrap());
        if let Some(s) = handle.status(&key) {
            assert_eq!((s.in_flight, s.queued), (0, 0), "{host}: {s:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_calls_dropped_anywhere_leave_nothing_in_flight() {
    for (seed, layer) in [
        (
            1,
            ConcurrencyLimitLayer::new().fixed(NonZeroUsize::new(3).unwrap()),
        ),
        (
            2,
            ConcurrencyLimitLayer::new()
                .fixed(NonZeroUsize::new(2).unwrap())
                .max_queue(4)
                .max_wait(Duration::from_millis(25)),
        ),
        (
            3,
            ConcurrencyLimitLayer::new()
                .adaptive(AdaptiveLimit::new().initial(NonZeroUsize::new(4).unwrap()))
                .max_queue(8)
                .max_wait(Duration::from_millis(50)),
        ),
        (
            4,
            ConcurrencyLimitLayer::new()
                .fixed(NonZeroUsize::new(2).unwrap())
                .max_queue(3)
                .release_at_headers(true),
        ),
    ] {
        let probe = layer.clone();
        let at_headers = seed == 4;
        let seen = run(layer, plans(seed, 10_000), 64).await;
        assert_idle(&probe);
        assert!(seen.refused.load(Ordering::Relaxed) > 0, "{seed}: {seen:?}");
        assert!(
            seen.dropped_in_call.load(Ordering::Relaxed) > 0,
            "{seed}: {seen:?}"
        );
        assert!(
            seen.answered.load(Ordering::Relaxed) > 0,
            "{seed}: {seen:?}"
        );
        let midway = seen.body_dropped_midway.load(Ordering::Relaxed);
        assert_eq!(midway == 0, at_headers, "{seed}: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_racing_on_two_threads_leave_nothing_in_flight() {
    // With a queue (its accounting under the lock), and without one (counted by atomics).
    let queued = ConcurrencyLimitLayer::new()
        .fixed(NonZeroUsize::new(2).unwrap())
        .max_queue(4)
        .max_wait(Duration::from_millis(5));
    let unqueued = ConcurrencyLimitLayer::new().fixed(NonZeroUsize::new(2).unwrap());
    for (seed, layer) in [(5, queued), (6, unqueued)] {
        let probe = layer.clone();
        let mut plans = plans(seed, 2_000);
        for p in &mut plans {
            p.delay %= 3;
            p.give_up = p.give_up.map(|ms| ms % 4);
            p.deadline = p.deadline.map(|ms| ms % 5);
        }
        let seen = run(layer, plans, 32).await;
        assert_idle(&probe);
        assert!(seen.answered.load(Ordering::Relaxed) > 0, "{seen:?}");
        assert!(seen.refused.load(Ordering::Relaxed) > 0, "{seen:?}");
        let peak = seen.peak.load(Ordering::SeqCst);
        assert!(peak <= 2, "{seed}: {peak} calls at once on one host");
    }
}

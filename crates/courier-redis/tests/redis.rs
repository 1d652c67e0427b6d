//! Against a real Redis (see `courier_testkit::redis`): the script's semantics on the server, four replicas
//! sharing one limit, shared parking, and outages (stopped, paused, restarted) under both
//! failure policies. Real time: the server's clock is the one that counts. Every wait is
//! bounded.

use common::{PATIENT, host, quota, replica, request};
use courier_core::{BoxError, HostKey, RateLimited};
use courier_ratelimit::{Decision, Mode, Quota, RateLimitStore, TokenBucketRateLimitLayer};
use courier_redis::{FailurePolicy, RedisStore};
use courier_testkit::redis::{own_redis, redis, unique_prefix};
use redis::AsyncCommands;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt, service_fn};

mod common;

const MS: Duration = Duration::from_millis(1);

/// A plain connection for looking at what the store wrote.
async fn inspect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("valid url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis answers")
}

async fn store(url: &str, prefix: &str) -> RedisStore<HostKey> {
    RedisStore::builder(url)
        .prefix(prefix)
        .command_timeout(PATIENT)
        .connect()
        .await
        .expect("redis answers")
}

async fn decide(s: &RedisStore<HostKey>, q: Quota, max_wait: Duration) -> Decision {
    timeout(Duration::from_secs(5), s.acquire(&host(), q, max_wait))
        .await
        .expect("a decision within 5 s")
        .expect("never an error")
}

/// The wait of an admitted decision, as seen just after it arrived.
fn wait_of(d: Decision) -> Duration {
    match d {
        Decision::Admit(g) => g.at().saturating_duration_since(Instant::now()),
        Decision::Deny(d) => panic!("expected a slot, refused for {:?}", d.retry_in()),
    }
}

/// GCRA on the server: the burst at once, then one per interval; a refusal takes nothing;
/// keys expire when they stop mattering; parks never shorten; a slot can be given back.
#[tokio::test]
async fn the_script_keeps_a_bucket_on_the_server() {
    let Some(redis) = redis("the_script_keeps_a_bucket_on_the_server").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("script");
    let s = store(&url, &prefix).await;
    let q = quota(10.0, 5);
    let (tat_key, park_key) = s.key_names(&host());
    let mut conn = inspect(&url).await;

    for _ in 0..5 {
        assert_eq!(wait_of(decide(&s, q, Duration::ZERO).await), Duration::ZERO);
    }
    // The sixth waits about one interval (less the time the first five took on the server).
    let Decision::Deny(denial) = decide(&s, q, Duration::ZERO).await else {
        panic!("no free slot now")
    };
    assert!(
        denial.retry_in() > 50 * MS && denial.retry_in() <= 100 * MS,
        "{denial:?}"
    );
    assert!(!denial.is_parked());
    let wait = wait_of(decide(&s, q, Duration::from_secs(1)).await);
    assert!(
        wait > 50 * MS && wait <= 100 * MS,
        "the refusal took nothing: {wait:?}"
    );
    let wait = wait_of(decide(&s, q, Duration::from_secs(1)).await);
    assert!(
        wait > 150 * MS && wait <= 200 * MS,
        "reservations stack: {wait:?}"
    );

    // The bucket's key lives until the bucket is full again: now + 7 * 100 ms at most.
    let ttl: i64 = conn.pttl(&tat_key).await.unwrap();
    assert!(ttl > 0 && ttl <= 701, "ttl {ttl}");

    // Give back the last slot: the next one takes it again.
    let Decision::Admit(grant) = decide(&s, q, Duration::from_secs(1)).await else {
        panic!("slot")
    };
    let before: String = conn.get(&tat_key).await.unwrap();
    s.cancel(&host(), q, &grant);
    let mut after = before.clone();
    for _ in 0..100 {
        after = conn.get(&tat_key).await.unwrap();
        if after != before {
            break;
        }
        tokio::time::sleep(10 * MS).await;
    }
    let (before, after): (u64, u64) = (before.parse().unwrap(), after.parse().unwrap());
    assert_eq!(before - after, 100_000, "one interval, in microseconds");
    let ttl: i64 = conn.pttl(&tat_key).await.unwrap();
    assert!(ttl > 0, "the give-back keeps the expiry");

    // Parks: set, obeyed, never shortened, and expiring.
    s.park(&host(), Duration::from_secs(5));
    let mut ttl: i64 = -2;
    for _ in 0..100 {
        ttl = conn.pttl(&park_key).await.unwrap();
        if ttl > 0 {
            break;
        }
        tokio::time::sleep(10 * MS).await;
    }
    assert!(ttl > 4000 && ttl <= 5001, "park ttl {ttl}");
    s.park(&host(), Duration::from_secs(1));
    tokio::time::sleep(100 * MS).await;
    let ttl: i64 = conn.pttl(&park_key).await.unwrap();
    assert!(
        ttl > 3500,
        "a shorter park never shortens a longer one: {ttl}"
    );
    assert_eq!(s.outages(), 0);
}

/// Four replicas (each its own store and connection) share one key: see
/// [`common::four_replicas_share_one_limit`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_share_one_limit() {
    let Some(redis) = redis("four_replicas_share_one_limit").await else {
        return;
    };
    let (url, prefix) = (redis.url(), unique_prefix("replicas"));
    let stores = [
        store(&url, &prefix).await,
        store(&url, &prefix).await,
        store(&url, &prefix).await,
        store(&url, &prefix).await,
    ];
    common::four_replicas_share_one_limit(stores).await;
}

/// A reset deletes the bucket's TAT when the last reservation in it is the resetting
/// replica's (every replica's next decision then starts from a full bucket), leaves a bucket
/// another replica reserved in since, and never touches the park.
#[tokio::test]
async fn reset_frees_the_slots_this_replica_booked_last_and_keeps_the_park() {
    let Some(redis) = redis("reset_frees_the_slots_this_replica_booked_last").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("reset");
    let (a, b) = (store(&url, &prefix).await, store(&url, &prefix).await);
    let q = quota(1.0, 5);
    let (tat_key, park_key) = a.key_names(&host());
    let mut conn = inspect(&url).await;
    // Waits (at most 1 s) until the key exists or not, as asked, or says it did not.
    async fn until_exists(
        conn: &mut redis::aio::MultiplexedConnection,
        key: &str,
        exists: bool,
    ) -> bool {
        for _ in 0..100 {
            if conn.exists::<_, bool>(key).await.unwrap() == exists {
                return true;
            }
            tokio::time::sleep(10 * MS).await;
        }
        false
    }
    async fn tat_gone(conn: &mut redis::aio::MultiplexedConnection, tat_key: &str) -> bool {
        until_exists(conn, tat_key, false).await
    }

    common::reset_starts_from_a_full_bucket(&b).await;
    // B reserved last: its reset frees the bucket for A too.
    b.reset(&host());
    assert!(
        tat_gone(&mut conn, &tat_key).await,
        "B's reset frees its slots"
    );
    // B reserves, then A on top: B's reset leaves A's slot, and A's own frees it.
    assert!(matches!(
        decide(&b, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    assert!(matches!(
        decide(&a, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    b.reset(&host());
    tokio::time::sleep(200 * MS).await;
    assert!(
        conn.exists::<_, bool>(&tat_key).await.unwrap(),
        "not B's to free"
    );
    a.reset(&host());
    assert!(
        tat_gone(&mut conn, &tat_key).await,
        "A's reset frees its slot"
    );

    // The park stays through a reset.
    assert!(matches!(
        decide(&a, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    // The park and the reset go out in two spawned tasks, in either order: the park must be
    // there once both landed, with the TTL it was given less the time since.
    let parked_at = tokio::time::Instant::now();
    a.park(&host(), Duration::from_secs(30));
    a.reset(&host());
    assert!(
        tat_gone(&mut conn, &tat_key).await,
        "the bucket is forgotten"
    );
    assert!(
        until_exists(&mut conn, &park_key, true).await,
        "the park lands"
    );
    let ttl: i64 = conn.pttl(&park_key).await.unwrap();
    let since = i64::try_from(parked_at.elapsed().as_millis()).unwrap();
    assert!(
        ttl > 30_000 - since - 1_000 && ttl <= 30_000,
        "the park stays: {ttl} ms left {since} ms after it was set"
    );
    let Decision::Deny(d) = decide(&b, q, Duration::ZERO).await else {
        panic!("still parked")
    };
    assert!(d.is_parked());
    assert_eq!((a.outages(), b.outages()), (0, 0));
}

/// A 429 with Retry-After seen by one replica parks the host for every replica.
#[tokio::test]
async fn a_park_through_one_replica_holds_the_others() {
    let Some(redis) = redis("a_park_through_one_replica_holds_the_others").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("park");
    let (a, b) = (store(&url, &prefix).await, store(&url, &prefix).await);

    let a_svc = ServiceBuilder::new()
        .layer(TokenBucketRateLimitLayer::with_quota(quota(100.0, 10)).store_in(a.clone()))
        .service(service_fn(|_req: http::Request<()>| async {
            let resp = http::Response::builder()
                .status(429)
                .header("retry-after", "30")
                .body(())
                .unwrap();
            Ok::<_, BoxError>(resp)
        }));
    let resp = a_svc.oneshot(request()).await.unwrap();
    assert_eq!(resp.status(), 429);
    let (_, park_key) = a.key_names(&host());
    let mut conn = inspect(&url).await;
    for _ in 0..100 {
        if conn.exists::<_, bool>(&park_key).await.unwrap() {
            break;
        }
        tokio::time::sleep(10 * MS).await;
    }

    // B never saw the 429, and has no park of its own: Redis holds it.
    assert_eq!(b.fallback().parked_until(&host()), None);
    let b_svc = ServiceBuilder::new()
        .layer(
            TokenBucketRateLimitLayer::with_quota(quota(100.0, 10))
                .mode(Mode::Reject)
                .store_in(b.clone()),
        )
        .service(service_fn(|_req: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(()))
        }));
    let err = b_svc.oneshot(request()).await.unwrap_err();
    let limited = err.downcast_ref::<RateLimited>().expect("RateLimited");
    assert!(
        limited.retry_in() > Duration::from_secs(25)
            && limited.retry_in() <= Duration::from_secs(30),
        "{limited:?}"
    );
    let Decision::Deny(d) = decide(&b, quota(100.0, 10), Duration::from_secs(1)).await else {
        panic!("parked")
    };
    assert!(d.is_parked());
    let wait = wait_of(decide(&b, quota(100.0, 10), Duration::from_secs(60)).await);
    assert!(
        wait > Duration::from_secs(25),
        "waits for the park: {wait:?}"
    );
}

const SHORT: Duration = Duration::from_millis(100);
/// A caller is answered within the command timeout plus this much (scheduling on a busy box).
const SLACK: Duration = Duration::from_millis(400);

async fn outage_store(url: &str, prefix: &str, policy: FailurePolicy) -> RedisStore<HostKey> {
    RedisStore::builder(url)
        .prefix(prefix)
        .command_timeout(SHORT)
        .retry_backoff(SHORT)
        .policy(policy)
        .connect()
        .await
        .expect("redis answers")
}

/// Waits (at most 10 s) until the store uses Redis again.
async fn until_shared(s: &RedisStore<HostKey>) {
    for _ in 0..200 {
        if !s.is_degraded() {
            return;
        }
        tokio::time::sleep(50 * MS).await;
    }
    panic!("the store did not go back to redis within 10 s");
}

async fn bounded(s: &RedisStore<HostKey>, q: Quota, max_wait: Duration) -> Decision {
    timeout(SHORT + SLACK, s.acquire(&host(), q, max_wait))
        .await
        .expect("never held past the command timeout")
        .expect("never an error")
}

/// Fail-open: Redis killed mid-run; every call is decided in process, quickly; when Redis is
/// back (empty, on the same port), decisions go to it again.
#[tokio::test]
async fn fail_open_rides_out_a_dead_redis_and_comes_back() {
    let Some(mut server) = own_redis("fail_open_rides_out_a_dead_redis_and_comes_back").await
    else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("failopen");
    let s = outage_store(&url, &prefix, FailurePolicy::FailOpen).await;
    let q = quota(10.0, 5);
    assert!(matches!(
        bounded(&s, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    assert!(!s.is_degraded());

    server.kill();
    for _ in 0..20 {
        let d = bounded(&s, q, Duration::from_secs(60)).await;
        assert!(matches!(d, Decision::Admit(_)), "fail-open admits: {d:?}");
    }
    assert!(s.is_degraded());
    assert_eq!(s.outages(), 1, "one outage");
    // The fallback paced them: it holds the bucket now.
    assert!(!s.fallback().is_empty());

    server.restart().await;
    until_shared(&s).await;
    let (tat_key, _) = s.key_names(&host());
    let mut conn = inspect(&url).await;
    assert!(
        !conn.exists::<_, bool>(&tat_key).await.unwrap(),
        "a fresh server"
    );
    assert!(matches!(
        bounded(&s, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));
    assert!(
        conn.exists::<_, bool>(&tat_key).await.unwrap(),
        "decided in redis again"
    );
    assert_eq!(s.outages(), 1);
}

/// Fail-closed: Redis killed mid-run; every call fails fast with `RateLimited`; after the
/// restart calls go through again.
#[tokio::test]
async fn fail_closed_refuses_while_redis_is_dead() {
    let Some(mut server) = own_redis("fail_closed_refuses_while_redis_is_dead").await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("failclosed");
    let s = outage_store(&url, &prefix, FailurePolicy::FailClosed).await;
    let svc = ServiceBuilder::new()
        .layer(TokenBucketRateLimitLayer::with_quota(quota(100.0, 10)).store_in(s.clone()))
        .service(service_fn(|_req: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(()))
        }));
    let call = || async {
        timeout(SHORT + SLACK, svc.clone().oneshot(request()))
            .await
            .expect("never held past the command timeout")
    };
    call().await.expect("admitted while redis runs");

    server.kill();
    for _ in 0..10 {
        let err = call().await.unwrap_err();
        let limited = err.downcast_ref::<RateLimited>().expect("RateLimited");
        assert_eq!(limited.retry_in(), SHORT, "retry when redis is tried again");
    }
    assert!(s.is_degraded());

    server.restart().await;
    until_shared(&s).await;
    call().await.expect("admitted once redis is back");
}

/// A frozen server (connections open, no answers): callers are answered within the command
/// timeout; after it thaws, decisions are shared again.
#[tokio::test]
async fn a_frozen_redis_holds_nobody_past_the_timeout() {
    let Some(server) = own_redis("a_frozen_redis_holds_nobody_past_the_timeout").await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("frozen");
    let s = outage_store(&url, &prefix, FailurePolicy::FailOpen).await;
    let q = quota(10.0, 5);
    assert!(matches!(
        bounded(&s, q, Duration::ZERO).await,
        Decision::Admit(_)
    ));

    server.pause();
    let mut decided = 0;
    for _ in 0..10 {
        decided += matches!(
            bounded(&s, q, Duration::from_secs(60)).await,
            Decision::Admit(_)
        ) as u32;
    }
    let degraded = s.is_degraded();
    server.resume();
    assert_eq!(decided, 10);
    assert!(degraded);
    until_shared(&s).await;
    assert!(matches!(
        bounded(&s, q, Duration::from_secs(60)).await,
        Decision::Admit(_)
    ));
    assert_eq!(s.outages(), 1);
}

/// A park heard by A while Redis was down reaches B once Redis is back, even though A never
/// decided again after it.
#[tokio::test]
async fn a_park_heard_during_an_outage_is_shared_once_redis_is_back() {
    let Some(mut server) =
        own_redis("a_park_heard_during_an_outage_is_shared_once_redis_is_back").await
    else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("park-outage");
    let a = outage_store(&url, &prefix, FailurePolicy::FailOpen).await;
    server.kill();
    let _ = bounded(&a, quota(100.0, 10), Duration::ZERO).await;
    assert!(a.is_degraded());
    a.park(&host(), Duration::from_secs(30));
    server.restart().await;
    until_shared(&a).await;
    let b = outage_store(&url, &prefix, FailurePolicy::FailOpen).await;
    let d = bounded(&b, quota(100.0, 10), Duration::from_secs(1)).await;
    assert!(
        matches!(d, Decision::Deny(d) if d.is_parked() && d.retry_in() > Duration::from_secs(25)),
        "B sends during A's park: {d:?}"
    );
    let Decision::Deny(d) = bounded(&a, quota(100.0, 10), Duration::from_secs(1)).await else {
        panic!("A is parked")
    };
    assert!(d.is_parked());
    assert_eq!(a.outages(), 1);
}

/// A Redis that answers but refuses the script (here a read-only replica of a master that is
/// not there) is one outage, not a new one after every probe.
#[tokio::test]
async fn a_redis_that_refuses_the_script_is_one_outage() {
    let Some(server) = own_redis("a_redis_that_refuses_the_script_is_one_outage").await else {
        return;
    };
    let url = server.url();
    let prefix = unique_prefix("readonly");
    let s = outage_store(&url, &prefix, FailurePolicy::FailOpen).await;
    let mut conn = inspect(&url).await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(2);
    let mut decisions = 0;
    while Instant::now() < until && decisions < 1000 {
        let d = bounded(&s, quota(100.0, 10), Duration::from_secs(1)).await;
        assert!(matches!(d, Decision::Admit(_)), "fail-open admits: {d:?}");
        decisions += 1;
        tokio::time::sleep(10 * MS).await;
    }
    assert!(decisions > 20, "{decisions} decisions in 2 s");
    assert!(s.is_degraded(), "a read-only redis is down");
    assert_eq!(
        s.outages(),
        1,
        "{} outages (each with a warning and a 'shared again') in 2 s",
        s.outages()
    );
    // Writable again: shared again.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut conn)
        .await
        .unwrap();
    until_shared(&s).await;
    let (tat_key, _) = s.key_names(&host());
    assert!(matches!(
        bounded(&s, quota(100.0, 10), Duration::ZERO).await,
        Decision::Admit(_)
    ));
    assert!(
        conn.exists::<_, bool>(&tat_key).await.unwrap(),
        "decided in redis"
    );
    assert_eq!(s.outages(), 1);
}

/// A give-back that lands in the millisecond its key expires never leaves the key without an
/// expiry.
#[tokio::test]
async fn a_give_back_never_leaves_a_key_without_expiry() {
    let Some(redis) = redis("a_give_back_never_leaves_a_key_without_expiry").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("giveback");
    let s: RedisStore<String> = RedisStore::builder(url.as_str())
        .prefix(prefix.as_str())
        .command_timeout(PATIENT)
        .connect()
        .await
        .expect("redis answers");
    let mut conn = inspect(&url).await;
    let q = quota(10.0, 1);
    let ticket: u64 = 1_000_000_000;
    let keys: Vec<String> = (0..400).map(|i| format!("k{i}")).collect();
    for k in &keys {
        let (tat_key, _) = s.key_names(k);
        let _: () = redis::cmd("SET")
            .arg(&tat_key)
            .arg(ticket)
            .arg("PX")
            .arg(1)
            .query_async(&mut conn)
            .await
            .unwrap();
        let grant = courier_ratelimit::Grant::new(
            Instant::now() + Duration::from_secs(1),
            ticket | (1 << 63),
        );
        s.cancel(k, q, &grant);
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(200 * MS).await;
    let mut immortal = Vec::new();
    for k in &keys {
        let (tat_key, _) = s.key_names(k);
        let ttl: i64 = conn.pttl(&tat_key).await.unwrap();
        if ttl == -1 {
            immortal.push(tat_key);
        }
    }
    assert!(
        immortal.is_empty(),
        "{} keys never expire, e.g. {:?}",
        immortal.len(),
        immortal.first()
    );
    assert_eq!(s.outages(), 0);
}

/// A slot whose moment has come goes back too when its request is never sent (refused on
/// waking, or dropped after its slot came): the next request takes it at once.
#[tokio::test]
async fn a_slot_given_back_after_its_moment_goes_back() {
    let Some(redis) = redis("a_slot_given_back_after_its_moment_goes_back").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("late-giveback");
    let s = store(&url, &prefix).await;
    // One at a time, one per 10 s: only a slot given back lets a second request in now.
    let q = quota(0.1, 1);
    let Decision::Admit(grant) = decide(&s, q, Duration::ZERO).await else {
        panic!("the bucket starts full")
    };
    assert!(grant.at() <= Instant::now(), "a slot for now");
    let Decision::Deny(_) = decide(&s, q, Duration::ZERO).await else {
        panic!("the one slot is taken")
    };
    s.cancel(&host(), q, &grant);
    // The give-back runs in a spawned task: bounded polling for its effect.
    let mut admitted = false;
    for _ in 0..100 {
        if let Decision::Admit(g) = decide(&s, q, Duration::ZERO).await {
            assert!(g.at() <= Instant::now());
            admitted = true;
            break;
        }
        tokio::time::sleep(10 * MS).await;
    }
    assert!(admitted, "the slot given back was taken again");
}

/// Two replicas pacing an overloaded host adaptively take their slots from one Redis bucket:
/// together they keep to the pace one of them learned, where each alone would keep to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_pacing_shares_its_slots_through_redis() {
    use courier_ratelimit::adaptive::AdaptivePacingLayer;
    let Some(redis) = redis("adaptive_pacing_shares_its_slots_through_redis").await else {
        return;
    };
    let url = redis.url();
    let prefix = unique_prefix("adaptive");
    let starts = Arc::new(Mutex::new(Vec::new()));
    let mut services = Vec::new();
    for _ in 0..2 {
        // Paced from the first answer: this is about the shared slots, not the evidence.
        let layer = AdaptivePacingLayer::new()
            .min_answers(1)
            .store_in(store(&url, &prefix).await);
        let starts = Arc::clone(&starts);
        // Every answer a bare 503: nothing accepted, so each replica learns the minimum, 1/s.
        services.push(ServiceBuilder::new().layer(layer).service(service_fn(
            move |_req: http::Request<()>| {
                starts.lock().unwrap().push(Instant::now());
                async {
                    let mut resp = http::Response::new(());
                    *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                    Ok::<_, BoxError>(resp)
                }
            },
        )));
    }
    let t0 = Instant::now();
    let run_for = Duration::from_millis(2_500);
    let (a, b) = (services[0].clone(), services[1].clone());
    tokio::join!(replica(a, t0, run_for), replica(b, t0, run_for));
    let starts = starts.lock().unwrap().clone();
    let in_window = starts.iter().filter(|t| **t - t0 < run_for).count();
    // Each replica's first call goes unpaced; then one slot a second for both together (at
    // 0, 1 and 2 s). Alone, each would start 1 + 3.
    assert!(
        (3..=6).contains(&in_window),
        "{in_window} starts in 2.5 s: {starts:?}"
    );
}

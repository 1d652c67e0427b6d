use super::host::ascii_lowercase;
use super::*;
use http::{HeaderMap, Uri};
use proptest::prelude::*;

fn host(name: &str) -> Uri {
    format!("http://{name}/").parse().unwrap()
}

/// A GET of `uri` with `headers`, as the budget sees it.
fn parts(uri: &Uri, headers: &HeaderMap) -> Parts {
    let mut req = http::Request::get(uri.clone()).body(()).unwrap();
    *req.headers_mut() = headers.clone();
    req.into_parts().0
}

trait Short {
    fn deposit_(&self, uri: &Uri, now: Instant);
    fn withdraw_(&self, uri: &Uri, now: Instant) -> Option<Withdrawal>;
}

impl Short for Arc<BudgetState> {
    fn deposit_(&self, uri: &Uri, now: Instant) {
        self.deposit(&parts(uri, &HeaderMap::new()), now)
    }
    fn withdraw_(&self, uri: &Uri, now: Instant) -> Option<Withdrawal> {
        self.withdraw(&parts(uri, &HeaderMap::new()), now)
    }
}

#[tokio::test(start_paused = true)]
async fn ten_percent_no_floor_is_exact() {
    let b = RetryBudget::new().ratio(0.1).floor(0).build();
    let h = host("a");
    let now = Instant::now();
    for _ in 0..9 {
        b.deposit_(&h, now);
    }
    assert!(b.withdraw_(&h, now).is_none(), "9 requests earn 0.9 retry");
    b.deposit_(&h, now);
    b.withdraw_(&h, now).expect("10 requests earn one").commit();
    assert!(b.withdraw_(&h, now).is_none());
}

#[tokio::test(start_paused = true)]
async fn floor_and_window() {
    let b = RetryBudget::new().ratio(0.0).floor(2).build();
    let h = host("a");
    b.withdraw_(&h, Instant::now()).unwrap().commit();
    b.withdraw_(&h, Instant::now()).unwrap().commit();
    assert!(b.withdraw_(&h, Instant::now()).is_none());
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(
        b.withdraw_(&h, Instant::now()).is_some(),
        "spent floor comes back"
    );
}

#[tokio::test(start_paused = true)]
async fn dropped_withdrawal_is_refunded() {
    let b = RetryBudget::new().ratio(0.0).floor(1).build();
    let h = host("a");
    let w = b.withdraw_(&h, Instant::now()).unwrap();
    assert!(b.withdraw_(&h, Instant::now()).is_none());
    drop(w);
    assert!(b.withdraw_(&h, Instant::now()).is_some());
}

#[tokio::test(start_paused = true)]
async fn hosts_are_separate_and_bounded() {
    let b = RetryBudget::new()
        .ratio(0.0)
        .floor(1)
        .max_keys(NonZeroUsize::new(2).unwrap())
        .build();
    b.withdraw_(&host("a"), Instant::now()).unwrap().commit();
    assert!(b.withdraw_(&host("a"), Instant::now()).is_none());
    b.withdraw_(&host("b"), Instant::now()).unwrap().commit();
    b.withdraw_(&host("c"), Instant::now()).unwrap().commit();
    assert!(b.hosts() <= 2);
    tokio::time::advance(Duration::from_secs(11)).await;
    for name in ["d", "e", "f"] {
        b.deposit_(&host(name), Instant::now());
    }
    assert!(b.hosts() <= 2);
    let g = RetryBudget::new().ratio(0.0).floor(1).global().build();
    g.withdraw_(&host("a"), Instant::now()).unwrap().commit();
    assert!(
        g.withdraw_(&host("b"), Instant::now()).is_none(),
        "one shared budget"
    );
}

#[tokio::test(start_paused = true)]
async fn key_by_gives_each_key_its_own_budget_across_hosts() {
    let b = RetryBudget::new()
        .ratio(0.0)
        .floor(1)
        .max_keys(NonZeroUsize::new(2).unwrap())
        .key_by(|head: &RequestHead<'_>| head.headers().get("x-tenant").cloned())
        .build();
    let now = Instant::now();
    let tenant = |name: &str, at: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("x-tenant", name.parse().unwrap());
        parts(&host(at), &headers)
    };
    b.withdraw(&tenant("acme", "a"), now).unwrap().commit();
    assert!(
        b.withdraw(&tenant("acme", "b"), now).is_none(),
        "one tenant, one budget, whatever the host"
    );
    b.withdraw(&tenant("zeta", "a"), now).unwrap().commit();
    assert_eq!(b.hosts(), 2);
    // Bounded like hosts: a third key evicts the least recently used.
    b.withdraw(&tenant("omni", "a"), now).unwrap().commit();
    assert!(b.hosts() <= 2);
    // A request the function gives no tenant has the `None` key's budget.
    b.withdraw(&parts(&host("a"), &HeaderMap::new()), now)
        .unwrap()
        .commit();
    assert!(
        b.withdraw(&parts(&host("b"), &HeaderMap::new()), now)
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn host_matching_ignores_case_and_reads_the_host_header() {
    let b = RetryBudget::new().ratio(0.0).floor(1).build();
    let now = Instant::now();
    b.withdraw_(&host("API.example"), now).unwrap().commit();
    assert!(
        b.withdraw_(&host("api.EXAMPLE"), now).is_none(),
        "same host"
    );
    let mut headers = HeaderMap::new();
    headers.insert("host", "svc:8080".parse().unwrap());
    let origin_form: Uri = "/a?b=c".parse().unwrap();
    b.withdraw(&parts(&origin_form, &headers), now)
        .unwrap()
        .commit();
    assert!(b.withdraw(&parts(&origin_form, &headers), now).is_none());
    assert_eq!(b.hosts(), 2);
    // The shared budget for requests without any host.
    b.withdraw(&parts(&origin_form, &HeaderMap::new()), now)
        .unwrap()
        .commit();
    assert_eq!(b.hosts(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_deposit_after_an_eviction_reaches_the_hosts_new_cell() {
    let b = RetryBudget::new()
        .ratio(1.0)
        .floor(0)
        .max_keys(NonZeroUsize::new(1).unwrap())
        .build();
    let now = Instant::now();
    // This thread now keeps "a"'s cell; making "b" evicts it.
    b.deposit_(&host("a"), now);
    assert!(b.withdraw_(&host("b"), now).is_none());
    assert_eq!(b.hosts(), 1);
    b.deposit_(&host("a"), now);
    b.withdraw_(&host("a"), now)
        .expect("the deposit went to the cell in the map")
        .commit();
}

#[tokio::test(start_paused = true)]
async fn the_cached_cell_is_told_apart_by_scheme_and_port_not_case() {
    let b = RetryBudget::new().ratio(1.0).floor(0).build();
    let now = Instant::now();
    let uri = |s: &str| s.parse::<Uri>().unwrap();
    for u in [
        "http://a.example/",
        "http://A.Example/x",
        "https://a.example/",
        "http://a.example:8080/",
    ] {
        b.deposit_(&uri(u), now);
    }
    for (u, retries) in [
        ("http://a.example/", 2),
        ("https://a.example/", 1),
        ("http://a.example:8080/", 1),
    ] {
        for _ in 0..retries {
            b.withdraw_(&uri(u), now).expect(u).commit();
        }
        assert!(b.withdraw_(&uri(u), now).is_none(), "{u}");
    }
}

#[tokio::test(start_paused = true)]
async fn budgets_on_one_thread_keep_their_deposits_apart() {
    let one = RetryBudget::new().ratio(1.0).floor(0).build();
    let two = RetryBudget::new().ratio(1.0).floor(0).build();
    let (a, now) = (host("a"), Instant::now());
    one.deposit_(&a, now);
    two.deposit_(&a, now);
    two.deposit_(&a, now);
    one.withdraw_(&a, now).unwrap().commit();
    assert!(one.withdraw_(&a, now).is_none(), "one deposit, one retry");
    two.withdraw_(&a, now).unwrap().commit();
    two.withdraw_(&a, now).unwrap().commit();
    assert!(two.withdraw_(&a, now).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_deposit_into_a_new_slot_clears_what_it_held() {
    let b = RetryBudget::new().ratio(1.0).floor(0).build();
    let a = host("a");
    b.deposit_(&a, Instant::now());
    // Same slot, one window later: the old deposit has left.
    tokio::time::advance(Duration::from_secs(10)).await;
    b.deposit_(&a, Instant::now());
    b.withdraw_(&a, Instant::now()).unwrap().commit();
    assert!(b.withdraw_(&a, Instant::now()).is_none());
}

proptest! {
    #[test]
    fn word_lowercase_matches_bytewise(bytes in any::<[u8; 8]>()) {
        let want = u64::from_le_bytes(bytes.map(|b| b.to_ascii_lowercase()));
        prop_assert_eq!(ascii_lowercase(u64::from_le_bytes(bytes)), want);
    }
}

proptest! {
    /// Whatever the timing, retries in any window never exceed ratio * requests + floor.
    #[test]
    fn never_more_than_the_share(
        steps in proptest::collection::vec((0u64..3000, any::<bool>()), 1..400),
        percent in 0u32..50,
        floor in 0u32..5,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let b = RetryBudget::new().ratio(f64::from(percent) / 100.0).floor(floor).build();
            let h = host("a");
            let start = Instant::now();
            let mut events: Vec<(Duration, bool)> = Vec::new();
            for (gap_ms, is_request) in steps {
                tokio::time::advance(Duration::from_millis(gap_ms)).await;
                let now = Instant::now();
                if is_request {
                    b.deposit_(&h, now);
                    events.push((now - start, true));
                } else if let Some(mut w) = b.withdraw_(&h, now) {
                    w.commit();
                    events.push((now - start, false));
                }
            }
            // The window of ten 1 s slots always covers the last 9 s of withdrawals and
            // never more than the last 10 s of deposits.
            for (s, is_request) in &events {
                if *is_request {
                    continue;
                }
                let ret = events.iter().filter(|(t, r)| !*r && *t <= *s && *t + Duration::from_secs(9) > *s).count() as u64;
                let req = events.iter().filter(|(t, r)| *r && *t <= *s && *t + Duration::from_secs(10) > *s).count() as u64;
                prop_assert!(
                    ret * 100 <= req * u64::from(percent) + u64::from(floor) * 100,
                    "{ret} retries against {req} requests at {s:?}"
                );
            }
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn keys_whose_hashes_collide_still_have_budgets_of_their_own() {
    /// A tenant whose hash is always the same: only equality tells two apart.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Tenant(String);
    impl Hash for Tenant {
        fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
    }
    let b = RetryBudget::new()
        .ratio(0.0)
        .floor(1)
        .key_by(|head: &RequestHead<'_>| Tenant(head.uri().host().unwrap_or_default().to_owned()))
        .build();
    let now = Instant::now();
    b.withdraw_(&host("a"), now).unwrap().commit();
    assert!(
        b.withdraw_(&host("a"), now).is_none(),
        "a's one retry is spent"
    );
    b.withdraw_(&host("b"), now)
        .expect("b has a budget of its own")
        .commit();
    assert_eq!(b.hosts(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_window_setting_sets_when_retries_come_back() {
    let b = RetryBudget::new()
        .ratio(0.0)
        .floor(1)
        .window(Duration::from_secs(1))
        .build();
    let h = host("a");
    b.withdraw_(&h, Instant::now()).unwrap().commit();
    assert!(b.withdraw_(&h, Instant::now()).is_none());
    tokio::time::advance(Duration::from_millis(1100)).await;
    assert!(
        b.withdraw_(&h, Instant::now()).is_some(),
        "a one-second window gives the floor back after a second, not after the default ten"
    );
}

#[tokio::test(start_paused = true)]
async fn per_host_after_global_keys_by_host_again_and_keeps_the_other_settings() {
    let budget = RetryBudget::new().ratio(0.0).floor(1).global();
    assert!(format!("{budget:?}").contains("Global"), "{budget:?}");
    let budget = budget.per_host();
    assert!(format!("{budget:?}").contains("PerHost"), "{budget:?}");
    let b = budget.build();
    let now = Instant::now();
    b.withdraw_(&host("a"), now).unwrap().commit();
    assert!(
        b.withdraw_(&host("a"), now).is_none(),
        "the floor of 1 is kept"
    );
    assert!(
        b.withdraw_(&host("b"), now).is_some(),
        "each host has its own"
    );
    let by = RetryBudget::new().key_by(|head: &RequestHead<'_>| head.method().clone());
    assert!(format!("{by:?}").contains("KeyBy(..)"), "{by:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retry_given_back_after_its_window_refunds_nothing_newer() {
    let b = RetryBudget::new().ratio(0.0).floor(1).build();
    let h = host("a");
    let old = b.withdraw_(&h, Instant::now()).expect("the floor");
    // Ten slots later the same slot counts a new epoch; the old retry has left the window.
    tokio::time::advance(Duration::from_secs(10)).await;
    b.withdraw_(&h, Instant::now())
        .expect("the floor again")
        .commit();
    drop(old);
    assert!(
        b.withdraw_(&h, Instant::now()).is_none(),
        "giving back the old retry must not refund the new one"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_hosts_go_first_and_busy_ones_keep_what_they_spent() {
    let b = RetryBudget::new()
        .ratio(0.0)
        .floor(1)
        .max_keys(NonZeroUsize::new(2).unwrap())
        .build();
    b.withdraw_(&host("a"), Instant::now()).unwrap().commit();
    b.deposit_(&host("b"), Instant::now());
    // Both idle after a window: a third host evicts both, not only the least recent.
    tokio::time::advance(Duration::from_secs(11)).await;
    b.deposit_(&host("c"), Instant::now());
    assert_eq!(b.hosts(), 1, "idle hosts are dropped together");
    // Busy hosts: the one used last keeps its spent retry when a newcomer needs room.
    tokio::time::advance(Duration::from_secs(2)).await;
    b.withdraw_(&host("d"), Instant::now()).unwrap().commit();
    b.deposit_(&host("e"), Instant::now());
    assert_eq!(b.hosts(), 2);
    assert!(
        b.withdraw_(&host("d"), Instant::now()).is_none(),
        "d is busy and recent: kept, its floor spent"
    );
}

/// The least recently used host goes when none is idle, whichever of the two it is.
#[tokio::test(start_paused = true)]
async fn past_the_bound_the_least_recently_used_host_goes() {
    for (older, newer) in [("p", "q"), ("q", "p")] {
        let b = RetryBudget::new()
            .ratio(0.0)
            .floor(1)
            .max_keys(NonZeroUsize::new(2).unwrap())
            .build();
        b.withdraw_(&host(older), Instant::now()).unwrap().commit();
        tokio::time::advance(Duration::from_secs(3)).await;
        b.withdraw_(&host(newer), Instant::now()).unwrap().commit();
        tokio::time::advance(Duration::from_secs(3)).await;
        b.deposit_(&host("r"), Instant::now());
        assert!(
            b.withdraw_(&host(newer), Instant::now()).is_none(),
            "{newer} was used last: kept, its floor spent"
        );
        assert!(
            b.withdraw_(&host(older), Instant::now()).is_some(),
            "{older} was evicted and starts over"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_budget_and_a_withdrawal_print_what_they_hold() {
    let b = RetryBudget::new().floor(3).build();
    let printed = format!("{b:?}");
    assert!(printed.starts_with("BudgetState"), "{printed}");
    assert!(printed.contains("floor: 3"), "{printed}");
    let w = b.withdraw_(&host("api.example"), Instant::now()).unwrap();
    let printed = format!("{w:?}");
    assert!(printed.starts_with("Withdrawal"), "{printed}");
    assert!(printed.contains("api.example"), "{printed}");
}

#[test]
fn host_hashes_ignore_case_and_tell_hosts_apart() {
    let hash = |uri: &str| {
        let uri: Uri = uri.parse().unwrap();
        super::host::with_view(&uri, &HeaderMap::new(), |view| view.hash())
    };
    assert_eq!(
        hash("http://API.Example:8080/"),
        hash("http://api.example:8080/")
    );
    let hosts = [
        "http://a/",
        "http://b/",
        "https://a/",
        "http://a:8080/",
        "http://a-much-longer-host-name.example/",
        "http://a-much-longer-host-name.example:1/",
    ];
    let hashes: std::collections::HashSet<u64> = hosts.iter().map(|h| hash(h)).collect();
    assert_eq!(hashes.len(), hosts.len(), "every host hashes apart");
}

/// A run of requests to one host deposits through the per-thread shortcut; a request to
/// another host, named in the URI or only in `Host`, must not take it.
#[tokio::test(start_paused = true)]
async fn the_deposit_shortcut_never_credits_another_host() {
    let b = RetryBudget::new().ratio(1.0).floor(0).build();
    let now = Instant::now();
    b.deposit_(&host("a.example"), now);
    b.deposit_(&host("b.example"), now);
    b.withdraw_(&host("b.example"), now)
        .expect("b's own request earned b a retry")
        .commit();
    b.withdraw_(&host("a.example"), now)
        .expect("a's own request earned a a retry")
        .commit();

    let origin_form: Uri = "/items".parse().unwrap();
    let host_field = |name: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("host", name.parse().unwrap());
        parts(&origin_form, &headers)
    };
    b.deposit(&host_field("c.example"), now);
    b.deposit(&host_field("d.example"), now);
    b.withdraw(&host_field("d.example"), now)
        .expect("d's own request earned d a retry")
        .commit();
    b.withdraw(&host_field("c.example"), now)
        .expect("c's own request earned c a retry")
        .commit();
}

/// A run of requests to one host, however its name is cased, deposits without the map: one
/// lookup for the run, and one more when the host changes.
#[tokio::test(start_paused = true)]
async fn a_run_of_deposits_to_one_host_looks_the_map_up_once() {
    let b = RetryBudget::new().build();
    let now = Instant::now();
    let lookups = |b: &BudgetState| b.lookups.load(Ordering::Relaxed);
    b.deposit_(&host("api.example"), now);
    assert_eq!(lookups(&b), 1);
    for name in ["api.example", "API.example", "api.EXAMPLE"] {
        b.deposit_(&host(name), now);
    }
    assert_eq!(lookups(&b), 1, "the same host, told in place");
    b.deposit_(&host("other.example"), now);
    assert_eq!(lookups(&b), 2, "another host is looked up");
}

/// The map places a host by its hash's top and bottom bits: both must spread, and the bits
/// must be balanced, for hosts that differ in a few characters.
#[test]
fn host_hashes_spread_over_the_map() {
    let hashes: Vec<u64> = (0..512)
        .map(|i| {
            let uri: Uri = format!("http://svc-{i}.internal:8080/").parse().unwrap();
            super::host::with_view(&uri, &HeaderMap::new(), |view| view.hash())
        })
        .collect();
    let distinct = |f: &dyn Fn(u64) -> u64| {
        hashes
            .iter()
            .map(|&h| f(h))
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    assert_eq!(distinct(&|h| h), 512);
    assert!(
        distinct(&|h| h >> 57) >= 100,
        "top seven bits: {}",
        distinct(&|h| h >> 57)
    );
    assert!(
        distinct(&|h| h & 511) >= 250,
        "low nine bits: {}",
        distinct(&|h| h & 511)
    );
    let ones: u32 = hashes.iter().map(|h| h.count_ones()).sum();
    let share = f64::from(ones) / (512.0 * 64.0);
    assert!((0.45..0.55).contains(&share), "share of set bits {share}");
}

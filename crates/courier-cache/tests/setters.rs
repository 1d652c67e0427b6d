//! What a setter does to the store: a layer is a value, and each setter gives the services
//! made after it a store of its own.

mod common;

use common::*;
use courier_cache::CacheStore;
use courier_core::CacheStatus;
use tower::Layer;

const URL: &str = "http://api.example/v1/items";

#[tokio::test(start_paused = true)]
async fn a_setter_leaves_earlier_services_their_settings_and_their_entries() {
    let mock = Mock::new();
    let first = layer();
    let early_store = first.store_ref().clone();
    let mut early = first.layer(mock.service());
    let second = first.max_entry_bytes(2);
    let store = second.store_ref().clone();
    let mut late = second.layer(mock.service());

    mock.push(ok(&[("cache-control", "max-age=60")], "fresh"));
    assert_eq!(
        send(&mut early, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );
    assert_eq!(
        early_store.len(),
        1,
        "the early service keeps its 1 MiB limit"
    );
    assert!(
        store.is_empty(),
        "its entry is not in the later layer's store"
    );

    mock.push(ok(&[("cache-control", "max-age=60")], "large"));
    assert_eq!(
        send(&mut late, get(URL)).await.unwrap().cache,
        CacheStatus::Miss
    );
    assert!(store.is_empty(), "five bytes pass the later limit of two");
    mock.push(ok(&[("cache-control", "max-age=60")], "s"));
    send(&mut late, get(URL)).await.unwrap();
    assert_eq!(
        store.len(),
        1,
        "the store taken after the last setter sees the calls"
    );
    let hit = send(&mut late, get(URL)).await.unwrap();
    assert_eq!((hit.cache, &hit.body[..]), (CacheStatus::Hit, &b"s"[..]));

    let hit = send(&mut early, get(URL)).await.unwrap();
    assert_eq!(
        (hit.cache, &hit.body[..]),
        (CacheStatus::Hit, &b"fresh"[..])
    );
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_setter_keeps_a_store_handed_in() {
    let mine = TextStore::default();
    let mock = Mock::new();
    let first = layer().store(mine.clone());
    let mut early = first.clone().layer(mock.service());
    let mut late = first.always_revalidate(false).layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "fresh"));
    send(&mut early, get(URL)).await.unwrap();
    let hit = send(&mut late, get(URL)).await.unwrap();
    assert_eq!(hit.cache, CacheStatus::Hit, "both use the store handed in");
    assert_eq!(mine.len(), 1);
}

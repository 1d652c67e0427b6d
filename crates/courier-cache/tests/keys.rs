//! Which requests share a stored entry: the URI key (scheme and host in any case, the port as
//! written unless it is the scheme's default, path and query exactly), `Vary` and the
//! credentials, through the in-memory store (looked up by the URI's parts) and through any
//! other store (looked up by the key text).

mod common;

use common::*;
use courier_cache::{EtagCacheLayer, MemoryStore};
use courier_core::CacheStatus;
use http::Method;
use tower::Layer;

fn fresh(body: &str) -> Answer {
    ok(&[("cache-control", "max-age=60"), ("etag", "\"k\"")], body)
}

/// Stores `first`, then asks each of `others` and returns whether it was a hit.
async fn shares(layer: EtagCacheLayer, first: &str, others: &[&str]) -> Vec<bool> {
    let mock = Mock::new();
    let mut svc = layer.layer(mock.service());
    mock.push(fresh("stored"));
    assert_eq!(
        send(&mut svc, get(first)).await.unwrap().cache,
        CacheStatus::Miss
    );
    let mut hits = Vec::new();
    for uri in others {
        // Not storable: each URI is compared with `first` alone.
        mock.push(ok(&[], "other"));
        let got = send(&mut svc, get(uri)).await.unwrap();
        let hit = got.cache == CacheStatus::Hit;
        assert_eq!(got.body, if hit { "stored" } else { "other" });
        hits.push(hit);
    }
    hits
}

fn layers() -> [(&'static str, EtagCacheLayer); 3] {
    [
        ("default store", layer()),
        ("memory store", layer().store(MemoryStore::new(1 << 20))),
        ("text store", layer().store(TextStore::default())),
    ]
}

#[tokio::test(start_paused = true)]
async fn equal_uris_share_an_entry_in_every_store() {
    for (name, layer) in layers() {
        let hits = shares(
            layer,
            "http://API.Example.com:8080/v1/Items?page=2",
            &[
                "http://api.example.com:8080/v1/Items?page=2",
                "HTTP://api.EXAMPLE.com:8080/v1/Items?page=2",
                "hTTp://Api.Example.Com:8080/v1/Items?page=2",
            ],
        )
        .await;
        assert_eq!(hits, [true, true, true], "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn unequal_uris_never_share_an_entry_in_any_store() {
    for (name, layer) in layers() {
        let hits = shares(
            layer,
            "http://api.example.com/v1/items?page=2",
            &[
                // Path and query keep their case.
                "http://api.example.com/v1/Items?page=2",
                "http://api.example.com/v1/items?Page=2",
                "http://api.example.com/v1/items?page=3",
                "http://api.example.com/v1/items",
                "http://api.example.com/v1/items?",
                // Another port, even the other scheme's default, is another key.
                "http://api.example.com:443/v1/items?page=2",
                "https://api.example.com/v1/items?page=2",
                "http://api.example.org/v1/items?page=2",
                // Same key text, other credentials: userinfo is fingerprinted.
                "http://user@api.example.com/v1/items?page=2",
                // Back to the stored one.
                "http://api.example.com/v1/items?page=2",
            ],
        )
        .await;
        let mut want = vec![false; 9];
        want.push(true);
        assert_eq!(hits, want, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_in_memory_store_keeps_its_text_keys() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(fresh("stored"));
    send(&mut svc, get("HTTPS://u:p@API.example:8443/a/B?x=Y"))
        .await
        .unwrap();
    let store = svc.store().expect("an active cache");
    assert!(
        store
            .get("https://api.example:8443/a/B?x=Y")
            .await
            .is_some()
    );
    assert!(
        store
            .get("HTTPS://API.example:8443/a/B?x=Y")
            .await
            .is_none()
    );
    assert!(
        store
            .get("https://api.example:8443/a/b?x=Y")
            .await
            .is_none()
    );
    assert!(store.remove("https://api.example:8443/a/B?x=Y").await);
    assert!(store.is_empty());
}

#[tokio::test(start_paused = true)]
async fn credentials_and_vary_still_select_within_a_key() {
    for (name, layer) in layers() {
        let mock = Mock::new();
        let mut svc = layer.layer(mock.service());
        let url = "http://API.example/thing";
        let varied = |body: &str| ok(&[("cache-control", "max-age=60"), ("vary", "accept")], body);
        let ask = |auth: &str, accept: &str| {
            req(
                Method::GET,
                url,
                &[("authorization", auth), ("accept", accept)],
            )
        };
        mock.push(varied("alice json"));
        send(&mut svc, ask("alice", "application/json"))
            .await
            .unwrap();
        mock.push(varied("alice text"));
        send(&mut svc, ask("alice", "text/plain")).await.unwrap();
        mock.push(varied("bob json"));
        send(&mut svc, ask("bob", "application/json"))
            .await
            .unwrap();
        assert_eq!(mock.calls(), 3, "{name}");

        let lower = "http://api.example/thing";
        for (auth, accept, body) in [
            ("alice", "application/json", "alice json"),
            ("alice", "text/plain", "alice text"),
            ("bob", "application/json", "bob json"),
        ] {
            let got = send(
                &mut svc,
                req(
                    Method::GET,
                    lower,
                    &[("authorization", auth), ("accept", accept)],
                ),
            )
            .await
            .unwrap();
            assert_eq!(
                (got.cache, &got.body[..]),
                (CacheStatus::Hit, body.as_bytes()),
                "{name}"
            );
        }
        assert_eq!(mock.calls(), 3, "{name}");
    }
}

//! The disk store: entries outlive the store that wrote them, the files stay within their
//! bound, and a file that fails a check is never served and is removed.

mod common;

use common::*;
use courier_cache::{CacheStore, DiskStore};
use courier_core::CacheStatus;
use http::Method;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tower::Layer;

const URL: &str = "http://api.example/catalog";

/// A fresh directory of its own for each test.
fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("courier-disk-store-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// The files in `dir`, by name, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn cacheable(body: &str) -> Answer {
    ok(
        &[("cache-control", "max-age=600"), ("etag", "\"d1\"")],
        body,
    )
}

#[tokio::test(start_paused = true)]
async fn entries_survive_a_restart() {
    let dir = dir("restart");
    {
        let store = DiskStore::open(&dir, 1 << 20).unwrap();
        let mock = Mock::new();
        let mut svc = layer().store(store.clone()).layer(mock.service());
        mock.push(cacheable("kept"));
        assert_eq!(
            send(&mut svc, get(URL)).await.unwrap().cache,
            CacheStatus::Miss
        );
        // Found at once, before it is on disk.
        assert_eq!(
            send(&mut svc, get(URL)).await.unwrap().cache,
            CacheStatus::Hit
        );
        store.flush().await;
        assert_eq!(files(&dir).len(), 1, "{:?}", files(&dir));
        assert!(files(&dir)[0].ends_with(".entry"));
    }

    tokio::time::advance(Duration::from_secs(5)).await;
    let store = DiskStore::open(&dir, 1 << 20).unwrap();
    assert_eq!(store.len(), 1);
    let mock = Mock::new();
    let mut svc = layer().store(store).layer(mock.service());
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Hit, &b"kept"[..]));
    assert_eq!(got.headers["etag"], "\"d1\"");
    assert_eq!(
        mock.calls(),
        0,
        "served by the new store, without a request"
    );

    // It goes on ageing from where it was: stale after its 600 s, revalidated then.
    tokio::time::advance(Duration::from_secs(600)).await;
    mock.push(not_modified(&[("etag", "\"d1\"")]));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Revalidated, &b"kept"[..])
    );
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn the_files_stay_within_their_bound_evicting_the_oldest() {
    let dir = dir("bound");
    // Each file is a little over 1 KiB: three fit.
    let store = DiskStore::open(&dir, 3 * 1024 + 1024).unwrap();
    let mock = Mock::new();
    let mut svc = layer().store(store.clone()).layer(mock.service());
    let body = "x".repeat(1024);
    for i in 0..6 {
        mock.push(cacheable(&body));
        send(&mut svc, get(&format!("{URL}/{i}"))).await.unwrap();
        store.flush().await;
        assert!(store.weight() <= store.max_bytes(), "{}", store.weight());
    }
    assert_eq!(store.len(), 3);
    assert_eq!(files(&dir).len(), 3);
    let on_disk: u64 = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(on_disk, store.weight());
    for i in 0..3 {
        assert!(
            store.get(&format!("{URL}/{i}")).await.is_none(),
            "{i} evicted"
        );
    }
    for i in 3..6 {
        assert!(store.get(&format!("{URL}/{i}")).await.is_some(), "{i} kept");
    }

    // A store opened with a smaller bound removes the oldest files until the rest fits.
    drop(svc);
    drop(store);
    let smaller = DiskStore::open(&dir, 2 * 1024 + 512).unwrap();
    assert_eq!(smaller.len(), 2);
    assert!(smaller.get(&format!("{URL}/3")).await.is_none());
    assert!(smaller.get(&format!("{URL}/5")).await.is_some());
    assert_eq!(files(&dir).len(), 2);

    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_truncated_or_garbage_file_is_ignored_and_removed() {
    let dir = dir("damaged");
    {
        let store = DiskStore::open(&dir, 1 << 20).unwrap();
        let mock = Mock::new();
        let mut svc = layer().store(store.clone()).layer(mock.service());
        for i in 0..2 {
            mock.push(cacheable("whole"));
            send(&mut svc, get(&format!("{URL}/{i}"))).await.unwrap();
        }
        store.flush().await;
    }
    let mut names = files(&dir);
    assert_eq!(names.len(), 2);
    // One truncated (as a crash in the middle of a write might leave it), garbage under an
    // entry's name, and a temporary file left over.
    let truncated = dir.join(names.remove(0));
    let len = fs::metadata(&truncated).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    fs::write(dir.join("00000000000000ff.entry"), b"not an entry at all").unwrap();
    fs::write(dir.join("00000000000000ff.7.tmp"), b"half").unwrap();
    fs::write(dir.join("notes.txt"), b"not ours").unwrap();

    let store = DiskStore::open(&dir, 1 << 20).unwrap();
    assert_eq!(store.len(), 1, "only the whole file is indexed");
    assert_eq!(files(&dir), [names[0].clone(), "notes.txt".to_owned()]);

    let mock = Mock::new();
    let mut svc = layer().store(store.clone()).layer(mock.service());
    // The truncated file's request goes upstream.
    mock.push(cacheable("whole"));
    let whole = [format!("{URL}/0"), format!("{URL}/1")];
    let hits = [
        send(&mut svc, get(&whole[0])).await.unwrap().cache,
        send(&mut svc, get(&whole[1])).await.unwrap().cache,
    ];
    assert_eq!(
        hits.iter().filter(|&&c| c == CacheStatus::Hit).count(),
        1,
        "the whole file still serves: {hits:?}"
    );
    assert_eq!(mock.calls(), 1);
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_file_damaged_after_it_was_indexed_is_never_served_and_is_removed() {
    let dir = dir("flipped");
    let store = DiskStore::open(&dir, 1 << 20).unwrap();
    let mock = Mock::new();
    let mut svc = layer().store(store.clone()).layer(mock.service());
    mock.push(cacheable("intact"));
    send(&mut svc, get(URL)).await.unwrap();
    store.flush().await;
    let path = dir.join(&files(&dir)[0]);
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    fs::write(&path, &bytes).unwrap();

    assert!(
        store.get(URL).await.is_none(),
        "a body that fails its checksum"
    );
    store.flush().await;
    assert!(!path.exists(), "removed once read");
    assert_eq!(store.len(), 0);

    // The request goes upstream again and stores a whole file.
    mock.push(cacheable("intact"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Miss, &b"intact"[..])
    );
    store.flush().await;
    assert_eq!(
        send(&mut svc, get(URL)).await.unwrap().cache,
        CacheStatus::Hit
    );
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn an_unsafe_method_removes_the_file_before_its_answer_is_handed_on() {
    let dir = dir("invalidate");
    let store = DiskStore::open(&dir, 1 << 20).unwrap();
    let mock = Mock::new();
    let mut svc = layer().store(store.clone()).layer(mock.service());
    mock.push(cacheable("before"));
    send(&mut svc, get(URL)).await.unwrap();
    store.flush().await;

    mock.push(respond(204, &[], ""));
    let got = send(&mut svc, req(Method::DELETE, URL, &[])).await.unwrap();
    assert_eq!(got.cache, CacheStatus::Bypass);
    assert!(store.get(URL).await.is_none(), "gone for the next request");
    mock.push(cacheable("after"));
    let got = send(&mut svc, get(URL)).await.unwrap();
    assert_eq!(
        (got.cache, &got.body[..]),
        (CacheStatus::Miss, &b"after"[..])
    );
    store.flush().await;
    assert_eq!(files(&dir).len(), 1);
    let _ = fs::remove_dir_all(&dir);
}

/// Variants holding one entry with `body`, stored through a layer over the in-memory store.
async fn variants(body: &str) -> std::sync::Arc<courier_cache::Variants> {
    let mock = Mock::new();
    let layer = layer();
    let store = layer.store_ref().clone();
    let mut svc = layer.layer(mock.service());
    mock.push(cacheable(body));
    send(&mut svc, get(URL)).await.unwrap();
    store.get(URL).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn writes_replace_whole_files_and_leave_no_temporary_one() {
    let dir = dir("atomic");
    let store = DiskStore::open(&dir, 1 << 20).unwrap();
    let (a, b) = (variants("first").await, variants("second").await);
    for i in 0..20 {
        let next = if i % 2 == 0 { &a } else { &b };
        store.insert(URL.to_owned(), next.clone()).await;
        // Read back at once, before it is on disk.
        let got = store.get(URL).await.unwrap();
        assert_eq!(got.entries()[0].body(), next.entries()[0].body());
    }
    store.flush().await;
    assert_eq!(files(&dir).len(), 1, "{:?}", files(&dir));
    let got = store.get(URL).await.unwrap();
    assert_eq!(got.entries()[0].body(), "second");
    assert!(store.remove(URL).await);
    assert!(!store.remove(URL).await);
    store.flush().await;
    assert!(files(&dir).is_empty());
    let _ = fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_value_larger_than_the_bound_is_refused_and_the_key_keeps_what_it_held() {
    let dir = dir("refused");
    let store = DiskStore::open(&dir, 2048).unwrap();
    store.insert(URL.to_owned(), variants("small").await).await;
    store
        .insert(URL.to_owned(), variants(&"y".repeat(4096)).await)
        .await;
    store.flush().await;
    let kept = store.get(URL).await.unwrap();
    assert_eq!(kept.entries()[0].body(), "small");
    assert!(store.weight() <= 2048);
    let _ = fs::remove_dir_all(&dir);
}

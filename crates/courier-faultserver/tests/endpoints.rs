//! The built-in endpoints: `/items`, `/cursor`, `/conditional`, `/limited/{name}`.

mod common;

use std::time::Duration;

use common::{Answer, get, h2c, http1, post, request, send};
use courier_faultserver::FaultServer;
use http::{Method, StatusCode};

fn ids(json: &serde_json::Value) -> Vec<u64> {
    json.as_array()
        .expect("an array of items")
        .iter()
        .map(|item| item["id"].as_u64().expect("an id"))
        .collect()
}

/// The `Link` targets by relation.
fn links(a: &Answer) -> Vec<(String, String)> {
    let value = a.header("link").unwrap_or_default();
    value
        .split(", ")
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (target, rel) = part.split_once("; ").expect("<target>; rel=...");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            let rel = rel.trim_start_matches("rel=\"").trim_end_matches('"');
            (rel.to_owned(), target.to_owned())
        })
        .collect()
}

fn link<'a>(links: &'a [(String, String)], rel: &str) -> Option<&'a str> {
    links
        .iter()
        .find(|(r, _)| r == rel)
        .map(|(_, t)| t.as_str())
}

#[tokio::test]
async fn items_follow_next_links_to_the_end() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    let mut url = format!("{}/items", server.url());
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let a = get(&client, &url).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.header("content-type"), Some("application/json"));
        let l = links(&a);
        assert_eq!(link(&l, "last"), Some("/items?page=3&per_page=10"));
        seen.extend(ids(&a.json()));
        pages += 1;
        assert!(pages <= 3, "more pages than 23 items need");
        match link(&l, "next") {
            Some(next) => {
                assert!(next.starts_with('/'), "relative: {next}");
                url = format!("{}{next}", server.url());
            }
            None => break,
        }
    }
    assert_eq!(seen, (1..=23).collect::<Vec<_>>());
    assert_eq!(server.hits("items").len(), 3);
}

#[tokio::test]
async fn items_per_page_is_capped_and_validated() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    let a = get(&client, &format!("{}/items?per_page=50", server.url())).await;
    assert_eq!(ids(&a.json()), (1..=10).collect::<Vec<_>>());
    assert_eq!(link(&links(&a), "next"), Some("/items?page=2&per_page=10"));

    let a = get(
        &client,
        &format!("{}/items?page=3&per_page=7", server.url()),
    )
    .await;
    assert_eq!(ids(&a.json()), (15..=21).collect::<Vec<_>>());
    let l = links(&a);
    assert_eq!(link(&l, "next"), Some("/items?page=4&per_page=7"));
    assert_eq!(link(&l, "last"), Some("/items?page=4&per_page=7"));
    assert_eq!(link(&l, "prev"), Some("/items?page=2&per_page=7"));
    assert_eq!(link(&l, "first"), Some("/items?page=1&per_page=7"));

    let a = get(
        &client,
        &format!("{}/items?page=4&per_page=7", server.url()),
    )
    .await;
    assert_eq!(ids(&a.json()), [22, 23]);
    assert_eq!(link(&links(&a), "next"), None, "no next on the last page");

    let a = get(&client, &format!("{}/items?page=9", server.url())).await;
    assert_eq!(ids(&a.json()), Vec::<u64>::new());

    for bad in [
        "page=0",
        "page=x",
        "per_page=0",
        "per_page=-1",
        "page=99999999999999999999",
    ] {
        let a = get(&client, &format!("{}/items?{bad}", server.url())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(a.text().contains("not valid"), "{bad}: {}", a.text());
    }
}

#[tokio::test]
async fn cursor_pages_through_every_item() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    let mut url = format!("{}/cursor?limit=4", server.url());
    let mut seen = Vec::new();
    for _ in 0..10 {
        let a = get(&client, &url).await;
        assert_eq!(a.status, StatusCode::OK);
        let json = a.json();
        seen.extend(ids(&json["items"]));
        match json["next_cursor"].as_str() {
            Some(cursor) => {
                assert!(!cursor.contains(char::is_whitespace));
                url = format!("{}/cursor?limit=4&cursor={cursor}", server.url());
            }
            None => {
                assert!(json["next_cursor"].is_null());
                break;
            }
        }
    }
    assert_eq!(seen, (1..=23).collect::<Vec<_>>());

    // Default and capped limit.
    let a = get(&client, &format!("{}/cursor?limit=100", server.url())).await;
    assert_eq!(ids(&a.json()["items"]).len(), 10);
}

#[tokio::test]
async fn bad_cursor_is_a_400() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    for bad in [
        "cursor=nope",
        "cursor=%FF%FE",
        "cursor=b2Zmc2V0Ojk5",
        "limit=0",
        "limit=x",
    ] {
        let a = get(&client, &format!("{}/cursor?{bad}", server.url())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}: {}", a.text());
    }
    assert_eq!(
        get(&client, &format!("{}/cursor", server.url()))
            .await
            .status,
        StatusCode::OK
    );
}

fn quota(a: &Answer) -> (u64, u64, u64) {
    let n = |name| {
        a.header(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    (
        n("x-ratelimit-limit"),
        n("x-ratelimit-remaining"),
        n("x-ratelimit-used"),
    )
}

#[tokio::test]
async fn conditional_304_is_free_and_200_spends_quota() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    let url = format!("{}/conditional", server.url());

    let first = get(&client, &url).await;
    assert_eq!(first.status, StatusCode::OK);
    let etag = first.header("etag").expect("an ETag").to_owned();
    assert!(etag.starts_with('"'), "strong: {etag}");
    let last_modified = first
        .header("last-modified")
        .expect("Last-Modified")
        .to_owned();
    assert!(httpdate::parse_http_date(&last_modified).is_ok());
    let reset: u64 = first.header("x-ratelimit-reset").unwrap().parse().unwrap();
    assert!(reset > 1_600_000_000, "epoch seconds: {reset}");
    assert_eq!(quota(&first), (60, 59, 1));
    assert!(!first.body.is_empty());

    let req = request(Method::GET, &url, &[("if-none-match", &etag)], "");
    let not_modified = send(&client, req).await.unwrap();
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
    assert!(not_modified.body.is_empty());
    assert_eq!(not_modified.header("etag"), Some(etag.as_str()));
    assert!(not_modified.header("date").is_some());
    assert_eq!(quota(&not_modified), (60, 59, 1), "a 304 spends nothing");

    let req = request(
        Method::GET,
        &url,
        &[("if-modified-since", &last_modified)],
        "",
    );
    let not_modified = send(&client, req).await.unwrap();
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
    assert_eq!(quota(&not_modified), (60, 59, 1));

    // A stale validator gets the full answer and spends.
    let req = request(Method::GET, &url, &[("if-none-match", "\"stale\"")], "");
    let full = send(&client, req).await.unwrap();
    assert_eq!(full.status, StatusCode::OK);
    assert_eq!(quota(&full), (60, 58, 2));
    assert_eq!(full.body, first.body);

    // POST changes it: new body and ETag; the old validators no longer match.
    let changed = post(&client, &url, "").await;
    assert_eq!(changed.status, StatusCode::OK);
    let new_etag = changed.header("etag").unwrap().to_owned();
    assert_ne!(new_etag, etag);
    assert_ne!(changed.body, first.body);
    let req = request(Method::GET, &url, &[("if-none-match", &etag)], "");
    let after = send(&client, req).await.unwrap();
    assert_eq!(after.status, StatusCode::OK);
    assert_eq!(after.header("etag"), Some(new_etag.as_str()));
    assert_eq!(after.body, changed.body);
    let req = request(
        Method::GET,
        &url,
        &[("if-modified-since", &last_modified)],
        "",
    );
    assert_eq!(send(&client, req).await.unwrap().status, StatusCode::OK);

    // A body given in the POST becomes the representation.
    let req = request(Method::POST, &url, &[("content-type", "text/plain")], "v3");
    send(&client, req).await.unwrap();
    let a = get(&client, &url).await;
    assert_eq!(
        (a.text().as_str(), a.header("content-type")),
        ("v3", Some("text/plain"))
    );
    assert_eq!(server.hits("conditional").len(), 9);
}

#[tokio::test]
async fn conditional_last_modified_is_never_after_date() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    let url = format!("{}/conditional", server.url());
    // Changes close together, most within one second.
    for _ in 0..3 {
        let a = post(&client, &url, "").await;
        let last_modified = a.header("last-modified").expect("Last-Modified");
        let date = a.header("date").expect("Date");
        assert!(
            httpdate::parse_http_date(last_modified).unwrap()
                <= httpdate::parse_http_date(date).unwrap(),
            "Last-Modified {last_modified} after Date {date}"
        );
        // Its own Last-Modified never vouches for an older version of the same second.
        let req = request(
            Method::GET,
            &url,
            &[("if-modified-since", last_modified)],
            "",
        );
        let got = send(&client, req).await.unwrap();
        if got.status == StatusCode::NOT_MODIFIED {
            assert_eq!(got.header("etag"), a.header("etag"), "no change since");
        } else {
            assert_eq!(got.status, StatusCode::OK);
            assert_eq!(got.body, a.body, "the current version");
        }
    }
}

#[tokio::test]
async fn conditional_quota_runs_out_but_304_still_answers() {
    let server = FaultServer::start().await.unwrap();
    server.set_conditional_quota(2, Duration::from_secs(3600));
    let client = h2c();
    let url = format!("{}/conditional", server.url());
    let etag = get(&client, &url).await.header("etag").unwrap().to_owned();
    assert_eq!(get(&client, &url).await.status, StatusCode::OK);
    let spent = get(&client, &url).await;
    assert_eq!(spent.status, StatusCode::FORBIDDEN);
    assert_eq!(spent.header("x-ratelimit-remaining"), Some("0"));
    assert!(spent.header("x-ratelimit-reset").is_some());
    let req = request(Method::GET, &url, &[("if-none-match", &etag)], "");
    let revalidated = send(&client, req).await.unwrap();
    assert_eq!(revalidated.status, StatusCode::NOT_MODIFIED);

    let req = request(Method::PUT, &url, &[], "");
    assert_eq!(
        send(&client, req).await.unwrap().status,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test]
async fn limited_answers_429_with_retry_after_when_empty() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    // One token per 2.5 s: the wait after the burst rounds up to 3 s.
    let url = format!("{}/limited/api?rate=0.4&burst=2", server.url());
    let statuses = [
        get(&client, &url).await,
        get(&client, &url).await,
        get(&client, &url).await,
    ];
    assert_eq!(
        statuses.each_ref().map(|a| a.status.as_u16()),
        [200, 200, 429]
    );
    let retry_after: u64 = statuses[2].header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3).contains(&retry_after), "{retry_after}");
    // Buckets are per name.
    let other = get(
        &client,
        &format!("{}/limited/other?rate=0.4&burst=1", server.url()),
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(server.hits("limited/api").len(), 3);
    assert_eq!(server.hits("limited/other").len(), 1);

    for bad in [
        "rate=0", "rate=-1", "rate=NaN", "rate=inf", "rate=x", "burst=0", "burst=y",
    ] {
        let a = get(&client, &format!("{}/limited/bad?{bad}", server.url())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn unknown_paths_and_methods_are_answered_not_dropped() {
    let server = FaultServer::start().await.unwrap();
    let client = http1();
    assert_eq!(
        get(&client, &format!("{}/nope", server.url())).await.status,
        StatusCode::NOT_FOUND
    );
    let index = get(&client, &server.url()).await;
    assert!(index.text().contains("/__plan/{name}"));
    let req = request(Method::PUT, &format!("{}/__plan/x", server.url()), &[], "");
    let a = send(&client, req).await.unwrap();
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.header("allow"), Some("POST, DELETE"));
    let req = request(Method::POST, &format!("{}/items", server.url()), &[], "");
    assert_eq!(
        send(&client, req).await.unwrap().status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let too_big = "x".repeat(1024 * 1024 + 1);
    let a = post(&client, &format!("{}/__plan/x", server.url()), &too_big).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        get(&client, &format!("{}/s/x", server.url())).await.status,
        StatusCode::OK
    );
}

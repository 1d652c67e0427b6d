//! `courier::paginate` through the preset over hyper, against the fault server on loopback.
//!
//! `/items` serves 23 items as Link-header pages of at most 10, `/cursor` the same items behind
//! an opaque `next_cursor`. Every test is bounded by [`BOUND`]; the server counts the requests.

use bytes::Bytes;
use courier::paginate::{self, CursorPosition, LinkPosition, Page, Pages, Walk};
use courier::retry::RetryLayer;
use courier::transport::HyperService;
use courier::{Courier, CourierLayer};
use courier_faultserver::{FaultServer, Step};
use futures_util::TryStreamExt;
use http_body_util::Full;
use std::future::Future;
use std::time::Duration;
use url::Url;

/// The longest any test here may run.
const BOUND: Duration = Duration::from_secs(10);

type Client = Courier<HyperService<Full<Bytes>>>;

/// The preset with a quick, seeded backoff, so a retried page costs milliseconds.
fn client() -> Client {
    CourierLayer::new()
        .retry(
            RetryLayer::new()
                .base(Duration::from_millis(10))
                .cap(Duration::from_millis(50))
                .seed(9),
        )
        .hyper::<Full<Bytes>>()
}

async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(BOUND, fut)
        .await
        .expect("the test finished within its bound")
}

fn url(server: &FaultServer, path: &str) -> Url {
    Url::parse(&server.url_for(path)).expect("the fault server's URLs parse")
}

/// The `id` of every item on `pages`, in order; `field` names the array for cursor pages.
fn ids(pages: &[Page], field: Option<&str>) -> Vec<u64> {
    pages
        .iter()
        .flat_map(|p| p.json_items(field).expect("a page of items"))
        .map(|item| item["id"].as_u64().expect("an item has a numeric id"))
        .collect()
}

// === links ===

#[tokio::test]
async fn link_stream_yields_all_items_across_three_pages() {
    let server = FaultServer::start().await.unwrap();
    let pages: Vec<Page> = bounded(paginate::links(client(), url(&server, "/items")).try_collect())
        .await
        .expect("every page arrives");

    assert_eq!(pages.len(), 3);
    assert!(pages.iter().all(|p| p.status() == 200));
    assert_eq!(ids(&pages, None), (1..=23).collect::<Vec<_>>());
    // The stream followed the server's links, not page numbers of its own.
    assert_eq!(pages[1].url().query(), Some("page=2&per_page=10"));
    assert_eq!(pages[2].url().query(), Some("page=3&per_page=10"));
    assert_eq!(server.hits("items").len(), 3);
}

#[tokio::test]
async fn link_stream_stops_at_max_pages() {
    let server = FaultServer::start().await.unwrap();
    let mut pages = paginate::links(client(), url(&server, "/items")).max_pages(2);
    let mut got = Vec::new();
    while let Some(page) = bounded(pages.try_next()).await.unwrap() {
        got.push(page);
    }

    assert_eq!(got.len(), 2);
    assert_eq!(ids(&got, None), (1..=20).collect::<Vec<_>>());
    assert_eq!(server.hits("items").len(), 2, "no third page was fetched");
    // The position still names the page a later run would fetch.
    let next = pages.position().next.as_ref().expect("a next page remains");
    assert_eq!(next.query(), Some("page=3&per_page=10"));
}

#[tokio::test]
async fn link_stream_resumes_from_a_saved_position_without_repeating() {
    let server = FaultServer::start().await.unwrap();
    let start = url(&server, "/items?per_page=5");

    let mut first_run = paginate::links(client(), start);
    let first = bounded(first_run.try_next())
        .await
        .unwrap()
        .expect("a first page");
    let saved = serde_json::to_string(first_run.position()).unwrap();
    drop(first_run);

    let position: LinkPosition = serde_json::from_str(&saved).unwrap();
    assert_eq!(position.visited.len(), 1);
    assert_eq!(position.pages, 1);
    let rest: Vec<Page> = bounded(paginate::LinkPages::resume(client(), position).try_collect())
        .await
        .unwrap();

    assert_eq!(ids(&[first], None), vec![1, 2, 3, 4, 5]);
    assert_eq!(rest.len(), 4);
    assert_eq!(ids(&rest, None), (6..=23).collect::<Vec<_>>());
    let queries: Vec<_> = server
        .hits("items")
        .into_iter()
        .map(|h| h.query.unwrap_or_default())
        .collect();
    assert_eq!(
        queries,
        [
            "per_page=5",
            "page=2&per_page=5",
            "page=3&per_page=5",
            "page=4&per_page=5",
            "page=5&per_page=5"
        ],
        "each page fetched once, across both runs"
    );
}

#[tokio::test]
async fn link_stream_max_pages_counts_pages_fetched_before_a_resume() {
    let server = FaultServer::start().await.unwrap();
    let mut first_run = paginate::links(client(), url(&server, "/items"));
    bounded(first_run.try_next()).await.unwrap().unwrap();
    let position = first_run.position().clone();

    let rest: Vec<Page> = bounded(
        paginate::LinkPages::resume(client(), position)
            .max_pages(2)
            .try_collect(),
    )
    .await
    .unwrap();
    assert_eq!(
        rest.len(),
        1,
        "one page before the resume and one after make two"
    );
    assert_eq!(server.hits("items").len(), 2);
}

#[tokio::test]
async fn link_back_to_a_visited_page_ends_with_a_pagination_error() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "loop-a",
        vec![
            Step::ok()
                .header("link", "</s/loop-b>; rel=\"next\"")
                .body("[1]"),
        ],
    );
    server.set_plan(
        "loop-b",
        vec![
            Step::ok()
                .header("link", "</s/loop-a>; rel=\"next\"")
                .body("[2]"),
        ],
    );

    let mut pages = paginate::links(client(), url(&server, "/s/loop-a"));
    let a = bounded(pages.try_next()).await.unwrap().expect("page a");
    assert_eq!(a.body().as_ref(), b"[1]");
    let b = bounded(pages.try_next()).await.unwrap().expect("page b");
    assert_eq!(
        b.body().as_ref(),
        b"[2]",
        "the page that loops is delivered"
    );
    let err = pagination_error_then_end(&mut pages, "b links back to a").await;
    assert!(err.contains("/s/loop-a"), "{err}");
    assert_eq!(
        server.hits("loop-a").len(),
        1,
        "page a was not fetched twice"
    );
    assert_eq!(server.hits("loop-b").len(), 1);
}

#[tokio::test]
async fn link_stream_ends_after_a_non_2xx_page() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "gone",
        vec![
            Step::status(404)
                .header("link", "</s/after>; rel=\"next\"")
                .body("not here"),
        ],
    );

    let mut stream = paginate::links(client(), url(&server, "/s/gone"));
    let page = bounded(stream.try_next())
        .await
        .unwrap()
        .expect("the 404 page");
    assert_eq!(page.status(), 404);
    assert!(
        bounded(stream.try_next()).await.unwrap().is_none(),
        "the stream ended"
    );
    assert!(
        server.hits("after").is_empty(),
        "a failed page's links are not followed"
    );

    // The position still names the failed page, so a later run asks for it again.
    let position = stream.position().clone();
    assert_eq!(position.next, Some(url(&server, "/s/gone")));
    assert!(position.visited.is_empty());
    let again: Vec<Page> = bounded(paginate::LinkPages::resume(client(), position).try_collect())
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].status(), 200, "the plan is used up");
    assert_eq!(server.hits("gone").len(), 2);
}

#[tokio::test]
async fn link_stream_ends_after_an_error_and_can_resume_from_the_failed_page() {
    let server = FaultServer::start().await.unwrap();
    let closed = closed_port_url().await;

    let mut stream = paginate::links(client(), closed.clone());
    let err = bounded(stream.try_next())
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(
            err,
            courier::Error::Transport {
                kind: courier::core::FailureKind::Connect,
                ..
            }
        ),
        "unexpected error {err}"
    );
    assert!(
        bounded(stream.try_next()).await.unwrap().is_none(),
        "the stream ends after an error instead of asking again forever"
    );
    assert_eq!(stream.position().next.as_ref(), Some(&closed));

    // Point the saved position at a live server: the run picks up there.
    let mut position = stream.position().clone();
    position.next = Some(url(&server, "/items"));
    let pages: Vec<Page> = bounded(paginate::LinkPages::resume(client(), position).try_collect())
        .await
        .unwrap();
    assert_eq!(ids(&pages, None).len(), 23);
}

/// A loopback URL where nothing listens.
async fn closed_port_url() -> Url {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    Url::parse(&format!("http://{addr}/items")).unwrap()
}

#[tokio::test]
async fn every_link_page_goes_through_the_whole_stack() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "p1",
        vec![
            Step::status(503),
            Step::ok()
                .header("link", "</s/p2>; rel=\"next\"")
                .body("[{\"id\":1}]"),
        ],
    );
    server.set_plan(
        "p2",
        vec![Step::status(503), Step::ok().body("[{\"id\":2}]")],
    );

    let pages: Vec<Page> = bounded(paginate::links(client(), url(&server, "/s/p1")).try_collect())
        .await
        .unwrap();
    assert_eq!(ids(&pages, None), vec![1, 2]);
    for page in &pages {
        assert_eq!(page.status(), 200);
        let attempts = page.attempts().expect("the retry layer recorded the page");
        assert_eq!(attempts.count(), 2, "503 then 200 on {}", page.url());
    }
    assert_eq!(server.hits("p1").len(), 2);
    assert_eq!(server.hits("p2").len(), 2);
}

// === cursor ===

#[tokio::test]
async fn cursor_stream_yields_all_items() {
    let server = FaultServer::start().await.unwrap();
    let pages: Vec<Page> =
        bounded(paginate::cursor(client(), url(&server, "/cursor?limit=10")).try_collect())
            .await
            .unwrap();

    assert_eq!(pages.len(), 3);
    assert_eq!(ids(&pages, Some("items")), (1..=23).collect::<Vec<_>>());
    let hits = server.hits("cursor");
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].query.as_deref(), Some("limit=10"));
    for hit in &hits[1..] {
        let query = hit.query.as_deref().unwrap_or_default();
        assert!(query.starts_with("limit=10&cursor="), "{query}");
    }
}

#[tokio::test]
async fn cursor_stream_resumes_from_a_saved_position() {
    let server = FaultServer::start().await.unwrap();
    let mut first_run = paginate::cursor(client(), url(&server, "/cursor?limit=10"));
    let first = bounded(first_run.try_next()).await.unwrap().unwrap();
    let saved = serde_json::to_vec(first_run.position()).unwrap();
    drop(first_run);

    let position: CursorPosition = serde_json::from_slice(&saved).unwrap();
    assert_eq!(position.pages, 1);
    assert!(!position.done);
    let echoed = position
        .cursor
        .clone()
        .expect("the first page gave a cursor");
    let rest: Vec<Page> = bounded(paginate::CursorPages::resume(client(), position).try_collect())
        .await
        .unwrap();

    assert_eq!(ids(&[first], Some("items")), (1..=10).collect::<Vec<_>>());
    assert_eq!(ids(&rest, Some("items")), (11..=23).collect::<Vec<_>>());
    let hits = server.hits("cursor");
    assert_eq!(hits.len(), 3, "the first page was not fetched again");
    assert_eq!(
        hits[1].query.as_deref(),
        Some(format!("limit=10&cursor={echoed}").as_str()),
        "the saved cursor was sent back as given"
    );
}

#[tokio::test]
async fn cursor_stream_ends_after_a_non_2xx_page() {
    let server = FaultServer::start().await.unwrap();
    // A cursor the server never gave out is a 400.
    let pages: Vec<Page> = bounded(
        paginate::CursorPages::resume(
            client(),
            CursorPosition {
                url: url(&server, "/cursor"),
                cursor: Some("not-a-cursor".into()),
                pages: 0,
                done: false,
                seen: paginate::Seen::default(),
            },
        )
        .try_collect(),
    )
    .await
    .unwrap();
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].status(), 400);
    assert_eq!(server.hits("cursor").len(), 1);
}

#[tokio::test]
async fn cursor_position_after_a_failed_page_names_that_page() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "flaky",
        vec![
            Step::ok().body(r#"{"items":[{"id":1}],"next_cursor":"c1"}"#),
            // Retried by the stack, and still failing when the attempts run out.
            Step::status(500).times(3),
            Step::ok().body(r#"{"items":[{"id":2}],"next_cursor":null}"#),
        ],
    );
    let mut stream = paginate::cursor(client(), url(&server, "/s/flaky"));
    let first = bounded(stream.try_next()).await.unwrap().unwrap();
    let failed = bounded(stream.try_next()).await.unwrap().unwrap();
    assert_eq!(failed.status(), 500);
    assert_eq!(failed.attempts().map(|a| a.count()), Some(3));
    assert!(bounded(stream.try_next()).await.unwrap().is_none());

    let position = stream.position().clone();
    assert_eq!(position.cursor.as_deref(), Some("c1"));
    assert_eq!(position.pages, 1, "the failed page is not counted as read");
    assert!(!position.done, "an incomplete listing is not finished");
    let rest: Vec<Page> = bounded(paginate::CursorPages::resume(client(), position).try_collect())
        .await
        .unwrap();
    assert_eq!(ids(&[first], Some("items")), vec![1]);
    assert_eq!(ids(&rest, Some("items")), vec![2]);
    let hits = server.hits("flaky");
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[4].query.as_deref(), Some("cursor=c1"));
}

#[tokio::test]
async fn cursor_stream_stops_at_max_pages() {
    let server = FaultServer::start().await.unwrap();
    let pages: Vec<Page> = bounded(
        paginate::cursor(client(), url(&server, "/cursor?limit=5"))
            .max_pages(2)
            .try_collect(),
    )
    .await
    .unwrap();
    assert_eq!(ids(&pages, Some("items")), (1..=10).collect::<Vec<_>>());
    assert_eq!(server.hits("cursor").len(), 2);
}

#[tokio::test]
async fn every_cursor_page_goes_through_the_whole_stack() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "c",
        vec![
            Step::status(503),
            Step::ok().body(r#"{"items":[{"id":1}],"next_cursor":"opaque+/="}"#),
            Step::status(503),
            Step::ok().body(r#"{"items":[{"id":2}],"next_cursor":null}"#),
        ],
    );
    let pages: Vec<Page> = bounded(paginate::cursor(client(), url(&server, "/s/c")).try_collect())
        .await
        .unwrap();
    assert_eq!(ids(&pages, Some("items")), vec![1, 2]);
    for page in &pages {
        assert_eq!(page.attempts().map(|a| a.count()), Some(2));
    }
    let hits = server.hits("c");
    assert_eq!(hits.len(), 4);
    // The cursor is echoed, percent-encoded, never decoded or changed.
    let query = hits[2].query.as_deref().unwrap_or_default();
    assert_eq!(query, "cursor=opaque%2B%2F%3D");
}

// === both shapes ===
/// The next item is a pagination error, and then the stream ends; returns the error's text.
async fn pagination_error_then_end<P>(pages: &mut P, what: &str) -> String
where
    P: futures_util::TryStream<Ok = Page, Error = courier::Error> + Unpin,
{
    let err = bounded(pages.try_next()).await.expect_err(what);
    assert!(
        matches!(err, courier::Error::Pagination(_)),
        "{what}: unexpected error {err}"
    );
    assert!(
        bounded(pages.try_next()).await.unwrap().is_none(),
        "{what}: the stream has ended"
    );
    err.to_string()
}

/// Every page left on `pages`, keeping the stream so its position can be read afterwards.
async fn drain<W: Walk>(pages: &mut Pages<Client, Full<Bytes>, W>) -> Vec<Page> {
    let mut got = Vec::new();
    while let Some(page) = bounded(pages.try_next()).await.unwrap() {
        got.push(page);
    }
    got
}

/// The first `n` pages: one `max_pages` serves both shapes.
async fn first<W: Walk>(pages: Pages<Client, Full<Bytes>, W>, n: u64) -> Vec<Page> {
    drain(&mut pages.max_pages(n)).await
}

#[tokio::test]
async fn one_generic_max_pages_limits_both_shapes() {
    let server = FaultServer::start().await.unwrap();
    let links = first(
        paginate::links(client(), url(&server, "/items?per_page=5")),
        3,
    )
    .await;
    let cursor = first(
        paginate::cursor(client(), url(&server, "/cursor?limit=5")),
        3,
    )
    .await;

    assert_eq!(ids(&links, None), (1..=15).collect::<Vec<_>>());
    assert_eq!(ids(&cursor, Some("items")), (1..=15).collect::<Vec<_>>());
    assert_eq!(server.hits("items").len(), 3);
    assert_eq!(server.hits("cursor").len(), 3);
}

/// `saved` parsed as a position, after checking that it serializes back to the same text.
fn reparsed<T: serde::Serialize + serde::de::DeserializeOwned>(saved: &str) -> T {
    let position: T = serde_json::from_str(saved).expect("a saved position parses");
    assert_eq!(serde_json::to_string(&position).unwrap(), saved);
    position
}

#[tokio::test]
async fn link_position_keeps_its_saved_format_and_resumes_from_it() {
    let server = FaultServer::start().await.unwrap();
    let base = server.url();
    // A position saved after two pages, as earlier releases wrote it.
    let saved = format!(
        r#"{{"next":"{base}/items?page=3&per_page=10","visited":["{base}/items","{base}/items?page=2&per_page=10"]}}"#
    );
    let mut first_run = paginate::links(client(), url(&server, "/items")).max_pages(2);
    assert_eq!(drain(&mut first_run).await.len(), 2);
    assert_eq!(serde_json::to_string(first_run.position()).unwrap(), saved);

    let mut resumed = paginate::LinkPages::resume(client(), reparsed(&saved));
    assert_eq!(ids(&drain(&mut resumed).await, None), vec![21, 22, 23]);
    assert_eq!(resumed.position().next, None);
    assert_eq!(resumed.position().visited.len(), 3);
    assert_eq!(server.hits("items").len(), 3, "two pages, then the third");
}

#[tokio::test]
async fn cursor_position_keeps_its_saved_format_and_resumes_from_it() {
    let server = FaultServer::start().await.unwrap();
    // A position saved after two pages of ten, as earlier releases wrote it.
    let saved = format!(
        r#"{{"url":"{}/cursor?limit=10","cursor":"b2Zmc2V0OjIw","pages":2,"done":false,"seen":["b2Zmc2V0OjEw","b2Zmc2V0OjIw"]}}"#,
        server.url()
    );
    let mut first_run = paginate::cursor(client(), url(&server, "/cursor?limit=10")).max_pages(2);
    assert_eq!(drain(&mut first_run).await.len(), 2);
    assert_eq!(serde_json::to_string(first_run.position()).unwrap(), saved);

    let mut resumed = paginate::CursorPages::resume(client(), reparsed(&saved));
    assert_eq!(
        ids(&drain(&mut resumed).await, Some("items")),
        vec![21, 22, 23]
    );
    assert!(resumed.position().done);
    assert_eq!(resumed.position().pages, 3);
    let hits = server.hits("cursor");
    assert_eq!(hits.len(), 3, "two pages, then the third");
    assert_eq!(
        hits[2].query.as_deref(),
        Some("limit=10&cursor=b2Zmc2V0OjIw")
    );
}

#[test]
fn both_shapes_debug_their_walk() {
    let start = Url::parse("http://127.0.0.1:9/items").unwrap();
    let links = format!(
        "{:?}",
        paginate::links::<_, Full<Bytes>>(client(), start.clone())
    );
    assert!(links.starts_with("Pages { walk: LinkPosition {"), "{links}");
    assert!(links.contains("max_pages: None"), "{links}");
    let cursor = format!(
        "{:?}",
        paginate::cursor::<_, Full<Bytes>>(client(), start)
            .field("next")
            .param("after")
            .max_pages(4)
    );
    assert!(cursor.starts_with("Pages { walk: CursorWalk {"), "{cursor}");
    assert!(cursor.contains(r#"field: "next""#), "{cursor}");
    assert!(cursor.contains(r#"param: "after""#), "{cursor}");
    assert!(cursor.contains("max_pages: Some(4)"), "{cursor}");
}

// === review fixes ===

type Request = http::Request<Full<Bytes>>;

/// Adds a bearer token, as a layer of the caller's stack would.
fn with_token(mut req: Request) -> Request {
    req.headers_mut().insert(
        http::header::AUTHORIZATION,
        http::HeaderValue::from_static("Bearer secret-for-api"),
    );
    req
}

/// `client()` under a layer that sends a token with every request.
fn client_with_token() -> tower::util::MapRequest<Client, fn(Request) -> Request> {
    tower::ServiceBuilder::new()
        .map_request(with_token as fn(Request) -> Request)
        .service(client())
}

/// Whether any request `server` counted under `name` carried an `authorization` header.
fn got_token(server: &FaultServer, name: &str) -> bool {
    server
        .hits(name)
        .iter()
        .any(|h| h.headers.iter().any(|(n, _)| n == "authorization"))
}

#[tokio::test]
async fn link_stream_does_not_carry_credentials_to_another_origin() {
    let api = FaultServer::start().await.unwrap();
    let other = FaultServer::start().await.unwrap();
    other.set_plan("collect", vec![Step::ok().body("[]")]);
    let elsewhere = url(&other, "/s/collect");
    api.set_plan(
        "first",
        vec![
            Step::ok()
                .header("link", format!("<{elsewhere}>; rel=\"next\""))
                .body("[1]"),
        ],
    );

    let mut pages = paginate::links::<_, Full<Bytes>>(client_with_token(), url(&api, "/s/first"));
    let first = bounded(pages.try_next())
        .await
        .expect("the first page arrives")
        .expect("a first page");
    assert_eq!(
        first.body().as_ref(),
        b"[1]",
        "the page that links away is delivered"
    );
    let text = pagination_error_then_end(&mut pages, "the link to another origin is refused").await;
    assert!(
        text.contains(&other.url()),
        "names the other origin: {text}"
    );
    assert!(
        text.contains("allow_cross_origin"),
        "says how to allow it: {text}"
    );
    assert!(
        other.hits("collect").is_empty() && !got_token(&other, "collect"),
        "the token for {} was sent to {}",
        api.url(),
        other.url()
    );
    assert!(
        got_token(&api, "first"),
        "the token still goes to its own origin"
    );
    // The listing is not taken for finished: the refused link is still next.
    assert_eq!(pages.position().next.as_ref(), Some(&elsewhere));
}

#[tokio::test]
async fn link_stream_follows_another_origin_when_allowed() {
    let api = FaultServer::start().await.unwrap();
    let other = FaultServer::start().await.unwrap();
    other.set_plan("collect", vec![Step::ok().body("[2]").times(2)]);
    let first_step = Step::ok()
        .header(
            "link",
            format!("<{}>; rel=\"next\"", url(&other, "/s/collect")),
        )
        .body("[1]");
    api.set_plan("first", vec![first_step.times(2)]);

    let pages: Vec<Page> = bounded(
        paginate::links::<_, Full<Bytes>>(client_with_token(), url(&api, "/s/first"))
            .allow_cross_origin(true)
            .try_collect(),
    )
    .await
    .expect("both pages arrive");
    let bodies: Vec<&[u8]> = pages.iter().map(|p| p.body().as_ref()).collect();
    assert_eq!(bodies, [b"[1]".as_slice(), b"[2]".as_slice()]);
    assert!(got_token(&other, "collect"), "the caller chose to send it");

    // A position saved at the refusal resumes across the origin once allowed.
    let mut refused = paginate::links::<_, Full<Bytes>>(client(), url(&api, "/s/first"));
    bounded(refused.try_next()).await.unwrap().unwrap();
    bounded(refused.try_next())
        .await
        .expect_err("refused by default");
    let resumed: Vec<Page> = bounded(
        paginate::LinkPages::resume(client(), refused.position().clone())
            .allow_cross_origin(true)
            .try_collect(),
    )
    .await
    .unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].body().as_ref(), b"[2]");
    assert_eq!(other.hits("collect").len(), 2);
}

#[tokio::test]
async fn link_to_the_same_origin_spelled_differently_is_followed() {
    let server = FaultServer::start().await.unwrap();
    let start = url(&server, "/s/same-a");
    // The same scheme, host and port, written as an absolute URL with the scheme in capitals.
    let next = format!("HTTP://{}/s/same-b", start.authority());
    server.set_plan(
        "same-a",
        vec![
            Step::ok()
                .header("link", format!("<{next}>; rel=\"next\""))
                .body("[1]"),
        ],
    );
    server.set_plan("same-b", vec![Step::ok().body("[2]")]);
    let pages: Vec<Page> = bounded(paginate::links(client(), start).try_collect())
        .await
        .expect("the same origin is followed by default");
    assert_eq!(pages.len(), 2);
    assert_eq!(server.hits("same-b").len(), 1);
}

#[tokio::test]
async fn the_page_with_a_looping_next_is_not_lost() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "lp-a",
        vec![
            Step::ok()
                .header("link", "</s/lp-b>; rel=\"next\"")
                .body("[1]"),
        ],
    );
    server.set_plan(
        "lp-b",
        vec![
            Step::ok()
                .header("link", "</s/lp-a>; rel=\"next\"")
                .body("[2]"),
        ],
    );
    let mut pages = paginate::links(client(), url(&server, "/s/lp-a"));
    let a = bounded(pages.try_next()).await.unwrap().expect("page a");
    assert_eq!(a.body().as_ref(), b"[1]");
    let b = bounded(pages.try_next())
        .await
        .expect("page b, whose next loops back, is delivered")
        .expect("page b");
    assert_eq!(b.body().as_ref(), b"[2]");
    pagination_error_then_end(&mut pages, "then the loop is reported").await;

    let position = pages.position().clone();
    assert_eq!(
        position.next,
        Some(url(&server, "/s/lp-a")),
        "the saved position is not taken for a finished listing"
    );
    assert_eq!(position.visited.len(), 2);
    // Resuming reports the loop again without asking for a page it already has.
    let err = bounded(paginate::LinkPages::resume(client(), position).try_collect::<Vec<Page>>())
        .await
        .expect_err("still a loop");
    assert!(
        matches!(
            err,
            courier::Error::Pagination(paginate::PaginationError::LinkLoop { .. })
        ),
        "{err}"
    );
    assert_eq!(server.hits("lp-a").len(), 1);
    assert_eq!(server.hits("lp-b").len(), 1);
}

#[tokio::test]
async fn the_cursor_page_with_a_looping_next_is_not_lost() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "cl",
        vec![
            Step::ok().body(r#"{"items":[{"id":1}],"next_cursor":"c1"}"#),
            Step::ok().body(r#"{"items":[{"id":2}],"next_cursor":"c2"}"#),
            Step::ok().body(r#"{"items":[{"id":3}],"next_cursor":"c1"}"#),
        ],
    );
    let mut pages = paginate::cursor(client(), url(&server, "/s/cl"));
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            bounded(pages.try_next())
                .await
                .expect("a page")
                .expect("a page"),
        );
    }
    assert_eq!(
        ids(&got, Some("items")),
        vec![1, 2, 3],
        "page 3 is delivered"
    );
    let err = pagination_error_then_end(&mut pages, "then the loop is reported").await;
    assert!(err.contains("\"c1\""), "{err}");
    assert_eq!(server.hits("cl").len(), 3, "c1 was not asked for twice");
    let position = pages.position();
    assert!(!position.done, "a listing that loops is not finished");
    assert_eq!(position.pages, 3);
}

#[tokio::test]
async fn cursor_in_the_start_url_is_not_dropped() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "cur",
        vec![
            Step::ok().body(r#"{"items":[{"id":11}],"next_cursor":"after-11"}"#),
            Step::ok().body(r#"{"items":[{"id":12}],"next_cursor":null}"#),
        ],
    );
    let start = url(&server, "/s/cur?limit=1&cursor=opaque-token-7");
    let pages: Vec<Page> =
        bounded(paginate::cursor::<_, Full<Bytes>>(client(), start).try_collect())
            .await
            .expect("the pages arrive");
    assert_eq!(ids(&pages, Some("items")), vec![11, 12]);
    let queries: Vec<_> = server.hits("cur").into_iter().map(|h| h.query).collect();
    assert_eq!(
        queries,
        [
            Some("limit=1&cursor=opaque-token-7".to_owned()),
            Some("limit=1&cursor=after-11".to_owned()),
        ],
        "the first request keeps the start URL's cursor, the next replaces it"
    );

    // The same with a parameter of the caller's naming.
    server.set_plan(
        "after",
        vec![Step::ok().body(r#"{"items":[{"id":21}],"next":null}"#)],
    );
    let start = url(&server, "/s/after?after=x9");
    let pages: Vec<Page> = bounded(
        paginate::cursor::<_, Full<Bytes>>(client(), start)
            .field("next")
            .param("after")
            .try_collect(),
    )
    .await
    .unwrap();
    assert_eq!(pages.len(), 1);
    assert_eq!(server.hits("after")[0].query.as_deref(), Some("after=x9"));
}

#[tokio::test]
async fn a_start_cursor_handed_back_is_refused_as_a_loop() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "back",
        vec![Step::ok().body(r#"{"items":[{"id":1}],"next_cursor":"s0"}"#)],
    );
    let mut pages = paginate::cursor(client(), url(&server, "/s/back?cursor=s0"));
    let page = bounded(pages.try_next()).await.unwrap().expect("the page");
    assert_eq!(ids(&[page], Some("items")), vec![1]);
    let err = bounded(pages.try_next())
        .await
        .expect_err("s0 was already used");
    assert!(
        matches!(
            err,
            courier::Error::Pagination(paginate::PaginationError::CursorLoop { ref cursor })
                if cursor == "s0"
        ),
        "{err}"
    );
    assert_eq!(server.hits("back").len(), 1);
}

#[tokio::test]
async fn cursor_keeps_the_rest_of_the_query_as_written() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "raw",
        vec![
            Step::ok().body(r#"{"items":[],"next_cursor":"n/1"}"#),
            Step::ok().body(r#"{"items":[],"next_cursor":"n/2"}"#),
            Step::ok().body(r#"{"items":[],"next_cursor":null}"#),
        ],
    );
    let start = url(&server, "/s/raw?flag&x=%FF&q=a%20b&cursor=old&sort=id");
    let pages: Vec<Page> =
        bounded(paginate::cursor::<_, Full<Bytes>>(client(), start).try_collect())
            .await
            .unwrap();
    assert_eq!(pages.len(), 3);
    let queries: Vec<_> = server
        .hits("raw")
        .into_iter()
        .map(|h| h.query.unwrap_or_default())
        .collect();
    assert_eq!(
        queries,
        [
            "flag&x=%FF&q=a%20b&cursor=old&sort=id",
            "flag&x=%FF&q=a%20b&sort=id&cursor=n%2F1",
            "flag&x=%FF&q=a%20b&sort=id&cursor=n%2F2",
        ]
    );
}

#[tokio::test]
async fn a_next_that_differs_only_by_its_fragment_is_a_visited_page() {
    // A fragment is never sent: `/s/frag#top` is the page `/s/frag` already read.
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "frag",
        vec![
            Step::ok()
                .header("link", "</s/frag#top>; rel=\"next\"")
                .body("[1]")
                .times(2),
        ],
    );
    let mut pages = paginate::links(client(), url(&server, "/s/frag"));
    let first = bounded(pages.try_next()).await.unwrap().expect("the page");
    assert_eq!(first.body().as_ref(), b"[1]");
    pagination_error_then_end(&mut pages, "the page links to itself").await;
    assert_eq!(server.hits("frag").len(), 1, "the page was fetched twice");
}

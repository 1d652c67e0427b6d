//! Pagination through the courier preset: a Link-header stream over `/items` and a cursor
//! stream over `/cursor`, each stopped part-way, its position saved as JSON, and resumed.
//!
//! Every page goes through the whole stack (deadline, cache, retry, breaker, attempt timeout),
//! so a flaky page is retried like any other call. The position is plain serde data: write it
//! to a file, a database row or a job queue, and hand it back to `resume` after a crash.
//!
//! Run with `cargo run --example pagination`.

use bytes::Bytes;
use courier::CourierLayer;
use courier::paginate::{self, CursorPages, CursorPosition, LinkPages, LinkPosition, Page};
use courier_faultserver::FaultServer;
use futures_util::TryStreamExt;
use http_body_util::Full;
use url::Url;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn print_page(page: &Page, field: Option<&str>) -> Result<usize, courier::Error> {
    let items = page.json_items(field)?;
    let ids: Vec<String> = items.iter().map(|item| item["id"].to_string()).collect();
    println!(
        "  {} -> {} items: {}",
        page.url(),
        items.len(),
        ids.join(" ")
    );
    Ok(items.len())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let server = FaultServer::start().await?;
    let client = CourierLayer::new().hyper::<Full<Bytes>>();
    let mut total_links = 0;
    let mut total_cursor = 0;

    // === Link headers ===

    println!("Link pagination over /items, first run stopped after 2 pages:");
    let start = Url::parse(&server.url_for("/items?per_page=10"))?;
    let mut pages = paginate::links(client.clone(), start).max_pages(2);
    while let Some(page) = pages.try_next().await? {
        total_links += print_page(&page, None)?;
    }
    let saved = serde_json::to_string(pages.position())?;
    println!("  saved position: {saved}");

    println!("resumed run:");
    let position: LinkPosition = serde_json::from_str(&saved)?;
    let mut pages = LinkPages::resume(client.clone(), position);
    while let Some(page) = pages.try_next().await? {
        total_links += print_page(&page, None)?;
    }

    // === Cursor ===

    println!("cursor pagination over /cursor, first run stopped after 1 page:");
    let start = Url::parse(&server.url_for("/cursor?limit=10"))?;
    let mut pages = paginate::cursor(client.clone(), start).max_pages(1);
    while let Some(page) = pages.try_next().await? {
        total_cursor += print_page(&page, Some("items"))?;
    }
    let saved = serde_json::to_string(pages.position())?;
    println!("  saved position: {saved}");

    println!("resumed run:");
    let position: CursorPosition = serde_json::from_str(&saved)?;
    let mut pages = CursorPages::resume(client, position);
    while let Some(page) = pages.try_next().await? {
        total_cursor += print_page(&page, Some("items"))?;
    }

    let requests = server.hits("items").len() + server.hits("cursor").len();
    println!(
        "{total_links} items by Link, {total_cursor} by cursor, {requests} requests in all: \
         no page fetched twice"
    );
    if total_links != 23 || total_cursor != 23 || requests != 6 {
        return Err("expected 23 items each way in 3 pages each".into());
    }
    Ok(())
}

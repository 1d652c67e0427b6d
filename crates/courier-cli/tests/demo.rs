//! `courier demo`: every row of the scenario table passes, and the run stays short.

mod common;

use common::courier;

#[tokio::test]
async fn demo_passes_every_row() {
    let run = courier(&["demo"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    let rows: Vec<_> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("GET: ") || l.starts_with("POST: "))
        .collect();
    assert_eq!(rows.len(), 10, "{}", run.stdout);
    for row in &rows {
        assert!(row.ends_with(" pass"), "{row}");
    }
    let summary = run.stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("10 of 10 rows passed in "),
        "{}",
        run.stdout
    );
}

//! Every chart the documents show exists: each `.svg` target of a markdown image or link, or of
//! an `<img src="...">`, in BENCHMARKS.md and README.md, is a file next to the document; and
//! BENCHMARKS.md shows at least one chart.

use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.join("..").join("..")
}

/// The `.svg` targets in `text`: `![alt](target)`, `[text](target)` and `<img src="target">`,
/// titles (`(target "title")`) and fragments left out.
fn svg_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Markdown: the target between "](" and the matching ")".
    for (at, _) in text.match_indices("](") {
        let rest = &text[at + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].trim();
        let target = target.split_whitespace().next().unwrap_or("");
        push_svg(
            &mut out,
            target.trim_start_matches('<').trim_end_matches('>'),
        );
    }
    // HTML: src="..." or src='...' inside an <img> tag.
    for (at, _) in text.match_indices("<img") {
        let tag = &text[at..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let Some(src) = tag.find("src=") else {
            continue;
        };
        let value = &tag[src + 4..];
        let Some(quote) = value.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let value = &value[1..];
        if let Some(end) = value.find(quote) {
            push_svg(&mut out, &value[..end]);
        }
    }
    out
}

fn push_svg(out: &mut Vec<String>, target: &str) {
    let path = target.split(['#', '?']).next().unwrap_or("");
    let remote = path.contains("://");
    if !remote && path.to_ascii_lowercase().ends_with(".svg") {
        out.push(path.to_owned());
    }
}

/// The `.svg` targets of the document at `name` (from the workspace root), each checked to
/// exist relative to the document.
fn checked_charts(name: &str) -> Vec<String> {
    let doc = workspace_root().join(name);
    let text = std::fs::read_to_string(&doc)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", doc.display()));
    let dir = doc.parent().expect("a document has a folder");
    let targets = svg_targets(&text);
    let missing: Vec<&String> = targets
        .iter()
        .filter(|t| !dir.join(t.trim_start_matches('/')).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "{name} shows charts that do not exist: {missing:?}"
    );
    targets
}

#[test]
fn the_readme_shows_only_charts_that_exist() {
    checked_charts("README.md");
}

#[test]
fn the_benchmarks_show_at_least_one_chart_and_only_charts_that_exist() {
    let charts = checked_charts("BENCHMARKS.md");
    assert!(
        !charts.is_empty(),
        "BENCHMARKS.md shows no chart: link the ones in docs/bench/"
    );
}

#[test]
fn targets_are_found_in_markdown_and_html() {
    let text = r#"
![herd](docs/bench/herd.svg) and [the chart](docs/bench/recovery.svg "title"),
<img src="docs/bench/a.svg" width="600"> <img alt='x' src='b.SVG'>
[not a chart](docs/bench/herd.png) ![remote](https://example.invalid/c.svg)
![with a fragment](d.svg#top)
"#;
    assert_eq!(
        svg_targets(text),
        [
            "docs/bench/herd.svg",
            "docs/bench/recovery.svg",
            "d.svg",
            "docs/bench/a.svg",
            "b.SVG"
        ]
    );
}

//! The README's Rust blocks are doc tests (`cargo test --doc -p courier --all-features`,
//! through a hidden item of `src/lib.rs`). People paste those blocks, so each must be
//! whole as shown: no hidden `# ` lines, and none left out of the doc tests.

const README: &str = include_str!("../README.md");

/// The Rust blocks of the README: (line of the opening fence, info string, lines).
fn rust_blocks() -> Vec<(usize, &'static str, Vec<&'static str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, &str, Vec<&str>)> = None;
    for (n, line) in README.lines().enumerate() {
        let number = n + 1;
        match open.take() {
            None => {
                if let Some(info) = line.strip_prefix("```")
                    && info.starts_with("rust")
                {
                    open = Some((number, info, Vec::new()));
                } else if line.starts_with("```") {
                    // Another language's block: skip to its end.
                    open = Some((number, "", Vec::new()));
                }
            }
            Some((start, info, mut lines)) => {
                if line.starts_with("```") {
                    if info.starts_with("rust") {
                        blocks.push((start, info, lines));
                    }
                } else {
                    lines.push(line);
                    open = Some((start, info, lines));
                }
            }
        }
    }
    assert!(open.is_none(), "the README ends inside a code block");
    blocks
}

#[test]
fn the_readme_has_rust_blocks_to_test() {
    assert!(rust_blocks().len() >= 5, "{:?}", rust_blocks());
}

#[test]
fn no_readme_rust_block_hides_a_line() {
    for (start, _, lines) in rust_blocks() {
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            assert!(
                !(trimmed == "#" || trimmed.starts_with("# ")),
                "README line {}: a hidden doc-test line, which a reader who pastes the block \
                 does not get: {line:?}",
                start + 1 + i
            );
        }
    }
}

#[test]
fn every_readme_rust_block_is_compiled() {
    for (start, info, _) in rust_blocks() {
        for attr in info.split(',') {
            assert!(
                !matches!(attr.trim(), "ignore" | "text"),
                "README line {start}: `{info}` is not compiled by the doc tests"
            );
        }
    }
}

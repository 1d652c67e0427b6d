//! Every crate's features table is made from the `## ` comments above its features in its
//! `Cargo.toml` (`document-features`), which leaves out a feature without one: so every feature
//! has one, and every crate with features shows the table.

use std::path::{Path, PathBuf};

/// The workspace's manifests: the facade's and each crate's, with the crate's directory.
fn manifests() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.to_path_buf()];
    let crates = std::fs::read_dir(root.join("crates")).expect("crates/ is readable");
    for entry in crates {
        let dir = entry.expect("an entry of crates/").path();
        if dir.join("Cargo.toml").is_file() {
            dirs.push(dir);
        }
    }
    dirs.sort();
    dirs
}

/// The features of `manifest` (`default` aside), each with whether a `## ` comment is
/// directly above it.
fn features(manifest: &str) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    let mut in_features = false;
    let mut documented = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_features = line == "[features]";
            documented = false;
            continue;
        }
        if !in_features || line.is_empty() {
            continue;
        }
        if line.starts_with("## ") || line == "##" {
            documented = true;
        } else if line.starts_with('#') {
            // A plain comment, or a continuation of a feature's list.
        } else if let Some((name, _)) = line.split_once('=')
            && let name = name.trim()
            && !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            if name != "default" {
                found.push((name.to_owned(), documented));
            }
            documented = false;
        }
    }
    found
}

#[test]
fn every_feature_has_a_doc_comment_and_every_crate_with_features_shows_them() {
    let mut checked = 0;
    for dir in manifests() {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a manifest");
        let features = features(&manifest);
        let undocumented: Vec<&str> = features
            .iter()
            .filter(|(_, documented)| !documented)
            .map(|(name, _)| name.as_str())
            .collect();
        assert!(
            undocumented.is_empty(),
            "{}: features without a `## ` comment above them, left out of the docs' table: \
             {undocumented:?}",
            dir.display()
        );
        let lib = dir.join("src/lib.rs");
        // What is not published (test support, benchmarks, the soak) is never a dependency.
        let published = !manifest
            .lines()
            .any(|line| line.trim() == "publish = false");
        if !features.is_empty() && published && lib.is_file() {
            let source = std::fs::read_to_string(&lib).expect("lib.rs");
            assert!(
                source.contains("#![doc = document_features::document_features!()]"),
                "{}: features, and no features table in the crate docs",
                lib.display()
            );
        }
        checked += features.len();
    }
    assert!(
        checked >= 20,
        "only {checked} features found: the parser misread a manifest"
    );
}

#[test]
fn a_feature_without_a_comment_is_found() {
    let manifest = "[package]\nname = \"x\"\n\n[features]\ndefault = [\"a\"]\n## A.\na = []\n\
                    b = [\"a\"]\n## C,\n## over two lines.\nc = [\n    \"a\",\n]\n\n[dependencies]\n";
    assert_eq!(
        features(manifest),
        vec![
            ("a".to_owned(), true),
            ("b".to_owned(), false),
            ("c".to_owned(), true),
        ]
    );
}

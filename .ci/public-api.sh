#!/usr/bin/env bash
# The public API of every published crate, compared with its snapshot in api/<crate>.txt, so
# that every change to the public surface shows in review as a diff of that file.
#
#   bash .ci/public-api.sh           compare (CI); fails on any difference, and prints it
#   bash .ci/public-api.sh --bless   write the snapshots anew after a change meant to be public
#
# The list is cargo-public-api's, read from rustdoc's JSON with every feature on (as docs.rs
# builds the pages), without blanket impls. rustdoc writes JSON on a stable toolchain only
# under RUSTC_BOOTSTRAP, given here to the documented crate alone. cargo-public-api 0.52.0
# reads the JSON format (57) of Rust 1.95's rustdoc: a newer Rust needs a newer one, and the
# snapshots written anew.
set -euo pipefail
cd "$(dirname "$0")/.."

bless=false
case "${1:-}" in
    --bless) bless=true ;;
    "") ;;
    *) echo "usage: $0 [--bless]" >&2; exit 2 ;;
esac

command -v cargo-public-api >/dev/null 2>&1 ||
    cargo install cargo-public-api --version 0.52.0 --locked --quiet
# shellcheck source=workspace.sh
source .ci/workspace.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

changed=()
for crate in $(published); do
    lib=${crate//-/_}
    RUSTC_BOOTSTRAP=$lib cargo rustdoc --quiet -p "$crate" --lib --all-features \
        -- -Z unstable-options --output-format json
    cargo public-api --rustdoc-json "$target_dir/doc/$lib.json" --simplified --color never \
        > "$out/$crate.txt"
    if $bless; then
        cp "$out/$crate.txt" "api/$crate.txt"
    elif ! diff -u "api/$crate.txt" "$out/$crate.txt" > "$out/$crate.diff"; then
        cat "$out/$crate.diff"
        changed+=("$crate")
    fi
done

if [ ${#changed[@]} -gt 0 ]; then
    echo "public API changed: ${changed[*]}." >&2
    echo "If the change is meant, run 'bash .ci/public-api.sh --bless' and commit api/." >&2
    exit 1
fi
if $bless; then echo "api/: $(published | wc -l) snapshots written"; fi

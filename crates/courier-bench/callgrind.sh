#!/bin/sh
# Instructions per happy-path call of every variant (see examples/instructions.rs), with
# callgrind: stable on a busy machine, unlike wall-clock time.
#
#   crates/courier-bench/callgrind.sh [EXTRA_CALLS]
#
# Prints a markdown table: instructions per call, and added over the bare service_fn.
set -eu
cd "$(dirname "$0")/../.."
extra=${1:-20000}
base=1000
cargo build -q --release -p courier-bench --example instructions
bin=${CARGO_TARGET_DIR:-target}/release/examples/instructions
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # variant calls -> total instructions
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" >/dev/null 2>"$tmp/err"
    sed -n 's/^==[0-9]*== Collected : //p' "$tmp/err"
}
echo "| variant | instructions per call | added over bare |"
echo "| --- | ---: | ---: |"
bare=""
"$bin" | while IFS="$(printf '\t')" read -r i name; do
    a=$(count "$i" "$base")
    b=$(count "$i" $((base + extra)))
    per=$(( (b - a) / extra ))
    if [ -z "$bare" ]; then bare=$per; fi
    echo "| $name | $per | $((per - bare)) |"
done

#!/bin/sh
# Instructions per happy-path call of every variant (see examples/instructions.rs), with
# callgrind: stable on a busy machine, unlike wall-clock time.
#
#   crates/courier-bench/callgrind.sh [EXTRA_CALLS]
#
# Prints two markdown tables:
# - the happy path in process: instructions per call, added over the bare service_fn, and heap
#   allocations (calls to malloc) per call;
# - loopback end to end, 16 tasks (examples/loopback_calls.rs): instructions per request,
#   client and server together, and added over the raw hyper-util client.
set -eu
cd "$(dirname "$0")/../.."
extra=${1:-20000}
base=1000
cargo build -q --release -p courier-bench --example instructions --example loopback_calls
bin=${CARGO_TARGET_DIR:-target}/release/examples/instructions
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # variant calls -> "instructions mallocs"
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" >/dev/null 2>"$tmp/err"
    ir=$(sed -n 's/^==[0-9]*== Collected : //p' "$tmp/err")
    # The calls into malloc: the "(Nx)" of every caller line above malloc's own line.
    mallocs=$(callgrind_annotate --tree=caller "$tmp/out" 2>/dev/null | awk '
        /^ *[0-9,]+ \([ 0-9.]+%\)  \* / { if ($0 ~ /malloc\.c:malloc \[/) { print n + 0; exit } n = 0; next }
        /  < / { if (match($0, /\(([0-9,]+)x\)/)) { s = substr($0, RSTART + 1, RLENGTH - 3); gsub(",", "", s); n += s } }')
    echo "$ir ${mallocs:-0}"
}
echo "| variant | instructions per call | added over bare | allocations per call |"
echo "| --- | ---: | ---: | ---: |"
# "added" counts from the bare service_fn, and for the rows whose inner future yields once
# from the "inner yields once" row.
bare="" ybare=""
"$bin" | while IFS="$(printf '\t')" read -r i name; do
    set -- $(count "$i" "$base")
    a=$1 ma=$2
    set -- $(count "$i" $((base + extra)))
    b=$1 mb=$2
    per=$(( (b - a) / extra ))
    if [ -z "$bare" ]; then bare=$per; fi
    from=$bare
    case $name in
    "inner yields once") ybare=$per from=$per ;;
    *"yields once"*) from=${ybare:-$bare} ;;
    esac
    allocs=$(awk -v a="$ma" -v b="$mb" -v n="$extra" 'BEGIN { x = (b - a) / n; if (x < 0.05) x = 0; printf "%.1f", x }')
    echo "| $name | $per | $((per - from)) | $allocs |"
done

echo
echo "| loopback, 16 tasks | instructions per request (client + server) | added over raw |"
echo "| --- | ---: | ---: |"
lbin=${CARGO_TARGET_DIR:-target}/release/examples/loopback_calls
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$lbin" "$1" "$2" 16 2>&1 | sed -n 's/^==[0-9]*== Collected : //p'; }
raw=""
for v in raw bare bare_no_ua deadline attempt_timeout cache retry breaker preset; do
    a=$(ir "$v" 800)
    b=$(ir "$v" 4000)
    per=$(( (b - a) / 3200 ))
    if [ -z "$raw" ]; then raw=$per; fi
    echo "| $v | $per | $((per - raw)) |"
done

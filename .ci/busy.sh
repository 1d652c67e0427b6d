#!/usr/bin/env bash
# The README's test command on a busy machine: two busy loops (`yes > /dev/null`) beside it,
# run BUSY_RUNS times in a row (3 by default). CI's machines are loaded; a test that passes only
# on a quiet one fails here. Not part of .ci/run (it takes three times the test step).
#
#   bash .ci/busy.sh              # three runs
#   BUSY_RUNS=5 bash .ci/busy.sh  # five
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${BUSY_RUNS:-3}
export CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only

# Build first, quietly: the runs measure the tests, not the compiler.
cargo test --workspace --all-features --no-run -q || exit 1

yes > /dev/null &
loop1=$!
yes > /dev/null &
loop2=$!
trap 'kill $loop1 $loop2 2>/dev/null' EXIT

failed=0
for i in $(seq 1 "$runs"); do
    started=$(date +%s)
    if cargo test --workspace --all-features --no-fail-fast > "target/busy-run-$i.log" 2>&1; then
        echo "busy run $i of $runs: passed in $(( $(date +%s) - started )) s"
    else
        echo "busy run $i of $runs: FAILED after $(( $(date +%s) - started )) s (target/busy-run-$i.log):"
        grep -E "^---- |panicked at|^test result: FAILED" "target/busy-run-$i.log" | head -20
        failed=1
    fi
done
exit $failed

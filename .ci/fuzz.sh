#!/usr/bin/env bash
# Fuzzing: every cargo-fuzz target in fuzz/ for a bounded time each, from the seed corpus in
# fuzz/seeds/<target>, as many at once as there are cores. Fails when a target finds a crash;
# the input is left in fuzz/artifacts/<target>/ and printed, to become a regression test in the
# crate that owns the parser. Installs cargo-fuzz when missing. cargo-fuzz passes unstable flags
# (-Zsanitizer=address) to rustc; RUSTC_BOOTSTRAP=1 lets the machine's one stable toolchain take
# them, so no nightly toolchain is fetched.
#
#   .ci/fuzz.sh                      # every target, 30 s each
#   FUZZ_SECONDS=600 .ci/fuzz.sh     # longer
#   FUZZ_JOBS=1 .ci/fuzz.sh plan     # some targets only, one at a time
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-$(nproc)}

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd fuzz
echo "== building the fuzz targets (release, debug assertions, address sanitizer)"
cargo fuzz build
triple=$(rustc -vV | sed -n 's/^host: //p')
bins=${CARGO_TARGET_DIR:-target}/$triple/release

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# New inputs go to a scratch corpus; the seeds in the repository are only read.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fuzz_one() { # target: runs it, leaves its log and its exit status in $work
    local target=$1
    mkdir -p "$work/$target" "artifacts/$target"
    local status=0
    "$bins/$target" "$work/$target" "seeds/$target" \
        -artifact_prefix="artifacts/$target/" -max_total_time="$seconds" -timeout=20 \
        -rss_limit_mb=2048 -print_final_stats=1 >"$work/$target.log" 2>&1 || status=$?
    echo "$status" >"$work/$target.status"
}

echo "== fuzzing ${#targets[@]} targets, ${seconds} s each, ${jobs} at a time"
running=0
for target in "${targets[@]}"; do
    [ -x "$bins/$target" ] || { echo "fuzz: no target $target" >&2; exit 1; }
    [ -d "seeds/$target" ] || { echo "fuzz: no seeds/$target for target $target" >&2; exit 1; }
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$target" &
    running=$((running + 1))
done
wait

failed=()
echo "== fuzzing summary (${seconds} s per target)"
for target in "${targets[@]}"; do
    if [ "$(cat "$work/$target.status")" = 0 ]; then
        runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' \
            "$work/$target.log")
        corpus=$(find "$work/$target" -type f | wc -l)
        printf '  %-14s %s, corpus %s\n' "$target" "$runs" "$corpus"
    else
        failed+=("$target")
        printf '  %-14s FAILED\n' "$target"
    fi
done
for target in "${failed[@]}"; do
    echo "---- $target" >&2
    grep -v '^#[0-9]' "$work/$target.log" | tail -40 >&2
    for crash in artifacts/"$target"/*; do
        [ -f "$crash" ] || continue
        echo "fuzz: $target: input fuzz/$crash (base64): $(base64 -w0 "$crash")" >&2
    done
    echo "fuzz: reproduce with (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $target <input>);" \
        "add the input as a regression test in the crate that owns the parser" >&2
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]}" >&2
    exit 1
fi

#!/usr/bin/env bash
# The chaos soak of the preset (crates/courier-chaos): random fault plans against fault servers
# on loopback, one shared preset per transport and a quarter of the callers through the same
# preset with hedging, invariants checked from the servers' records; then the broken-paths mix
# (the preset's defaults, one host, one path in six resetting or stalling), which fails when
# the breaker refuses over 1 % of the calls to answering paths.
# About a minute per mix on each transport, the two transports side by side (a soak keeps a
# core less than a quarter busy), the cache in memory over hyper and on disk over reqwest;
# fails on any broken invariant.
#
#   .ci/chaos.sh                       # 60 s per transport, a random seed (printed)
#   CHAOS_SECONDS=600 .ci/chaos.sh     # longer
#   .ci/chaos.sh --seed 7              # extra flags go to courier-chaos
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${CHAOS_SECONDS:-60}
seed=${CHAOS_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}

echo "== chaos soak (release build, ${seconds} s per transport, seed ${seed})"
cargo build -q -p courier-chaos --release
# shellcheck source=workspace.sh
source .ci/workspace.sh
bin=$target_dir/release/courier-chaos

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for run in "hyper memory" "reqwest disk"; do
    read -r transport store <<<"$run"
    "$bin" --transport "$transport" --store "$store" --seconds "$seconds" --seed "$seed" "$@" \
        >"$logs/$transport" 2>&1 &
    pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
done
cat "$logs/hyper" "$logs/reqwest"
exit $status

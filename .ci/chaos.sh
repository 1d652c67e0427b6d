#!/usr/bin/env bash
# The chaos soak of the preset (crates/courier-chaos): random fault plans against fault servers
# on loopback, one shared preset per transport, invariants checked from the servers' records.
# About a minute on each transport; fails on any broken invariant.
#
#   .ci/chaos.sh                       # 60 s per transport, a random seed (printed)
#   CHAOS_SECONDS=600 .ci/chaos.sh     # longer
#   .ci/chaos.sh --seed 7              # extra flags go to courier-chaos
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${CHAOS_SECONDS:-60}

echo "== chaos soak (release build, ${seconds} s per transport)"
cargo build -q -p courier-chaos --release
cargo run -q -p courier-chaos --release -- --transport both --seconds "$seconds" "$@"

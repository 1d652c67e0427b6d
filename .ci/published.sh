#!/usr/bin/env bash
# Prints the crates published to crates.io, one a line: every workspace member without
# `publish = false`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["publish"] is None:
        print(p["name"])'

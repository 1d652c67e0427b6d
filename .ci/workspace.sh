# Sourced by the CI scripts: what they need to know of the workspace, read from `cargo metadata`.

# The target directory, wherever a user's configuration puts it.
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

# Prints the crates published to crates.io, one a line: every workspace member without
# `publish = false`.
published() {
    cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["publish"] is None:
        print(p["name"])'
}

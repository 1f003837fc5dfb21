#!/usr/bin/env bash
# Runs every fuzz target in the module for a while each: hack/fuzz.sh [DURATION] (default 30s).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
found=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    found=1
    echo "== $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
[ "$found" = 1 ] || { echo "no fuzz targets found" >&2; exit 1; }

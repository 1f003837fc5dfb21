#!/usr/bin/env bash
# Runs every fuzz target in the module for a while each: hack/fuzz.sh [DURATION] (default 30s).
# Targets are found in the source, not with `go test -list`, which would run each package's
# TestMain (and start an API server) just to list them.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
found=0
while IFS=: read -r file target; do
  found=1
  pkg="./$(dirname "$file")"
  echo "== $pkg $target ($fuzztime)"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
done < <(git ls-files '*_test.go' | xargs grep -Ho '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/')
[ "$found" = 1 ] || { echo "no fuzz targets found" >&2; exit 1; }

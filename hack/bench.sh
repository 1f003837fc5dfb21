#!/usr/bin/env bash
# make bench: every benchmark, each printing its figures against its baseline or target.
#   hack/bench.sh [copy|bridge]...   (default: all)
# BENCH_SIZE_MIB (copy), BENCH_WINDOW and BENCH_SAMPLES (bridge) shorten a run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(copy bridge)
for b in "${what[@]}"; do
  case "$b" in
    copy) hack/bench-copy.sh ;;
    bridge)
      hack/control-plane.sh >/dev/null
      echo
      go run ./test/bench/bridge ;;
    *) echo "unknown benchmark $b (copy, bridge)" >&2; exit 2 ;;
  esac
done

#!/usr/bin/env bash
# make bench: every benchmark, each printing its figures against its baseline or target.
#   hack/bench.sh [copy|bridge|audit]...   (default: all)
# BENCH_SIZE_MIB (copy), BENCH_WINDOW and BENCH_SAMPLES (bridge), BENCH_AUDIT_WINDOW and
# BENCH_AUDIT_RECORDS (audit) shorten a run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(copy bridge audit)
for b in "${what[@]}"; do
  case "$b" in
    copy) hack/bench-copy.sh ;;
    bridge)
      hack/control-plane.sh >/dev/null
      echo
      go run ./test/bench/bridge ;;
    audit)
      echo
      go run ./test/bench/audit ;;
    *) echo "unknown benchmark $b (copy, bridge, audit)" >&2; exit 2 ;;
  esac
done

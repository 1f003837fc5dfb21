#!/usr/bin/env bash
# Runs the tests while a CPU hog keeps every core busy, as on a shared CI machine: a test that
# passes only on an idle machine fails here.
#
#   hack/stress-test.sh                        # go test -count=1 ./...
#   hack/stress-test.sh ./internal/ui/...      # some packages (any go test arguments)
#   hack/stress-test.sh -run TestCancel ./internal/ui
#
# It first builds what `make test` needs (unless `make test-stress` already did), then runs
# go test with GO_TEST_FLAGS (default -count=1 -timeout=30m, as make test) and the arguments
# (default ./...) beside the hog: Debian's stress-ng, installed with apt-get when missing (as
# root, or with sudo), or else one shell busy loop per core. STRESS_WORKERS sets the hog's
# processes (default: one per core). It prints the wall time, the failing tests and the log's
# path, stops the hog on any exit, and exits non-zero when a test failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=hack/versions.env
source hack/versions.env

say() { printf 'stress-test: %s\n' "$*" >&2; }

cosign="$root/bin/tools/cosign-$COSIGN_VERSION"
helm="$root/bin/tools/helm-$HELM_VERSION"
# make sets MAKELEVEL for its recipes: under `make test-stress` the prerequisites are built.
if [ -z "${MAKELEVEL:-}" ]; then
  make --no-print-directory control-plane chromium "$cosign" "$helm"
fi
# What `make test` exports to the tests.
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/k8s/$KUBE_VERSION}
export NODEWRIGHT_COSIGN=${NODEWRIGHT_COSIGN:-$cosign}
export NODEWRIGHT_HELM=${NODEWRIGHT_HELM:-$helm}

workers=${STRESS_WORKERS:-$(nproc)}
# A hog left behind by a killed script stops by itself after this long.
hog_limit=4h

have_stress_ng() {
  command -v stress-ng >/dev/null && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo=sudo
  fi
  say "installing Debian's stress-ng with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends stress-ng; } >&2 || return 1
  command -v stress-ng >/dev/null
}

# Each hog runs in a process group of its own (setsid), so that stopping it stops every
# process it started.
hogs=()
stop_hogs() {
  local pid
  for pid in "${hogs[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for pid in "${hogs[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if have_stress_ng; then
  setsid stress-ng --cpu "$workers" --timeout "$hog_limit" --quiet >/dev/null 2>&1 &
  hogs+=("$!")
  hog="stress-ng --cpu $workers"
else
  say "no stress-ng (and none could be installed): busy shell loops instead"
  for _ in $(seq "$workers"); do
    setsid timeout "$hog_limit" bash -c 'while :; do :; done' &
    hogs+=("$!")
  done
  hog="$workers busy shell loops"
fi

[ "$#" -gt 0 ] || set -- ./...
log=$(mktemp "${TMPDIR:-/tmp}/nodewright-stress-test.XXXXXX")
# shellcheck disable=SC2086 # GO_TEST_FLAGS is a list of flags
say "go test ${GO_TEST_FLAGS:--count=1 -timeout=30m} $* beside $hog on $(nproc) cores; log $log"
start=$(date +%s)
status=0
# shellcheck disable=SC2086
go test ${GO_TEST_FLAGS:--count=1 -timeout=30m} "$@" 2>&1 | tee "$log" || status=$?
elapsed=$(($(date +%s) - start))
stop_hogs

printf '\n== stress-test: wall time %dm%02ds under %s\n' $((elapsed / 60)) $((elapsed % 60)) "$hog"
failed=$(grep -E '^[[:space:]]*--- FAIL: |^FAIL[[:space:]]|^panic: ' "$log" || true)
if [ "$status" -ne 0 ]; then
  printf '== stress-test: FAILED (go test exit status %d); the failures:\n%s\n' "$status" "${failed:-(none named: see the log)}"
  printf '== the whole log: %s\n' "$log"
  exit "$status"
fi
printf '== stress-test: every test passed; the log: %s\n' "$log"

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
  make --no-print-directory control-plane chromium drbd-utils iproute2 "$cosign" "$helm"
fi
# What `make test` exports to the tests.
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/k8s/$KUBE_VERSION}
export NODEWRIGHT_COSIGN=${NODEWRIGHT_COSIGN:-$cosign}
export NODEWRIGHT_HELM=${NODEWRIGHT_HELM:-$helm}
export NODEWRIGHT_REQUIRE_DRBD_UTILS=${NODEWRIGHT_REQUIRE_DRBD_UTILS:-1}

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

# The hog and the tests each run in a session of their own (setsid), so that stopping one
# stops every process it started, even those in process groups of their own (envtest starts
# etcd and kube-apiserver so); on INT or TERM the script stops both before it exits.
# setpriv's parent-death signal stops them too if the script itself is killed outright.
sessions=() # the hog's sessions, then the tests'
orphan_guard=()
if command -v setpriv >/dev/null; then
  orphan_guard=(setpriv --pdeathsig TERM)
fi
stop_sessions() {
  local sid
  for sid in "${sessions[@]}"; do
    pkill -TERM -s "$sid" 2>/dev/null || kill -TERM -- "-$sid" 2>/dev/null || true
  done
  for sid in "${sessions[@]}"; do
    wait "$sid" 2>/dev/null || true
  done
  # A kube-apiserver whose etcd is gone can take its time over TERM: 30 s, then KILL.
  local tries=0
  for sid in "${sessions[@]}"; do
    while pgrep -s "$sid" >/dev/null 2>&1 && [ "$tries" -lt 30 ]; do
      sleep 1
      tries=$((tries + 1))
    done
    pkill -KILL -s "$sid" 2>/dev/null || true
  done
  sessions=()
}
trap stop_sessions EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if have_stress_ng; then
  "${orphan_guard[@]}" setsid stress-ng --cpu "$workers" --timeout "$hog_limit" --quiet >/dev/null 2>&1 &
  sessions+=("$!")
  hog="stress-ng --cpu $workers"
else
  say "no stress-ng (and none could be installed): busy shell loops instead"
  for _ in $(seq "$workers"); do
    "${orphan_guard[@]}" setsid timeout "$hog_limit" bash -c 'while :; do :; done' &
    sessions+=("$!")
  done
  hog="$workers busy shell loops"
fi

[ "$#" -gt 0 ] || set -- ./...
log=$(mktemp "${TMPDIR:-/tmp}/nodewright-stress-test.XXXXXX")
# shellcheck disable=SC2086 # GO_TEST_FLAGS is a list of flags
say "go test ${GO_TEST_FLAGS:--count=1 -timeout=30m} $* beside $hog on $(nproc) cores; log $log"
start=$(date +%s)
status=0
# In the background, so that the traps run as soon as a signal comes; go test, the test
# binaries and what they start share the session that stop_sessions stops.
# shellcheck disable=SC2086,SC2016 # GO_TEST_FLAGS is a list of flags; $@ is for the inner shell
"${orphan_guard[@]}" setsid bash -c 'set -o pipefail; log=$1; shift; go test "$@" 2>&1 | tee "$log"' \
  stress-test "$log" ${GO_TEST_FLAGS:--count=1 -timeout=30m} "$@" &
sessions+=("$!")
wait "$!" || status=$?
elapsed=$(($(date +%s) - start))
stop_sessions

printf '\n== stress-test: wall time %dm%02ds under %s\n' $((elapsed / 60)) $((elapsed % 60)) "$hog"
failed=$(grep -E '^[[:space:]]*--- FAIL: |^FAIL[[:space:]]|^panic: ' "$log" || true)
if [ "$status" -ne 0 ]; then
  printf '== stress-test: FAILED (go test exit status %d); the failures:\n%s\n' "$status" "${failed:-(none named: see the log)}"
  printf '== the whole log: %s\n' "$log"
  exit "$status"
fi
printf '== stress-test: every test passed; the log: %s\n' "$log"

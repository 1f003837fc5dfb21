#!/usr/bin/env bash
# Builds (or reuses) the cosign binary the EdgeProfile signature tests run against, into
# bin/tools/cosign-<COSIGN_VERSION>, from the Go module proxy. cosign is a test tool only: it is
# never added to go.mod. A fresh build takes a few minutes. Prints the binary's path on stdout;
# progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

dest="$root/bin/tools/cosign-$COSIGN_VERSION"
if [ -x "$dest" ]; then
  echo "$dest"
  exit 0
fi

say() { printf 'cosign: %s\n' "$*" >&2; }

# Build into a private folder and rename, so a concurrent or interrupted build never leaves a
# half-written binary at $dest.
mkdir -p "$root/bin/tools"
work=$(mktemp -d "$root/bin/tools/.cosign-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building cosign $COSIGN_VERSION from the module proxy (a few minutes on a fresh machine)"
start=$SECONDS
CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$work" \
  go install -trimpath -ldflags "-s -w" "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION"
mv "$work/cosign" "$dest"
say "built in $((SECONDS - start))s"
echo "$dest"

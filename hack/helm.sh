#!/usr/bin/env bash
# Builds (or reuses) the helm binary that lints, packages and tests the chart (charts/nodewright),
# into bin/tools/helm-<HELM_VERSION>, from the Go module proxy. helm is a tool only: it is never
# added to go.mod. A fresh build takes a few minutes. Prints the binary's path on stdout;
# progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

dest="$root/bin/tools/helm-$HELM_VERSION"
if [ -x "$dest" ]; then
  echo "$dest"
  exit 0
fi

say() { printf 'helm: %s\n' "$*" >&2; }

# Build into a private folder and rename, so a concurrent or interrupted build never leaves a
# half-written binary at $dest.
mkdir -p "$root/bin/tools"
work=$(mktemp -d "$root/bin/tools/.helm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building helm $HELM_VERSION from the module proxy (a few minutes on a fresh machine)"
start=$SECONDS
CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$work" \
  go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$work/helm" "$dest"
say "built in $((SECONDS - start))s"
echo "$dest"

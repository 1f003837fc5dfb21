#!/usr/bin/env bash
# go-tool.sh NAME PACKAGE VERSION: builds (or reuses) a tool from the Go module proxy into
# bin/tools/NAME-VERSION, without adding it to go.mod. Prints the binary's path on stdout;
# progress goes to stderr. hack/cosign.sh and hack/helm.sh call it with their pinned versions.
set -euo pipefail

name=${1:?usage: go-tool.sh NAME PACKAGE VERSION}
pkg=${2:?usage: go-tool.sh NAME PACKAGE VERSION}
version=${3:?usage: go-tool.sh NAME PACKAGE VERSION}
root=$(cd "$(dirname "$0")/.." && pwd)

dest="$root/bin/tools/$name-$version"
if [ -x "$dest" ]; then
  echo "$dest"
  exit 0
fi

say() { printf '%s: %s\n' "$name" "$*" >&2; }

# Build into a private folder and rename, so a concurrent or interrupted build never leaves a
# half-written binary at $dest.
mkdir -p "$root/bin/tools"
work=$(mktemp -d "$root/bin/tools/.$name-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building $name $version from the module proxy (a few minutes on a fresh machine)"
start=$SECONDS
CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$work" go install -trimpath -ldflags "-s -w" "$pkg@$version"
mv "$work/$(basename "$pkg")" "$dest"
say "built in $((SECONDS - start))s"
echo "$dest"

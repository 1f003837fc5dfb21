#!/usr/bin/env bash
# Builds (or reuses) the cosign binary the EdgeProfile signature tests run against, into
# bin/tools/cosign-<COSIGN_VERSION>, from the Go module proxy. cosign is a test tool only: it is
# never added to go.mod. A fresh build takes a few minutes. Prints the binary's path on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"
exec "$root/hack/go-tool.sh" cosign github.com/sigstore/cosign/v2/cmd/cosign "$COSIGN_VERSION"

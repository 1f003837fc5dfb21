#!/usr/bin/env bash
# Builds (or reuses) the helm binary that lints, packages and tests the chart (charts/nodewright),
# into bin/tools/helm-<HELM_VERSION>, from the Go module proxy. helm is a tool only: it is never
# added to go.mod. A fresh build takes a few minutes. Prints the binary's path on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"
exec "$root/hack/go-tool.sh" helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"

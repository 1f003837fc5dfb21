#!/usr/bin/env bash
# Builds the Kubernetes control plane used by the tests and the local site from the Go module
# proxy, into bin/k8s/<KUBE_VERSION>/:
#   kube-apiserver kube-controller-manager kube-scheduler kubectl   (k8s.io/kubernetes)
#   etcd                                                            (go.etcd.io/etcd/server/v3)
#   kwok kwokctl                                                    (sigs.k8s.io/kwok)
# Binaries already in the cache are reused; a fresh build takes several minutes on two cores.
# Prints the cache folder on stdout as its last line; progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

dest="$root/bin/k8s/$KUBE_VERSION"
work="$root/bin/k8s/.build"
mkdir -p "$dest"

say() { printf 'control-plane: %s\n' "$*" >&2; }

missing() {
  local b
  for b in "$@"; do [ -x "$dest/$b" ] || { echo yes; return; }; done
}

export CGO_ENABLED=0 GOFLAGS=-mod=mod
ldflags_strip="-s -w"

build_kubernetes() {
  local mod="$work/kubernetes-$KUBE_VERSION"
  if [ -z "$(missing kube-apiserver kube-controller-manager kube-scheduler kubectl)" ]; then
    say "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $KUBE_VERSION: cached"
    return
  fi
  say "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $KUBE_VERSION from the module proxy (several minutes on a fresh machine)"
  mkdir -p "$mod"
  local staging="v0.${KUBE_VERSION#v1.}"
  (
    cd "$mod"
    gomod_file=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    {
      echo "module nodewright.local/k8sbuild"
      echo
      echo "go 1.24.0"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      # k8s.io/kubernetes replaces its staging modules with local folders; point them at the
      # published modules of the same release instead.
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod_file" |
        awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
    } >go.mod
    local ver="k8s.io/component-base/version"
    local cver="k8s.io/client-go/pkg/version"
    local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
    local stamp=""
    for p in "$ver" "$cver"; do
      stamp+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
      stamp+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    go build -trimpath -ldflags "$ldflags_strip $stamp" -o "$dest/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl
  )
}

build_etcd() {
  local mod="$work/etcd-$ETCD_VERSION"
  if [ -z "$(missing etcd)" ]; then say "etcd $ETCD_VERSION: cached"; return; fi
  say "building etcd $ETCD_VERSION from the module proxy"
  mkdir -p "$mod"
  (
    cd "$mod"
    printf 'module nodewright.local/etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
    go build -trimpath -ldflags "$ldflags_strip" -o "$dest/etcd" go.etcd.io/etcd/server/v3
  )
}

build_kwok() {
  if [ -z "$(missing kwok kwokctl)" ]; then say "kwok, kwokctl $KWOK_VERSION: cached"; return; fi
  say "building kwok, kwokctl $KWOK_VERSION from the module proxy"
  GOFLAGS= GOBIN="$dest" go install -trimpath -ldflags "$ldflags_strip" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
}

build_etcd
build_kwok
build_kubernetes
say "ready in $dest"
echo "$dest"

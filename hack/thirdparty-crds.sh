#!/usr/bin/env bash
# Writes the CRDs of the third-party APIs Nodewright's controllers use into config/thirdparty/,
# from the Go modules pinned in go.mod:
#   kubevirt/  VirtualMachine and VirtualMachineInstance. KubeVirt builds its CRD schemas from
#              the Go types of kubevirt.io/api; so does this script (controller-gen), and
#              hack/thirdparty-crds sets the names, subresources and columns virt-operator sets.
#   snapshot/  VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass, copied as they
#              ship in github.com/kubernetes-csi/external-snapshotter/client/v8.
# The tests and the local site install these. `make verify` fails when they are stale.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
controller_gen=${CONTROLLER_GEN:?set CONTROLLER_GEN to the controller-gen binary}

kubevirt_version=$(go list -m -f '{{.Version}}' kubevirt.io/api)
snapshot_dir=$(go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)
[ -n "$snapshot_dir" ] || { go mod download github.com/kubernetes-csi/external-snapshotter/client/v8;
  snapshot_dir=$(go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8); }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$controller_gen" crd:allowDangerousTypes=true,generateEmbeddedObjectMeta=true \
  paths=kubevirt.io/api/core/v1 output:crd:dir="$work"
rm -rf config/thirdparty/kubevirt config/thirdparty/snapshot
mkdir -p config/thirdparty/kubevirt config/thirdparty/snapshot
go run ./hack/thirdparty-crds "$work" config/thirdparty/kubevirt "$kubevirt_version"

for f in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
  install -m 0644 "$snapshot_dir/config/crd/snapshot.storage.k8s.io_$f.yaml" config/thirdparty/snapshot/
done

#!/usr/bin/env bash
# Writes the CRDs of the third-party APIs Nodewright's controllers use into config/thirdparty/,
# from the Go modules pinned in go.mod:
#   kubevirt/  VirtualMachine, VirtualMachineInstance and VirtualMachineInstanceMigration, and
#              snapshot.kubevirt.io/v1beta1's VirtualMachineSnapshot, VirtualMachineSnapshotContent
#              and VirtualMachineRestore (KubeVirt also serves the same kinds as v1alpha1, which
#              Nodewright does not use). KubeVirt
#              builds its CRD schemas from the Go types of kubevirt.io/api; so does this script
#              (controller-gen), and hack/thirdparty-crds sets the names, subresources and columns
#              virt-operator sets.
#   snapshot/  VolumeSnapshot, VolumeSnapshotContent and VolumeSnapshotClass, copied as they
#              ship in github.com/kubernetes-csi/external-snapshotter/client/v8.
#   monitoring/ the Prometheus Operator's ServiceMonitor, as it ships in
#              github.com/prometheus-operator/prometheus-operator (PROMETHEUS_OPERATOR_VERSION
#              in hack/versions.env; not a module dependency): the chart's optional
#              ServiceMonitor is applied to it on the local site.
# The tests and the local site install these. `make verify` fails when they are stale.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
controller_gen=${CONTROLLER_GEN:?set CONTROLLER_GEN to the controller-gen binary}
# shellcheck source=hack/versions.env
source "$root/hack/versions.env"

kubevirt_version=$(go list -m -f '{{.Version}}' kubevirt.io/api)
snapshot_dir=$(go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8)
[ -n "$snapshot_dir" ] || { go mod download github.com/kubernetes-csi/external-snapshotter/client/v8;
  snapshot_dir=$(go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/client/v8); }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Downloaded outside this module, so that go.mod and go.sum do not change.
monitoring_dir=$(cd "$work" && GOFLAGS= go mod download -json \
  "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$monitoring_dir" ] || { echo "thirdparty-crds: cannot download prometheus-operator $PROMETHEUS_OPERATOR_VERSION" >&2; exit 1; }

"$controller_gen" crd:allowDangerousTypes=true,generateEmbeddedObjectMeta=true \
  paths=kubevirt.io/api/core/v1 paths=kubevirt.io/api/snapshot/v1beta1 output:crd:dir="$work"
rm -rf config/thirdparty/kubevirt config/thirdparty/snapshot config/thirdparty/monitoring
mkdir -p config/thirdparty/kubevirt config/thirdparty/snapshot config/thirdparty/monitoring
go run ./hack/thirdparty-crds "$work" config/thirdparty/kubevirt "$kubevirt_version"

for f in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
  install -m 0644 "$snapshot_dir/config/crd/snapshot.storage.k8s.io_$f.yaml" config/thirdparty/snapshot/
done
install -m 0644 "$monitoring_dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" config/thirdparty/monitoring/

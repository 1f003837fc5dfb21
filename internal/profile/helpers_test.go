package profile

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// testSpec is a valid spec that sets every field.
func testSpec() v1alpha1.EdgeProfileSpec {
	return v1alpha1.EdgeProfileSpec{
		Version:  "1.4.0",
		Topology: v1alpha1.TopologyTwoNodeTiebreaker,
		Storage:  v1alpha1.ProfileStorage{Backend: v1alpha1.StorageLINSTOR, StorageClassName: "linstor-r2"},
		OS:       v1alpha1.HostOSKairos,
		Network: v1alpha1.ProfileNetwork{
			BondInterface:    "bond0",
			BondMode:         v1alpha1.BondMode8023AD,
			MemberInterfaces: []string{"enp1s0", "enp2s0"},
			StorageVLAN:      ptr.To[int32](120),
		},
		Legacy: &v1alpha1.LegacySource{
			ConfigMapRef:   v1alpha1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init-state"},
			DaemonSetRef:   v1alpha1.NamespacedObjectReference{Namespace: "kube-system", Name: "node-init"},
			EventComponent: "node-init",
		},
		Thresholds: v1alpha1.ProfileThresholds{
			HeartbeatStaleAfter: metav1.Duration{Duration: 45 * time.Second},
			DRBDSyncTimeout:     metav1.Duration{Duration: 90 * time.Minute},
		},
	}
}

// minimalSpec is a valid spec that sets only the required fields.
func minimalSpec() v1alpha1.EdgeProfileSpec {
	return v1alpha1.EdgeProfileSpec{
		Version:  "0.1.0",
		Topology: v1alpha1.TopologySingleNode,
		Storage:  v1alpha1.ProfileStorage{Backend: v1alpha1.StorageTopoLVM},
		OS:       v1alpha1.HostOSSystemdNetworkd,
		Network:  v1alpha1.ProfileNetwork{BondInterface: "bond0", BondMode: v1alpha1.BondModeActiveBackup},
	}
}

// testProfileYAML is testSpec as a file.
const testProfileYAML = `# The Munich store.
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: EdgeProfile
metadata:
  name: store-munich
spec:
  version: 1.4.0
  topology: TwoNodeTiebreaker
  storage:
    backend: LINSTOR
    storageClassName: linstor-r2
  os: Kairos
  network:
    bondInterface: bond0
    bondMode: "802.3ad"
    memberInterfaces: [enp1s0, enp2s0]
    storageVLAN: 120
  legacy:
    configMapRef: {namespace: kube-system, name: node-init-state}
    daemonSetRef: {namespace: kube-system, name: node-init}
    eventComponent: node-init
  thresholds:
    heartbeatStaleAfter: 45s
    drbdSyncTimeout: 1h30m
`

func mustCanonical(t testing.TB, spec v1alpha1.EdgeProfileSpec) []byte {
	t.Helper()
	b, err := Canonical(spec)
	if err != nil {
		t.Fatalf("Canonical: %v", err)
	}
	return b
}

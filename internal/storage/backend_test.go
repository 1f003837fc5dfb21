package storage

import (
	"slices"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

func TestForProvisioner(t *testing.T) {
	cases := []struct {
		provisioner string
		name        string
		kind        nwv1.StorageBackendKind
	}{
		{"linstor.csi.linbit.com", "LINSTOR", nwv1.StorageLINSTOR},
		{"topolvm.io", "TopoLVM", nwv1.StorageTopoLVM},
		{"topolvm.cybozu.com", "TopoLVM", nwv1.StorageTopoLVM},
		{"driver.longhorn.io", "Longhorn", nwv1.StorageLonghorn},
		{"rbd.csi.ceph.com", "Ceph RBD", nwv1.StorageCephRBD},
		{"openshift-storage.rbd.csi.ceph.com", "Ceph RBD", nwv1.StorageCephRBD},
		{"rook-ceph.rbd.csi.ceph.com", "Ceph RBD", nwv1.StorageCephRBD},
		{".rbd.csi.ceph.com", "generic CSI (.rbd.csi.ceph.com)", nwv1.StorageGenericCSI},
		{"cephfs.csi.ceph.com", "generic CSI (cephfs.csi.ceph.com)", nwv1.StorageGenericCSI},
		{"csi.example.com", "generic CSI (csi.example.com)", nwv1.StorageGenericCSI},
		{"", "generic CSI", nwv1.StorageGenericCSI},
	}
	for _, c := range cases {
		b := ForProvisioner(c.provisioner)
		if b.Name() != c.name || b.Kind() != c.kind {
			t.Errorf("ForProvisioner(%q) = %s (%s); want %s (%s)", c.provisioner, b.Name(), b.Kind(), c.name, c.kind)
		}
	}
}

// TestCapabilities pins every backend's declared capabilities: changing one is a decision,
// made here as well as in the backend's file.
func TestCapabilities(t *testing.T) {
	type caps struct {
		snapshot, clone, rwxBlock, rwxFS, expand bool
		placement                                Placement
		maxReplicas                              int
		tiebreaker                               bool
	}
	want := map[nwv1.StorageBackendKind]caps{
		nwv1.StorageLINSTOR:    {true, true, true, false, true, PlacementSyncPerVolume, 32, true},
		nwv1.StorageTopoLVM:    {false, false, false, false, true, PlacementNodeLocal, 1, false},
		nwv1.StorageLonghorn:   {true, true, false, true, true, PlacementSyncPerVolume, 20, false},
		nwv1.StorageCephRBD:    {true, true, true, false, true, PlacementSyncPerPool, 10, true},
		nwv1.StorageGenericCSI: {false, false, false, false, false, PlacementUnknown, 1, false},
	}
	for _, b := range All() {
		got := caps{b.SupportsSnapshot(), b.SupportsClone(), b.SupportsRWXBlock(), b.SupportsRWXFilesystem(),
			b.SupportsOnlineExpansion(), b.ReplicaPlacement(), b.MaxReplicas(), b.NeedsTiebreaker()}
		if w, ok := want[b.Kind()]; !ok || got != w {
			t.Errorf("%s: %+v; want %+v", b.Name(), got, w)
		}
	}
}

// TestDeclarationsAgree checks what follows from one capability for another.
func TestDeclarationsAgree(t *testing.T) {
	for _, b := range All() {
		p := b.ReplicaPlacement()
		if p.Replicated() != (b.MaxReplicas() > 1) {
			t.Errorf("%s: placement %s but at most %d replicas", b.Name(), p, b.MaxReplicas())
		}
		if b.NeedsTiebreaker() && !p.Replicated() {
			t.Errorf("%s needs a tiebreaker but does not replicate (%s)", b.Name(), p)
		}
	}
}

func TestForKindCoversTheEnum(t *testing.T) {
	values := testenv.EnumValues(t, "StorageBackendKind")
	for _, v := range values {
		kind := nwv1.StorageBackendKind(v)
		b, err := ForKind(kind)
		if err != nil {
			t.Errorf("ForKind(%q): %v", kind, err)
			continue
		}
		if b.Kind() != kind {
			t.Errorf("ForKind(%q) is %s, whose Kind() is %q", kind, b.Name(), b.Kind())
		}
	}
	var kinds []string
	for _, b := range All() {
		kinds = append(kinds, string(b.Kind()))
	}
	if !slices.Equal(kinds, values) {
		t.Errorf("All() has the kinds %v; want one backend per enum value, in the enum's order %v", kinds, values)
	}
}

func TestForKindUnknown(t *testing.T) {
	for _, kind := range []nwv1.StorageBackendKind{"NFS", "", "linstor"} {
		b, err := ForKind(kind)
		if err == nil {
			t.Errorf("ForKind(%q) = %s; want an error", kind, b.Name())
			continue
		}
		if !strings.Contains(err.Error(), `"`+string(kind)+`"`) {
			t.Errorf("ForKind(%q): error %q does not name the kind", kind, err)
		}
	}
}

// TestProvisionersRoundTrip: every driver name a backend declares leads back to it, and no
// two backends declare the same one.
func TestProvisionersRoundTrip(t *testing.T) {
	owner := map[string]string{}
	for _, b := range All() {
		for _, name := range b.Provisioners() {
			if other, ok := owner[name]; ok {
				t.Errorf("%s and %s both declare %q", other, b.Name(), name)
			}
			owner[name] = b.Name()
			provisioner := name
			if suffix, ok := strings.CutPrefix(name, "*"); ok {
				provisioner = "site" + suffix
			}
			if got := ForProvisioner(provisioner); got.Kind() != b.Kind() {
				t.Errorf("%s declares %q but ForProvisioner(%q) is %s", b.Name(), name, provisioner, got.Name())
			}
		}
	}
}

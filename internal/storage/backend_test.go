package storage

import "testing"

func TestForProvisioner(t *testing.T) {
	cases := []struct {
		provisioner               string
		name                      string
		snapshot, clone, rwxBlock bool
	}{
		{"linstor.csi.linbit.com", "LINSTOR", true, true, true},
		{"topolvm.io", "TopoLVM", false, false, false},
		{"driver.longhorn.io", "Longhorn", true, true, false},
		{"rbd.csi.ceph.com", "Ceph RBD", true, true, true},
		{"openshift-storage.rbd.csi.ceph.com", "Ceph RBD", true, true, true},
		{"csi.example.com", "generic CSI (csi.example.com)", false, false, false},
		{"", "generic CSI ()", false, false, false},
	}
	for _, c := range cases {
		b := ForProvisioner(c.provisioner)
		if b.Name() != c.name || b.SupportsSnapshot() != c.snapshot || b.SupportsClone() != c.clone || b.SupportsRWXBlock() != c.rwxBlock {
			t.Errorf("%q: %s snapshot=%v clone=%v rwxBlock=%v; want %s %v %v %v", c.provisioner,
				b.Name(), b.SupportsSnapshot(), b.SupportsClone(), b.SupportsRWXBlock(), c.name, c.snapshot, c.clone, c.rwxBlock)
		}
	}
}

// Package storage is the storage seam: what each storage backend can safely do, declared as
// constants of its Go type and never probed live. Controllers ask a backend before they act,
// and refuse what it cannot do rather than falling back to something weaker.
package storage

import "strings"

// Backend is one storage backend's static capabilities.
type Backend interface {
	// Name is the backend's name for people, e.g. "LINSTOR".
	Name() string
	// SupportsSnapshot: CSI VolumeSnapshots of its volumes can be taken and restored.
	SupportsSnapshot() bool
	// SupportsClone: a new volume can be a CSI clone of an existing one (a PVC dataSource).
	SupportsClone() bool
	// SupportsRWXBlock: a raw block volume can be attached to two nodes at once
	// (ReadWriteMany, volumeMode Block), which KubeVirt live migration needs.
	SupportsRWXBlock() bool
	// SupportsOnlineExpansion: a volume in use can grow.
	SupportsOnlineExpansion() bool
}

// backends maps CSI driver names (a StorageClass's provisioner) to their backends.
var backends = map[string]Backend{
	"linstor.csi.linbit.com": LINSTOR{},
	"topolvm.io":             TopoLVM{},
	"driver.longhorn.io":     Longhorn{},
	"rbd.csi.ceph.com":       CephRBD{},
}

// ForProvisioner is the backend behind a StorageClass's provisioner. A provisioner it does not
// know gets Generic, which claims nothing it cannot prove. Ceph RBD drivers deployed under a
// prefix (e.g. "openshift-storage.rbd.csi.ceph.com") are recognised by their suffix.
func ForProvisioner(provisioner string) Backend {
	if b, ok := backends[provisioner]; ok {
		return b
	}
	if strings.HasSuffix(provisioner, ".rbd.csi.ceph.com") {
		return CephRBD{}
	}
	return Generic{Provisioner: provisioner}
}

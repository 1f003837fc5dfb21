package storage

// CephRBD is Ceph's RADOS block device through ceph-csi: snapshots, clones, and block volumes
// shared between nodes.
type CephRBD struct{}

func (CephRBD) Name() string                  { return "Ceph RBD" }
func (CephRBD) SupportsSnapshot() bool        { return true }
func (CephRBD) SupportsClone() bool           { return true }
func (CephRBD) SupportsRWXBlock() bool        { return true }
func (CephRBD) SupportsOnlineExpansion() bool { return true }

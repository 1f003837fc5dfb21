package storage

// Longhorn snapshots and clones its volumes; its ReadWriteMany volumes are NFS file systems,
// so a raw block volume cannot be shared between nodes.
type Longhorn struct{}

func (Longhorn) Name() string                  { return "Longhorn" }
func (Longhorn) SupportsSnapshot() bool        { return true }
func (Longhorn) SupportsClone() bool           { return true }
func (Longhorn) SupportsRWXBlock() bool        { return false }
func (Longhorn) SupportsOnlineExpansion() bool { return false }

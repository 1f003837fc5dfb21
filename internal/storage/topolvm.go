package storage

// TopoLVM (and LVMS) provision node-local LVM volumes. Snapshots and clones exist only for
// thin volumes, which a class does not promise, so neither is claimed; a node-local volume
// cannot be attached to two nodes.
type TopoLVM struct{}

func (TopoLVM) Name() string                  { return "TopoLVM" }
func (TopoLVM) SupportsSnapshot() bool        { return false }
func (TopoLVM) SupportsClone() bool           { return false }
func (TopoLVM) SupportsRWXBlock() bool        { return false }
func (TopoLVM) SupportsOnlineExpansion() bool { return true }

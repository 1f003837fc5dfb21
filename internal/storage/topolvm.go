package storage

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// TopoLVM (and OpenShift's LVMS, which ships it) provisions node-local LVM logical volumes.
type TopoLVM struct{}

func (TopoLVM) Name() string                  { return "TopoLVM" }
func (TopoLVM) Kind() nwv1.StorageBackendKind { return nwv1.StorageTopoLVM }

// Provisioners are topolvm.io, TopoLVM's driver since its 2022 rename, and
// topolvm.cybozu.com, its name before and still where the chart was installed with useLegacy.
func (TopoLVM) Provisioners() []string { return []string{"topolvm.io", "topolvm.cybozu.com"} }

// SupportsSnapshot is false: snapshots exist only for thin volumes, which a class does not
// promise.
func (TopoLVM) SupportsSnapshot() bool { return false }

// SupportsClone is false: clones exist only for thin volumes, which a class does not promise.
func (TopoLVM) SupportsClone() bool { return false }

// SupportsRWXBlock is false: a logical volume lives in one node's volume group and cannot be
// attached anywhere else.
func (TopoLVM) SupportsRWXBlock() bool { return false }

// SupportsRWXFilesystem is false: a logical volume lives in one node's volume group and
// cannot be mounted anywhere else.
func (TopoLVM) SupportsRWXFilesystem() bool { return false }

// SupportsOnlineExpansion is true: lvextend grows a logical volume in use, and the node
// plugin then grows its file system.
func (TopoLVM) SupportsOnlineExpansion() bool { return true }

// ReplicaPlacement is node-local: a volume is one logical volume on the node its first pod
// was scheduled to.
func (TopoLVM) ReplicaPlacement() Placement { return PlacementNodeLocal }

// MaxReplicas is 1: one logical volume, no replicas.
func (TopoLVM) MaxReplicas() int { return 1 }

// NeedsTiebreaker is false: nothing is replicated, so there is nothing to arbitrate.
func (TopoLVM) NeedsTiebreaker() bool { return false }

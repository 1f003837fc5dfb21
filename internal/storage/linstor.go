package storage

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// LINSTOR is LINBIT's LINSTOR (Piraeus) with DRBD replication. Snapshots and clones need a
// thin LVM or ZFS storage pool, which is how edge clusters deploy it.
type LINSTOR struct{}

func (LINSTOR) Name() string                  { return "LINSTOR" }
func (LINSTOR) Kind() nwv1.StorageBackendKind { return nwv1.StorageLINSTOR }

// Provisioners is the LINSTOR CSI driver's name, in Piraeus and in LINBIT SDS alike.
func (LINSTOR) Provisioners() []string { return []string{"linstor.csi.linbit.com"} }

// SupportsSnapshot is true: LINSTOR snapshots volumes in thin LVM and ZFS pools.
func (LINSTOR) SupportsSnapshot() bool { return true }

// SupportsClone is true: LINSTOR CSI clones a volume within the same thin LVM or ZFS pool.
func (LINSTOR) SupportsClone() bool { return true }

// SupportsRWXBlock is true: DRBD lets a volume be primary on two nodes (allow-two-primaries)
// for the length of a live migration.
func (LINSTOR) SupportsRWXBlock() bool { return true }

// SupportsRWXFilesystem is false: DRBD shares a block device, not a file system; RWX file
// systems need LINSTOR CSI's optional NFS server (LINSTOR CSI 1.10 and later), which a site
// need not run.
func (LINSTOR) SupportsRWXFilesystem() bool { return false }

// SupportsOnlineExpansion is true: DRBD grows a resource in use once its backing volumes
// have grown (drbdadm resize).
func (LINSTOR) SupportsOnlineExpansion() bool { return true }

// ReplicaPlacement is synchronous per volume: DRBD replicates with protocol C to as many
// nodes as the StorageClass's placementCount asks for.
func (LINSTOR) ReplicaPlacement() Placement { return PlacementSyncPerVolume }

// MaxReplicas is 32: DRBD 9 numbers a resource's nodes 0 to 31 (DRBD_NODE_ID_MAX), diskless
// ones included.
func (LINSTOR) MaxReplicas() int { return 32 }

// NeedsTiebreaker is true: DRBD quorum with two diskful replicas needs a third vote, which
// LINSTOR provides as a diskless tiebreaker resource.
func (LINSTOR) NeedsTiebreaker() bool { return true }

package storage

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// CephRBD is Ceph's RADOS block device through ceph-csi.
type CephRBD struct{}

func (CephRBD) Name() string                  { return "Ceph RBD" }
func (CephRBD) Kind() nwv1.StorageBackendKind { return nwv1.StorageCephRBD }

// Provisioners is ceph-csi's RBD driver; Rook and OpenShift Data Foundation prefix it with
// their namespace (e.g. "openshift-storage.rbd.csi.ceph.com").
func (CephRBD) Provisioners() []string { return []string{"rbd.csi.ceph.com", "*.rbd.csi.ceph.com"} }

// SupportsSnapshot is true: ceph-csi takes CSI snapshots as RBD snapshots.
func (CephRBD) SupportsSnapshot() bool { return true }

// SupportsClone is true: ceph-csi clones a volume as an RBD clone.
func (CephRBD) SupportsClone() bool { return true }

// SupportsRWXBlock is true: ceph-csi maps one RBD image on several nodes for ReadWriteMany
// block volumes.
func (CephRBD) SupportsRWXBlock() bool { return true }

// SupportsRWXFilesystem is false: an RBD image is a block device; a shared file system is
// CephFS, another driver.
func (CephRBD) SupportsRWXFilesystem() bool { return false }

// SupportsOnlineExpansion is true: rbd resize grows an image in use.
func (CephRBD) SupportsOnlineExpansion() bool { return true }

// ReplicaPlacement is synchronous per pool: RADOS acknowledges a write once it is on all of
// the pool's size OSDs, which CRUSH places in distinct failure domains.
func (CephRBD) ReplicaPlacement() Placement { return PlacementSyncPerPool }

// MaxReplicas is 10: Ceph refuses a replicated pool size above it.
func (CephRBD) MaxReplicas() int { return 10 }

// NeedsTiebreaker is true: Ceph monitors need a majority, so two nodes need a third monitor
// to vote.
func (CephRBD) NeedsTiebreaker() bool { return true }

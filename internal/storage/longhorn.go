package storage

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// Longhorn replicates each volume through an engine on the node the volume is attached to.
type Longhorn struct{}

func (Longhorn) Name() string                  { return "Longhorn" }
func (Longhorn) Kind() nwv1.StorageBackendKind { return nwv1.StorageLonghorn }

// Provisioners is the Longhorn CSI driver's name.
func (Longhorn) Provisioners() []string { return []string{"driver.longhorn.io"} }

// SupportsSnapshot is true: Longhorn takes and restores CSI snapshots of its volumes.
func (Longhorn) SupportsSnapshot() bool { return true }

// SupportsClone is true: Longhorn clones a volume from another of its volumes.
func (Longhorn) SupportsClone() bool { return true }

// SupportsRWXBlock is false: only classes with migratable: "true" (Harvester's live
// migration) share a block volume between nodes, and a class does not promise it.
func (Longhorn) SupportsRWXBlock() bool { return false }

// SupportsRWXFilesystem is true: ReadWriteMany volumes are NFSv4 exports served by the
// volume's share-manager pod.
func (Longhorn) SupportsRWXFilesystem() bool { return true }

// SupportsOnlineExpansion is true: Longhorn grows attached volumes since v1.4 (V1 data engine).
func (Longhorn) SupportsOnlineExpansion() bool { return true }

// ReplicaPlacement is synchronous per volume: the engine writes to the StorageClass's
// numberOfReplicas replicas, on distinct nodes by default.
func (Longhorn) ReplicaPlacement() Placement { return PlacementSyncPerVolume }

// MaxReplicas is 20: Longhorn rejects a replica count above it.
func (Longhorn) MaxReplicas() int { return 20 }

// NeedsTiebreaker is false: the engine is a volume's only writer and its replicas do not
// vote, so the surviving node keeps writing.
func (Longhorn) NeedsTiebreaker() bool { return false }

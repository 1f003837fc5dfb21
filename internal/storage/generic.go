package storage

import nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"

// Generic is any CSI driver Nodewright does not know. It claims nothing: an operation that
// needs a capability is refused on it rather than attempted on a guess.
type Generic struct {
	// Provisioner is the driver's name, empty when the backend was named by kind alone.
	Provisioner string
}

func (g Generic) Name() string {
	if g.Provisioner == "" {
		return "generic CSI"
	}
	return "generic CSI (" + g.Provisioner + ")"
}

func (Generic) Kind() nwv1.StorageBackendKind { return nwv1.StorageGenericCSI }

// Provisioners is empty: Generic answers to every driver no other backend names.
func (Generic) Provisioners() []string { return nil }

func (Generic) SupportsSnapshot() bool        { return false }
func (Generic) SupportsClone() bool           { return false }
func (Generic) SupportsRWXBlock() bool        { return false }
func (Generic) SupportsRWXFilesystem() bool   { return false }
func (Generic) SupportsOnlineExpansion() bool { return false }

// ReplicaPlacement is unknown: copies it cannot see are not counted on.
func (Generic) ReplicaPlacement() Placement { return PlacementUnknown }

// MaxReplicas is 1: the volume itself, and nothing more is claimed.
func (Generic) MaxReplicas() int { return 1 }

// NeedsTiebreaker is false: it claims no replication, so there is nothing to arbitrate.
func (Generic) NeedsTiebreaker() bool { return false }

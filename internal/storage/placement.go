package storage

// Placement is where the copies of a volume's data live.
type Placement string

// The placements.
const (
	// PlacementUnknown: nothing is known of the backend's copies, so it is taken to keep one.
	PlacementUnknown Placement = "Unknown"
	// PlacementNodeLocal: one copy, on the node the volume was provisioned on; it is lost, or
	// unreachable, with that node.
	PlacementNodeLocal Placement = "NodeLocal"
	// PlacementSyncPerVolume: a write is acknowledged once it is on every replica, each on its
	// own node; how many replicas is set per volume, by its StorageClass.
	PlacementSyncPerVolume Placement = "SynchronousPerVolume"
	// PlacementSyncPerPool: a write is acknowledged once it is on every replica, each in its
	// own failure domain; how many replicas is set for a whole pool, not per volume.
	PlacementSyncPerPool Placement = "SynchronousPerPool"
)

// Replicated says whether a volume's data survives the loss of the node it is used on.
func (p Placement) Replicated() bool {
	return p == PlacementSyncPerVolume || p == PlacementSyncPerPool
}

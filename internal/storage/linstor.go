package storage

// LINSTOR is LINBIT's LINSTOR (Piraeus) with DRBD replication. Snapshots and clones need a
// thin LVM or ZFS storage pool, which is how edge clusters deploy it; DRBD lets a block volume
// be primary on two nodes during a live migration.
type LINSTOR struct{}

func (LINSTOR) Name() string                  { return "LINSTOR" }
func (LINSTOR) SupportsSnapshot() bool        { return true }
func (LINSTOR) SupportsClone() bool           { return true }
func (LINSTOR) SupportsRWXBlock() bool        { return true }
func (LINSTOR) SupportsOnlineExpansion() bool { return true }

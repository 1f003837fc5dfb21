package drbd

import (
	"fmt"
	"math"
)

// The states of a fully replicated volume, as drbdsetup names them.
const (
	ConnectionConnected    = "Connected"
	ReplicationEstablished = "Established"
	DiskUpToDate           = "UpToDate"
	DiskDiskless           = "Diskless"
)

// Problems says, one sentence each, what keeps the resource from being fully replicated: a
// connection that is not Connected, a volume that is not Established with its peer, or a disk,
// local or on a peer, that is not UpToDate. A disk that is Diskless on purpose (a client or a
// tiebreaker, which LINSTOR adds for quorum) is no problem. Nil means fully replicated.
func (r Resource) Problems() []string {
	var problems []string
	for _, d := range r.Devices {
		if !diskReplicated(d.DiskState, d.Client) {
			problems = append(problems, fmt.Sprintf("%s volume %d: the local disk is %s", r.Name, d.Volume, d.DiskState))
		}
	}
	for _, c := range r.Connections {
		if c.ConnectionState != ConnectionConnected {
			problems = append(problems, fmt.Sprintf("%s: the connection to %s is %s", r.Name, c.Name, c.ConnectionState))
			continue
		}
		for _, p := range c.PeerDevices {
			if p.ReplicationState != ReplicationEstablished {
				problems = append(problems, fmt.Sprintf("%s volume %d: replication with %s is %s", r.Name, p.Volume, c.Name, p.ReplicationState))
			}
			if !diskReplicated(p.PeerDiskState, p.PeerClient) {
				problems = append(problems, fmt.Sprintf("%s volume %d: the disk on %s is %s", r.Name, p.Volume, c.Name, p.PeerDiskState))
			}
		}
	}
	return problems
}

func diskReplicated(state string, disklessOnPurpose bool) bool {
	return state == DiskUpToDate || (disklessOnPurpose && state == DiskDiskless)
}

// Problems says what keeps any of the resources from being fully replicated (see
// Resource.Problems).
func Problems(resources []Resource) []string {
	var problems []string
	for _, r := range resources {
		problems = append(problems, r.Problems()...)
	}
	return problems
}

// AllConnectedAndUpToDate reports whether every resource is fully replicated: every
// connection Connected, every volume Established with every peer, every disk UpToDate (or
// Diskless on purpose). It is true of no resources at all.
func AllConnectedAndUpToDate(resources []Resource) bool {
	return len(Problems(resources)) == 0
}

// Connection returns the resource's connection to the named peer.
func (r Resource) Connection(peer string) (Connection, bool) {
	for _, c := range r.Connections {
		if c.Name == peer {
			return c, true
		}
	}
	return Connection{}, false
}

// OutOfSyncKiB is the sum of what this node knows to differ from each peer, over every volume
// and every connection of the resource: the figure a DRBDVerify reports. Blocks that differ
// from two peers count twice.
func (r Resource) OutOfSyncKiB() uint64 {
	return r.OutOfSyncKiBWhere(func(Connection, PeerDevice) bool { return true })
}

// OutOfSyncKiBWhere is Resource.OutOfSyncKiB over the volumes of the peers keep keeps.
func (r Resource) OutOfSyncKiBWhere(keep func(Connection, PeerDevice) bool) uint64 {
	var total uint64
	for _, c := range r.Connections {
		for _, p := range c.PeerDevices {
			if keep(c, p) {
				total = addSaturating(total, p.OutOfSyncKiB)
			}
		}
	}
	return total
}

// TotalOutOfSyncKiB is the sum of Resource.OutOfSyncKiB over the resources. Both sums stop at
// the largest uint64 rather than wrap.
func TotalOutOfSyncKiB(resources []Resource) uint64 {
	var total uint64
	for _, r := range resources {
		total = addSaturating(total, r.OutOfSyncKiB())
	}
	return total
}

func addSaturating(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

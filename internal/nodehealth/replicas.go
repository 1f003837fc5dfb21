package nodehealth

import (
	"fmt"
	"slices"
	"strings"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// ResourceReport is one node's agent's report of a DRBD resource.
type ResourceReport struct {
	// Node is the node whose agent reports it (its NodewrightAgentStatus is named after it).
	Node string
	// Stale: the node's heartbeat is stale, so what it reports may be long past.
	Stale bool
	nwv1.DRBDResourceStatus
}

// ResourceReports are the agents' reports of each DRBD resource, by the resource's name, each
// in the order of the nodes' names. Only agents report resources one by one: the legacy
// DaemonSet's counts name none.
func ResourceReports(agents []nwv1.NodewrightAgentStatus) map[string][]ResourceReport {
	out := map[string][]ResourceReport{}
	for _, a := range agents {
		if a.Status.Storage == nil {
			continue
		}
		for _, res := range a.Status.Storage.ResourceStatuses {
			out[res.Name] = append(out[res.Name], ResourceReport{Node: a.Name, Stale: a.Status.Heartbeat.Stale, DRBDResourceStatus: res})
		}
	}
	for _, reports := range out {
		slices.SortFunc(reports, func(a, b ResourceReport) int { return strings.Compare(a.Node, b.Node) })
	}
	return out
}

// DiskNodes are the nodes whose agents report a disk of the resource (a volume that is not a
// client's or a tiebreaker's): where its data is.
func DiskNodes(reports []ResourceReport) []string {
	var out []string
	for _, r := range reports {
		if slices.ContainsFunc(r.Volumes, func(v nwv1.DRBDVolumeStatus) bool { return !v.Client }) {
			out = append(out, r.Node)
		}
	}
	return out
}

// NotInSync says what keeps the resource from being replicated in sync, as the agents that
// report it say; "" when nothing does: on every node, I/O not suspended and every volume's
// disk UpToDate (a client's aside), and every peer Connected, with every volume Established
// and the peer's disk UpToDate (a client peer's aside). A stale report is not trusted. Each
// node's report of its own disks is read before what its peers see of them.
func NotInSync(reports []ResourceReport) string {
	for _, r := range reports {
		switch {
		case r.Stale:
			return fmt.Sprintf("the report of %s from %s is stale (its agent's heartbeat is older than the cluster's heartbeatStaleAfter), so whether it is in sync is not known", r.Name, r.Node)
		case r.Suspended:
			return fmt.Sprintf("I/O on %s is suspended on %s", r.Name, r.Node)
		}
		for _, v := range r.Volumes {
			if !v.Client && v.DiskState != drbd.DiskUpToDate {
				return fmt.Sprintf("replica of %s on %s is %s%s", volumeName(r.Name, v.Volume), r.Node, v.DiskState, resync(r.Peers, v.Volume))
			}
		}
	}
	for _, r := range reports {
		for _, p := range r.Peers {
			if p.ConnectionState != drbd.ConnectionConnected {
				return fmt.Sprintf("the connection of %s from %s to %s is %s", r.Name, r.Node, p.Name, p.ConnectionState)
			}
			for _, v := range p.Volumes {
				switch {
				case !v.PeerClient && v.PeerDiskState != drbd.DiskUpToDate:
					return fmt.Sprintf("replica of %s on %s is %s, as %s sees it%s", volumeName(r.Name, v.Volume), p.Name, v.PeerDiskState, r.Node, resync([]nwv1.DRBDPeerStatus{p}, v.Volume))
				case v.ReplicationState != drbd.ReplicationEstablished:
					return fmt.Sprintf("the replication of %s from %s to %s is %s", volumeName(r.Name, v.Volume), r.Node, p.Name, v.ReplicationState)
				}
			}
		}
	}
	return ""
}

// volumeName is the resource's volume as DRBD names it: the resource alone for its volume 0.
func volumeName(resource string, volume int32) string {
	if volume == 0 {
		return resource
	}
	return fmt.Sprintf("%s/%d", resource, volume)
}

// resync says how the volume's replication with the peers stands, where it is not
// Established: " (SyncTarget)". Its progress is left out: the reason stays the same while a
// resynchronisation runs (the agents' reports show how far it is).
func resync(peers []nwv1.DRBDPeerStatus, volume int32) string {
	var states []string
	for _, p := range peers {
		for _, v := range p.Volumes {
			if v.Volume != volume || v.ReplicationState == drbd.ReplicationEstablished {
				continue
			}
			if !slices.Contains(states, v.ReplicationState) {
				states = append(states, v.ReplicationState)
			}
		}
	}
	if len(states) == 0 {
		return ""
	}
	return " (" + strings.Join(states, ", ") + ")"
}

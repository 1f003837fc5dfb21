// Package nodehealth is the health of a node after a change or a boot, as the operator reads
// it from the node's agent, its Node and LINSTOR: shared by the OS version policy's soak and
// the boot-recovery policy's post-boot health. It also says, from the agents' reports, where a
// DRBD resource's data is and whether it is replicated in sync (a VMSnapshotPolicy's runs).
package nodehealth

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// DRBDRed says what of node's DRBD is not connected and UpToDate, or has lost quorum, as its
// agent reports it, or that it reports fewer than the resources it had (recorded at the
// Preflight): none at all when DRBD did not come back after a boot (no module, no state read).
func DRBDRed(a *nwv1.NodewrightAgentStatus, node string, had int32) string {
	var d *nwv1.DRBDStatus
	if a != nil {
		d = a.Status.Storage
	}
	switch {
	case d == nil && had > 0:
		return fmt.Sprintf("%s: its agent reports no DRBD state; it had %d resources", node, had)
	case d == nil:
		return ""
	case d.Resources < had:
		return fmt.Sprintf("%s: its agent reports %d DRBD resources; it had %d", node, d.Resources, had)
	}
	var lost []string
	for _, res := range d.ResourceStatuses {
		for _, v := range res.Volumes {
			if v.NoQuorum {
				lost = append(lost, fmt.Sprintf("%s/%d", res.Name, v.Volume))
			}
		}
	}
	if len(lost) > 0 {
		return fmt.Sprintf("%s: DRBD lost quorum on %s", node, strings.Join(lost, ", "))
	}
	if d.Connected == d.Resources && d.UpToDate == d.Resources {
		return ""
	}
	var down []string
	for _, res := range d.ResourceStatuses {
		for _, p := range res.Peers {
			if p.ConnectionState != "Connected" {
				down = append(down, fmt.Sprintf("%s to %s %s", res.Name, p.Name, p.ConnectionState))
			}
		}
		for _, v := range res.Volumes {
			if !v.Client && v.DiskState != "UpToDate" {
				down = append(down, fmt.Sprintf("%s/%d %s", res.Name, v.Volume, v.DiskState))
			}
		}
	}
	msg := fmt.Sprintf("%s: %d of %d DRBD resources connected, %d UpToDate", node, d.Connected, d.Resources, d.UpToDate)
	if len(down) > 0 {
		if len(down) > 4 {
			down = append(down[:4], "...")
		}
		msg += " (" + strings.Join(down, ", ") + ")"
	}
	return msg
}

// Ready reports whether the Node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

package osversionpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/nodehealth"
	"github.com/spectrocloud/nodewright/internal/osimage"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

// preflight checks, before anything changes, what the policy needs beyond the gates:
//
//   - the operator knows the agents' namespace; the signed EdgeProfile in force allows the
//     image (spec.osImages), as each agent checks again before it stages it;
//   - the policy has nodes to upgrade (its
//     selector picks some that report, not all held);
//   - every node's agent reports, renewing its Lease, on Kairos, with its boot ID and boot
//     entry;
//   - every DRBD resource of every node is connected and UpToDate;
//   - the VMs on the nodes it upgrades can be protected as spec.vmProtection says
//     (internal/vmprotect);
//   - with a LINSTOR gate, every node's LINSTOR satellite is ONLINE (the soak checks it
//     again); without one, its message says that the satellites are not checked.
func (r *Reconciler) preflight(ctx context.Context, s *scope) (engine.Outcome, error) {
	p := s.p
	if r.AgentNamespace == "" {
		return engine.Failed("the operator runs without --agent-namespace: there is no node agent to upgrade the nodes"), nil
	}
	// A repair that stages no image (an AssessmentReset, a SelectBootEntry) names in
	// spec.image only the image its node must boot: it needs no profile to allow it (the
	// profile may have dropped it since).
	if !p.Spec.Repairs.KeepsImage() {
		profile, err := engine.ProfileInForce(ctx, r.Client)
		if err != nil {
			return engine.Outcome{}, err
		}
		if profile == nil {
			return engine.Failed("no EdgeProfile is in force: the agents stage only an image the signed profile's spec.osImages allows"), nil
		}
		if why := osimage.Allowed(profile, p.Spec.Image); why != "" {
			return engine.Failed("spec.image: %s; the nodes' agents would refuse to stage it", why), nil
		}
	}
	if len(p.Status.Nodes) == 0 {
		why := "spec.nodeSelector selects no node whose agent reports to Nodewright"
		if _, _, n, err := r.selection(ctx, p, s.agents); err != nil {
			return engine.Outcome{}, err
		} else if n > osupgrade.MaxNodes {
			why = fmt.Sprintf("spec.nodeSelector selects %d nodes; a policy upgrades at most %d: select fewer", n, osupgrade.MaxNodes)
		}
		if len(p.Status.Held) > 0 {
			var held []string
			for _, h := range p.Status.Held {
				held = append(held, h.Node+" ("+h.Reason+")")
			}
			why = "every node it selects is held: " + strings.Join(held, "; ")
		}
		return engine.Failed("no node to upgrade: %s", why), nil
	}
	var onTarget, toDo, upgrading, acked, unhealthy []string
	for i := range p.Status.Nodes {
		n := &p.Status.Nodes[i]
		a := s.agents[n.Name]
		switch {
		case a == nil || a.Status.Reporter != nwv1.ReporterAgent:
			return engine.Failed("%s: no agent reports it: no agent would upgrade it", n.Name), nil
		case s.silent(n.Name) != "":
			return engine.Failed("every node's agent must be renewing its heartbeat Lease before an upgrade starts: %s", s.silent(n.Name)), nil
		case a.Status.OS == nil || a.Status.OS.Kind != nwv1.HostOSKairos || a.Status.OS.Kairos == nil:
			return engine.Failed("%s: its agent does not report a Kairos host: an OSVersionPolicy upgrades Kairos nodes only", n.Name), nil
		case a.Status.OS.BootID == "":
			return engine.Failed("%s: its agent reports no boot ID: its reboot could not be proven", n.Name), nil
		}
		if why, err := osupgrade.RepairRefused(ctx, r.Client, p, a); err != nil || why != "" {
			return engine.Failed("%s", why), err
		}
		if msg := nodehealth.DRBDRed(a, n.Name, 0); msg != "" {
			if !p.Spec.Repairs.IsRollback() {
				return engine.Failed("%s; every resource must be connected and UpToDate before an upgrade starts", msg), nil
			}
			// A rollback's node is the one whose health did not come back: that is what it is
			// for; but never one that holds the only UpToDate copy of a resource.
			if only := onlyCopies(s, n.Name); only != "" {
				return engine.Failed("%s; a rollback reboots it, and %s", msg, only), nil
			}
			unhealthy = append(unhealthy, msg)
		}
		if a.Status.Storage != nil {
			n.DRBDResources = a.Status.Storage.Resources
		}
		if rp := p.Spec.Repairs; rp.IsRestage() && a.Status.OS.Kairos.Image != osupgrade.Repository(p.Spec.Image) {
			return engine.Failed("spec.repairs: %s booted %s after its fallback, not %s: a repair stages again only the image the node booted",
				n.Name, orNone(a.Status.OS.Kairos.Image), osupgrade.Repository(p.Spec.Image)), nil
		}
		if fb := fallbackFrom(a, p.Spec.Image); fb != nil {
			acked = append(acked, fmt.Sprintf("%s's fallback from it at boot %s", n.Name, fb.BootID))
		}
		if osupgrade.Runs(a.Status.OS.Kairos, p.Spec.Image) && !p.Spec.Repairs.KeepsImage() {
			onTarget = append(onTarget, n.Name)
		} else {
			toDo = append(toDo, fmt.Sprintf("%s (%s, %s)", n.Name, a.Status.OS.Kairos.Image, osupgrade.EntryOf(a.Status.OS.Kairos)))
			upgrading = append(upgrading, n.Name)
		}
	}
	var cluster corev1.NodeList
	if err := r.Client.List(ctx, &cluster); err != nil {
		return engine.Outcome{}, err
	}
	if msg, err := r.vms(s).Check(ctx, upgrading, len(cluster.Items)); err != nil || msg != "" {
		return engine.Failed("%s", msg), err
	}
	names := make([]string, len(p.Status.Nodes))
	for i, n := range p.Status.Nodes {
		names[i] = n.Name
	}
	satellites, checked := r.satellitesRed(ctx, names...)
	if satellites != "" {
		if !p.Spec.Repairs.IsRollback() {
			return engine.Failed("%s; every node's LINSTOR satellite must be ONLINE before an upgrade starts", satellites), nil
		}
		unhealthy = append(unhealthy, satellites)
	}
	msg := fmt.Sprintf("%s to %s, in this order: %s", "upgrading", osupgrade.Repository(p.Spec.Image), strings.Join(toDo, ", "))
	switch rp := p.Spec.Repairs; {
	case rp.IsAssessmentReset():
		msg = fmt.Sprintf("clearing the stale boot-assessment flags of %s, then rebooting it into %s from its active slot", strings.Join(toDo, ", "), osupgrade.Repository(p.Spec.Image))
	case rp.IsBootSelection():
		msg = fmt.Sprintf("booting %s once into its %s entry, %s; the boot after boots its default entry again", strings.Join(toDo, ", "), rp.Entry, osupgrade.Repository(p.Spec.Image))
	case len(toDo) == 0:
		msg = "every node already runs " + osupgrade.Repository(p.Spec.Image)
	case len(onTarget) > 0:
		msg += "; already on it: " + strings.Join(onTarget, ", ")
	}
	if len(p.Status.Held) > 0 {
		var held []string
		for _, h := range p.Status.Held {
			held = append(held, h.Node)
		}
		msg += "; held: " + strings.Join(held, ", ")
	}
	if len(acked) > 0 {
		msg += fmt.Sprintf("; tried again, as %s acknowledged: %s", p.Annotations[nwv1.AnnotationAcknowledgedBy], strings.Join(acked, ", "))
	}
	if len(unhealthy) > 0 {
		msg += "; rolled back while unhealthy, as a rollback is: " + strings.Join(unhealthy, "; ")
	}
	if !checked {
		// First: a long list of nodes may be cut from the end of the step's message.
		msg = linstorUnchecked + "; " + msg
	}
	return engine.Succeeded("%s", msg), nil
}

func orNone(image string) string {
	if image == "" {
		return "an image its kairos-release does not name"
	}
	return image
}

// onlyCopies says which DRBD resources of node have an UpToDate disk on no other node, by the
// other nodes' agents' own reports of their disks; "" when every one has such a copy.
func onlyCopies(s *scope, node string) string {
	a := s.agents[node]
	if a == nil || a.Status.Storage == nil {
		return ""
	}
	var only []string
	for _, res := range a.Status.Storage.ResourceStatuses {
		elsewhere := false
		for name, other := range s.agents {
			if name == node || other.Status.Storage == nil {
				continue
			}
			for _, o := range other.Status.Storage.ResourceStatuses {
				if o.Name == res.Name && len(o.Volumes) > 0 && !slices.ContainsFunc(o.Volumes, func(v nwv1.DRBDVolumeStatus) bool { return v.DiskState != "UpToDate" }) {
					elsewhere = true
				}
			}
		}
		if !elsewhere {
			only = append(only, res.Name)
		}
	}
	if len(only) == 0 {
		return ""
	}
	slices.Sort(only)
	return fmt.Sprintf("no other node's agent reports an UpToDate disk of %s: it may hold the only good copy", strings.Join(only, ", "))
}

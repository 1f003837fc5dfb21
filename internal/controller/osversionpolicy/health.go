package osversionpolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// soak waits for node k's health gates to be green after its boot (within spec.rebootTimeout of
// the part's start: a node that boots but whose storage never comes back fails here), then
// for them to stay green for spec.soak: a gate that turns red before then fails the step.
func (r *Reconciler) soak(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	rec.Phase = nwv1.NodeOSSoaking
	red, satelliteRed, err := r.health(ctx, s, rec.Name)
	if err != nil {
		return engine.Outcome{}, err
	}
	// The VMs ProtectVMs moved off the node must run where they went; RestoreVMs, after the
	// soak, brings them back and waits for them (and for those it stopped) to run on it.
	if down, err := r.vms(s).NotRunning(ctx, vmNode(s, k)); err != nil {
		return engine.Outcome{}, err
	} else if len(down) > 0 {
		red = strings.TrimPrefix(red+"; the VMs moved off it do not all run: "+strings.Join(down, ", "), "; ")
	}
	length := soak(s.p)
	if rec.HealthyAt == nil {
		if red != "" {
			limit := rebootTimeout(s.p)
			if passed, _ := s.Deadline(limit); passed {
				msg := fmt.Sprintf("%s booted the image but its health was not green within %s: %s", s.describe(k), limit, red)
				r.event(s, corev1.EventTypeWarning, ReasonSoakFailed, msg)
				return engine.Failed("%s", msg), nil
			}
			_, left := s.Deadline(limit)
			wait := left + time.Second
			if satelliteRed {
				// No watch tells of a satellite's return: LINSTOR is read again.
				wait = min(wait, satellitePoll)
			}
			return engine.Waiting(wait, "waiting for %s's health to be green before its soak: %s", rec.Name, red), nil
		}
		rec.HealthyAt = ptr.To(s.Now)
		return engine.Waiting(length, "%s is healthy; soaking for %s, until %s", rec.Name, length, s.Now.Add(length).UTC().Format(time.RFC3339)), nil
	}
	if red != "" {
		msg := fmt.Sprintf("%s's soak failed %s after it began: %s", s.describe(k), s.Now.Sub(rec.HealthyAt.Time).Round(time.Second), red)
		r.event(s, corev1.EventTypeWarning, ReasonSoakFailed, msg)
		return engine.Failed("%s", msg), nil
	}
	if left := rec.HealthyAt.Add(length).Sub(s.Now.Time); left > 0 {
		return engine.Waiting(left, "%s soaking: green since %s, %s left", rec.Name, rec.HealthyAt.UTC().Format(time.RFC3339), left.Round(time.Second)), nil
	}
	return engine.Succeeded("%s stayed healthy for %s after booting the image", rec.Name, length), nil
}

// health says which of node's health gates is red, empty when all are green, and whether its
// LINSTOR satellite is among them:
//
//   - its Node Ready;
//   - its agent reporting: its heartbeat Lease renewed, its report not stale;
//   - every DRBD resource of every node of the policy connected and UpToDate, so on both
//     sides of each of the node's connections, with quorum (no volume reporting quorum:no),
//     and each node reporting as many resources as it had at the Preflight (a node whose DRBD
//     did not come back reports none);
//   - with a LINSTOR gate, its LINSTOR satellite ONLINE, LINSTOR knowing it and answering
//     (satellitesRed). Without one, this gate is not checked (the Preflight says so).
//
// The satellite is read at every reconcile of the soak: the agents' reports and heartbeat
// Lease renewals (every node's, every 10 s by default) wake it.
func (r *Reconciler) health(ctx context.Context, s *scope, node string) (string, bool, error) {
	var red []string
	var n corev1.Node
	switch err := r.Client.Get(ctx, clientKey(node), &n); {
	case apierrors.IsNotFound(err):
		red = append(red, fmt.Sprintf("there is no Node %s", node))
	case err != nil:
		return "", false, fmt.Errorf("reading Node %s: %w", node, err)
	case !ready(&n):
		red = append(red, fmt.Sprintf("Node %s is not Ready", node))
	}
	a := s.agents[node]
	switch {
	case s.silent(node) != "":
		red = append(red, s.silent(node))
	case a == nil:
		red = append(red, node+" has no NodewrightAgentStatus")
	case a.Status.Heartbeat.Stale:
		red = append(red, node+"'s report is stale")
	}
	for _, other := range s.p.Status.Nodes {
		if msg := drbdRed(s.agents[other.Name], other.Name, other.DRBDResources); msg != "" {
			red = append(red, msg)
		}
	}
	satellite, _ := r.satellitesRed(ctx, node)
	if satellite != "" {
		red = append(red, satellite)
	}
	return strings.Join(red, "; "), satellite != "", nil
}

// drbdRed says what of node's DRBD is not connected and UpToDate, or has lost quorum, as its
// agent reports it, or that it reports fewer than the resources it had (recorded at the
// Preflight): none at all when DRBD did not come back after a boot (no module, no state read).
func drbdRed(a *nwv1.NodewrightAgentStatus, node string, had int32) string {
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

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

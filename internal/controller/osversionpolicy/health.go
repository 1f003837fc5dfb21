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
	"github.com/spectrocloud/nodewright/internal/nodehealth"
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
	case !nodehealth.Ready(&n):
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
		if msg := nodehealth.DRBDRed(s.agents[other.Name], other.Name, other.DRBDResources); msg != "" {
			red = append(red, msg)
		}
	}
	satellite, _ := r.satellitesRed(ctx, node)
	if satellite != "" {
		red = append(red, satellite)
	}
	return strings.Join(red, "; "), satellite != "", nil
}

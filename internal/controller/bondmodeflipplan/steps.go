package bondmodeflipplan

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// reasonRestoreFailed is the agent's reason for a change it could not undo (internal/agent).
const reasonRestoreFailed = "RestoreFailed"

// Bounds of the steps whose length the spec does not give.
const (
	// drbdStepTimeout bounds a pause or a resume of the resynchronisation towards a node.
	drbdStepTimeout = 10 * time.Minute
	// drbdSettleTimeout bounds the Preflight's wait for every DRBD resource connected and
	// UpToDate: a connection lost for a moment comes back and resynchronises what it missed
	// within it; one that does not is a DRBD to repair before a flip.
	drbdSettleTimeout = 5 * time.Minute
	// defaultSyncTimeout bounds the wait for DRBD UpToDate again when no EdgeProfile gives
	// thresholds.drbdSyncTimeout (the profile's default).
	defaultSyncTimeout = 6 * time.Hour
	// opMargin is what a SetBondMode's deadline leaves beyond its checkpoint: the agent refuses
	// one with less than 30 s.
	opMargin = 45 * time.Second
	// commitGrace is how long after a checkpoint's expiry the operator waits for the agent to
	// say how it ended (it reports its own rollback within seconds of reaching the API server).
	commitGrace = 30 * time.Second
)

// nodeStep is the action of a node's step, forward or rollback, which carries out its parts
// in order (runParts).
func (r *Reconciler) nodeStep(ctx context.Context, s *scope) (engine.Outcome, error) {
	step := s.State.Step
	k, rollback, ok := bondflip.ParseStep(step)
	if !ok || k > len(s.order) {
		return engine.Failed("%s is no step of this flip", step), nil
	}
	if k > len(s.f.Status.Nodes) || s.f.Status.Nodes[k-1].Name != s.node(k) {
		return engine.Failed("%s: status.nodes does not record node %d as %s", step, k, s.node(k)), nil
	}
	rec := &s.f.Status.Nodes[k-1]
	parts := bondflip.NodeParts
	if rollback {
		parts = bondflip.UndoParts(bondflip.FailedPart(rec))
		bondflip.StopForwardOf(&s.f.Status.WorkflowStatus, k, rec, s.Now)
		s.leaveOut = s.givenUp(s.order...)
	}
	out, err := bondflip.RunParts(rec, parts, s.Now, func(part string) (engine.Outcome, error) {
		s.part, s.partStarted = part, bondflip.Part(rec, part).StartedAt.Time
		return r.part(ctx, s, k, part)
	})
	// A part that waits on agents looks again when the first of their Leases stops holding.
	if wake := s.wake(rollback); err == nil && out.Event == "" && wake > 0 && (out.Wait == 0 || wake < out.Wait) {
		out.Wait = wake
	}
	return out, err
}

// part runs the action of node k's part.
func (r *Reconciler) part(ctx context.Context, s *scope, k int, part string) (engine.Outcome, error) {
	switch part {
	case bondflip.Cordon, bondflip.RollbackCordon:
		return r.cordon(ctx, s, k)
	case bondflip.Uncordon, bondflip.RollbackUncordon:
		return r.uncordon(ctx, s, k)
	case bondflip.ProtectVMs, bondflip.RollbackProtectVMs:
		return r.protectVMs(ctx, s, k)
	case bondflip.PauseResync:
		return r.pauseResync(ctx, s, k)
	case bondflip.SetBondMode:
		return r.setBondMode(ctx, s, k)
	case bondflip.Confirm:
		return r.confirm(ctx, s, k)
	case bondflip.ResumeResync:
		return r.resumeResync(ctx, s, k, "resume", "pause")
	case bondflip.RestoreVMs, bondflip.RollbackVMs:
		return r.restoreVMs(ctx, s, k)
	case bondflip.RollbackBondMode:
		return r.rollbackBondMode(ctx, s, k)
	}
	return engine.Failed("%s is no part of a flip's step", part), nil
}

// Names of the operations of node k's steps.
func setModeName(k int) string   { return "n" + strconv.Itoa(k) + "-setmode" }
func commitName(k int) string    { return "n" + strconv.Itoa(k) + "-commit" }
func rbSetModeName(k int) string { return "n" + strconv.Itoa(k) + "-rb-setmode" }
func rbCommitName(k int) string  { return "n" + strconv.Itoa(k) + "-rb-commit" }
func pausePrefix(k int) string   { return "n" + strconv.Itoa(k) + "-pause" }

// pauseResync asks each peer of node k to pause its resynchronisation towards it.
func (r *Reconciler) pauseResync(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	node := s.node(k)
	pairs := s.pairsTowards(node)
	if len(pairs) == 0 {
		return engine.Skipped("no peer reports a DRBD resource shared with %s", node), nil
	}
	if silent := s.silent(peersOf(pairs)...); len(silent) > 0 {
		return engine.Failed("%s: its peers cannot pause their resynchronisation towards it: %s", s.describe(k), strings.Join(silent, "; ")), nil
	}
	done, failed, err := r.syncOps(ctx, s, k, pausePrefix(k), pairs, false)
	switch {
	case err != nil:
		return engine.Outcome{}, err
	case failed != "":
		return engine.Failed("%s: %s", s.describe(k), failed), nil
	case done:
		return engine.Succeeded("resynchronisation towards %s paused on its peers (%d resources)", node, len(pairs)), nil
	}
	if passed, _ := s.Deadline(drbdStepTimeout); passed {
		return engine.Failed("%s: the peers did not pause their resynchronisation within %s", s.describe(k), drbdStepTimeout), nil
	}
	return engine.Waiting(0, "waiting for %s's peers to pause their resynchronisation towards it", node), nil
}

// setModeSpec is the SetBondMode that changes node k to mode under a checkpoint, probing
// every peer's bond address (up to bondflip.MaxProbeAddresses, every peer at least once), the
// API server, and DRBD's connections when the node has any.
func (s *scope) setModeSpec(k int, bond string, mode nwv1.BondMode) nwv1.NodeOperationSpec {
	node := s.node(k)
	var addresses [][]string
	for _, other := range s.order {
		if a := s.agents[other]; other != node && a != nil && a.Status.Network.Bond != nil && !s.leaveOut[other] {
			addresses = append(addresses, a.Status.Network.Bond.Addresses)
		}
	}
	peers := bondflip.ProbeAddresses(addresses)
	drbd := false
	if a := s.agents[node]; a != nil && a.Status.Storage != nil && a.Status.Storage.Resources > 0 {
		// A rollback that leaves a silent peer out does not make the change back depend on
		// reaching it: not its address, nor DRBD's connections, which are probed all or none
		// (the live peers' view of the node is still confirmed, connected).
		drbd = !s.sharesWithLeftOut(a)
	}
	return nwv1.NodeOperationSpec{Type: nwv1.OperationSetBondMode, SetBondMode: &nwv1.SetBondModeOperation{
		Bond: bond, Mode: mode, CheckpointTimeout: s.f.Spec.ConnectivityTimeout,
		Probes: nwv1.BondProbes{Peers: peers, APIServer: ptr.To(true), DRBDConnections: ptr.To(drbd)}}}
}

// setBondMode asks node k's agent to change its bond to the target mode under a checkpoint of
// connectivityTimeout, and waits until the agent has changed and probed it (the change then
// waits for the Confirm's commit), or has found it already in place.
func (r *Reconciler) setBondMode(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	bond, _, err := r.bond(ctx, s.f)
	if err != nil {
		return engine.Outcome{}, err
	}
	spec := s.setModeSpec(k, bond, s.f.Spec.TargetMode)
	spec.SetBondMode.CheckpointTimeout.Duration = connectivityTimeout(s.f)
	op, err := r.ensureOp(ctx, s, opName(s.f, setModeName(k)), s.node(k), s.label(k), connectivityTimeout(s.f)+opMargin, spec)
	if err != nil {
		return engine.Outcome{}, err
	}
	return changed(s, k, op, connectivityTimeout(s.f)+opMargin)
}

// changed is the outcome of a step waiting for op, a SetBondMode, to be in place: armed (waiting
// for its commit) or Succeeded (already in place).
func changed(s *scope, k int, op *nwv1.NodeOperation, limit time.Duration) (engine.Outcome, error) {
	node := s.node(k)
	mode := op.Spec.SetBondMode.Mode
	switch end, ok := op.Ended(); {
	case end && ok:
		return engine.Succeeded("%s already ran %s: nothing to commit", node, mode), nil
	case end:
		return engine.Failed("%s: its agent did not keep %s (%s)", s.describe(k), mode, op.Outcome()), nil
	case armed(op):
		return engine.Succeeded("%s runs %s and its probes passed; its checkpoint expires at %s", node, mode,
			op.Status.Result.CheckpointExpires.UTC().Format(time.RFC3339)), nil
	}
	if passed, _ := s.Deadline(limit + commitGrace); passed {
		return engine.Failed("%s: its agent did not take the change to %s within %s (operation %s %s)", s.describe(k), mode, limit, op.Name, op.Status.Phase), nil
	}
	return engine.Waiting(0, "waiting for %s's agent to change its bond to %s and probe it (operation %s %s)", node, mode, op.Name, op.PhaseText()), nil
}

// confirm checks node k from the operator's side, then commits its change: its Lease still
// renewed and its peers seeing their DRBD connections to it Connected, in reports they wrote
// after reading the host at least once since the change.
// A node that cannot be confirmed before its checkpoint expires is not committed: its agent
// restores it, and the step fails.
func (r *Reconciler) confirm(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	return r.confirmOf(ctx, s, k, setModeName(k), commitName(k), pausePrefix(k))
}

// confirmOf confirms node k's change op setMode and commits it as commit; paused names the
// pause operations of the step, whose pairs must each be seen Connected.
func (r *Reconciler) confirmOf(ctx context.Context, s *scope, k int, setMode, commit, paused string) (engine.Outcome, error) {
	node := s.node(k)
	op := s.ops[opName(s.f, setMode)]
	if op == nil {
		return engine.Failed("%s: its SetBondMode %s is gone", s.describe(k), opName(s.f, setMode)), nil
	}
	mode := op.Spec.SetBondMode.Mode
	if end, ok := op.Ended(); end {
		if ok {
			return engine.Succeeded("%s runs %s, committed", node, mode), nil
		}
		return engine.Failed("%s: its agent did not keep %s (%s)", s.describe(k), mode, op.Outcome()), nil
	}
	if c := s.ops[opName(s.f, commit)]; c != nil {
		if end, ok := c.Ended(); end && !ok {
			return engine.Failed("%s: the commit of %s was refused (%s)", s.describe(k), mode, c.Outcome()), nil
		}
		return r.waitCheckpoint(s, k, op, "waiting for %s's agent to keep %s (commit %s %s)", node, mode, c.Name, c.PhaseText())
	}
	// The pairs to confirm: those the peers report, and those the step paused (a peer whose
	// report no longer shows its resource, or the node, must show it again, Connected).
	pairs := s.confirmPairs(node, paused)
	// A silent peer will never report the node after its change (and its last report, from
	// before it, does not count): the change cannot be confirmed. A rollback's change back is
	// confirmed without it (its pairs are left out).
	if silent := s.silent(peersOf(pairs)...); len(silent) > 0 {
		return engine.Failed("%s: not confirmed, its peers cannot report their DRBD connections to it: %s; its agent restores its previous mode at its checkpoint's expiry",
			s.describe(k), strings.Join(silent, "; ")), nil
	}
	// The peers' reports count only once they have read the host after the change: each peer is
	// asked for a report (the op's UID as its request), which its agent answers at once with a
	// read made after it. A report from before the change does not count, however recent: the
	// step waits for the answers until the checkpoint expires (a peer whose agent died is
	// silent once its Lease lapses, above). A node that shares no DRBD resource has nothing for
	// them to report.
	if peers := peersOf(pairs); len(peers) > 0 {
		unanswered, err := r.askReports(ctx, s, peers, string(op.UID))
		if err != nil {
			return engine.Outcome{}, err
		}
		if len(unanswered) > 0 {
			return r.waitCheckpoint(s, k, op, "confirming %s: waiting for %s to report their DRBD connections read after the change (asked)",
				node, strings.Join(unanswered, ", "))
		}
	}
	missing := s.connected(node, pairs)
	if missing == "" {
		l, err := r.lease(ctx, node)
		if err != nil {
			return engine.Outcome{}, err
		}
		switch {
		case l == nil || l.Spec.RenewTime == nil:
			missing = node + " has no heartbeat Lease"
		case !renewing(l, s.Now.Time):
			missing = fmt.Sprintf("%s's Lease has not been renewed since %s", node, l.Spec.RenewTime.UTC().Format(time.RFC3339))
		}
	}
	if missing != "" {
		return r.waitCheckpoint(s, k, op, "confirming %s: %s", node, missing)
	}
	bond := op.Spec.SetBondMode.Bond
	c, err := r.ensureOp(ctx, s, opName(s.f, commit), node, s.label(k), commitGrace+time.Minute, nwv1.NodeOperationSpec{
		Type: nwv1.OperationCommitCheckpoint, CommitCheckpoint: &nwv1.CommitCheckpointOperation{Bond: bond, Operation: op.Name}})
	if err != nil {
		return engine.Outcome{}, err
	}
	return r.waitCheckpoint(s, k, op, "%s confirmed: its Lease renewed and its peers connected; committing (%s %s)", node, c.Name, c.PhaseText())
}

// askReports asks each of peers' agents for a report read after this moment, under request
// (nwv1.AnnotationReportRequest on its NodewrightAgentStatus, set once), and returns the peers
// whose reports do not answer it yet.
func (r *Reconciler) askReports(ctx context.Context, s *scope, peers []string, request string) ([]string, error) {
	var unanswered []string
	for _, peer := range peers {
		a := s.agents[peer]
		if a == nil || a.Status.ReportRequest == request {
			continue
		}
		unanswered = append(unanswered, peer)
		if a.Annotations[nwv1.AnnotationReportRequest] == request {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nwv1.AnnotationReportRequest: request}}})
		if err != nil {
			return nil, err
		}
		if err := r.Client.Patch(ctx, a.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("asking %s's agent for a report: %w", peer, err)
		}
	}
	return unanswered, nil
}

// renewing reports whether the Lease is still renewed: its last renewal within its duration.
// That the node reaches the API server after its change the agent has already shown, by
// writing the change's probed result through it.
func renewing(l *coordinationv1.Lease, now time.Time) bool {
	duration := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 40)) * time.Second
	return now.Before(l.Spec.RenewTime.Add(duration))
}

// waitCheckpoint waits, saying why, until op's checkpoint expires (and a grace for the agent's
// report of its rollback); then the step fails: the agent restores the node by itself.
func (r *Reconciler) waitCheckpoint(s *scope, k int, op *nwv1.NodeOperation, format string, args ...any) (engine.Outcome, error) {
	msg := fmt.Sprintf(format, args...)
	expires := s.StepStarted().Add(connectivityTimeout(s.f))
	if res := op.Status.Result; res != nil && res.CheckpointExpires != nil {
		expires = res.CheckpointExpires.Time
	}
	if s.Now.After(expires.Add(commitGrace)) {
		return engine.Failed("%s: not confirmed before its checkpoint expired at %s (%s); its agent restores its previous mode",
			s.describe(k), expires.UTC().Format(time.RFC3339), msg), nil
	}
	return engine.Waiting(time.Until(expires.Add(commitGrace))+time.Second, "%s", msg), nil
}

// resumeResync asks the peers of node k to resume the resynchronisation the flip paused
// towards it (the pause operations named pause), under names made of resume, and waits until
// the node's DRBD is UpToDate again.
func (r *Reconciler) resumeResync(ctx context.Context, s *scope, k int, resume string, pauses ...string) (engine.Outcome, error) {
	node := s.node(k)
	prefixes := make([]string, len(pauses))
	for i, p := range pauses {
		prefixes[i] = "n" + strconv.Itoa(k) + "-" + p
	}
	pairs := s.pausedPairs(node, prefixes...)
	if silent := s.silent(append(peersOf(pairs), node)...); len(silent) > 0 {
		return engine.Failed("%s: the resynchronisation towards it cannot be resumed and seen UpToDate: %s", s.describe(k), strings.Join(silent, "; ")), nil
	}
	done, failed, err := r.syncOps(ctx, s, k, "n"+strconv.Itoa(k)+"-"+resume, pairs, true)
	switch {
	case err != nil:
		return engine.Outcome{}, err
	case failed != "":
		return engine.Failed("%s: %s", s.describe(k), failed), nil
	case !done:
		if passed, _ := s.Deadline(drbdStepTimeout); passed {
			return engine.Failed("%s: the peers did not resume their resynchronisation within %s", s.describe(k), drbdStepTimeout), nil
		}
		return engine.Waiting(0, "waiting for %s's peers to resume their resynchronisation towards it", node), nil
	}
	if s.leaveOut[node] {
		return engine.Succeeded("resynchronisation towards %s resumed on %d resources; its DRBD UpToDate not waited for: %s",
			node, len(pairs), strings.Join(s.silence([]string{node}, true), "; ")), nil
	}
	if missing := s.upToDate(node); missing != "" {
		limit := r.syncTimeout(ctx)
		if passed, _ := s.Deadline(limit); passed {
			return engine.Failed("%s: DRBD not UpToDate within %s: %s", s.describe(k), limit, missing), nil
		}
		return engine.Waiting(0, "waiting for DRBD UpToDate: %s", missing), nil
	}
	if len(pairs) == 0 {
		return engine.Succeeded("%s's DRBD is UpToDate (nothing was paused)", node), nil
	}
	return engine.Succeeded("resynchronisation towards %s resumed (%d resources); its DRBD is UpToDate", node, len(pairs)), nil
}

// syncTimeout is the site's drbdSyncTimeout.
func (r *Reconciler) syncTimeout(ctx context.Context) time.Duration {
	if p, err := engine.ProfileInForce(ctx, r.Client); err == nil && p != nil && p.Spec.Thresholds.DRBDSyncTimeout.Duration > 0 {
		return p.Spec.Thresholds.DRBDSyncTimeout.Duration
	}
	return defaultSyncTimeout
}

// rollbackBondMode brings node k back to the mode it had before the flip, and ends with the
// resynchronisation towards it resumed and its DRBD UpToDate. What is left to undo depends on
// how the node's forward change ended, as its operation says:
//
//   - none asked for, or the agent never took it and its deadline passed (the agent refuses it
//     after that): the node did not change;
//   - rolled back, or refused before any change: the agent restored it, or it never changed;
//   - still Running (waiting for a commit that will not come): the agent restores it at its
//     checkpoint's expiry, and says so when it reaches the API server; an agent that has not
//     said so by then leaves the node in doubt, and the flip Failed;
//   - kept (committed): it is undone as it was made, the resynchronisation towards the node
//     paused, the previous mode set under a checkpoint of its own, confirmed and committed.
func (r *Reconciler) rollbackBondMode(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	node := s.node(k)
	previous := s.f.Status.Nodes[k-1].PreviousMode
	if previous == "" {
		return engine.Failed("%s: the mode it had before the flip was not recorded; it reports %s", s.describe(k), modeOf(s.agents, node)), nil
	}
	undo := s.hasOp(rbSetModeName(k))
	if fwd := s.ops[opName(s.f, setModeName(k))]; fwd != nil && !undo {
		switch end, ok := fwd.Ended(); {
		case end && ok:
			undo = true
		case end && fwd.Status.Error != nil && fwd.Status.Error.Reason == reasonRestoreFailed:
			return engine.Failed("%s cannot be brought back to %s: its agent could not restore it (%s); it reports %s",
				s.describe(k), previous, fwd.Outcome(), modeOf(s.agents, node)), nil
		case end:
			// Restored by its agent, or never changed.
		case fwd.Status.Phase == "" || fwd.Status.Phase == nwv1.OperationPending:
			if left := fwd.Spec.Deadline.Add(commitGrace).Sub(s.Now.Time); left > 0 {
				return engine.Waiting(left, "waiting for %s's agent to take or refuse %s before its deadline %s (it would still run it before then)",
					node, fwd.Name, fwd.Spec.Deadline.UTC().Format(time.RFC3339)), nil
			}
		default:
			out, err := r.waitCheckpoint(s, k, fwd, "waiting for %s's agent to restore %s by its checkpoint (operation %s %s)", node, previous, fwd.Name, fwd.PhaseText())
			if out.Event == workflow.StepFailed {
				out.Message = fmt.Sprintf("%s has not said how its change ended: its checkpoint expired, so its agent restores %s by itself unless it is down; it last reported %s",
					s.describe(k), previous, modeOf(s.agents, node))
			}
			return out, err
		}
	}
	if undo {
		if out, err, done := r.undoChange(ctx, s, k, previous); !done {
			return out, err
		}
	}
	out, err := r.resumeResync(ctx, s, k, "rb-resume", "pause", "rb-pause")
	if err != nil || out.Event != workflow.StepSucceeded {
		return out, err
	}
	if left := s.leftOut(k); left != "" {
		return engine.Succeeded("%s runs %s again; %s; %s", node, previous, out.Message, left), nil
	}
	return engine.Succeeded("%s runs %s again; %s", node, previous, out.Message), nil
}

func (s *scope) hasOp(suffix string) bool { return s.ops[opName(s.f, suffix)] != nil }

// undoChange sets node k back to previous, as a forward change is made; done once the change
// back is committed (or found in place).
func (r *Reconciler) undoChange(ctx context.Context, s *scope, k int, previous nwv1.BondMode) (engine.Outcome, error, bool) {
	node := s.node(k)
	if s.leaveOut[node] {
		if op := s.ops[opName(s.f, rbSetModeName(k))]; op == nil || !ended(op) {
			return engine.Failed("%s cannot be brought back to %s: %s; it reports %s", s.describe(k), previous,
				strings.Join(s.silence([]string{node}, true), "; "), modeOf(s.agents, node)), nil, false
		}
	}
	pairs := s.pairsTowards(node)
	if len(pairs) > 0 {
		done, failed, err := r.syncOps(ctx, s, k, "n"+strconv.Itoa(k)+"-rb-pause", pairs, false)
		switch {
		case err != nil:
			return engine.Outcome{}, err, false
		case failed != "":
			return engine.Failed("%s: %s", s.describe(k), failed), nil, false
		case !done:
			return engine.Waiting(0, "waiting for %s's peers to pause their resynchronisation towards it", node), nil, false
		}
	}
	bond := ""
	if op := s.ops[opName(s.f, setModeName(k))]; op != nil {
		bond = op.Spec.SetBondMode.Bond
	}
	if bond == "" {
		var err error
		if bond, _, err = r.bond(ctx, s.f); err != nil {
			return engine.Outcome{}, err, false
		}
	}
	spec := s.setModeSpec(k, bond, previous)
	spec.SetBondMode.CheckpointTimeout.Duration = connectivityTimeout(s.f)
	op, err := r.ensureOp(ctx, s, opName(s.f, rbSetModeName(k)), node, s.label(k), connectivityTimeout(s.f)+opMargin, spec)
	if err != nil {
		return engine.Outcome{}, err, false
	}
	if end, ok := op.Ended(); end && !ok {
		return engine.Failed("%s cannot be brought back to %s: its agent did not keep it (%s); it reports %s", s.describe(k), previous, op.Outcome(), modeOf(s.agents, node)), nil, false
	} else if end {
		return engine.Outcome{}, nil, true
	}
	if !armed(op) {
		if passed, _ := s.Deadline(connectivityTimeout(s.f) + opMargin + commitGrace); passed {
			return engine.Failed("%s cannot be brought back to %s: its agent did not take the change (operation %s %s); it reports %s",
				s.describe(k), previous, op.Name, op.PhaseText(), modeOf(s.agents, node)), nil, false
		}
		return engine.Waiting(0, "waiting for %s's agent to set %s back and probe it (operation %s %s)", node, previous, op.Name, op.PhaseText()), nil, false
	}
	out, err := r.confirmOf(ctx, s, k, rbSetModeName(k), rbCommitName(k), "n"+strconv.Itoa(k)+"-rb-pause")
	if err != nil || out.Event != workflow.StepSucceeded {
		if out.Event == workflow.StepFailed {
			out.Message = fmt.Sprintf("cannot be brought back: %s; it reports %s", out.Message, modeOf(s.agents, node))
		}
		return out, err, false
	}
	return engine.Outcome{}, nil, true
}

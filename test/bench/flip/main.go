// Command flip measures a BondModeFlipPlan on three nodes (make bench): the operator's flip
// controller in this process against a real API server, each node's agent a real process
// built for the local site, in its own network namespace of the played storage network
// (test/site/netsite). Every time is when this process saw the change, through watches of the
// flip and its NodeOperations.
//
// The agents and the operator run at their default intervals, as installed: the agents read
// their host every 10 s (and at once on a DRBD event or a report request), their heartbeat
// every 10 s.
//
//   - Per node, the orchestration's overhead: from the node's first step started to its last
//     ended, less the agent's own time on its change (from its SetBondMode seen Running to seen
//     changed and probed). It includes the DRBD pause and resume on the peers and the Confirm's
//     wait for the peers' reports after the change (asked for, and answered). Target: 1 s per
//     node (stretch: 0.5 s).
//   - A broken port: the third node's port never carries the new mode. From its change seen
//     Running to the flip seen RolledBack, every node back on its old mode. Target:
//     connectivityTimeout + 3 s per node flipped before it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/test/bench/agentlab"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// timeout is each change's checkpoint, the least a flip allows.
const timeout = 10 * time.Second

// reportInterval is how often the agents read their host: their default.
const reportInterval = agent.ReportInterval

var nodes = []string{"bench-flip-a", "bench-flip-b", "bench-flip-c"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-flip: %v\n", err)
		os.Exit(1)
	}
	if benchproc.Missed {
		os.Exit(1)
	}
}

func run() error {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	log.SetLogger(logr.Discard())
	lab, err := agentlab.Start("bench-flip-")
	if err != nil {
		return err
	}
	defer lab.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const agentNS = agentlab.AgentNamespace
	n, err := lab.Site(ctx, nwv1.BondModeActiveBackup, nodes, "pvc-bench-one", "pvc-bench-two")
	if err != nil {
		return err
	}
	defer n.Close()
	agents, cleanup, err := n.ReadyForFlips(ctx, nodes, nodes[0], reportInterval.String(), 2)
	if err != nil {
		return err
	}
	defer cleanup()
	for _, p := range agents {
		defer p.Stop()
	}
	watcher, err := lab.StartFlips(ctx, "bench-flip")
	if err != nil {
		return err
	}

	fmt.Printf("A BondModeFlipPlan of three nodes on the played network, two DRBD resources (connectivityTimeout %s, agents reporting every %s):\n", timeout, reportInterval)
	// The flip: every node to 802.3ad.
	seen, err := flip(ctx, watcher, agentNS, "bench-flip-there", nwv1.BondMode8023AD, timeout, nwv1.WorkflowSucceeded)
	if err != nil {
		return err
	}
	worst := time.Duration(0)
	for k := 1; k <= len(nodes); k++ {
		total := seen.at(stepDone(k, bondflip.RestoreVMs)).Sub(seen.at(stepStarted(k, bondflip.Cordon)))
		agent := seen.at(opArmed(k)).Sub(seen.at(opRunning(k)))
		overhead := total - agent
		worst = max(worst, overhead)
		fmt.Printf("  node %d: %.2f s from its first step to its last, %.2f s the agent's change and probes, %.2f s the orchestration\n",
			k, total.Seconds(), agent.Seconds(), overhead.Seconds())
	}
	benchproc.Verdict(fmt.Sprintf("per-node orchestration overhead, the worst of three: %.2f s (%.2f× the target, 1 s; %.2f× the stretch, 0.5 s)",
		worst.Seconds(), worst.Seconds()/1, worst.Seconds()/0.5), worst <= time.Second)

	// The broken port: back to active-backup, the third node's port never carries it; at the
	// shortest timeout, then at the default one.
	n.NeverCarry(nodes[0], nwv1.BondModeActiveBackup)
	for i, t := range []time.Duration{timeout, defaultTimeout} {
		if err := broken(ctx, watcher, n, fmt.Sprintf("bench-flip-broken-%d", i+1), t); err != nil {
			return err
		}
	}
	return nil
}

// defaultTimeout is a flip's default connectivityTimeout.
const defaultTimeout = 60 * time.Second

// broken flips back to active-backup, which the third node's port never carries, at
// connectivityTimeout t, and measures the time from the broken change to every node back.
func broken(ctx context.Context, watcher client.WithWatch, n *agentlab.Site, name string, t time.Duration) error {
	fmt.Printf("A broken port at connectivityTimeout %s:\n", t)
	seen, err := flip(ctx, watcher, agentlab.AgentNamespace, name, nwv1.BondModeActiveBackup, t, nwv1.WorkflowRolledBack)
	if err != nil {
		return err
	}
	for _, node := range nodes {
		raw, err := os.ReadFile(n.Node(node).Bond.ModeFile(netsite.Bond))
		if err != nil {
			return err
		}
		if mode := strings.TrimSpace(string(raw)); mode != string(nwv1.BondMode8023AD) {
			return fmt.Errorf("after the rollback %s runs %s, not 802.3ad", node, mode)
		}
	}
	back := seen.at(phase(nwv1.WorkflowRolledBack)).Sub(seen.at(opRunning(3)))
	restored := seen.at(opEnded(3)).Sub(seen.at(opRunning(3)))
	target := t + 2*3*time.Second
	fmt.Printf("  the broken node restored by its agent %.2f s after its change began (its probes try for half the timeout)\n", restored.Seconds())
	benchproc.Verdict(fmt.Sprintf("from the broken port to every node back: %.2f s (%.2f× the target, %s + 3 s for each of 2 nodes flipped before it)",
		back.Seconds(), back.Seconds()/target.Seconds(), t), back <= target)
	return nil
}

// Events this process notes the time of, as it sees them.
func stepStarted(k int, part string) string {
	return "started " + bondflip.PartName(k, part)
}
func stepDone(k int, part string) string { return "done " + bondflip.PartName(k, part) }
func opRunning(k int) string             { return fmt.Sprintf("op n%d Running", k) }
func opArmed(k int) string               { return fmt.Sprintf("op n%d armed", k) }
func opEnded(k int) string               { return fmt.Sprintf("op n%d ended", k) }
func phase(p nwv1.WorkflowPhase) string  { return "phase " + string(p) }

// timeline is when each event was first seen.
type timeline struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (t *timeline) note(event string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[event]; !ok {
		t.seen[event] = now
	}
}

func (t *timeline) at(event string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[event]
}

// flip creates a flip to mode, follows it and its operations until it ends in want, and
// returns when it saw what.
func flip(ctx context.Context, c client.WithWatch, ns, name string, mode nwv1.BondMode, timeout time.Duration, want nwv1.WorkflowPhase) (*timeline, error) {
	seen := &timeline{seen: map[string]time.Time{}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	flips, err := c.Watch(ctx, &nwv1.BondModeFlipPlanList{})
	if err != nil {
		return nil, err
	}
	defer flips.Stop()
	ops, err := c.Watch(ctx, &nwv1.NodeOperationList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	defer ops.Stop()
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.BondModeFlipPlanSpec{
		TargetMode: mode, VMProtection: nwv1.VMProtectionNone, NodeOrder: []string{nodes[1], nodes[2], nodes[0]},
		ConnectivityTimeout: metav1.Duration{Duration: timeout}}}
	if err := c.Create(ctx, f); err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not end %s in time", name, want)
		case e := <-ops.ResultChan():
			if op, ok := e.Object.(*nwv1.NodeOperation); ok && e.Type != watch.Deleted && op.Labels[bondflip.LabelName] == name {
				noteOp(seen, name, op, time.Now())
			}
		case e := <-flips.ResultChan():
			got, ok := e.Object.(*nwv1.BondModeFlipPlan)
			if !ok || got.Name != name {
				continue
			}
			now := time.Now()
			for _, st := range got.Status.Steps {
				if st.StartedAt != nil {
					seen.note("started "+st.Name, now)
				}
				if st.State == nwv1.StepSucceeded || st.State == nwv1.StepSkipped {
					seen.note("done "+st.Name, now)
				}
			}
			// Each node's parts, as its record in status.nodes says.
			for _, n := range got.Status.Nodes {
				for _, p := range n.Parts {
					name := bondflip.PartName(int(n.Position), p.Name)
					if p.StartedAt != nil {
						seen.note("started "+name, now)
					}
					if p.State == nwv1.StepSucceeded || p.State == nwv1.StepSkipped {
						seen.note("done "+name, now)
					}
				}
			}
			if got.Status.Phase.Finished() {
				seen.note(phase(got.Status.Phase), now)
				if got.Status.Phase != want {
					return nil, fmt.Errorf("%s ended %s, not %s: %+v", name, got.Status.Phase, want, got.Status.Conditions)
				}
				return seen, nil
			}
		}
	}
}

// noteOp notes what a forward SetBondMode of the flip shows.
func noteOp(seen *timeline, flip string, op *nwv1.NodeOperation, now time.Time) {
	for k := 1; k <= len(nodes); k++ {
		if op.Name != fmt.Sprintf("%s-n%d-setmode", flip, k) {
			continue
		}
		switch {
		case op.Status.Phase == nwv1.OperationRunning && op.Status.Result != nil && op.Status.Result.CheckpointExpires != nil:
			seen.note(opRunning(k), now)
			seen.note(opArmed(k), now)
		case op.Status.Phase == nwv1.OperationRunning:
			seen.note(opRunning(k), now)
		case op.Status.Phase == nwv1.OperationSucceeded || op.Status.Phase == nwv1.OperationFailed || op.Status.Phase == nwv1.OperationRolledBack:
			seen.note(opRunning(k), now)
			seen.note(opEnded(k), now)
		}
	}
}

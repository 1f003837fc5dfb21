// Command deadpeer measures how soon a BondModeFlipPlan gives up on a peer whose agent died
// (make bench): the operator's flip controller in this process against a real API server,
// three nodes' agents real processes built for the local site, each in its own network
// namespace of the played storage network (test/site/netsite), all at their default settings
// (a heartbeat Lease renewed every 10 s, held 40 s; a report every 10 s).
//
// The flip changes the first node; as soon as the operator asks it for its change, the third
// node's agent is killed (SIGKILL: nothing said, its Lease simply not renewed again). A step of
// the first node waits on that peer (its Confirm, or its ResumeResync): from the kill to that
// step seen Failed is the detection, against the target of the Lease's duration + 10 s. Then
// the time to the flip seen RolledBack, the first node back without waiting for the dead peer.
// Every time is when this process saw the change, through watches.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
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
)

var nodes = []string{"bench-dead-a", "bench-dead-b", "bench-dead-c"}

// changed is the node the flip changes first, dead the peer whose agent dies.
var changed, dead = nodes[0], nodes[2]

const flipName = "bench-dead-peer"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-deadpeer: %v\n", err)
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
	lab, err := agentlab.Start("bench-deadpeer-")
	if err != nil {
		return err
	}
	defer lab.Close()
	env := lab.Env
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const agentNS = agentlab.AgentNamespace
	n, err := lab.Site(ctx, nwv1.BondModeActiveBackup, nodes, "pvc-bench-one", "pvc-bench-two")
	if err != nil {
		return err
	}
	defer n.Close()
	agents, cleanup, err := n.ReadyForFlips(ctx, nodes, nodes[len(nodes)-1], agent.ReportInterval.String(), 2)
	if err != nil {
		return err
	}
	defer cleanup()
	for _, p := range agents {
		defer p.Stop()
	}
	watcher, err := lab.StartFlips(ctx, "bench-deadpeer")
	if err != nil {
		return err
	}

	fmt.Printf("A BondModeFlipPlan of three nodes whose peer %s's agent dies while %s changes (the agents' defaults: Lease renewed every %s, held %d s; a report every %s):\n",
		dead, changed, agent.RenewInterval, agent.LeaseDurationSeconds, agent.ReportInterval)
	r, err := follow(ctx, watcher, agentNS, func() { _ = agents[dead].Cmd.Process.Signal(syscall.SIGKILL) })
	if err != nil {
		return err
	}
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: agentNS, Name: dead}, l); err != nil {
		return err
	}
	duration := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	detected := r.failed.Sub(r.killed)
	fmt.Printf("  %s failed: %s\n", r.part, r.message)
	fmt.Printf("  the dead agent's last renewal %.2f s before its death; the step failed %.2f s after that renewal\n",
		r.killed.Sub(l.Spec.RenewTime.Time).Seconds(), r.failed.Sub(l.Spec.RenewTime.Time).Seconds())
	fmt.Printf("  the flip rolled back %.2f s after the death (%s back on active-backup)\n", r.rolledBack.Sub(r.killed).Seconds(), changed)
	target := duration + 10*time.Second
	benchproc.Verdict(fmt.Sprintf("a dead peer detected %.2f s after its agent died (%.2f× the target, the Lease's %s + 10 s)",
		detected.Seconds(), detected.Seconds()/target.Seconds(), duration), detected <= target)
	return nil
}

// result is what the flip showed, when this process saw it.
type result struct {
	killed, failed, rolledBack time.Time
	part, message              string
}

// follow creates the flip, kills the peer's agent (kill) once it sees the first node's
// SetBondMode, and follows the flip until it ends RolledBack.
func follow(ctx context.Context, c client.WithWatch, ns string, kill func()) (*result, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
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
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: flipName}, Spec: nwv1.BondModeFlipPlanSpec{
		TargetMode: nwv1.BondMode8023AD, VMProtection: nwv1.VMProtectionNone, NodeOrder: nodes}}
	if err := c.Create(ctx, f); err != nil {
		return nil, err
	}
	r := &result{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not roll back in time (killed %t, failed %t)", flipName, !r.killed.IsZero(), !r.failed.IsZero())
		case e := <-ops.ResultChan():
			if op, ok := e.Object.(*nwv1.NodeOperation); ok && e.Type == watch.Added && op.Name == flipName+"-n1-setmode" && r.killed.IsZero() {
				kill()
				r.killed = time.Now()
			}
		case e := <-flips.ResultChan():
			got, ok := e.Object.(*nwv1.BondModeFlipPlan)
			if !ok || got.Name != flipName {
				continue
			}
			now := time.Now()
			for _, nd := range got.Status.Nodes {
				for _, p := range nd.Parts {
					if p.State == nwv1.StepFailed && r.failed.IsZero() {
						r.failed, r.part, r.message = now, bondflip.PartName(int(nd.Position), p.Name), p.Message
					}
				}
			}
			if got.Status.Phase.Finished() {
				if got.Status.Phase != nwv1.WorkflowRolledBack || r.killed.IsZero() || r.failed.IsZero() {
					var steps []string
					for _, st := range got.Status.Steps {
						steps = append(steps, st.Name+"="+string(st.State)+" ("+st.Message+")")
					}
					return nil, fmt.Errorf("%s ended %s, not RolledBack after a failure: %s", flipName, got.Status.Phase, strings.Join(steps, "; "))
				}
				r.rolledBack = now
				return r, nil
			}
		}
	}
}

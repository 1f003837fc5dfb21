// Command osupgrade measures an OSVersionPolicy on three played Kairos nodes (make bench): the
// operator's OSVersionPolicy controller in this process against a real API server, each node's
// agent a real process built for the local site, in its own network namespace of the played
// storage network (test/site/netsite), on a played Kairos host (test/site/kairosplay) whose
// reboot ends the agent's process and starts it again on the booted slot with a new boot ID.
// Every time is when this process saw the change, through watches of the policy, its
// NodeOperations and the agents' reports.
//
// The agents and the operator run at their default intervals, as installed: the agents read
// their host and report every 10 s (and at once when they start, so on a new boot), their
// heartbeat every 10 s. The policy soaks each node for 10 s, the least it allows.
//
//   - Per node, the orchestration's overhead beyond the played reboot and the soak: from the
//     node's first part started to its last ended, less the agent's own time on the stage (its
//     OSUpgradeStage seen Running to seen Succeeded), less the reboot (its Reboot seen Running
//     to the new boot's first report seen) and less the soak (spec.soak). Target: 3 s per node.
//   - A fallback: the next image fails to boot on the first node (kairosplay's fail-to-boot
//     fault); GRUB boots the fallback with upgrade_failure. From the fallback boot's first
//     report seen (the node's NodewrightAgentStatus with the new boot ID) to the policy seen
//     Failed. Target: one report after the boot, the agents' report interval (10 s).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/test/bench/agentlab"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// soak is the policy's soak, the least it allows.
const soak = 10 * time.Second

// rebootTimeout is the policy's spec.rebootTimeout: generous, only a stuck node reaches it.
const rebootTimeout = 5 * time.Minute

// reportInterval is how often the agents read their host and report: their default.
const reportInterval = agent.ReportInterval

// The played registry's images: the installed one, the policy's, and the one that fails to
// boot.
const (
	installed = "v3.4.2"
	target    = "v3.5.0"
	failing   = "v3.6.0"
)

var (
	nodes     = []string{"bench-os-a", "bench-os-b", "bench-os-c"}
	roles     = []nwv1.NodeRole{nwv1.NodeRoleTiebreaker, nwv1.NodeRoleSecondary, nwv1.NodeRolePrimary}
	resources = []string{"pvc-bench-one", "pvc-bench-two"}
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-osupgrade: %v\n", err)
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
	lab, err := agentlab.Start("bench-osupgrade-")
	if err != nil {
		return err
	}
	defer lab.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := lab.Env.Client
	n, err := lab.Site(ctx, nwv1.BondModeActiveBackup, nodes, resources...)
	if err != nil {
		return err
	}
	defer n.Close()

	registry := kairosplay.Registry{Dir: filepath.Join(lab.Dir, "registry")}
	images := map[string]string{}
	for _, v := range []string{installed, target, failing} {
		if images[v], err = registry.AddVersion(v); err != nil {
			return err
		}
	}
	hosts := map[string]*kairosplay.Host{}
	for _, name := range nodes {
		if err := readyNode(ctx, c, name); err != nil {
			return err
		}
		host := &kairosplay.Host{Root: n.Node(name).Root, Dir: filepath.Join(lab.Dir, "kairos-"+name), Registry: registry, DRBDDir: n.Node(name).DRBDDir}
		if _, err := host.Install(ctx, images[installed]); err != nil {
			return fmt.Errorf("installing %s on %s: %w", images[installed], name, err)
		}
		hosts[name] = host
		sup, err := n.StartKairosAgent(name, host)
		if err != nil {
			return err
		}
		defer func() { _ = sup.Stop() }()
	}
	for i, name := range nodes {
		if err := reported(ctx, c, name, images[installed]); err != nil {
			logged, _ := os.ReadFile(n.AgentLog(name))
			return fmt.Errorf("%w\n%s", err, logged)
		}
		if err := clusterplay.SetRole(ctx, c, name, roles[i]); err != nil {
			return err
		}
	}
	// The signed profile: Kairos nodes on the played bond, the played registry's repository
	// allowed (the agents refuse to stage an image it does not list).
	cleanup, err := clusterplay.ManagedWith(ctx, c, func(p *nwv1.EdgeProfileSpec) {
		p.OS = nwv1.HostOSKairos
		p.Network = nwv1.ProfileNetwork{BondInterface: netsite.Bond, BondMode: nwv1.BondModeActiveBackup}
		p.OSImages = []string{kairosplay.DefaultRepository}
	})
	if err != nil {
		return err
	}
	defer cleanup()
	watcher, err := lab.StartOSPolicies(ctx, "bench-osupgrade")
	if err != nil {
		return err
	}

	fmt.Printf("An OSVersionPolicy of three played Kairos nodes, %s to %s, two DRBD resources (soak %s, agents reporting every %s):\n",
		installed, target, soak, reportInterval)
	seen, err := upgrade(ctx, watcher, "bench-os-there", images[target], nwv1.WorkflowSucceeded)
	if err != nil {
		return err
	}
	for _, name := range nodes {
		if got := bootedImage(hosts[name]); got != osupgrade.Repository(images[target]) {
			return fmt.Errorf("after the policy %s's /etc/kairos-release names %q, not %s", name, got, osupgrade.Repository(images[target]))
		}
	}
	worst := time.Duration(0)
	for k := 1; k <= len(nodes); k++ {
		total := seen.at(partDone(k, osupgrade.RestoreVMs)).Sub(seen.at(partStarted(k, osupgrade.Cordon)))
		stage := seen.at(opEnded(k, "stage")).Sub(seen.at(opRunning(k, "stage")))
		reboot := seen.at(newBoot(k)).Sub(seen.at(opRunning(k, "reboot")))
		overhead := total - stage - reboot - soak
		worst = max(worst, overhead)
		fmt.Printf("  node %d (%s): %.2f s from its first part to its last: %.2f s the agent's stage, %.2f s the reboot to its first report, %.0f s the soak, %.2f s the orchestration\n",
			k, nodes[k-1], total.Seconds(), stage.Seconds(), reboot.Seconds(), soak.Seconds(), overhead.Seconds())
		// Where the time went: each part, from seen started to seen ended.
		var parts []string
		for _, part := range osupgrade.NodeParts {
			if start, end := seen.at(partStarted(k, part)), seen.at(partDone(k, part)); !start.IsZero() && !end.IsZero() {
				parts = append(parts, fmt.Sprintf("%s %.2f", part, end.Sub(start).Seconds()))
			}
		}
		fmt.Printf("    its parts, seen started to seen ended (s): %s\n", strings.Join(parts, ", "))
	}
	benchproc.Verdict(fmt.Sprintf("per-node orchestration overhead beyond the reboot and the soak, the worst of three: %.2f s (%.2f× the target, 3 s)",
		worst.Seconds(), worst.Seconds()/3), worst <= 3*time.Second)

	// The fallback: the next image fails to boot on the first node.
	fmt.Printf("A fallback: %s fails to boot on %s, GRUB boots the fallback with upgrade_failure:\n", failing, nodes[0])
	if err := hosts[nodes[0]].SetFault(kairosplay.FaultFailBoot, true, images[failing]); err != nil {
		return err
	}
	seen, err = upgrade(ctx, watcher, "bench-os-fallback", images[failing], nwv1.WorkflowFailed)
	if err != nil {
		return err
	}
	if got := bootedImage(hosts[nodes[0]]); got != osupgrade.Repository(images[target]) {
		return fmt.Errorf("after the fallback %s's /etc/kairos-release names %q, not %s", nodes[0], got, osupgrade.Repository(images[target]))
	}
	for _, name := range nodes[1:] {
		if got := bootedImage(hosts[name]); got != osupgrade.Repository(images[target]) {
			return fmt.Errorf("after the fallback %s, which the policy never reached, runs %q", name, got)
		}
	}
	stopped := seen.at(phase(nwv1.WorkflowFailed)).Sub(seen.at(newBoot(1)))
	fmt.Printf("  the fallback boot's first report seen %.2f s after the Reboot seen Running\n", seen.at(newBoot(1)).Sub(seen.at(opRunning(1, "reboot"))).Seconds())
	benchproc.Verdict(fmt.Sprintf("from the fallback boot's first report to the policy Failed: %.2f s (%.2f× the target, one report interval of %s; %.2f s above the ideal, 0)",
		stopped.Seconds(), stopped.Seconds()/reportInterval.Seconds(), reportInterval, stopped.Seconds()), stopped <= reportInterval)
	return nil
}

// readyNode creates node's Node, Ready (no kubelet runs: its condition is set once).
func readyNode(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if err := c.Create(ctx, node); err != nil {
		return err
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	return c.Status().Update(ctx, node)
}

// reported waits until node's agent reports its Kairos host running image from its active
// slot, and its DRBD resources connected and UpToDate.
func reported(ctx context.Context, c client.Client, node, image string) error {
	as := &nwv1.NodewrightAgentStatus{}
	err := agentlab.Wait(ctx, 2*time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		k, d := as.Status.OS, as.Status.Storage
		return k != nil && k.Kairos != nil && k.Kairos.Image == osupgrade.Repository(image) && k.Kairos.BootEntry == nwv1.KairosBootActive &&
			d != nil && d.Resources == int32(len(resources)) && d.Connected == d.Resources && d.UpToDate == d.Resources, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s's report of Kairos %s and its DRBD (OS %+v, DRBD %+v): %w", node, image, as.Status.OS, as.Status.Storage, err)
	}
	return nil
}

// bootedImage is the image node's played host runs, as its /etc/kairos-release names it.
func bootedImage(h *kairosplay.Host) string {
	raw, err := os.ReadFile(filepath.Join(h.Root, "etc/kairos-release"))
	if err != nil {
		return err.Error()
	}
	return kairosplay.ReleaseValue(string(raw), "KAIROS_IMAGE_REPO")
}

// Events this process notes the time of, as it sees them.
func partStarted(k int, part string) string { return "started " + osupgrade.PartName(k, part) }
func partDone(k int, part string) string    { return "done " + osupgrade.PartName(k, part) }
func opRunning(k int, op string) string     { return fmt.Sprintf("op n%d-%s Running", k, op) }
func opEnded(k int, op string) string       { return fmt.Sprintf("op n%d-%s ended", k, op) }
func newBoot(k int) string                  { return fmt.Sprintf("node %d new boot reported", k) }
func phase(p nwv1.WorkflowPhase) string     { return "phase " + string(p) }

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

// upgrade creates a policy to image over nodes in order, follows it, its operations and the
// agents' reports until it ends in want, and returns when it saw what. Every event it needs
// must have been seen: a figure is never computed from a time it did not see.
func upgrade(ctx context.Context, c client.WithWatch, name, image string, want nwv1.WorkflowPhase) (*timeline, error) {
	seen := &timeline{seen: map[string]time.Time{}}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	// The boot each node runs now: a report of another is its new boot.
	before := map[string]string{}
	for _, node := range nodes {
		as := &nwv1.NodewrightAgentStatus{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
			return nil, err
		}
		if as.Status.OS == nil || as.Status.OS.BootID == "" {
			return nil, fmt.Errorf("%s's agent reports no boot ID", node)
		}
		before[node] = as.Status.OS.BootID
	}
	policies, err := c.Watch(ctx, &nwv1.OSVersionPolicyList{})
	if err != nil {
		return nil, err
	}
	defer policies.Stop()
	ops, err := c.Watch(ctx, &nwv1.NodeOperationList{}, client.InNamespace(agentlab.AgentNamespace))
	if err != nil {
		return nil, err
	}
	defer ops.Stop()
	reports, err := c.Watch(ctx, &nwv1.NodewrightAgentStatusList{})
	if err != nil {
		return nil, err
	}
	defer reports.Stop()
	p := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.OSVersionPolicySpec{
		Image: image, NodeOrder: nodes, NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: nodes}}},
		Soak: metav1.Duration{Duration: soak}, RebootTimeout: metav1.Duration{Duration: rebootTimeout}}}
	if err := c.Create(ctx, p); err != nil {
		return nil, err
	}
	var last *nwv1.OSVersionPolicy
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not end %s in time: %s", name, want, describe(last))
		case e, ok := <-reports.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch of the agents' reports ended")
			}
			if as, ok := e.Object.(*nwv1.NodewrightAgentStatus); ok && as.Status.OS != nil {
				for k, node := range nodes {
					if as.Name == node && as.Status.OS.BootID != "" && as.Status.OS.BootID != before[node] {
						seen.note(newBoot(k+1), time.Now())
					}
				}
			}
		case e, ok := <-ops.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch of the NodeOperations ended")
			}
			if op, ok := e.Object.(*nwv1.NodeOperation); ok && e.Type != watch.Deleted {
				noteOp(seen, name, op, time.Now())
			}
		case e, ok := <-policies.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch of the policies ended")
			}
			got, ok := e.Object.(*nwv1.OSVersionPolicy)
			if !ok || got.Name != name {
				continue
			}
			last = got
			now := time.Now()
			for _, n := range got.Status.Nodes {
				for _, part := range n.Parts {
					if part.StartedAt != nil {
						seen.note(partStarted(int(n.Position), part.Name), now)
					}
					if part.State == nwv1.StepSucceeded || part.State == nwv1.StepSkipped {
						seen.note(partDone(int(n.Position), part.Name), now)
					}
				}
			}
			if got.Status.Phase.Finished() {
				seen.note(phase(got.Status.Phase), now)
				if got.Status.Phase != want {
					return nil, fmt.Errorf("%s ended %s, not %s: %s", name, got.Status.Phase, want, describe(got))
				}
				return seen, missing(seen, want)
			}
		}
	}
}

// missing names the events a figure needs that were not seen.
func missing(seen *timeline, want nwv1.WorkflowPhase) error {
	needed := []string{newBoot(1), opRunning(1, "reboot")}
	if want == nwv1.WorkflowSucceeded {
		needed = nil
		for k := 1; k <= len(nodes); k++ {
			needed = append(needed, partStarted(k, osupgrade.Cordon), partDone(k, osupgrade.RestoreVMs),
				opRunning(k, "stage"), opEnded(k, "stage"), opRunning(k, "reboot"), newBoot(k))
		}
	}
	var gone []string
	for _, e := range needed {
		if seen.at(e).IsZero() {
			gone = append(gone, e)
		}
	}
	if len(gone) > 0 {
		return fmt.Errorf("not seen: %s", strings.Join(gone, ", "))
	}
	return nil
}

// noteOp notes what the policy's OSUpgradeStage and Reboot operations show: an operation seen
// ended was Running by then, if it was not seen so.
func noteOp(seen *timeline, policy string, op *nwv1.NodeOperation, now time.Time) {
	for k := 1; k <= len(nodes); k++ {
		for _, kind := range []string{"stage", "reboot"} {
			if op.Name != children.Name(policy, fmt.Sprintf("n%d-%s", k, kind)) {
				continue
			}
			switch op.Status.Phase {
			case nwv1.OperationRunning:
				seen.note(opRunning(k, kind), now)
			case nwv1.OperationSucceeded, nwv1.OperationFailed, nwv1.OperationRolledBack:
				seen.note(opRunning(k, kind), now)
				seen.note(opEnded(k, kind), now)
			}
		}
	}
}

// describe is the policy's steps and nodes, for an error.
func describe(p *nwv1.OSVersionPolicy) string {
	if p == nil {
		return "no status seen"
	}
	var out []string
	for _, st := range p.Status.Steps {
		out = append(out, fmt.Sprintf("%s=%s(%s)", st.Name, st.State, st.Message))
	}
	for _, n := range p.Status.Nodes {
		out = append(out, fmt.Sprintf("%s=%s(%s)", n.Name, n.Phase, n.Evidence))
	}
	return strings.Join(out, "; ")
}

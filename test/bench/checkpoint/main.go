// Command checkpoint measures how fast a bond change that cuts a node off is undone (make
// bench): the agent, a real process built for the local site, in a network namespace of the
// played storage network (test/site/netsite), changes its bond to a mode the switch does not
// carry for it, or loses its link to the API server so that no commit can reach it. The figure
// is the time from the change to the previous mode restored and every probe answering again,
// from the agent's own records (the changes it made, its checkpoint's resolution), against the
// target of the same run: the checkpoint's timeout plus 2 s.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/bench/agentlab"
	"github.com/spectrocloud/nodewright/test/bench/benchproc"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// timeout is each change's checkpoint timeout, the least the API allows.
const timeout = 10 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-checkpoint: %v\n", err)
		os.Exit(1)
	}
	if benchproc.Missed {
		os.Exit(1)
	}
}

func run() error {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	lab, err := agentlab.Start("bench-checkpoint-")
	if err != nil {
		return err
	}
	defer lab.Close()
	env, dir, binary, kubeconfig := lab.Env, lab.Dir, lab.Agent, lab.Kubeconfig
	ctx := context.Background()
	const ns = "nodewright-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The signed EdgeProfile the agent checks the change against, allowing 802.3ad.
	cleanup, err := clusterplay.Managed(ctx, env.Client, netsite.Bond, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Printf("A bond change that cuts the node off, undone by its agent alone (checkpointTimeout %s, target %s):\n", timeout, timeout+2*time.Second)
	for _, sc := range []scenario{
		{name: "port never carries the new mode", never: true},
		{name: "API server cut, no commit", cutAPI: true, label: "restored (the peers answer; the API server, cut off, cannot)"},
	} {
		elapsed, err := sc.run(ctx, env, dir, binary, kubeconfig, ns)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		target := timeout + 2*time.Second
		label := sc.label
		if label == "" {
			label = "restored and probed healthy"
		}
		benchproc.Verdict(fmt.Sprintf("%-27s %s %.2f s after the change (%.2f× the target)",
			sc.name+":", label, elapsed.Seconds(), elapsed.Seconds()/target.Seconds()), elapsed <= target)
	}
	return nil
}

type scenario struct {
	name   string
	label  string
	never  bool
	cutAPI bool
}

// run makes the change in a network of its own and returns the time from the change to the
// checkpoint's resolution (restored and probed), as the agent recorded them.
func (sc scenario) run(ctx context.Context, env *testenv.Env, dir, binary, kubeconfig, ns string) (time.Duration, error) {
	nodes := []string{"bench-edge-1", "bench-edge-2", "bench-edge-3"}
	sdir, err := os.MkdirTemp(dir, "net-")
	if err != nil {
		return 0, err
	}
	n, err := netsite.Start(sdir, nwv1.BondModeActiveBackup, nodes...)
	if n != nil {
		defer n.Close()
	}
	if err != nil {
		return 0, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go n.Run(runCtx)
	nodeKubeconfig := filepath.Join(sdir, "kubeconfig-nodes")
	if err := n.ServeAPI(kubeconfig, nodeKubeconfig); err != nil {
		return 0, err
	}
	node := n.Node(nodes[0])
	n.Expect(node.Name, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	if sc.never {
		n.NeverCarry(node.Name, nwv1.BondMode8023AD)
	}
	stateDir := filepath.Join(sdir, "state")
	cmd := n.Command(node.Name, binary, "--kubeconfig", nodeKubeconfig, "--node-name", node.Name, "--namespace", ns,
		"--network-backend", "site", "--site-bond-dir", node.Bond.Dir, "--host-root", node.Root,
		"--state-dir", stateDir, "--host-os", string(nwv1.HostOSSystemdNetworkd))
	p, err := benchproc.Start(cmd, filepath.Join(sdir, "agent.log"))
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bench-flip-"},
		Spec: nwv1.NodeOperationSpec{NodeName: node.Name, Type: nwv1.OperationSetBondMode,
			Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD,
				CheckpointTimeout: metav1.Duration{Duration: timeout},
				Probes:            nwv1.BondProbes{Peers: n.Peers(node.Name), APIServer: ptr.To(true), DRBDConnections: ptr.To(false)}}}}
	if err := env.Client.Create(ctx, op); err != nil {
		return 0, err
	}
	if sc.cutAPI {
		// Cut once the change is checked and waits for its commit.
		if err := wait(func() (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), op); err != nil {
				return false, err
			}
			return op.Status.Result != nil && op.Status.Result.CheckpointExpires != nil, nil
		}); err != nil {
			return 0, fmt.Errorf("waiting for the checkpoint: %w", err)
		}
		n.CutAPIServer(node.Name, true)
	}
	// The agent's checkpoint file says when it was resolved; its changes file when it changed.
	var resolved time.Time
	if err := wait(func() (bool, error) {
		files, _ := filepath.Glob(filepath.Join(stateDir, "checkpoint-*.json"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return false, err
			}
			var c struct {
				State      string             `json:"state"`
				ResolvedAt time.Time          `json:"resolvedAt"`
				Results    []nwv1.ProbeResult `json:"results"`
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				return false, err
			}
			if c.State == "RolledBack" {
				if os.Getenv("BENCH_CHECKPOINT_DEBUG") != "" {
					fmt.Printf("%s\n", raw)
				}
				resolved = c.ResolvedAt
				for _, r := range c.Results {
					if !r.OK && (r.Target != "api-server" || !sc.cutAPI) {
						return false, fmt.Errorf("after the restore the probe of %s failed: %s", r.Target, r.Message)
					}
				}
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return 0, fmt.Errorf("waiting for the rollback: %w", err)
	}
	raw, err := os.ReadFile(node.Bond.ChangesFile(netsite.Bond))
	if err != nil {
		return 0, err
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 {
		return 0, fmt.Errorf("%d changes to the bond; want the change and its restore:\n%s", len(lines), raw)
	}
	at := func(line string) (time.Time, error) {
		stamp, _, _ := strings.Cut(line, " ")
		return time.Parse(time.RFC3339Nano, stamp)
	}
	changed, err := at(lines[0])
	if err != nil {
		return 0, fmt.Errorf("the changes file: %w", err)
	}
	if sc.cutAPI {
		// Cut off, the API server cannot answer the probes whatever the bond does: the figure
		// is the restore itself, the peers answering after it.
		if resolved, err = at(lines[1]); err != nil {
			return 0, fmt.Errorf("the changes file: %w", err)
		}
	}
	if sc.cutAPI {
		n.CutAPIServer(node.Name, false)
	}
	// The report reaches the API server too.
	if err := wait(func() (bool, error) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), op); err != nil {
			return false, err
		}
		return op.Status.Phase == nwv1.OperationRolledBack, nil
	}); err != nil {
		return 0, fmt.Errorf("waiting for RolledBack: %w (status %+v)", err, op.Status)
	}
	return resolved.Sub(changed), nil
}

// wait polls cond every 50 ms for up to two minutes.
func wait(cond func() (bool, error)) error {
	end := time.Now().Add(2 * time.Minute)
	for time.Now().Before(end) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not within two minutes")
}

package bondmodeflipplan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// ring plays one DRBD resource per node, replicated on it and the next node of names (the
// last with the first), as LINSTOR places two replicas: each node holds two resources, with
// a peer on each side. Leaner than every resource on every node, and each node's change still
// pauses and resumes the resynchronisation towards it on two peers.
func ring(n *netsite.Network, names []string) (map[string]int, error) {
	if err := n.PlayDRBD(); err != nil {
		return nil, err
	}
	held := map[string]int{}
	for i, name := range names {
		next := names[(i+1)%len(names)]
		if err := n.PlaceDRBD(fmt.Sprintf("pvc-ring-%02d", i+1), name, next); err != nil {
			return nil, err
		}
		held[name]++
		held[next]++
	}
	return held, nil
}

// TestSixteenNodes flips sixteen nodes, the most a flip changes, on the played network: each
// one at a time under its checkpoint, its eight parts recorded in status.nodes, every played
// bond ends in 802.3ad. Then a flip back to active-backup whose sixteenth node's port never
// carries it: that node restores itself, and the fifteen before it are flipped back to
// 802.3ad, the last first, each under a checkpoint of its own; status.steps holds all 33
// steps.
func TestSixteenNodes(t *testing.T) {
	var nodes, order []string
	for i := 1; i <= bondflip.MaxNodes; i++ {
		role := "secondary"
		if i == bondflip.MaxNodes {
			role = "primary"
		}
		name := fmt.Sprintf("flip16-%02d", i)
		nodes, order = append(nodes, name+"="+role), append(order, name)
	}
	began := time.Now()
	s := plantSiteWith(t, true, nil, ring, nodes...)
	t.Logf("the site of %d nodes played in %s", len(order), time.Since(began).Round(time.Second))

	t.Run("flip", func(t *testing.T) {
		began := time.Now()
		f := s.flipTo("flip-sixteen", nwv1.BondMode8023AD, nwv1.VMProtectionNone, order...)
		// kubectl get shows the node's step and the part under way.
		eventually(t, func() string {
			got := &nwv1.BondModeFlipPlan{}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), got); err != nil {
				return err.Error()
			}
			if got.Status.Phase.Finished() {
				t.Fatalf("the flip ended %s before kubectl get showed a later node's part; steps %s", got.Status.Phase, steps(got))
			}
			shown, err := tableRow(f.Name)
			if err != nil {
				return err.Error()
			}
			step, _ := shown["Step"].(string)
			part, _ := shown["Part"].(string)
			if k, rollback, ok := bondflip.ParseStep(bondflip.Step(step)); !ok || rollback || k < 2 || !slices.Contains(bondflip.NodeParts, part) {
				return fmt.Sprintf("kubectl get shows %v; want a later node's step and its part", shown)
			}
			return ""
		})
		f = s.ended(f, nwv1.WorkflowSucceeded)
		t.Logf("%d nodes flipped in %s", len(order), time.Since(began).Round(time.Second))
		s.nodesAre(f, nwv1.NodeFlipDone, nwv1.BondMode8023AD, order...)
		if len(f.Status.Steps) != 1+len(order) || f.Status.Progress != "16/16" {
			t.Errorf("%d steps, progress %q; want 17 and 16/16", len(f.Status.Steps), f.Status.Progress)
		}
		for k, node := range order {
			if got := s.mode(node); got != nwv1.BondMode8023AD {
				t.Errorf("%s's bond runs %s, want 802.3ad", node, got)
			}
			if got := s.changes(node); got != 1 {
				t.Errorf("%s's bond changed %d times; want once", node, got)
			}
			n := f.Status.Nodes[k]
			if got, want := parts(n), "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Succeeded Confirm=Succeeded ResumeResync=Succeeded Uncordon=Succeeded RestoreVMs=Skipped"; got != want {
				t.Errorf("node %d's parts: %s; want %s", k+1, got, want)
			}
			for _, p := range n.Parts {
				if p.StartedAt == nil || p.FinishedAt == nil || p.FinishedAt.Before(p.StartedAt) {
					t.Errorf("node %d's %s: started %v, finished %v", k+1, p.Name, p.StartedAt, p.FinishedAt)
				}
			}
			pause, resume := partMessage(f, k+1, "PauseResync"), partMessage(f, k+1, "ResumeResync")
			if pause != "resynchronisation towards "+node+" paused on its peers (2 resources)" ||
				resume != "resynchronisation towards "+node+" resumed (2 resources); its DRBD is UpToDate" {
				t.Errorf("node %d: %q, %q", k+1, pause, resume)
			}
			commit := &nwv1.NodeOperation{}
			key := client.ObjectKey{Namespace: s.ns, Name: fmt.Sprintf("flip-sixteen-n%d-commit", k+1)}
			if err := env.Client.Get(context.Background(), key, commit); err != nil {
				t.Fatal(err)
			}
			if commit.Status.Phase != nwv1.OperationSucceeded || commit.Labels[bondflip.LabelStep] != fmt.Sprintf("Node%dConfirm", k+1) {
				t.Errorf("%s: %s, made by %q; want Succeeded, by Node%dConfirm", key.Name, failure(commit), commit.Labels[bondflip.LabelStep], k+1)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a failure at the sixteenth node rolls every node back", func(t *testing.T) {
		// Every node reports the new mode and its DRBD whole again, as the Preflight wants.
		for _, node := range order {
			s.reported(node, nwv1.BondMode8023AD)
		}
		last := order[len(order)-1]
		s.net.NeverCarry(last, nwv1.BondModeActiveBackup)
		defer s.net.NeverCarry(last, "")
		began := time.Now()
		f := s.ended(s.flipTo("flip-sixteen-back", nwv1.BondModeActiveBackup, nwv1.VMProtectionNone, order...), nwv1.WorkflowRolledBack)
		if st := f.Status.Steps[0]; st.State != nwv1.StepSucceeded {
			t.Fatalf("the Preflight %s: %s", st.State, st.Message)
		}
		t.Logf("%d nodes flipped and %d flipped back in %s", len(order)-1, len(order)-1, time.Since(began).Round(time.Second))
		if n := len(f.Status.Steps); n != 33 {
			t.Errorf("%d steps; want 33: the Preflight, 16 nodes' and 16 rollback steps: %s", n, steps(f))
		}
		var back []string
		for _, st := range f.Status.Steps {
			if _, rollback, _ := bondflip.ParseStep(bondflip.Step(st.Name)); rollback {
				back = append(back, st.Name+"="+string(st.State))
			}
			if st.Name == "Node16" && (st.State != nwv1.StepFailed || !strings.HasPrefix(st.Message, "SetBondMode: "+last+" (node 16)") || !strings.Contains(st.Message, "ProbeFailed")) {
				t.Errorf("Node16 %s: %q; want Failed in SetBondMode naming %s and ProbeFailed", st.State, st.Message, last)
			}
		}
		var want []string
		for k := len(order); k >= 1; k-- {
			want = append(want, fmt.Sprintf("RollbackNode%d=Succeeded", k))
		}
		if strings.Join(back, " ") != strings.Join(want, " ") {
			t.Errorf("the rollback: %s; want %s", strings.Join(back, " "), strings.Join(want, " "))
		}
		// status.nodes follows the last transition in the next reconcile.
		eventually(t, func() string {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); err != nil {
				return err.Error()
			}
			for _, n := range f.Status.Nodes {
				if n.State != nwv1.NodeFlipRolledBack {
					return fmt.Sprintf("%s is %s", n.Name, n.State)
				}
			}
			return ""
		})
		for k, node := range order {
			if got := s.mode(node); got != nwv1.BondMode8023AD {
				t.Errorf("%s's bond runs %s, want 802.3ad as before the flip", node, got)
			}
			n := f.Status.Nodes[k]
			if n.State != nwv1.NodeFlipRolledBack || n.PreviousMode != nwv1.BondMode8023AD || n.CurrentMode != nwv1.BondMode8023AD {
				t.Errorf("node %d: %s %s->%s; want RolledBack, 802.3ad->802.3ad", k+1, n.State, n.PreviousMode, n.CurrentMode)
			}
			want := "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Succeeded Confirm=Succeeded ResumeResync=Succeeded Uncordon=Succeeded RestoreVMs=Skipped " +
				"RollbackCordon=Succeeded RollbackProtectVMs=Skipped RollbackBondMode=Succeeded RollbackUncordon=Succeeded RollbackVMs=Skipped"
			if k+1 == len(order) {
				want = "Cordon=Succeeded ProtectVMs=Skipped PauseResync=Succeeded SetBondMode=Failed RollbackBondMode=Succeeded RollbackUncordon=Succeeded RollbackVMs=Skipped"
			}
			if got := parts(n); got != want {
				t.Errorf("node %d's parts: %s; want %s", k+1, got, want)
			}
			if k+1 == len(order) {
				continue
			}
			// Flipped back under a checkpoint of its own, committed.
			op := &nwv1.NodeOperation{}
			key := client.ObjectKey{Namespace: s.ns, Name: fmt.Sprintf("flip-sixteen-back-n%d-rb-setmode", k+1)}
			if err := env.Client.Get(context.Background(), key, op); err != nil {
				t.Fatal(err)
			}
			if op.Status.Phase != nwv1.OperationSucceeded || op.Spec.SetBondMode.Mode != nwv1.BondMode8023AD {
				t.Errorf("%s: %s to %s, want Succeeded to 802.3ad", key.Name, failure(op), op.Spec.SetBondMode.Mode)
			}
		}
	})
}

// tableRow is the row kubectl get shows of the flip name, by column.
func tableRow(name string) (map[string]any, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis", nwv1.GroupVersion.Group, nwv1.GroupVersion.Version, "bondmodeflipplans", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Param("includeObject", "None").DoRaw(context.Background())
	if err != nil {
		return nil, err
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		return nil, fmt.Errorf("the table of %s: %w\n%s", name, err, raw)
	}
	if len(table.Rows) != 1 {
		return nil, fmt.Errorf("the table of %s has %d rows\n%s", name, len(table.Rows), raw)
	}
	shown := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		shown[col.Name] = table.Rows[0].Cells[i]
	}
	return shown, nil
}

// parts lists a node's record: "ProtectVMs=Skipped PauseResync=Succeeded ...".
func parts(n nwv1.NodeFlip) string {
	var out []string
	for _, p := range n.Parts {
		out = append(out, p.Name+"="+string(p.State))
	}
	return strings.Join(out, " ")
}

package agentstatus_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	nwagent "github.com/spectrocloud/nodewright/internal/agent"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/agentstatus"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// statusOwners maps each leaf field of the status to the managers that own it.
func statusOwners(t *testing.T, as *nwv1.NodewrightAgentStatus) map[string][]string {
	t.Helper()
	owners := map[string][]string{}
	for _, m := range as.ManagedFields {
		if m.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(m.FieldsV1.Raw)); err != nil {
			t.Fatalf("the managed fields of %s: %v", m.Manager, err)
		}
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if s := p.String(); strings.HasPrefix(s, ".status.") {
				owners[s] = append(owners[s], fmt.Sprintf("%s/%s", m.Manager, m.Operation))
			}
		})
	}
	return owners
}

// bridgeOwns says which fields are the bridge's always; the others are the reporter's.
func bridgeOwns(path string) bool {
	return strings.HasPrefix(path, ".status.role") || strings.HasPrefix(path, ".status.heartbeat") ||
		strings.Contains(path, `[type="HeartbeatFresh"]`)
}

// ownedOnce says what is wrong with the owners: a field with more than one, or with another
// than the split says; reporter is the manager of the report fields.
func ownedOnce(t *testing.T, as *nwv1.NodewrightAgentStatus, reporter string) string {
	t.Helper()
	owners := statusOwners(t, as)
	var wrong []string
	for path, managers := range owners {
		want := reporter
		if bridgeOwns(path) {
			want = agentstatus.FieldManager + "/Apply"
		}
		if len(managers) != 1 || managers[0] != want {
			wrong = append(wrong, fmt.Sprintf("%s: %v, want %s", path, managers, want))
		}
	}
	sort.Strings(wrong)
	if len(wrong) > 0 {
		return "fields not owned as the split says:\n  " + strings.Join(wrong, "\n  ")
	}
	return ""
}

func hasField(t *testing.T, as *nwv1.NodewrightAgentStatus, prefix string) bool {
	for path := range statusOwners(t, as) {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// hostBond plays the node's storage bond (the real one is netlink's, on a kernel with the
// bonding driver this machine lacks).
type hostBond struct{}

func (hostBond) Bond(_ context.Context, name string) (nwv1.BondObservation, error) {
	return nwv1.BondObservation{Interface: name, Mode: nwv1.BondModeActiveBackup,
		Members: []nwv1.BondMember{{Name: "eth1", Up: true}, {Name: "eth2", Up: true}}}, nil
}

// drbdsetupAnswer answers `drbdsetup status --json` with a real answer of internal/drbd's
// test data.
type drbdsetupAnswer string

func (a drbdsetupAnswer) Run(context.Context, []string) (drbd.Result, error) {
	data, err := os.ReadFile(filepath.Join("..", "..", "drbd", "testdata", "status", string(a)))
	return drbd.Result{Stdout: data}, err
}

// nodeAgent is the reporter of node's agent, on a Debian host with one DRBD resource.
func nodeAgent(t *testing.T, node string) *nwagent.Reporter {
	t.Helper()
	host := hostos.Host{Root: t.TempDir(), Proc: t.TempDir()}
	data, err := os.ReadFile(filepath.Join("..", "..", "hostos", "testdata", "os-release", "debian-12"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(host.Root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host.Root, "etc", "os-release"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	procDRBD := filepath.Join(host.Proc, "drbd")
	if err := os.WriteFile(procDRBD, []byte("version: 9.2.12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &nwagent.Reporter{Client: env.LiteClient(t), Node: node, Observer: &nwagent.HostObserver{
		Bond: hostBond{}, BondName: "bond0", DRBD: drbdsetupAnswer("salt-shaptools-connected.json"), ProcDRBD: procDRBD,
		OS: hostos.SystemdNetworkd{}, Host: host}}
}

// TestTheBridgeAndAnAgentOwnEachFieldOnce runs the bridge and a node's agent side by side on
// one NodewrightAgentStatus: while the legacy DaemonSet reports the node every status field
// is the bridge's; once the agent reports it, the report fields are the agent's alone and the
// rest the bridge's alone (managedFields say so field by field), and a change on either side
// leaves the other's fields as they were.
func TestTheBridgeAndAnAgentOwnEachFieldOnce(t *testing.T) {
	ctx := context.Background()
	// Heartbeats stay fresh longer than any wait: no stale heartbeat makes the bridge write.
	f := bt.New(t, env, time.Hour)
	env.StartManager(t, operator.SetupControllers)
	node := f.Node(1)
	f.SetNodes(node, f.Node(2))
	f.Transition(legacy.MultiNodeReady)

	bridge := agentstatus.FieldManager + "/Apply"
	bt.Eventually(t, wait, func() string {
		as, ok := agent(t, node)
		if !ok || as.Status.Reporter != nwv1.ReporterLegacy || as.Status.Storage == nil || as.Status.Network.BondMode != nwv1.BondMode8023AD {
			return fmt.Sprintf("the legacy report of node 1: %+v", as)
		}
		if !hasField(t, as, ".status.storage") {
			return "no owner of status.storage yet"
		}
		return ownedOnce(t, as, bridge)
	})

	// The agent starts reporting the node.
	r := nodeAgent(t, node)
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	agentManager := nwagent.FieldManager + "/Apply"
	bt.Eventually(t, wait, func() string {
		as, _ := agent(t, node)
		st := as.Status
		if st.Reporter != nwv1.ReporterAgent || st.Storage == nil || st.Storage.Resources != 1 || len(st.Storage.ResourceStatuses) != 1 ||
			st.Network.BondMode != nwv1.BondModeActiveBackup || st.OS == nil || st.OS.Name != "Debian GNU/Linux" || st.Role != nwv1.NodeRolePrimary {
			return fmt.Sprintf("node 1 as its agent reports it: %+v", st)
		}
		return ownedOnce(t, as, agentManager)
	})

	// The legacy DaemonSet changes its mind about the node's role and DRBD: the bridge writes
	// the role, and the storage stays the agent's.
	f.Data[legacy.NodeKey(node, legacy.FieldRole)] = "secondary"
	f.Data[legacy.NodeKey(node, legacy.FieldDRBD)] = `{"resources":5,"connected":1,"upToDate":1,"outOfSyncKiB":1024}`
	f.Data[legacy.NodeKey(node, legacy.FieldBondMode)] = "balance-xor"
	f.Write()
	var as *nwv1.NodewrightAgentStatus
	bt.Eventually(t, wait, func() string {
		as, _ = agent(t, node)
		if as.Status.Role != nwv1.NodeRoleSecondary {
			return fmt.Sprintf("role %s", as.Status.Role)
		}
		return ""
	})
	if st := as.Status; st.Storage.Resources != 1 || st.Network.BondMode != nwv1.BondModeActiveBackup || st.Reporter != nwv1.ReporterAgent {
		t.Errorf("the bridge wrote over the agent's report: %+v", st)
	}
	if msg := ownedOnce(t, as, agentManager); msg != "" {
		t.Error(msg)
	}
	// And the agent, reporting again, finds its fields as it left them: it writes nothing.
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := agent(t, node); again.ResourceVersion != as.ResourceVersion {
		t.Errorf("the agent rewrote its report after the bridge's write: %+v", again.Status)
	}

	// The node leaves the legacy DaemonSet's list: the node its agent reports keeps its object.
	f.SetNodes(f.Node(2), f.Node(3))
	bt.Eventually(t, wait, func() string {
		if _, ok := agent(t, f.Node(3)); !ok {
			return "node 3 has no status yet"
		}
		return ""
	})
	if got, ok := agent(t, node); !ok || got.Status.Reporter != nwv1.ReporterAgent {
		t.Errorf("node 1, reported by its agent, lost its status when it left the legacy list: %+v", got)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: f.Node(2)}, &nwv1.NodewrightAgentStatus{}); err != nil {
		t.Errorf("node 2: %v", err)
	}
}

// TestTheBridgeTakesOverWhatItWroteBeforeApplying: an object whose status the operator wrote
// before v0.2 (an update, not an apply) ends up owned by the bridge's apply manager alone, so
// that a field the bridge drops is gone, not kept by the old writer.
func TestTheBridgeTakesOverWhatItWroteBeforeApplying(t *testing.T) {
	ctx := context.Background()
	f := bt.New(t, env, time.Minute)
	node := f.Node(1)
	old := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	old.Status = nwv1.NodewrightAgentStatusStatus{Role: nwv1.NodeRolePrimary, Network: nwv1.NodeNetworkStatus{BondMode: nwv1.BondMode8023AD},
		Storage: &nwv1.DRBDStatus{Resources: 2, Connected: 2, UpToDate: 2}}
	if err := env.Client.Status().Update(ctx, old, client.FieldOwner("operator")); err != nil {
		t.Fatal(err)
	}
	f.SetNodes(node)
	f.Transition(legacy.SingleNodeReady)
	env.StartManager(t, operator.SetupControllers)
	bridge := agentstatus.FieldManager + "/Apply"
	bt.Eventually(t, wait, func() string {
		as, _ := agent(t, node)
		if as.Status.Reporter != nwv1.ReporterLegacy {
			return "not applied by the bridge yet"
		}
		return ownedOnce(t, as, bridge)
	})

	// The legacy DaemonSet no longer reports the node's DRBD: the storage goes.
	delete(f.Data, legacy.NodeKey(node, legacy.FieldDRBD))
	f.Write()
	bt.Eventually(t, wait, func() string {
		if as, _ := agent(t, node); as.Status.Storage != nil {
			return fmt.Sprintf("storage still %+v", as.Status.Storage)
		}
		return ""
	})
}

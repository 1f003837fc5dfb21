package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// onPlayedBond runs the test's goroutine, locked to its thread, in a network namespace of its
// own holding a veth called bond0: a played bond (test/site/netsite) the Bonds can change.
func onPlayedBond(t *testing.T, mode nwv1.BondMode) netsite.PlayedBond {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
			t.Fatal("this test creates a network namespace and needs root")
		}
		t.Skip("creating a network namespace needs root")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("nwt-agent-%d", os.Getpid())
	if _, err := netns.NewNamed(name); err != nil { // and the thread is in it
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = netns.Set(orig)
		_ = orig.Close()
		_ = netns.DeleteNamed(name)
		runtime.UnlockOSThread()
	})
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: netsite.Bond}, PeerName: "peer0"}); err != nil {
		t.Fatal(err)
	}
	bond := netsite.PlayedBond{Dir: t.TempDir()}
	if err := os.WriteFile(bond.ModeFile(netsite.Bond), []byte(string(mode)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bond
}

// singleNode is a verified EdgeProfile of a single node whose storage bond is the played bond,
// allowed active-backup and 802.3ad: what the agent checks a change against is tested in
// profile_test.go.
type singleNode struct{}

func (singleNode) InForce(context.Context) (*nwv1.EdgeProfile, error) {
	return &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "single"}, Spec: nwv1.EdgeProfileSpec{Version: "1.0.0",
		Topology: nwv1.TopologySingleNode, Network: nwv1.ProfileNetwork{BondInterface: netsite.Bond,
			BondMode: nwv1.BondModeActiveBackup, AllowedBondModes: []nwv1.BondMode{nwv1.BondMode8023AD}}}}, nil
}

// writeCheckpoint writes a checkpoint as the agent writes it, in state, for a change of the
// played bond from active-backup to 802.3ad that wrote files.
func writeCheckpoint(t *testing.T, dir string, uid types.UID, name, state string, files []hostos.File, expires time.Time) {
	t.Helper()
	record, _ := json.Marshal(map[string]any{
		"operation": uid, "namespace": "nodewright-system", "name": name, "bond": netsite.Bond,
		"previous": nwv1.BondObservation{Interface: netsite.Bond, Mode: nwv1.BondModeActiveBackup, Members: []nwv1.BondMember{{Name: netsite.Bond, Up: true}}},
		"mode":     "802.3ad", "previousFiles": []hostos.File{{Path: files[0].Path}}, "files": files,
		"probes":  nwv1.BondProbes{APIServer: new(bool), DRBDConnections: new(bool)},
		"timeout": time.Minute, "expires": expires, "state": state, "reason": "NotCommitted", "message": "not committed",
	})
	if err := os.WriteFile(filepath.Join(dir, "checkpoint-"+string(uid)+".json"), record, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverUndoesAHalfMadeChange: an agent that died in the middle of a bond change (its
// checkpoint still says Applying, the mode and the file already changed) restores the
// previous mode and files when it starts, before it reaches any API server, and the
// operation then ends RolledBack (Interrupted).
func TestRecoverUndoesAHalfMadeChange(t *testing.T) {
	bond := onPlayedBond(t, nwv1.BondMode8023AD)
	root, state := t.TempDir(), t.TempDir()
	files, err := hostos.BondFiles(hostos.SystemdNetworkd{}, hostos.BondConfig{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD})
	if err != nil {
		t.Fatal(err)
	}
	if err := hostos.WriteFiles(root, files); err != nil {
		t.Fatal(err)
	}
	uid := types.UID("0c4f7d1e-half-made")
	// The checkpoint as the agent writes it before changing anything.
	writeCheckpoint(t, state, uid, "flip-edge-1", "Applying", files, time.Now().Add(time.Minute))
	var told []types.NamespacedName
	b := &agent.Bonds{Net: bond, OS: hostos.SystemdNetworkd{}, HostRoot: root, StateDir: state,
		Resolved: func(k types.NamespacedName) { told = append(told, k) }}
	if err := b.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(bond.ModeFile(netsite.Bond)); strings.TrimSpace(string(raw)) != "active-backup" {
		t.Errorf("after Recover the bond runs %q; want active-backup restored", raw)
	}
	if _, err := os.Stat(filepath.Join(root, files[0].Path)); !os.IsNotExist(err) {
		t.Errorf("the persistent file the change wrote is still there (%v)", err)
	}
	if len(told) != 1 || told[0].Name != "flip-edge-1" {
		t.Errorf("told %v; want the operation flip-edge-1", told)
	}
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "nodewright-system", Name: "flip-edge-1", UID: uid},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-1", Type: nwv1.OperationSetBondMode, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD}}}
	result, err := b.Executors()[nwv1.OperationSetBondMode].Run(context.Background(), op)
	var failed *agent.OperationError
	if !errors.As(err, &failed) || !failed.RolledBack || failed.Reason != "Interrupted" {
		t.Fatalf("the operation's outcome: %v; want RolledBack, Interrupted", err)
	}
	if result == nil || result.Bond == nil || result.Bond.Mode != nwv1.BondModeActiveBackup || result.PreviousMode != nwv1.BondModeActiveBackup {
		t.Errorf("result %+v; want the bond observed in active-backup", result)
	}
	// Run again (the agent restarted once more): the same outcome, and no change.
	if _, err := b.Executors()[nwv1.OperationSetBondMode].Run(context.Background(), op); !errors.As(err, &failed) || failed.Reason != "Interrupted" {
		t.Errorf("run again: %v", err)
	}
	if raw, _ := os.ReadFile(bond.ChangesFile(netsite.Bond)); strings.Count(string(raw), "\n") != 1 {
		t.Errorf("changes to the bond:\n%s; want only the restore", raw)
	}
}

// TestAChangeTheOSCannotPersistIsRefusedUntouched: on Talos the bond's mode lives in the
// machine config; the agent refuses the change (Unsupported) and touches nothing.
func TestAChangeTheOSCannotPersistIsRefusedUntouched(t *testing.T) {
	bond := onPlayedBond(t, nwv1.BondModeActiveBackup)
	b := &agent.Bonds{Net: bond, OS: hostos.Talos{}, HostRoot: t.TempDir(), StateDir: t.TempDir(), Profiles: singleNode{}}
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "nodewright-system", Name: "flip-talos", UID: "talos-1"},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-1", Type: nwv1.OperationSetBondMode, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD}}}
	_, err := b.Executors()[nwv1.OperationSetBondMode].Run(context.Background(), op)
	var failed *agent.OperationError
	if !errors.As(err, &failed) || failed.Reason != "Unsupported" || !strings.Contains(failed.Message, "machine.network") {
		t.Fatalf("on Talos: %v; want Unsupported naming machine.network", err)
	}
	if _, err := os.Stat(bond.ChangesFile(netsite.Bond)); !os.IsNotExist(err) {
		t.Errorf("the bond was changed on Talos")
	}
}

// TestRecoverFinishesARestore: killed in the middle of a rollback (RollingBack recorded, the
// mode already restored, the file not yet), the agent finishes the restore as it starts; a
// commit then finds nothing to commit, never a change the host no longer runs. Beside it, a
// checkpoint file that cannot be read is set aside, does not stop the recovery, and refuses
// new bond changes until a person removes it.
func TestRecoverFinishesARestore(t *testing.T) {
	bond := onPlayedBond(t, nwv1.BondModeActiveBackup)
	root, state := t.TempDir(), t.TempDir()
	files, _ := hostos.BondFiles(hostos.SystemdNetworkd{}, hostos.BondConfig{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD})
	if err := hostos.WriteFiles(root, files); err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, state, "uid-rolling", "flip-rolling", "RollingBack", files, time.Now().Add(time.Minute))
	if err := os.WriteFile(filepath.Join(state, "checkpoint-uid-torn.json"), []byte(`{"operation": "uid-torn", "sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &agent.Bonds{Net: bond, OS: hostos.SystemdNetworkd{}, HostRoot: root, StateDir: state}
	if err := b.Recover(context.Background()); err != nil {
		t.Fatalf("Recover stopped at the unreadable checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, files[0].Path)); !os.IsNotExist(err) {
		t.Errorf("the restore was not finished: the file the change wrote is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(state, "checkpoint-uid-torn.json.unreadable")); err != nil {
		t.Errorf("the unreadable checkpoint was not set aside: %v", err)
	}
	commit := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "nodewright-system", Name: "commit", UID: "uid-commit"},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-1", Type: nwv1.OperationCommitCheckpoint, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			CommitCheckpoint: &nwv1.CommitCheckpointOperation{Bond: netsite.Bond}}}
	var failed *agent.OperationError
	if _, err := b.Executors()[nwv1.OperationCommitCheckpoint].Run(context.Background(), commit); !errors.As(err, &failed) || failed.Reason != "NoCheckpoint" {
		t.Errorf("a commit after the finished restore: %v; want NoCheckpoint", err)
	}
	flip := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: "nodewright-system", Name: "flip-next", UID: "uid-next"},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-1", Type: nwv1.OperationSetBondMode, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			SetBondMode: &nwv1.SetBondModeOperation{Bond: netsite.Bond, Mode: nwv1.BondMode8023AD}}}
	if _, err := b.Executors()[nwv1.OperationSetBondMode].Run(context.Background(), flip); !errors.As(err, &failed) || failed.Reason != "CheckpointUnreadable" {
		t.Errorf("a change beside an unreadable checkpoint: %v; want CheckpointUnreadable", err)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

// Upgrades are cluster-scoped: each test names its own and deletes them when it ends.

// upgradeNamed is the upgrade name, to read or delete.
func upgradeNamed(name string) *nwv1.ReplicationUpgrade {
	return &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// Without the operator's webhooks the API server stores what the plugin sends, with the CRD's
// defaults: the flags become the spec.
func TestUpgradeCreatesTheUpgrade(t *testing.T) {
	deleteWhenDone(t, upgradeNamed("to-three"))
	r := plugin(t, runOpts{}, "upgrade", "--peer", "edge-2", "--peer", "edge-3", "--replicas", "3", "--sync-timeout", "12h",
		"--approval", "MANUAL", "--maintenance-window", "Sat 22:00-04:00 Europe/Berlin", "to-three")
	r.wantCode(t, ExitOK)
	if want := "replicationupgrade/to-three created: peers edge-2, edge-3, 3 replicas of each volume, sync timeout 12h00m, approval Manual, " +
		"maintenance window Saturday 22:00-04:00 Europe/Berlin\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q", r.stdout, r.stderr, want)
	}
	want := nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2", "edge-3"}, ReplicaCount: 3, SyncTimeout: metav1.Duration{Duration: 12 * time.Hour},
		Approval: nwv1.ApprovalManual, MaintenanceWindow: &nwv1.MaintenanceWindow{Days: []nwv1.Weekday{"Saturday"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}}
	if got := readBack(t, upgradeNamed("to-three")).Spec; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("spec %+v\nwant %+v", got, want)
	}

	// A tiebreaker, the peers comma-separated, the name with --name (one of a subcommand's).
	deleteWhenDone(t, upgradeNamed("watch"))
	r = plugin(t, runOpts{}, "upgrade", "--peer", "edge-2,edge-3", "--tiebreaker", "edge-3", "--name", "watch")
	r.wantCode(t, ExitOK)
	if want := "replicationupgrade/watch created: peers edge-2, edge-3 (edge-3 the tiebreaker, without data), 2 replicas of each volume, sync timeout 6h00m, approval Automatic\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if s := readBack(t, upgradeNamed("watch")).Spec; s.TiebreakerNode != "edge-3" || s.ReplicaCount != 2 {
		t.Errorf("spec %+v", s)
	}

	// Only --peer: the name is upgrade- and five characters; the CRD's defaults are said.
	r = plugin(t, runOpts{}, "upgrade", "--peer", "edge-2")
	r.wantCode(t, ExitOK)
	name := regexp.MustCompile(`^replicationupgrade/(upgrade-[a-z0-9]{5}) created: peer edge-2, 2 replicas of each volume, sync timeout 6h00m, approval Automatic\n$`).FindStringSubmatch(r.stdout)
	if name == nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	deleteWhenDone(t, upgradeNamed(name[1]))

	// -o json and yaml print the object the API server returned.
	deleteWhenDone(t, upgradeNamed("to-two-json"))
	r = plugin(t, runOpts{}, "upgrade", "--peer", "edge-2", "to-two-json", "-o", "json")
	r.wantCode(t, ExitOK)
	var printed nwv1.ReplicationUpgrade
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Kind != "ReplicationUpgrade" || printed.UID == "" ||
		printed.ManagedFields != nil || printed.Spec.ReplicaCount != 2 {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	deleteWhenDone(t, upgradeNamed("to-two-yaml"))
	r = plugin(t, runOpts{}, "upgrade", "--peer", "edge-2", "to-two-yaml", "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: ReplicationUpgrade\n") || !strings.Contains(r.stdout, "  - edge-2\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}
}

// Each mistake is a usage error that names the flag and says what it wants, checked as the
// API server would check it; nothing is created.
func TestUpgradeUsageErrors(t *testing.T) {
	wantUsageErrors(t, func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} }, []usageCase{
		{[]string{"upgrade"}, "Error: --peer NODE is required: the nodes that join the storage node (one or two)"},
		{[]string{"upgrade", "--peer", "a,b,c"}, "Error: --peer a,b,c: at most 2 nodes, got 3"},
		{[]string{"upgrade", "--peer", "a", "--peer", "a"}, "Error: --peer: node a is named twice"},
		{[]string{"upgrade", "--peer", "Edge_2"}, `Error: --peer: "Edge_2" is not a node name: a lowercase RFC 1123 subdomain`},
		{[]string{"upgrade", "--peer", "a", "--replicas", "4"}, "Error: --replicas 4: must be 2 or 3 (the replicas with data each volume ends with, the storage node's among them)"},
		{[]string{"upgrade", "--peer", "a", "--replicas", "two"}, `Error: invalid argument "two" for "--replicas" flag`},
		{[]string{"upgrade", "--peer", "a", "--replicas", "3"}, "Error: --replicas 3: more than the 2 data nodes (the storage node and the --peer nodes): name another --peer, or fewer replicas"},
		{[]string{"upgrade", "--peer", "a", "--tiebreaker", "a"}, "Error: --replicas 2 (the default): more than the 1 data nodes (the storage node and the --peer nodes but the tiebreaker)"},
		{[]string{"upgrade", "--peer", "a,b", "--tiebreaker", "b", "--replicas", "3"}, "Error: --replicas 3: more than the 2 data nodes"},
		{[]string{"upgrade", "--peer", "a,b", "--tiebreaker", "c"}, "Error: --tiebreaker c: not one of --peer (a, b): the tiebreaker is a joining node that holds no data"},
		{[]string{"upgrade", "--peer", "a", "--sync-timeout", "30s"}, "Error: --sync-timeout 30s: must be between 1m and 48h"},
		{[]string{"upgrade", "--peer", "a", "--sync-timeout", "49h"}, "Error: --sync-timeout 49h0m0s: must be between 1m and 48h"},
		{[]string{"upgrade", "--peer", "a", "--approval", "later"}, `Error: --approval "later": want one of Automatic, Manual`},
		{[]string{"upgrade", "--peer", "a", "--maintenance-window", "nights"}, `Error: --maintenance-window "nights": want "[DAYS ]HH:MM-HH:MM[ TIMEZONE]"`},
		{[]string{"upgrade", "--peer", "a", "To_Two"}, `Error: NAME "To_Two": a lowercase RFC 1123 subdomain`},
		{[]string{"upgrade", "--peer", "a", "--name", "x", "y"}, "Error: --name x and NAME y: give the name once"},
		{[]string{"upgrade", "--peer", "a", "x", "y"}, "Error: kubectl nodewright upgrade wants at most one NAME, got 2 arguments"},
		{[]string{"upgrade", "--peer", "a", "--timeout", "5m"}, "Error: --timeout needs --wait"},
		{[]string{"upgrade", "--peer", "a", "--wait", "-o", "json"}, "Error: --wait writes the upgrade's progress; it cannot be combined with --output json"},
		{[]string{"upgrade", "watch"}, "Error: kubectl nodewright upgrade watch wants the NAME of a ReplicationUpgrade, got 0 arguments"},
		{[]string{"upgrade", "list", "extra"}, `Error: unknown command "extra" for "kubectl nodewright upgrade list"`},
	})
}

func TestUpgradeList(t *testing.T) {
	wantNoneListed(t, func() client.ObjectList { return &nwv1.ReplicationUpgradeList{} }, "No ReplicationUpgrades found.", "upgrade", "list")

	manual := manualUpgradeStory(t, "list-manual")
	rolledBack := rolledBackUpgradeStory(t, "list-rolledback")
	waiting := upgradeHeldAt(t, manual, "Verify")
	syncing := firstVersion(t, manual, "two replicas syncing", func(u *nwv1.ReplicationUpgrade) bool { return len(u.Status.Syncing) == 2 })
	syncing.Name = "list-syncing"
	rollingBack := firstVersion(t, rolledBack, "the replicas being removed", func(u *nwv1.ReplicationUpgrade) bool { return u.Status.Progress == "removed 3/8" })
	rollingBack.Name = "list-rollingback"
	pending := manual[0].Obj.DeepCopy()
	pending.Name, pending.Status = "list-pending", nwv1.ReplicationUpgradeStatus{}
	for _, u := range []*nwv1.ReplicationUpgrade{waiting, syncing, rollingBack, rolledBack[len(rolledBack)-1].Obj, pending} {
		storeWorkflow(t, u)
	}

	r := plugin(t, runOpts{}, "upgrade", "list")
	r.wantCode(t, ExitOK)
	wantAll(t, "upgrade list", ages.ReplaceAllString(r.stdout, "   AGE"),
		"NAME               PEERS           PHASE         STAGE                       PROGRESS      HELD BY            AGE\n",
		"list-manual        edge-2,edge-3   Running       4/6 Verify (waiting)        synced 4/4    AwaitingApproval   AGE\n",
		"list-pending       edge-2,edge-3   Pending       -                           -             -                  AGE\n",
		"list-rolledback    edge-2,edge-3   RolledBack    3/6 Sync (failed)           -             -                  AGE\n",
		"list-rollingback   edge-2,edge-3   RollingBack   RemoveReplicas (rollback)   removed 3/8   -                  AGE\n",
		"list-syncing       edge-2,edge-3   Running       3/6 Sync                    synced 2/4    -                  AGE\n")

	r = plugin(t, runOpts{}, "upgrade", "list", "-o", "json")
	r.wantCode(t, ExitOK)
	var list nwv1.ReplicationUpgradeList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	found := false
	for _, u := range list.Items {
		found = found || u.Name == "list-syncing" && u.Kind == "ReplicationUpgrade" && u.ManagedFields == nil && len(u.Status.Syncing) == 2
	}
	if list.Kind != "ReplicationUpgradeList" || !found {
		t.Errorf("-o json:\n%s", r.stdout)
	}
	r = plugin(t, runOpts{}, "upgrade", "ls", "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: ReplicationUpgradeList\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}
}

// upgrade watch, driven by the API server's watch as the story's versions are written, writes
// exactly the log of the golden file (times aside), and --wait gives the outcome's exit code.
func TestUpgradeWatchFollowsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		story string
		args  []string
		code  int
	}{
		{"upgrade-manual-succeeded", []string{"--wait"}, ExitOK},
		{"upgrade-rolledback", []string{"--wait"}, ExitFailed},
		{"upgrade-rolledback", nil, ExitOK}, // without --wait, ending is all that counts
	} {
		t.Run(c.story+strings.Join(c.args, ""), func(t *testing.T) {
			name := "watch-" + strings.TrimPrefix(c.story, "upgrade-") + strings.ReplaceAll(strings.Join(c.args, ""), "--", "-")
			watchReplay(t, "upgrade", upgradeStories[c.story](t, name), c.story+".lines.golden", "to-three", c.args, c.code)
		})
	}
}

// On a terminal the view is redrawn in place, with the command that approves the waiting
// stage, and then who approved it.
func TestUpgradeWatchOnATerminal(t *testing.T) {
	held := upgradeHeldAt(t, manualUpgradeStory(t, "watch-terminal-upgrade"), "Place")
	r := approvedOnATerminal(t, "upgrade", held, "rupg/watch-terminal-upgrade", "Place")
	if !regexp.MustCompile(`\x1b\[\d+A\x1b\[J`).MatchString(r.stdout) {
		t.Errorf("the second frame does not move back over the first:\n%q", r.stdout)
	}
}

func TestUpgradeWaitEndsEarly(t *testing.T) {
	storeWorkflow(t, manualUpgradeStory(t, "slow-upgrade")[2].Obj) // the Preflight runs
	// --timeout: exit code 3, saying where it stood.
	wantError(t, ExitNotFinished, "Error: timed out after 1s waiting for replicationupgrade/slow-upgrade: phase Running, step Preflight\n",
		"upgrade", "watch", "slow-upgrade", "--wait", "--timeout", "1s")
	// Not there at all: 1 at once.
	wantError(t, ExitFailed, "Error: replicationupgrade/nope not found\n", "upgrade", "watch", "nope", "--wait")
}

// upgrade --wait creates the upgrade and follows it like upgrade watch --wait: 0 when it
// Succeeded, 1 when it rolled back, with how it ended.
func TestUpgradeWait(t *testing.T) {
	for _, c := range []struct {
		story  string
		result []string
		code   int
	}{
		{"upgrade-manual-succeeded", []string{"Result: Succeeded after 4m05s: " + replupgrade.Kind.Succeeded + "\n"}, ExitOK},
		{"upgrade-rolledback", []string{"Result: RolledBack after 10m20s in stage Sync (3 of 6): SyncFailed: ",
			"Rollback: RemoveReplicas Succeeded, RestorePlaceCount Succeeded, RestoreBalance Succeeded\n"}, ExitFailed},
	} {
		t.Run(c.story, func(t *testing.T) {
			name := "wait-" + strings.TrimPrefix(c.story, "upgrade-")
			snaps := upgradeStories[c.story](t, name)
			last := snaps[len(snaps)-1].Obj
			r := createAndEnd(t, func() *nwv1.ReplicationUpgrade { return &nwv1.ReplicationUpgrade{} }, last,
				"upgrade", "--peer", strings.Join(last.Spec.PeerNodes, ","), "--tiebreaker", last.Spec.TiebreakerNode,
				"--replicas", fmt.Sprint(last.Spec.ReplicaCount), name, "--wait", "--timeout", "2m")
			r.wantCode(t, c.code)
			wantAll(t, "stdout", r.stdout, append([]string{"replicationupgrade/" + name + " created: ", "phase " + string(last.Status.Phase) + "\n"}, c.result...)...)
		})
	}
}

// Completion offers the cluster's Nodes for --peer, the peers given for --tiebreaker, the
// approvals, and the upgrades for upgrade watch.
func TestUpgradeCompletion(t *testing.T) {
	for _, node := range []string{"cmpl-up-1", "cmpl-up-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := env.Client.Create(context.Background(), n); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	}
	storeWorkflow(t, manualUpgradeStory(t, "cmpl-upgrade")[0].Obj)
	wantCompletions(t, []completionCase{
		{[]string{"upgrade", "--peer", "cmpl-up"}, "cmpl-up-1\ncmpl-up-2\n:6\n"},
		{[]string{"upgrade", "--peer", "cmpl-up-2,cmpl-"}, "cmpl-up-2,cmpl-up-1\n:6\n"},
		{[]string{"upgrade", "--peer", "cmpl-up-1", "--peer", "cmpl-up-2", "--tiebreaker", ""}, "cmpl-up-1\ncmpl-up-2\n:4\n"},
		{[]string{"upgrade", "--approval", "m"}, "Manual\n:4\n"},
		{[]string{"upgrade", "watch", "cmpl-"}, "cmpl-upgrade\n:4\n"},
	})
}

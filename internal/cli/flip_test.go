package cli

import (
	"context"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Flips are cluster-scoped: each test names its own and deletes them when it ends.

// deleteFlipWhenDone deletes the flip name when the test ends.
func deleteFlipWhenDone(t *testing.T, name string) {
	t.Helper()
	deleteWhenDone(t, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

func getFlip(t *testing.T, name string) *nwv1.BondModeFlipPlan {
	t.Helper()
	f := &nwv1.BondModeFlipPlan{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, f); err != nil {
		t.Fatal(err)
	}
	return f
}

// Without the operator's webhooks the API server stores what the plugin sends, with the CRD's
// defaults: the flags become the spec.
func TestFlipCreatesTheFlip(t *testing.T) {
	deleteFlipWhenDone(t, "to-lacp")
	r := plugin(t, runOpts{}, "flip", "--to", "802.3AD", "--order", "edge-2,edge-3", "--order", "edge-1", "--vm-protection", "stop",
		"--connectivity-timeout", "90s", "--bond", "bond1", "--approval", "manual", "--maintenance-window", "sat, Sunday 22:00-04:00 Europe/Berlin",
		"--name", "to-lacp")
	r.wantCode(t, ExitOK)
	if want := "bondmodeflipplan/to-lacp created: to 802.3ad on bond1, nodes edge-2, edge-3, edge-1 in that order, VM protection Stop, " +
		"connectivity timeout 1m30s, approval Manual, maintenance window Saturday,Sunday 22:00-04:00 Europe/Berlin\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q", r.stdout, r.stderr, want)
	}
	want := nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, BondInterface: "bond1", NodeOrder: []string{"edge-2", "edge-3", "edge-1"},
		VMProtection: nwv1.VMProtectionStop, ConnectivityTimeout: metav1.Duration{Duration: 90 * time.Second}, Approval: nwv1.ApprovalManual,
		MaintenanceWindow: &nwv1.MaintenanceWindow{Days: []nwv1.Weekday{"Saturday", "Sunday"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}}
	if got := getFlip(t, "to-lacp").Spec; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("spec %+v\nwant %+v", got, want)
	}

	// Only --to: the name is flip-to-MODE- and five characters, 802.3ad's dot a dash; the
	// CRD's defaults are said.
	r = plugin(t, runOpts{}, "flip", "--to", "802.3ad")
	r.wantCode(t, ExitOK)
	name := regexp.MustCompile(`^bondmodeflipplan/(flip-to-802-3ad-[a-z0-9]{5}) created: to 802\.3ad on the profile's bond, nodes in the default order \(the primary last\), ` +
		`VM protection LiveMigrate, connectivity timeout 1m00s, approval Automatic\n$`).FindStringSubmatch(r.stdout)
	if name == nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	deleteFlipWhenDone(t, name[1])
	if s := getFlip(t, name[1]).Spec; s.TargetMode != nwv1.BondMode8023AD || s.NodeOrder != nil || s.BondInterface != "" || s.MaintenanceWindow != nil {
		t.Errorf("spec %+v", s)
	}

	// -o json and yaml print the object the API server returned.
	deleteFlipWhenDone(t, "to-lacp-json")
	r = plugin(t, runOpts{}, "flip", "--to", "balance-alb", "--name", "to-lacp-json", "-o", "json")
	r.wantCode(t, ExitOK)
	var printed nwv1.BondModeFlipPlan
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Kind != "BondModeFlipPlan" || printed.UID == "" ||
		printed.ManagedFields != nil || printed.Spec.VMProtection != nwv1.VMProtectionLiveMigrate {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	deleteFlipWhenDone(t, "to-lacp-yaml")
	r = plugin(t, runOpts{}, "flip", "--to", "balance-alb", "--name", "to-lacp-yaml", "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: BondModeFlipPlan\n") || !strings.Contains(r.stdout, "  targetMode: balance-alb\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}
}

// Each mistake is a usage error that names the flag and says what it wants; nothing is created.
func TestFlipUsageErrors(t *testing.T) {
	wantUsageErrors(t, func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} }, []usageCase{
		{[]string{"flip"}, "Error: --to MODE is required: the bond mode every node ends with (balance-rr, active-backup, balance-xor, broadcast, 802.3ad, balance-tlb, balance-alb)"},
		{[]string{"flip", "--to", "lacp"}, `Error: --to "lacp": not a bond mode (LACP is 802.3ad): want one of balance-rr, active-backup, balance-xor, broadcast, 802.3ad, balance-tlb, balance-alb`},
		{[]string{"flip", "--to", "4"}, `Error: --to "4": not a bond mode: want one of`},
		{[]string{"flip", "--to", "802.3ad", "--order", "a,b,c,d"}, "Error: --order a,b,c,d: at most 3 nodes, got 4"},
		{[]string{"flip", "--to", "802.3ad", "--order", "a,b,a"}, "Error: --order: node a is named twice"},
		{[]string{"flip", "--to", "802.3ad", "--order", "Edge_1"}, `Error: --order: "Edge_1" is not a node name: a lowercase RFC 1123 subdomain`},
		{[]string{"flip", "--to", "802.3ad", "--vm-protection", "Migrate"}, `Error: --vm-protection "Migrate": want one of LiveMigrate, Stop, None`},
		{[]string{"flip", "--to", "802.3ad", "--approval", "yes"}, `Error: --approval "yes": want one of Automatic, Manual`},
		{[]string{"flip", "--to", "802.3ad", "--connectivity-timeout", "5s"}, "Error: --connectivity-timeout 5s: must be between 10s and 10m"},
		{[]string{"flip", "--to", "802.3ad", "--connectivity-timeout", "11m"}, "Error: --connectivity-timeout 11m0s: must be between 10s and 10m"},
		{[]string{"flip", "--to", "802.3ad", "--connectivity-timeout", "soon"}, `Error: invalid argument "soon" for "--connectivity-timeout" flag`},
		{[]string{"flip", "--to", "802.3ad", "--bond", "a-very-long-bond-name"}, `Error: --bond "a-very-long-bond-name": not an interface name`},
		{[]string{"flip", "--to", "802.3ad", "--maintenance-window", "at night"}, `Error: --maintenance-window "at night": want "[DAYS ]HH:MM-HH:MM[ TIMEZONE]", e.g. "Sat,Sun 22:00-04:00 Europe/Berlin"`},
		{[]string{"flip", "--to", "802.3ad", "--maintenance-window", "Caturday 22:00-04:00"}, `Error: --maintenance-window "Caturday 22:00-04:00": "Caturday" is not a day of the week`},
		{[]string{"flip", "--to", "802.3ad", "--maintenance-window", "22:00-24:00"}, `Error: --maintenance-window "22:00-24:00": spec.maintenanceWindow.end: "24:00" is not`},
		{[]string{"flip", "--to", "802.3ad", "--maintenance-window", "22:00-04:00 Mars/Olympus_Mons"}, `Error: --maintenance-window "22:00-04:00 Mars/Olympus_Mons": spec.maintenanceWindow.timeZone: `},
		{[]string{"flip", "--to", "802.3ad", "--name", "To_LACP"}, `Error: --name "To_LACP": a lowercase RFC 1123 subdomain`},
		{[]string{"flip", "--to", "802.3ad", "--timeout", "5m"}, "Error: --timeout needs --wait"},
		{[]string{"flip", "--to", "802.3ad", "--wait", "-o", "yaml"}, "Error: --wait writes the flip's progress; it cannot be combined with --output yaml"},
		{[]string{"flip", "somewhere"}, `Error: unknown command "somewhere" for "kubectl nodewright flip"`},
		{[]string{"flip", "watch"}, "Error: kubectl nodewright flip watch wants the NAME of a BondModeFlipPlan, got 0 arguments"},
		{[]string{"flip", "list", "extra"}, `Error: unknown command "extra" for "kubectl nodewright flip list"`},
	})
}

func TestFlipList(t *testing.T) {
	wantNoneListed(t, func() client.ObjectList { return &nwv1.BondModeFlipPlanList{} }, "No BondModeFlipPlans found.", "flip", "list")

	manual := manualSucceededStory(t, "list-manual")
	rolledBack := rolledBackStory(t, "list-rolledback")
	waiting := heldAt(t, manual, "Node2")
	running := firstVersion(t, rolledBack, "Node2 running its Confirm", func(f *nwv1.BondModeFlipPlan) bool {
		st, ok := currentStep(&f.Status.WorkflowStatus)
		return ok && st.Name == "Node2" && strings.HasPrefix(st.Message, "Confirm")
	})
	running.Name = "list-running"
	storeWorkflow(t, waiting)
	storeWorkflow(t, running)
	storeWorkflow(t, rolledBack[len(rolledBack)-1].Obj)
	pending := manual[0].Obj.DeepCopy()
	pending.Name, pending.Status = "list-pending", nwv1.BondModeFlipPlanStatus{}
	storeWorkflow(t, pending)

	r := plugin(t, runOpts{}, "flip", "list")
	r.wantCode(t, ExitOK)
	wantAll(t, "flip list", ages.ReplaceAllString(r.stdout, "   AGE"),
		"NAME              TARGET    PHASE        NODE              STEP              HELD BY            AGE\n",
		"list-manual       802.3ad   Running      edge-2 (2 of 2)   Node2 (waiting)   AwaitingApproval   AGE\n",
		"list-pending      802.3ad   Pending      -                 -                 -                  AGE\n",
		"list-rolledback   802.3ad   RolledBack   -                 -                 -                  AGE\n",
		"list-running      802.3ad   Running      edge-3 (2 of 3)   Node2             -                  AGE\n")

	r = plugin(t, runOpts{}, "flip", "list", "-o", "json")
	r.wantCode(t, ExitOK)
	var list nwv1.BondModeFlipPlanList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	names := map[string]*nwv1.BondModeFlipPlan{}
	for i := range list.Items {
		names[list.Items[i].Name] = &list.Items[i]
	}
	if m := names["list-running"]; list.Kind != "BondModeFlipPlanList" || m == nil || m.Kind != "BondModeFlipPlan" || m.ManagedFields != nil || len(m.Status.Nodes) != 3 {
		t.Errorf("-o json: %v", slices.Sorted(maps.Keys(names)))
	}
	r = plugin(t, runOpts{}, "flip", "list", "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: BondModeFlipPlanList\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}
}

// flip watch, driven by the API server's watch as the story's versions are written, writes
// exactly the log of the golden file (times aside), and --wait gives the outcome's exit code.
func TestFlipWatchFollowsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		story string
		args  []string
		code  int
	}{
		{"flip-manual-succeeded", []string{"--wait"}, ExitOK},
		{"flip-rolledback", []string{"--wait"}, ExitFailed},
		{"flip-rolledback", nil, ExitOK}, // without --wait, ending is all that counts
	} {
		t.Run(c.story+strings.Join(c.args, ""), func(t *testing.T) {
			name := "watch-" + strings.TrimPrefix(c.story, "flip-") + strings.ReplaceAll(strings.Join(c.args, ""), "--", "-")
			watchReplay(t, "flip", flipStories[c.story](t, name), c.story+".lines.golden", "to-lacp", c.args, c.code)
		})
	}
}

// On a terminal the view is redrawn in place, with the command that approves the waiting step.
func TestFlipWatchOnATerminal(t *testing.T) {
	snaps := manualSucceededStory(t, "watch-terminal")
	r := approvedOnATerminal(t, "flip", heldAt(t, snaps, "Node1"), "bondflip/watch-terminal", "Node1")
	if !strings.Contains(r.stdout, "\x1b[9A\x1b[J") {
		t.Errorf("the second frame does not move back over the first:\n%q", r.stdout)
	}
}

func TestFlipWaitEndsEarly(t *testing.T) {
	manual := manualSucceededStory(t, "slow-flip")
	storeWorkflow(t, manual[2].Obj) // the Preflight runs

	// --timeout: exit code 3, saying where it stood.
	wantError(t, ExitNotFinished, "Error: timed out after 1s waiting for bondmodeflipplan/slow-flip: phase Running, step Preflight\n",
		"flip", "watch", "slow-flip", "--wait", "--timeout", "1s")

	// Deleted while waited on: 1.
	out := &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "step Preflight Running")
		_ = env.Client.Delete(context.Background(), &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "slow-flip"}})
	}()
	r := plugin(t, runOpts{stdout: out}, "flip", "watch", "slow-flip", "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: bondmodeflipplan/slow-flip was deleted before it finished (phase Running)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Not there at all: 1 at once.
	wantError(t, ExitFailed, "Error: bondmodeflipplan/nope not found\n", "flip", "watch", "nope", "--wait")
}

// flip --wait creates the flip and follows it like flip watch --wait: 0 when it Succeeded,
// 1 when it rolled back.
func TestFlipWait(t *testing.T) {
	for _, c := range []struct {
		story, result string
		code          int
	}{
		{"flip-manual-succeeded", "Result: Succeeded after 3m26s: every node runs the target bond mode\n", ExitOK},
		{"flip-rolledback", "Result: RolledBack after 3m11s on node edge-3 (2 of 3): Node2Failed: ", ExitFailed},
	} {
		t.Run(c.story, func(t *testing.T) {
			name := "wait-" + strings.TrimPrefix(c.story, "flip-")
			snaps := flipStories[c.story](t, name)
			last := snaps[len(snaps)-1].Obj
			r := createAndEnd(t, func() *nwv1.BondModeFlipPlan { return &nwv1.BondModeFlipPlan{} }, last,
				"flip", "--to", string(last.Spec.TargetMode), "--name", name, "--order", strings.Join(last.Spec.NodeOrder, ","), "--wait", "--timeout", "2m")
			r.wantCode(t, c.code)
			wantAll(t, "stdout", r.stdout, "bondmodeflipplan/"+name+" created: ", "phase "+string(last.Status.Phase)+"\n", c.result)
		})
	}
}

// Completion offers the modes, the enums, the cluster's Nodes for --order (one after the
// other) and the flips for flip watch.
func TestFlipCompletion(t *testing.T) {
	for _, node := range []string{"cmpl-edge-1", "cmpl-edge-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := env.Client.Create(context.Background(), n); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	}
	storeWorkflow(t, manualSucceededStory(t, "cmpl-flip")[0].Obj)
	wantCompletions(t, []completionCase{
		{[]string{"flip", "--to", "8"}, "802.3ad\n:4\n"},
		{[]string{"flip", "--to", "balance-"}, "balance-rr\nbalance-xor\nbalance-tlb\nbalance-alb\n:4\n"},
		{[]string{"flip", "--vm-protection", "l"}, "LiveMigrate\n:4\n"},
		{[]string{"flip", "--approval", ""}, "Automatic\nManual\n:4\n"},
		{[]string{"flip", "--order", "cmpl-"}, "cmpl-edge-1\ncmpl-edge-2\n:6\n"},
		{[]string{"flip", "--order", "cmpl-edge-2,cmpl-"}, "cmpl-edge-2,cmpl-edge-1\n:6\n"},
		{[]string{"flip", "watch", "cmpl-"}, "cmpl-flip\n:4\n"},
	})
}

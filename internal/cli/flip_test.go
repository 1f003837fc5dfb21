package cli

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
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
	t.Cleanup(func() {
		err := env.Client.Delete(context.Background(), &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
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
	before := &nwv1.BondModeFlipPlanList{}
	if err := env.Client.List(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
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
	} {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%v: stderr %q, want it to start with %q and point at --help", c.args, r.stderr, c.want)
		}
	}
	after := &nwv1.BondModeFlipPlanList{}
	if err := env.Client.List(context.Background(), after); err != nil || len(after.Items) != len(before.Items) {
		t.Fatalf("a usage error created something: %v %d flips, %d before", err, len(after.Items), len(before.Items))
	}
}

// storeFlip stores the flip of a story's version with its status (and annotations), as the
// operator and the webhook would have written them, and deletes it when the test ends.
func storeFlip(t *testing.T, v *nwv1.BondModeFlipPlan) *nwv1.BondModeFlipPlan {
	t.Helper()
	ctx := context.Background()
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: v.Name, Annotations: v.Annotations}, Spec: v.Spec}
	if err := env.Client.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	deleteFlipWhenDone(t, v.Name)
	f.Status = *v.Status.DeepCopy()
	if err := env.Client.Status().Update(ctx, f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFlipList(t *testing.T) {
	// None: nothing on standard output, a note on standard error, exit code 0.
	if list := (&nwv1.BondModeFlipPlanList{}); env.Client.List(context.Background(), list) == nil && len(list.Items) == 0 {
		r := plugin(t, runOpts{}, "flip", "list")
		r.wantCode(t, ExitOK)
		if r.stdout != "" || r.stderr != "No BondModeFlipPlans found.\n" {
			t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
		}
	}

	manual := manualSucceededStory(t, "list-manual")
	rolledBack := rolledBackStory(t, "list-rolledback")
	waiting := heldAt(t, manual, "Node2ProtectVMs")
	running := firstVersion(t, rolledBack, "Node2Confirm running", func(f *nwv1.BondModeFlipPlan) bool {
		st, ok := currentStep(&f.Status.WorkflowStatus)
		return ok && st.Name == "Node2Confirm"
	})
	running.Name = "list-running"
	storeFlip(t, waiting)
	storeFlip(t, running)
	storeFlip(t, rolledBack[len(rolledBack)-1].Flip)
	pending := manual[0].Flip.DeepCopy()
	pending.Name, pending.Status = "list-pending", nwv1.BondModeFlipPlanStatus{}
	storeFlip(t, pending)

	r := plugin(t, runOpts{}, "flip", "list")
	r.wantCode(t, ExitOK)
	got := regexp.MustCompile(`(?m)   \d+s$`).ReplaceAllString(r.stdout, "   AGE")
	wantAll(t, "flip list", got,
		"NAME              TARGET    PHASE        NODE              STEP                        HELD BY            AGE\n",
		"list-manual       802.3ad   Running      edge-2 (2 of 2)   Node2ProtectVMs (waiting)   AwaitingApproval   AGE\n",
		"list-pending      802.3ad   Pending      -                 -                           -                  AGE\n",
		"list-rolledback   802.3ad   RolledBack   -                 -                           -                  AGE\n",
		"list-running      802.3ad   Running      edge-3 (2 of 3)   Node2Confirm                -                  AGE\n")

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

// replayFlip stores the first version of a story's flip and, once the watch has shown it,
// writes each later version: its annotations as the approve command and the webhook would,
// its status through the status subresource as the operator would. The test waits for the
// returned channel before it ends.
func replayFlip(t *testing.T, snaps []flipSnapshot, shown func()) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	f := storeFlip(t, snaps[0].Flip)
	done := make(chan struct{})
	go func() {
		defer close(done)
		shown()
		prev := snaps[0].Flip
		for i, s := range snaps[1:] {
			if !equality.Semantic.DeepEqual(prev.Annotations, s.Flip.Annotations) {
				f.Annotations = s.Flip.Annotations
				if err := env.Client.Update(ctx, f); err != nil {
					t.Errorf("writing the annotations of version %d: %v", i+2, err)
					return
				}
			}
			if !equality.Semantic.DeepEqual(prev.Status, s.Flip.Status) {
				f.Status = *s.Flip.Status.DeepCopy()
				if err := env.Client.Status().Update(ctx, f); err != nil {
					t.Errorf("writing version %d: %v", i+2, err)
					return
				}
			}
			prev = s.Flip
		}
	}()
	return done
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
			name := "watch-" + strings.TrimPrefix(c.story, "flip-") + strings.Join(c.args, "")
			name = strings.ReplaceAll(name, "--", "-")
			snaps := flipStories[c.story](t, name)
			out := &testenv.SyncBuffer{}
			replayed := replayFlip(t, snaps, func() { waitForOutput(out, "phase Pending") })
			r := plugin(t, runOpts{stdout: out}, append([]string{"flip", "watch", name}, c.args...)...)
			<-replayed
			r.wantCode(t, c.code)
			want, err := os.ReadFile(filepath.Join("testdata", c.story+".lines.golden"))
			if err != nil {
				t.Fatal(err)
			}
			expected := strings.ReplaceAll(timestamps.ReplaceAllString(string(want), "T "), "to-lacp", name)
			if got := timestamps.ReplaceAllString(r.stdout, "T "); got != expected {
				t.Errorf("watch log:\n%s\nwant:\n%s", got, expected)
			}
			if r.stderr != "" {
				t.Errorf("stderr %q", r.stderr)
			}
		})
	}
}

// On a terminal the view is redrawn in place, with the command that approves the waiting step.
func TestFlipWatchOnATerminal(t *testing.T) {
	snaps := manualSucceededStory(t, "watch-terminal")
	storeFlip(t, heldAt(t, snaps, "Node1ProtectVMs"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() {
		done <- plugin(t, runOpts{ctx: ctx, stdout: out, terminal: true}, "flip", "watch", "watch-terminal")
	}()
	waitForOutput(out, "Approve it: kubectl nodewright approve bondflip/watch-terminal --step Node1ProtectVMs")
	ctx2 := context.Background()
	f := getFlip(t, "watch-terminal")
	f.Annotations = map[string]string{nwv1.AnnotationApprove: "Node1ProtectVMs", nwv1.AnnotationApprovedBy: "ada@example.com"}
	if err := env.Client.Update(ctx2, f); err != nil {
		t.Fatal(err)
	}
	waitForOutput(out, "step Node1ProtectVMs is approved by ada@example.com")
	cancel()
	r := <-done
	r.wantCode(t, ExitNotFinished) // interrupted, as migrate watch
	if !strings.Contains(r.stdout, "\x1b[9A\x1b[J") {
		t.Errorf("the second frame does not move back over the first:\n%q", r.stdout)
	}
	if !strings.Contains(r.stdout, "step Node1ProtectVMs is approved by ada@example.com") {
		t.Errorf("the approval is not shown:\n%s", r.stdout)
	}
}

func TestFlipWaitEndsEarly(t *testing.T) {
	manual := manualSucceededStory(t, "slow-flip")
	storeFlip(t, manual[2].Flip) // the Preflight runs

	// --timeout: exit code 3, saying where it stood.
	r := plugin(t, runOpts{}, "flip", "watch", "slow-flip", "--wait", "--timeout", "1s")
	r.wantCode(t, ExitNotFinished)
	if want := "Error: timed out after 1s waiting for bondmodeflipplan/slow-flip: phase Running, step Preflight\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Deleted while waited on: 1.
	out := &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "step Preflight Running")
		_ = env.Client.Delete(context.Background(), &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "slow-flip"}})
	}()
	r = plugin(t, runOpts{stdout: out}, "flip", "watch", "slow-flip", "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: bondmodeflipplan/slow-flip was deleted before it finished (phase Running)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Not there at all: 1 at once.
	r = plugin(t, runOpts{}, "flip", "watch", "nope", "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: bondmodeflipplan/nope not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// flip --wait creates the flip and follows it like flip watch --wait: 0 when it Succeeded,
// 1 when it rolled back.
func TestFlipWait(t *testing.T) {
	for _, c := range []struct {
		story, result string
		code          int
	}{
		{"flip-manual-succeeded", "Result: Succeeded after 3m26s: every node runs the target bond mode\n", ExitOK},
		{"flip-rolledback", "Result: RolledBack after 3m11s on node edge-3 (2 of 3): Node2ConfirmFailed: ", ExitFailed},
	} {
		t.Run(c.story, func(t *testing.T) {
			name := "wait-" + strings.TrimPrefix(c.story, "flip-")
			deleteFlipWhenDone(t, name)
			snaps := flipStories[c.story](t, name)
			last := snaps[len(snaps)-1].Flip
			out := &testenv.SyncBuffer{}
			written := make(chan struct{})
			go func() {
				defer close(written)
				waitForOutput(out, "phase Pending")
				f := &nwv1.BondModeFlipPlan{}
				if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, f); err != nil {
					t.Error(err)
					return
				}
				f.Status = *last.Status.DeepCopy()
				if err := env.Client.Status().Update(context.Background(), f); err != nil {
					t.Error(err)
				}
			}()
			args := []string{"flip", "--to", string(last.Spec.TargetMode), "--name", name, "--order", strings.Join(last.Spec.NodeOrder, ","), "--wait", "--timeout", "2m"}
			r := plugin(t, runOpts{stdout: out}, args...)
			<-written
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
	storeFlip(t, manualSucceededStory(t, "cmpl-flip")[0].Flip)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"flip", "--to", "8"}, "802.3ad\n:4\n"},
		{[]string{"flip", "--to", "balance-"}, "balance-rr\nbalance-xor\nbalance-tlb\nbalance-alb\n:4\n"},
		{[]string{"flip", "--vm-protection", "l"}, "LiveMigrate\n:4\n"},
		{[]string{"flip", "--approval", ""}, "Automatic\nManual\n:4\n"},
		{[]string{"flip", "--order", "cmpl-"}, "cmpl-edge-1\ncmpl-edge-2\n:6\n"},
		{[]string{"flip", "--order", "cmpl-edge-2,cmpl-"}, "cmpl-edge-2,cmpl-edge-1\n:6\n"},
		{[]string{"flip", "watch", "cmpl-"}, "cmpl-flip\n:4\n"},
	} {
		r := plugin(t, runOpts{}, append([]string{"__complete"}, c.args...)...)
		if !strings.HasPrefix(r.stdout, c.want) {
			t.Errorf("completing %v: %q, want %q", c.args, r.stdout, c.want)
		}
	}
}

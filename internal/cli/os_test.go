package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// OSVersionPolicies are cluster-scoped: each test names its own and deletes them when it ends.

const (
	osImageV2 = "quay.io/kairos/ubuntu:24.04-v2@sha256:" + "2222222222222222222222222222222222222222222222222222222222222222"
	osBootV1  = "quay.io/kairos/ubuntu:24.04-v1"
	osBootV2  = "quay.io/kairos/ubuntu:24.04-v2"
)

func getOSPolicy(t *testing.T, name string) *nwv1.OSVersionPolicy {
	t.Helper()
	p := &nwv1.OSVersionPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Without the operator's webhooks the API server stores what the plugin sends, with the CRD's
// defaults: the flags become the spec, --ack the annotation.
func TestOSPlanCreatesThePolicy(t *testing.T) {
	deleteWhenDone(t, &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "to-v2"}})
	r := plugin(t, runOpts{}, "os", "plan", "--image", osImageV2, "--order", "edge-2,edge-1", "--selector", "ring=canary",
		"--hold", "edge-3=RMA pending", "--soak", "30m", "--reboot-timeout", "20m", "--vm-protection", "stop", "--upgrade-recovery", "--ack", "edge-2",
		"--approval", "manual", "--maintenance-window", "Sat 22:00-04:00 Europe/Berlin", "--name", "to-v2")
	r.wantCode(t, ExitOK)
	if want := "osversionpolicy/to-v2 created: to " + osImageV2 + ", the nodes ring=canary selects, edge-2, edge-1 first in that order, " +
		"holding edge-3 (RMA pending), soak 30m00s, reboot timeout 20m00s, VM protection Stop, recovery upgrade AfterSoak, fallback acknowledged on edge-2, " +
		"approval Manual, maintenance window Saturday 22:00-04:00 Europe/Berlin\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q", r.stdout, r.stderr, want)
	}
	got := getOSPolicy(t, "to-v2")
	want := nwv1.OSVersionPolicySpec{Image: osImageV2, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ring": "canary"}},
		NodeOrder: []string{"edge-2", "edge-1"}, Hold: []nwv1.OSNodeHold{{Node: "edge-3", Reason: "RMA pending"}},
		Soak: metav1.Duration{Duration: 30 * time.Minute}, RebootTimeout: metav1.Duration{Duration: 20 * time.Minute},
		VMProtection: nwv1.VMProtectionStop, UpgradeRecovery: nwv1.RecoveryUpgradeAfterSoak, Approval: nwv1.ApprovalManual,
		MaintenanceWindow: &nwv1.MaintenanceWindow{Days: []nwv1.Weekday{"Saturday"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}}
	if !equality.Semantic.DeepEqual(got.Spec, want) {
		t.Errorf("spec %+v\nwant %+v", got.Spec, want)
	}
	if a := got.Annotations[nwv1.AnnotationAcknowledgeFallback]; a != "edge-2" {
		t.Errorf("acknowledge-fallback %q, want edge-2", a)
	}

	// Only --image: the name is os-, the tag and five characters; the CRD's defaults are said.
	r = plugin(t, runOpts{}, "os", "plan", "--image", osImageV2)
	r.wantCode(t, ExitOK)
	name := regexp.MustCompile(`^osversionpolicy/(os-24-04-v2-[a-z0-9]{5}) created: to \S+, every node in the default order \(the primary last\), ` +
		`soak 10m00s, reboot timeout 15m00s, VM protection LiveMigrate, recovery upgrade Never, approval Automatic\n$`).FindStringSubmatch(r.stdout)
	if name == nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	deleteWhenDone(t, &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name[1]}})
	if s := getOSPolicy(t, name[1]).Spec; s.Image != osImageV2 || s.NodeOrder != nil || s.NodeSelector != nil || s.Hold != nil {
		t.Errorf("spec %+v", s)
	}

	// -o yaml prints the object the API server returned.
	deleteWhenDone(t, &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "to-v2-yaml"}})
	r = plugin(t, runOpts{}, "os", "plan", "--image", osImageV2, "--name", "to-v2-yaml", "-o", "yaml")
	r.wantCode(t, ExitOK)
	wantAll(t, "-o yaml", r.stdout, "kind: OSVersionPolicy\n", "  image: "+osImageV2+"\n", "  soak: 10m0s\n")
}

// Each mistake is a usage error that names the flag and says what it wants; nothing is created.
func TestOSPlanUsageErrors(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("a", 64)
	wantUsageErrors(t, func() client.ObjectList { return &nwv1.OSVersionPolicyList{} }, []usageCase{
		{[]string{"os", "plan"}, "Error: --image REPOSITORY:TAG@sha256:DIGEST is required"},
		{[]string{"os", "plan", "--image", "quay.io/kairos/ubuntu:v2"}, `Error: --image "quay.io/kairos/ubuntu:v2": not pinned by digest`},
		{[]string{"os", "plan", "--image", "quay.io/kairos/ubuntu@sha256:abc"}, `Error: --image "quay.io/kairos/ubuntu@sha256:abc": not pinned by digest`},
		{[]string{"os", "plan", "--image", "quay.io/kairos/ubuntu" + digest}, `Error: --image "quay.io/kairos/ubuntu@sha256:aaaa`},
		{[]string{"os", "plan", "--image", "Quay.io/Kairos:v2" + digest}, `Error: --image "Quay.io/Kairos:v2@sha256:aaaa`},
		{[]string{"os", "plan", "--image", osImageV2, "--order", "a,b,a"}, "Error: --order: node a is named twice"},
		{[]string{"os", "plan", "--image", osImageV2, "--order", "Edge_1"}, `Error: --order: "Edge_1" is not a node name`},
		{[]string{"os", "plan", "--image", osImageV2, "--selector", "ring in canary"}, `Error: --selector "ring in canary": `},
		{[]string{"os", "plan", "--image", osImageV2, "--hold", "edge-3"}, `Error: --hold "edge-3": want NODE=REASON`},
		{[]string{"os", "plan", "--image", osImageV2, "--hold", "edge-3="}, `Error: --hold "edge-3=": want NODE=REASON`},
		{[]string{"os", "plan", "--image", osImageV2, "--hold", "Edge_3=x"}, `Error: --hold: "Edge_3" is not a node name`},
		{[]string{"os", "plan", "--image", osImageV2, "--hold", "edge-3=a", "--hold", "edge-3=b"}, "Error: --hold: node edge-3 is named twice"},
		{[]string{"os", "plan", "--image", osImageV2, "--hold", "edge-3=" + strings.Repeat("x", 257)}, "Error: --hold edge-3: the reason has 257 characters, at most 256"},
		{[]string{"os", "plan", "--image", osImageV2, "--order", "edge-3", "--hold", "edge-3=x"}, "Error: --hold edge-3: the node is in --order too"},
		{[]string{"os", "plan", "--image", osImageV2, "--soak", "5s"}, "Error: --soak 5s: must be between 10s and 24h"},
		{[]string{"os", "plan", "--image", osImageV2, "--vm-protection", "migrate"}, "Error: --vm-protection \"migrate\": want one of LiveMigrate, Stop, None"},
		{[]string{"os", "plan", "--image", osImageV2, "--soak", "25h"}, "Error: --soak 25h0m0s: must be between 10s and 24h"},
		{[]string{"os", "plan", "--image", osImageV2, "--soak", "long"}, `Error: invalid argument "long" for "--soak" flag`},
		{[]string{"os", "plan", "--image", osImageV2, "--reboot-timeout", "10s"}, "Error: --reboot-timeout 10s: must be between 30s and 2h"},
		{[]string{"os", "plan", "--image", osImageV2, "--ack", "edge-2,edge-2"}, "Error: --ack: node edge-2 is named twice"},
		{[]string{"os", "plan", "--image", osImageV2, "--approval", "yes"}, `Error: --approval "yes": want one of Automatic, Manual`},
		{[]string{"os", "plan", "--image", osImageV2, "--maintenance-window", "at night"}, `Error: --maintenance-window "at night": want`},
		{[]string{"os", "plan", "--image", osImageV2, "--name", "To_V2"}, `Error: --name "To_V2": a lowercase RFC 1123 subdomain`},
		{[]string{"os", "plan", "--image", osImageV2, "--wait", "-o", "yaml"}, "Error: --wait writes the policy's progress; it cannot be combined with --output yaml"},
		{[]string{"os", "plan", "extra"}, `Error: unknown command "extra" for "kubectl nodewright os plan"`},
		{[]string{"os", "watch"}, "Error: kubectl nodewright os watch wants the NAME of a OSVersionPolicy, got 0 arguments"},
		{[]string{"os", "ack", "to-v2"}, "Error: kubectl nodewright os ack wants the NAME of an OSVersionPolicy and at least one NODE, got 1 arguments"},
		{[]string{"os", "ack", "to-v2", "Edge_2"}, `Error: NODE: "Edge_2" is not a node name`},
	})
}

// osStory is a policy of three nodes (edge-4 held) whose second node falls back: the versions
// its controller would write.
func osStory(name string) []storySnapshot[*nwv1.OSVersionPolicy] {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { tm := metav1.NewTime(t0.Add(d)); return &tm }
	p := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.OSVersionPolicySpec{Image: osImageV2, NodeOrder: []string{"edge-1", "edge-2", "edge-3"},
			Hold: []nwv1.OSNodeHold{{Node: "edge-4", Reason: "RMA pending"}}, Soak: metav1.Duration{Duration: time.Minute},
			RebootTimeout: metav1.Duration{Duration: 15 * time.Minute}, UpgradeRecovery: nwv1.RecoveryUpgradeNever, Approval: nwv1.ApprovalAutomatic}}
	gatesOpen := metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: nwv1.ReasonGatesOpen,
		Message: "no gate holds the next step", LastTransitionTime: *at(0)}
	node := func(pos int32, name string, phase nwv1.NodeOSPhase, image string, entry nwv1.KairosBootEntry, part string) nwv1.NodeOSUpgrade {
		return nwv1.NodeOSUpgrade{Name: name, Position: pos, Phase: phase, Target: osImageV2, BootedImage: image, BootEntry: entry, Part: part}
	}
	held := []nwv1.OSNodeHold{{Node: "edge-4", Reason: "RMA pending"}}

	v0 := p.DeepCopy()
	v1 := p.DeepCopy()
	v1.Status = nwv1.OSVersionPolicyStatus{WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning, StartTime: at(0),
		Steps: []nwv1.WorkflowStep{
			{Name: "Preflight", State: nwv1.StepSucceeded, StartedAt: at(0), FinishedAt: at(5 * time.Second), Message: "upgrading to " + osBootV2 + ", in this order: edge-1, edge-2, edge-3; held: edge-4"},
			{Name: "Node1", State: nwv1.StepRunning, StartedAt: at(5 * time.Second), Message: "draining edge-1"},
			{Name: "Node2", State: nwv1.StepPending}, {Name: "Node3", State: nwv1.StepPending}},
		Conditions: []metav1.Condition{gatesOpen}},
		CurrentNode: "edge-1", Progress: "0/3", Held: held,
		Nodes: []nwv1.NodeOSUpgrade{node(1, "edge-1", nwv1.NodeOSDraining, osBootV1, nwv1.KairosBootActive, "Drain"),
			node(2, "edge-2", nwv1.NodeOSPending, osBootV1, nwv1.KairosBootActive, ""),
			node(3, "edge-3", nwv1.NodeOSPending, osBootV1, nwv1.KairosBootActive, "")}}

	v2 := v1.DeepCopy()
	v2.Status.Steps[1] = nwv1.WorkflowStep{Name: "Node1", State: nwv1.StepSucceeded, StartedAt: at(5 * time.Second), FinishedAt: at(2 * time.Minute), Message: "edge-1 booted " + osBootV2 + " and soaked"}
	v2.Status.Steps[2] = nwv1.WorkflowStep{Name: "Node2", State: nwv1.StepRunning, StartedAt: at(2 * time.Minute), Message: "waiting for edge-2's agent to report its new boot"}
	v2.Status.CurrentNode, v2.Status.Progress = "edge-2", "1/3"
	v2.Status.Nodes[0] = node(1, "edge-1", nwv1.NodeOSDone, osBootV2, nwv1.KairosBootActive, "Uncordon")
	v2.Status.Nodes[1] = node(2, "edge-2", nwv1.NodeOSRebooting, osBootV1, nwv1.KairosBootActive, "Reboot")

	v3 := v2.DeepCopy()
	evidence := `boot b-1 → b-2; /etc/kairos-release KAIROS_IMAGE_REPO="` + osBootV1 + `", KAIROS_VERSION="v1"; entry Passive; upgrade_failure true`
	v3.Status.Phase, v3.Status.CompletionTime = nwv1.WorkflowFailed, at(3*time.Minute+30*time.Second)
	v3.Status.Steps[2] = nwv1.WorkflowStep{Name: "Node2", State: nwv1.StepFailed, StartedAt: at(2 * time.Minute), FinishedAt: at(3*time.Minute + 30*time.Second),
		Message: "edge-2 fell back from the image: the policy stops here"}
	v3.Status.CurrentNode = ""
	v3.Status.Nodes[1] = node(2, "edge-2", nwv1.NodeOSFellBack, osBootV1, nwv1.KairosBootPassive, "Verify")
	v3.Status.Nodes[1].Evidence = evidence
	v3.Status.Conditions = []metav1.Condition{gatesOpen, {Type: nwv1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: "Node2Failed",
		Message: "edge-2 fell back from the image", LastTransitionTime: *at(3*time.Minute + 30*time.Second)}}
	snaps := []storySnapshot[*nwv1.OSVersionPolicy]{}
	for i, v := range []*nwv1.OSVersionPolicy{v0, v1, v2, v3} {
		v.CreationTimestamp = metav1.NewTime(t0)
		snaps = append(snaps, storySnapshot[*nwv1.OSVersionPolicy]{At: t0.Add(time.Duration(i) * time.Minute), Obj: v})
	}
	return snaps
}

// os watch, driven by the API server's watch as the story's versions are written through the
// status subresource, writes exactly the log of the golden file (times aside): the nodes'
// phases and booted images, the held node with its reason, the fallback's evidence and how to
// try the image again; --wait gives the outcome's exit code.
func TestOSWatchFollowsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{{[]string{"--wait"}, ExitFailed}, {nil, ExitOK}} {
		t.Run(strings.Join(c.args, ""), func(t *testing.T) {
			name := "os-watch" + strings.ReplaceAll(strings.Join(c.args, ""), "--", "-")
			watchReplay(t, "os", osStory(name), "os-fellback.lines.golden", "to-v2", c.args, c.code)
		})
	}
}

// On a terminal the frame shows each node's phase, booted image and entry and part, the
// evidence under the node that fell back, the held node and the result.
func TestOSWatchFrame(t *testing.T) {
	snaps := osStory("to-v2")
	var frames strings.Builder
	for _, s := range snaps {
		for _, l := range renderOSFrame(s.Obj, s.At) {
			frames.WriteString(l.text + "\n")
		}
		frames.WriteString("----\n")
	}
	want, err := os.ReadFile(filepath.Join("testdata", "os-fellback.frames.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if frames.String() != string(want) {
		t.Errorf("frames:\n%s\nwant:\n%s", frames.String(), want)
	}
}

// A Manual policy's node that waits shows the command that approves it, and approve takes the
// policy by its kind and short names.
func TestOSWatchAndApprove(t *testing.T) {
	v := osStory("os-approve")[2].Obj
	v.Spec.Approval = nwv1.ApprovalManual
	v.Status.Steps[2] = nwv1.WorkflowStep{Name: "Node2", State: nwv1.StepWaiting, Message: "waits for approval"}
	v.Status.Nodes[1] = nwv1.NodeOSUpgrade{Name: "edge-2", Position: 2, Phase: nwv1.NodeOSPending}
	v.Status.Conditions[0] = metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: nwv1.ReasonAwaitingApproval,
		Message: "step Node2 waits for approval", LastTransitionTime: metav1.Now()}
	approvedOnATerminal(t, "os", v, "osvp/os-approve", "Node2")

	for i, kind := range []string{"osversionpolicy", "OSVP", "osversion", "osversionpolicies"} {
		w := osStory("os-approve-" + strings.ToLower(kind))[2].Obj
		w.Spec.Approval = nwv1.ApprovalManual
		w.Status.Steps[2] = nwv1.WorkflowStep{Name: "Node2", State: nwv1.StepWaiting}
		w.Status.Conditions[0] = v.Status.Conditions[0]
		stored := storeWorkflow(t, w)
		r := plugin(t, runOpts{}, "approve", kind+"/"+w.Name)
		r.wantCode(t, ExitOK)
		if want := "osversionpolicy/" + w.Name + ": approved step Node2\n"; r.stdout != want {
			t.Errorf("%d: stdout %q, want %q", i, r.stdout, want)
		}
		if a := annotations(t, stored); a[nwv1.AnnotationApprove] != "Node2" {
			t.Errorf("%s: annotations %v", kind, a)
		}
	}
}

func TestOSList(t *testing.T) {
	wantNoneListed(t, func() client.ObjectList { return &nwv1.OSVersionPolicyList{} }, "No OSVersionPolicies found.", "os", "list")
	snaps := osStory("list-os-fellback")
	storeWorkflow(t, snaps[3].Obj)
	running := snaps[2].Obj.DeepCopy()
	running.Name = "list-os-running"
	storeWorkflow(t, running)
	pending := snaps[0].Obj.DeepCopy()
	pending.Name = "list-os-pending"
	storeWorkflow(t, pending)
	waiting := snaps[2].Obj.DeepCopy()
	waiting.Name, waiting.Spec.Approval = "list-os-waiting", nwv1.ApprovalManual
	waiting.Status.Steps[2] = nwv1.WorkflowStep{Name: "Node2", State: nwv1.StepWaiting}
	waiting.Status.Nodes[1].Phase = nwv1.NodeOSPending
	waiting.Status.Conditions[0] = metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: nwv1.ReasonAwaitingApproval,
		Message: "step Node2 waits for approval", LastTransitionTime: metav1.Now()}
	storeWorkflow(t, waiting)

	r := plugin(t, runOpts{}, "os", "list")
	r.wantCode(t, ExitOK)
	img := "quay.io/kairos/ubuntu:24.04-v2@sha256:222222222222"
	wantAll(t, "os list", ages.ReplaceAllString(r.stdout, "   AGE"),
		"NAME               IMAGE                                                PHASE     NODE               DONE   FELL BACK   HELD BY            AGE\n",
		"list-os-fellback   "+img+"   Failed    -                  1/3    edge-2      -                  AGE\n",
		"list-os-pending    "+img+"   Pending   -                  0/3    -           -                  AGE\n",
		"list-os-running    "+img+"   Running   edge-2 Rebooting   1/3    -           -                  AGE\n",
		"list-os-waiting    "+img+"   Running   edge-2 (waiting)   1/3    -           AwaitingApproval   AGE\n")

	r = plugin(t, runOpts{}, "os", "list", "-o", "yaml")
	r.wantCode(t, ExitOK)
	wantAll(t, "-o yaml", r.stdout, "kind: OSVersionPolicyList\n", "phase: FellBack\n")
}

// ack adds the nodes to the acknowledge-fallback annotation, keeping those there, with a merge
// patch; these tests run no webhook, so nothing stamps acknowledged-by, and the command says so
// (cmd/kubectl-nodewright's tests run the operator's webhooks).
func TestOSAck(t *testing.T) {
	pending := osStory("ack-pending")[0].Obj
	pending.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "edge-1", "keep": "me"}
	storeWorkflow(t, pending)

	r := plugin(t, runOpts{}, "os", "ack", "ack-pending", "edge-2", "edge-1", "edge-3")
	r.wantCode(t, ExitOK)
	want := "osversionpolicy/ack-pending: acknowledged the fallback of edge-2, edge-3 (the policy's acknowledge-fallback now names edge-1, edge-2, edge-3)\n" +
		"Not stamped: the policy has no acknowledged-by (is the operator's admission webhook running?)\n" +
		"Next: when the policy starts, it may try " + osBootV2 + " again on edge-2, edge-1, edge-3.\n"
	if r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q\nwant %q", r.stdout, r.stderr, want)
	}
	a := getOSPolicy(t, "ack-pending").Annotations
	if a[nwv1.AnnotationAcknowledgeFallback] != "edge-1,edge-2,edge-3" || a["keep"] != "me" {
		t.Errorf("annotations %v", a)
	}

	// Again: nothing to add, nothing written.
	before := getOSPolicy(t, "ack-pending").ResourceVersion
	r = plugin(t, runOpts{}, "os", "ack", "ack-pending", "edge-2")
	r.wantCode(t, ExitOK)
	wantAll(t, "ack again", r.stdout, "osversionpolicy/ack-pending: edge-2 already acknowledged; nothing changed\n")
	if after := getOSPolicy(t, "ack-pending").ResourceVersion; after != before {
		t.Errorf("written again: resourceVersion %s → %s", before, after)
	}

	// A policy that stopped on a fallback: delete it, create a new one with --ack.
	storeWorkflow(t, osStory("ack-fellback")[3].Obj)
	r = plugin(t, runOpts{}, "os", "ack", "ack-fellback", "edge-2")
	r.wantCode(t, ExitOK)
	wantAll(t, "ack after a fallback", r.stdout,
		"The policy stopped: edge-2 fell back. It does not start again: to try the image there again, delete it and create a new one that acknowledges the node:\n",
		"  kubectl delete osvp ack-fellback && kubectl nodewright os plan --image "+osImageV2+" --ack edge-2 ...\n")

	// A running one: this policy will not try it.
	storeWorkflow(t, osStory("ack-running")[2].Obj)
	r = plugin(t, runOpts{}, "os", "ack", "ack-running", "edge-3")
	r.wantCode(t, ExitOK)
	wantAll(t, "ack while running", r.stdout, "The policy has started (Running): it chose its nodes at its Preflight, and does not try "+osBootV2+" on edge-3.")

	wantError(t, ExitFailed, "Error: osversionpolicy/ack-absent not found\n", "os", "ack", "ack-absent", "edge-2")
}

// The patch ack sends is a merge patch of the annotation alone, carrying the resourceVersion it
// read: a policy changed in between is read again, not overwritten.
func TestOSAckKeepsAConcurrentAcknowledgement(t *testing.T) {
	p := osStory("ack-race")[0].Obj
	storeWorkflow(t, p)
	c := &racingClient{Client: env.Client, race: func() {
		// Someone else acknowledges edge-1 between the read and the patch.
		other := getOSPolicy(t, "ack-race")
		other.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "edge-1"}
		if err := env.Client.Update(context.Background(), other); err != nil {
			t.Error(err)
		}
	}}
	res, err := AcknowledgeFallback(context.Background(), c, "ack-race", []string{"edge-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := getOSPolicy(t, "ack-race").Annotations[nwv1.AnnotationAcknowledgeFallback]; got != "edge-1,edge-2" || c.patches != 2 {
		t.Errorf("acknowledge-fallback %q after %d patches, want edge-1,edge-2 after 2 (the first refused as stale)", got, c.patches)
	}
	if len(res.Added) != 1 || res.Added[0] != "edge-2" {
		t.Errorf("added %v", res.Added)
	}
}

// racingClient runs race once, before the first patch it sends.
type racingClient struct {
	client.Client
	race    func()
	patches int
}

func (c *racingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if c.patches++; c.patches == 1 {
		c.race()
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// These run without the admission webhooks (see main_test.go): the approve annotation is
// stored as the plugin writes it, and nothing stamps approved-by. cmd/kubectl-nodewright's
// tests approve through the operator's webhooks.

// flipSteps are a flip's steps with one of them (step, 1 to 3) Waiting: the ones before it
// Succeeded, the ones after Pending.
func flipSteps(waiting int) []nwv1.WorkflowStep {
	steps := make([]nwv1.WorkflowStep, 3)
	for i := range steps {
		steps[i] = nwv1.WorkflowStep{Name: "Node" + string(rune('1'+i)) + "SetBondMode", State: nwv1.StepPending}
		switch {
		case i+1 < waiting:
			steps[i].State = nwv1.StepSucceeded
		case i+1 == waiting:
			steps[i].State = nwv1.StepWaiting
		}
	}
	return steps
}

// running is the status of a Running workflow with steps, held by the gate reason (none when
// empty), as its controller would write it.
func running(steps []nwv1.WorkflowStep, reason, message string) nwv1.WorkflowStatus {
	held := metav1.Condition{Type: nwv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: nwv1.ReasonGatesOpen,
		Message: "no gate holds the next step", LastTransitionTime: metav1.Now()}
	if reason != "" {
		held.Status, held.Reason, held.Message = metav1.ConditionTrue, reason, message
	}
	return nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning, Steps: steps, Conditions: []metav1.Condition{held}}
}

// createFlip stores a BondModeFlipPlan with status, and deletes it when the test ends.
func createFlip(t *testing.T, name string, approval nwv1.Approval, status nwv1.WorkflowStatus) *nwv1.BondModeFlipPlan {
	t.Helper()
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad", Approval: approval}}
	createWorkflow(t, f, func() { f.Status.WorkflowStatus = status })
	return f
}

// createUpgrade stores a ReplicationUpgrade with status, and deletes it when the test ends.
func createUpgrade(t *testing.T, name string, approval nwv1.Approval, status nwv1.WorkflowStatus) *nwv1.ReplicationUpgrade {
	t.Helper()
	u := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2"}, Approval: approval}}
	createWorkflow(t, u, func() { u.Status.WorkflowStatus = status })
	return u
}

func createWorkflow(t *testing.T, obj client.Object, setStatus func()) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	setStatus()
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// annotations reads obj's annotations from the API server.
func annotations(t *testing.T, obj client.Object) map[string]string {
	t.Helper()
	got := obj.DeepCopyObject().(client.Object)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	return got.GetAnnotations()
}

func TestApproveTheWaitingStep(t *testing.T) {
	flip := createFlip(t, "approve-waiting", nwv1.ApprovalManual,
		running(flipSteps(2), nwv1.ReasonAwaitingApproval, "step Node2SetBondMode waits for approval"))

	r := plugin(t, runOpts{}, "approve", "bondmodeflipplan/approve-waiting")
	r.wantCode(t, ExitOK)
	if want := "bondmodeflipplan/approve-waiting: approved step Node2SetBondMode\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q; want %q", r.stdout, r.stderr, want)
	}
	a := annotations(t, flip)
	if a[nwv1.AnnotationApprove] != "Node2SetBondMode" {
		t.Fatalf("annotations %v; want approve Node2SetBondMode", a)
	}
	if _, ok := a[nwv1.AnnotationApprovedBy]; ok {
		t.Errorf("the plugin wrote approved-by itself: %v", a)
	}

	// Again, with the step named and the kind as a short name in capitals: nothing to do.
	r = plugin(t, runOpts{}, "approve", "BMFP/approve-waiting", "--step", "Node2SetBondMode")
	r.wantCode(t, ExitOK)
	if want := "bondmodeflipplan/approve-waiting: step Node2SetBondMode is already approved\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}

	// Approved while the maintenance window is closed: it says the step still waits for it.
	up := createUpgrade(t, "approve-window", nwv1.ApprovalManual,
		running([]nwv1.WorkflowStep{{Name: "JoinPeers", State: nwv1.StepWaiting}, {Name: "PlaceReplicas", State: nwv1.StepPending}},
			nwv1.ReasonOutsideWindow, "the next maintenance window opens 2026-11-28T22:00:00Z"))
	r = plugin(t, runOpts{}, "approve", "rupg/approve-window")
	r.wantCode(t, ExitOK)
	want := "replicationupgrade/approve-window: approved step JoinPeers\n" +
		"replicationupgrade/approve-window: step JoinPeers still waits for another gate: OutsideMaintenanceWindow: the next maintenance window opens 2026-11-28T22:00:00Z\n"
	if r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if a := annotations(t, up); a[nwv1.AnnotationApprove] != "JoinPeers" {
		t.Fatalf("annotations %v; want approve JoinPeers", a)
	}
}

func TestApproveRefusesWhatDoesNotWait(t *testing.T) {
	waiting := createFlip(t, "approve-refused", nwv1.ApprovalManual,
		running(flipSteps(2), nwv1.ReasonAwaitingApproval, "step Node2SetBondMode waits for approval"))
	nothing := createFlip(t, "approve-nothing", nwv1.ApprovalManual,
		running([]nwv1.WorkflowStep{{Name: "Node1SetBondMode", State: nwv1.StepRunning}}, "", ""))
	automatic := createUpgrade(t, "approve-automatic", nwv1.ApprovalAutomatic,
		running([]nwv1.WorkflowStep{{Name: "JoinPeers", State: nwv1.StepWaiting}}, nwv1.ReasonAnotherWorkflowRunning, "BondModeFlipPlan x has not finished"))
	automaticRunning := createUpgrade(t, "approve-automatic-running", nwv1.ApprovalAutomatic,
		running([]nwv1.WorkflowStep{{Name: "JoinPeers", State: nwv1.StepRunning}}, "", ""))

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"approve", "bmfp/approve-nothing"},
			"Error: bondmodeflipplan/approve-nothing: no step is waiting for approval (phase Running)\n"},
		{[]string{"approve", "bmfp/approve-nothing", "--step", "Node1SetBondMode"},
			"Error: bondmodeflipplan/approve-nothing: no step is waiting for approval (phase Running); step Node1SetBondMode is Running\n"},
		{[]string{"approve", "bondmodeflipplans/approve-refused", "--step", "Node3SetBondMode"},
			"Error: bondmodeflipplan/approve-refused: step Node3SetBondMode is Pending; Node2SetBondMode waits\n"},
		{[]string{"approve", "bondflip/approve-refused", "--step", "Node9SetBondMode"},
			"Error: bondmodeflipplan/approve-refused: it has no step Node9SetBondMode; Node2SetBondMode waits\n"},
		{[]string{"approve", "ReplicationUpgrade/approve-automatic"},
			"Error: replicationupgrade/approve-automatic: spec.approval is Automatic: step JoinPeers waits for AnotherWorkflowRunning, not for approval\n"},
		{[]string{"approve", "replup/approve-automatic-running"},
			"Error: replicationupgrade/approve-automatic-running: spec.approval is Automatic: its steps do not wait for approval, and none is waiting (phase Running)\n"},
		{[]string{"approve", "bmfp/approve-absent"},
			"Error: bondmodeflipplan/approve-absent not found\n"},
	} {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitFailed)
		if r.stderr != c.want || r.stdout != "" {
			t.Errorf("%v: stdout %q, stderr %q; want %q", c.args, r.stdout, r.stderr, c.want)
		}
	}
	for _, obj := range []client.Object{waiting, nothing, automatic, automaticRunning} {
		if a := annotations(t, obj); a[nwv1.AnnotationApprove] != "" {
			t.Errorf("%s was approved by a refused command: %v", obj.GetName(), a)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"approve"}, "Error: kubectl nodewright approve wants KIND/NAME"},
		{[]string{"approve", "approve-refused"}, `Error: "approve-refused": want KIND/NAME, e.g. bondmodeflipplan/to-lacp`},
		{[]string{"approve", "vmvolumemigration/x"}, `Error: "vmvolumemigration": not a kind whose steps wait for approval`},
		{[]string{"approve", "bmfp/"}, `Error: "bmfp/": want KIND/NAME`},
	} {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%v: stderr %q, want it to start with %q and point at --help", c.args, r.stderr, c.want)
		}
	}
}

// kubeconfigFor writes a kubeconfig that reaches the test API server with cfg's credentials.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// A user who may read the flip but not update it is told so, and nothing changes; once given
// the right, the same command approves.
func TestApproveNeedsTheRightToUpdate(t *testing.T) {
	ctx := context.Background()
	flip := createFlip(t, "approve-rbac", nwv1.ApprovalManual,
		running(flipSteps(1), nwv1.ReasonAwaitingApproval, "step Node1SetBondMode waits for approval"))
	const user = "approve-viewer"
	cfg := env.User(t, user)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "approve-viewer"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"bondmodeflipplans"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "approve-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, obj) })
	}
	viewer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() string {
		if err := viewer.Get(ctx, client.ObjectKeyFromObject(flip), &nwv1.BondModeFlipPlan{}); err != nil {
			return "the viewer cannot read the flip yet: " + err.Error()
		}
		return ""
	})

	kubeconfig := kubeconfigFor(t, cfg)
	r := plugin(t, runOpts{kubeconfig: kubeconfig}, "approve", "bondmodeflipplan/approve-rbac")
	r.wantCode(t, ExitFailed)
	const want = "Error: you may not approve bondmodeflipplan/approve-rbac: the API server refused the update: "
	if !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, `User "approve-viewer" cannot patch resource "bondmodeflipplans"`) {
		t.Errorf("stderr %q, want it to start with %q and say which right is missing", r.stderr, want)
	}
	if a := annotations(t, flip); a[nwv1.AnnotationApprove] != "" {
		t.Fatalf("approved without the right to: %v", a)
	}

	role.Rules[0].Verbs = []string{"get", "patch"}
	if err := env.Client.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() string {
		if r = plugin(t, runOpts{kubeconfig: kubeconfig}, "approve", "bondmodeflipplan/approve-rbac"); r.code != ExitOK {
			return "approving with the right to patch: " + r.stderr
		}
		return ""
	})
	if a := annotations(t, flip); a[nwv1.AnnotationApprove] != "Node1SetBondMode" {
		t.Fatalf("annotations %v; want approve Node1SetBondMode", a)
	}
}

// The flip changes between approve's read and its write: the write fails on the
// resourceVersion, and approve reads it again and approves the step that waits now, or refuses
// when --step names the one that waited before.
func TestApproveReadsAgainWhenTheWorkflowChanged(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, step string
		stdout     string
		err        string
		approved   string
	}{
		{"approve-moved-on", "", "bondmodeflipplan/approve-moved-on: approved step Node3SetBondMode\n", "", "Node3SetBondMode"},
		{"approve-moved-on-step", "Node2SetBondMode", "",
			"bondmodeflipplan/approve-moved-on-step: step Node2SetBondMode is Succeeded; Node3SetBondMode waits", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			flip := createFlip(t, c.name, nwv1.ApprovalManual,
				running(flipSteps(2), nwv1.ReasonAwaitingApproval, "step Node2SetBondMode waits for approval"))
			// Before approve's first write, the controller moves on: Node2 was approved by
			// someone else and has run, and Node3 waits.
			moved := false
			direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
			if err != nil {
				t.Fatal(err)
			}
			c2 := interceptor.NewClient(direct, interceptor.Funcs{
				Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					if !moved {
						moved = true
						f := &nwv1.BondModeFlipPlan{}
						if err := env.Client.Get(ctx, client.ObjectKeyFromObject(flip), f); err != nil {
							return err
						}
						f.Status.WorkflowStatus = running(flipSteps(3), nwv1.ReasonAwaitingApproval, "step Node3SetBondMode waits for approval")
						if err := env.Client.Status().Update(ctx, f); err != nil {
							return err
						}
					}
					return cl.Patch(ctx, obj, patch, opts...)
				},
			})
			done, err := Approve(ctx, c2, "bondmodeflipplan", flip.Name, c.step)
			if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			var out strings.Builder
			for _, l := range done.Lines() {
				out.WriteString(l + "\n")
			}
			if err == nil && out.String() != c.stdout {
				t.Errorf("output %q, want %q", out.String(), c.stdout)
			}
			if !moved {
				t.Fatal("approve never wrote: the test changed nothing in between")
			}
			if a := annotations(t, flip); a[nwv1.AnnotationApprove] != c.approved {
				t.Errorf("approve annotation %q, want %q", a[nwv1.AnnotationApprove], c.approved)
			}
		})
	}
}

func TestApproveKinds(t *testing.T) {
	for name, want := range map[string]string{
		"bondmodeflipplan": "bondmodeflipplan", "BondModeFlipPlans": "bondmodeflipplan", "bmfp": "bondmodeflipplan",
		"BONDFLIP": "bondmodeflipplan", "bondmodeflipplans.nodewright.spectrocloud.com": "bondmodeflipplan",
		"replicationupgrade": "replicationupgrade", "ReplicationUpgrades": "replicationupgrade", "rupg": "replicationupgrade",
		"Replup": "replicationupgrade", "vmvolumemigration": "", "flip": "", "": "",
	} {
		got, ok := approvableKind(name)
		if got.name != want || ok != (want != "") {
			t.Errorf("%q: kind %q (%v), want %q", name, got.name, ok, want)
		}
	}
}

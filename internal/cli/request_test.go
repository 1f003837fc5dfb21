package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// getRequest reads the request ns/name as it is stored.
func getRequest(t *testing.T, ns, name string) *nwv1.VMOperationRequest {
	t.Helper()
	r := &nwv1.VMOperationRequest{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Without the operator's webhook the API server stores what the plugin sends: the operation,
// the VM, the parameters and the reason, and no requester (the webhook writes it).
func TestRequestCreatesTheRequest(t *testing.T) {
	ns := env.Namespace(t)
	for _, c := range []struct {
		args   []string
		name   string
		spec   nwv1.VMOperationRequestSpec
		stdout string
	}{
		{[]string{"snapshot", "web"}, "snap", nwv1.VMOperationRequestSpec{Operation: nwv1.VMSnapshotNow, VM: "web"},
			"vmoperationrequest/snap created: SnapshotNow of VM web\n"},
		{[]string{"restore", "web", "nightly-1"}, "back", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestore, VM: "web",
			Params: nwv1.VMOperationParams{Snapshot: "nightly-1"}}, "vmoperationrequest/back created: Restore of VM web from snapshot nightly-1\n"},
		{[]string{"restart", "db"}, "bounce", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "db"},
			"vmoperationrequest/bounce created: Restart of VM db\n"},
		{[]string{"migrate", "db", "root", "--to", "linstor-replicated"}, "move", nwv1.VMOperationRequestSpec{Operation: nwv1.VMMigrateVolume, VM: "db",
			Params: nwv1.VMOperationParams{Volume: "root", StorageClass: "linstor-replicated"}},
			"vmoperationrequest/move created: MigrateVolume of VM db, volume root to StorageClass linstor-replicated\n"},
		// The other names of migrate.
		{[]string{"move-volume", "db", "data", "--to", "linstor-replicated"}, "move-data", nwv1.VMOperationRequestSpec{Operation: nwv1.VMMigrateVolume, VM: "db",
			Params: nwv1.VMOperationParams{Volume: "data", StorageClass: "linstor-replicated"}},
			"vmoperationrequest/move-data created: MigrateVolume of VM db, volume data to StorageClass linstor-replicated\n"},
	} {
		reason := "because of " + c.name
		r := plugin(t, runOpts{}, append(append([]string{"request"}, c.args...), "-n", ns, "--name", c.name, "--reason", reason)...)
		r.wantCode(t, ExitOK)
		if r.stdout != c.stdout {
			t.Errorf("%v: stdout %q, want %q", c.args, r.stdout, c.stdout)
		}
		c.spec.Reason = reason
		if got := getRequest(t, ns, c.name).Spec; !equalJSON(got, c.spec) {
			t.Errorf("%v: spec %+v, want %+v", c.args, got, c.spec)
		}
	}

	// Without --name: VM-WORD- and five random characters; without --reason, none.
	r := plugin(t, runOpts{}, "request", "restart", "web", "-n", ns)
	r.wantCode(t, ExitOK)
	name := regexp.MustCompile(`^vmoperationrequest/(web-restart-[a-z0-9]{5}) created: Restart of VM web\n$`).FindStringSubmatch(r.stdout)
	if name == nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	if got := getRequest(t, ns, name[1]); got.Spec.Reason != "" || got.Spec.Requester != nil {
		t.Errorf("spec %+v", got.Spec)
	}

	// -o json prints the object the API server returned, with the CRD's defaults.
	r = plugin(t, runOpts{}, "request", "snapshot", "db", "-n", ns, "--name", "snap-db", "-o", "json")
	r.wantCode(t, ExitOK)
	var printed nwv1.VMOperationRequest
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Kind != "VMOperationRequest" || printed.UID == "" ||
		printed.ManagedFields != nil || printed.Spec.VM != "db" {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
}

// equalJSON compares two values by their JSON, as the API server stores them.
func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestRequestUsageErrors(t *testing.T) {
	ns := env.Namespace(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"request", "frobnicate", "web"}, `Error: unknown operation "frobnicate" for "kubectl nodewright request": want snapshot, restore, restart or migrate (or list, watch, approve)`},
		{[]string{"request", "snapshot"}, "Error: kubectl nodewright request snapshot wants VM, got 0 arguments"},
		{[]string{"request", "snapshot", "web", "db"}, "Error: kubectl nodewright request snapshot wants VM, got 2 arguments"},
		{[]string{"request", "restore", "web"}, "Error: kubectl nodewright request restore wants VM and SNAPSHOT, got 1 arguments"},
		{[]string{"request", "restore", "web", ""}, "Error: SNAPSHOT is empty"},
		{[]string{"request", "restart", ""}, "Error: VM is empty"},
		{[]string{"request", "migrate", "web", "root"}, "Error: --to CLASS is required: the StorageClass to move volume root to"},
		{[]string{"request", "migrate", "web", "--to", "c"}, "Error: kubectl nodewright request migrate wants VM and VOLUME, got 1 arguments"},
		{[]string{"request", "snapshot", "web", "--reason", strings.Repeat("é", 1025)}, "Error: --reason: 1025 characters, at most 1024"},
		{[]string{"request", "snapshot", "web", "--name", "Not_A_Name"}, `Error: --name "Not_A_Name": a lowercase RFC 1123 subdomain`},
		{[]string{"request", "snapshot", "web", "--timeout", "5m"}, "Error: --timeout needs --wait"},
		{[]string{"request", "snapshot", "web", "--wait", "-o", "yaml"}, "Error: --wait writes the request's progress; it cannot be combined with --output yaml"},
		{[]string{"request", "snapshot", "web", "-o", "wide"}, `Error: --output "wide": want one of table, json, yaml`},
		{[]string{"request", "restart", "web", "--to", "c"}, "Error: unknown flag: --to"},
		{[]string{"request", "list", "-o", "wide"}, `Error: --output "wide": want one of table, json, yaml, name`},
		{[]string{"request", "watch"}, "Error: kubectl nodewright request watch wants the NAME of a VMOperationRequest, got 0 arguments"},
		{[]string{"request", "watch", "x", "--timeout", "-1s", "--wait"}, "Error: --timeout -1s: must not be negative"},
		{[]string{"request", "approve", "a", "b"}, "Error: kubectl nodewright request approve wants the NAME of a VMOperationRequest, got 2 arguments"},
	} {
		r := plugin(t, runOpts{}, append(c.args, "-n", ns)...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%v: stderr %q, want it to start with %q and point at --help", c.args, r.stderr, c.want)
		}
	}
	var list nwv1.VMOperationRequestList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("a usage error created something: %v %v", err, list.Items)
	}
}

// The API server's own refusal (the CRD schema) is shown field by field, prefixed by the
// object, with exit code 1.
func TestRequestSchemaRefusal(t *testing.T) {
	ns := env.Namespace(t)
	r := plugin(t, runOpts{}, "request", "migrate", "web", "root", "--to", strings.Repeat("c", 254), "-n", ns, "--name", "too-long")
	r.wantCode(t, ExitFailed)
	if want := "Error: vmoperationrequest/too-long: spec.params.storageClass: Too long: may not be more than 253 bytes\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// createRequest stores a request with a status, as the webhook and the controller would have
// written them.
func createRequest(t *testing.T, ns, name string, spec nwv1.VMOperationRequestSpec, status nwv1.VMOperationRequestStatus) *nwv1.VMOperationRequest {
	t.Helper()
	ctx := context.Background()
	r := &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := env.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if status.Phase != "" {
		r.Status = status
		if err := env.Client.Status().Update(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// waitForTheNextSecond returns once the clock is past the second of t.
func waitForTheNextSecond(t metav1.Time) {
	time.Sleep(time.Until(t.Add(time.Second)))
}

func alice() *nwv1.RequestUser { return &nwv1.RequestUser{Username: "alice"} }

func TestRequestList(t *testing.T) {
	ns := env.Namespace(t)
	now := metav1.Now()
	createRequest(t, ns, "snap", nwv1.VMOperationRequestSpec{Operation: nwv1.VMSnapshotNow, VM: "web", Requester: alice()},
		nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationSucceeded, Step: nwv1.StepSnapshotVM, Approval: nwv1.ApprovalNotRequired,
			StartTime: &now, CompletionTime: &now, Snapshot: "snap-snapshot"})
	// A creation time counts whole seconds: the next requests are a second younger, so that the
	// list shows the oldest first though its name comes last; those of one second go by name.
	waitForTheNextSecond(getRequest(t, ns, "snap").CreationTimestamp)
	createRequest(t, ns, "before-upgrade", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestore, VM: "web", Requester: alice(),
		Params: nwv1.VMOperationParams{Snapshot: "snap-snapshot"}},
		nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationWaiting, QueuePosition: 1, Approval: nwv1.ApprovalRequired,
			BlockedBy: []string{"approval by an administrator"}, Message: "waiting: approval by an administrator"})
	createRequest(t, ns, "fresh", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "db"}, nwv1.VMOperationRequestStatus{})

	r := plugin(t, runOpts{}, "request", "list", "-n", ns)
	r.wantCode(t, ExitOK)
	age := regexp.MustCompile(`(?m)   \d+s$`)
	// Oldest first, as the namespace's queue runs them.
	want := `NAME             OPERATION     VM    PHASE       STEP         QUEUE   APPROVAL      REQUESTER   AGE
snap             SnapshotNow   web   Succeeded   SnapshotVM   -       NotRequired   alice       AGE
before-upgrade   Restore       web   Waiting     -            1       Required      alice       AGE
fresh            Restart       db    Pending     -            -       -             -           AGE
`
	if got := age.ReplaceAllString(r.stdout, "   AGE"); got != want {
		t.Errorf("request list:\n%s\nwant:\n%s", got, want)
	}

	// Every namespace: the namespace comes first.
	r = plugin(t, runOpts{}, "request", "ls", "-A")
	r.wantCode(t, ExitOK)
	if !regexp.MustCompile(`(?m)^NAMESPACE +NAME +OPERATION +VM`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^`+ns+` +before-upgrade +Restore +web +Waiting +- +1 +Required +alice`).MatchString(r.stdout) {
		t.Errorf("request list -A:\n%s", r.stdout)
	}

	r = plugin(t, runOpts{}, "request", "list", "-n", ns, "-o", "json")
	r.wantCode(t, ExitOK)
	var list nwv1.VMOperationRequestList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if list.Kind != "VMOperationRequestList" || len(list.Items) != 3 || list.Items[1].Name != "before-upgrade" || list.Items[1].Kind != "VMOperationRequest" ||
		list.Items[1].Status.BlockedBy[0] != "approval by an administrator" || list.Items[1].ManagedFields != nil {
		t.Errorf("-o json: %s", r.stdout)
	}
	r = plugin(t, runOpts{}, "request", "list", "-n", ns, "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: VMOperationRequestList\n") || !strings.Contains(r.stdout, "  kind: VMOperationRequest\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}
	r = plugin(t, runOpts{}, "request", "list", "-n", ns, "-o", "name")
	r.wantCode(t, ExitOK)
	if want := "vmoperationrequest.nodewright.spectrocloud.com/snap\nvmoperationrequest.nodewright.spectrocloud.com/before-upgrade\nvmoperationrequest.nodewright.spectrocloud.com/fresh\n"; r.stdout != want {
		t.Errorf("-o name: %q, want %q", r.stdout, want)
	}

	// None: nothing on standard output, a note on standard error, exit code 0.
	empty := env.Namespace(t)
	r = plugin(t, runOpts{}, "request", "list", "-n", empty)
	r.wantCode(t, ExitOK)
	if r.stdout != "" || r.stderr != "No VMOperationRequests found in namespace "+empty+".\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// A requester's words are shown, not obeyed: a terminal's escape in a reason or a VM's name is
// quoted.
func TestRequestListQuotesWhatTheRequesterWrote(t *testing.T) {
	ns := env.Namespace(t)
	createRequest(t, ns, "sneaky", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "web",
		Requester: &nwv1.RequestUser{Username: "mallory\x1b[2J"}}, nwv1.VMOperationRequestStatus{})
	r := plugin(t, runOpts{}, "request", "list", "-n", ns)
	r.wantCode(t, ExitOK)
	if strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, `"mallory\x1b[2J"`) {
		t.Errorf("request list: %q", r.stdout)
	}
}

// requestStory is a request's statuses as the controller writes them on the way to its end.
func requestStory(started metav1.Time) []nwv1.VMOperationRequestStatus {
	done := metav1.NewTime(started.Add(2*time.Minute + 5*time.Second))
	return []nwv1.VMOperationRequestStatus{
		{Phase: nwv1.VMOperationWaiting, QueuePosition: 1, Approval: nwv1.ApprovalRequired,
			BlockedBy: []string{"approval: an administrator approves Restore"}, Message: "waiting: approval: an administrator approves Restore"},
		{Phase: nwv1.VMOperationWaiting, QueuePosition: 1, Approval: nwv1.ApprovalGiven, ApprovedBy: "bob",
			BlockedBy: []string{"the maintenance window opens at 22:00"}, Message: "waiting: the maintenance window opens at 22:00"},
		{Phase: nwv1.VMOperationRunning, Step: nwv1.StepStopVM, Approval: nwv1.ApprovalGiven, ApprovedBy: "bob", StartTime: &started,
			Message: "stopping VirtualMachine web (run strategy Halted; it was Always): its instance is Running"},
		{Phase: nwv1.VMOperationRunning, Step: nwv1.StepRestoreVM, Approval: nwv1.ApprovalGiven, ApprovedBy: "bob", StartTime: &started,
			Restore: "before-upgrade-restore", Message: "restoring VirtualMachine web from nightly-1: VirtualMachineRestore before-upgrade-restore: in progress"},
		{Phase: nwv1.VMOperationSucceeded, Step: nwv1.StepStartVM, Approval: nwv1.ApprovalGiven, ApprovedBy: "bob", StartTime: &started, CompletionTime: &done,
			Restore: "before-upgrade-restore", Message: "restored from nightly-1; VirtualMachine web has its run strategy Always back"},
	}
}

// The lines request watch writes for requestStory.
const requestStoryLog = `vmoperationrequest NS/before-upgrade: Restore of VM web from snapshot nightly-1, asked by alice
Reason: the upgrade broke the database
2026-11-21T10:00:00Z phase Pending
2026-11-21T10:00:00Z phase Waiting, queue 1, approval Required: waiting: approval: an administrator approves Restore
  An administrator approves it with: kubectl nodewright request approve before-upgrade -n NS
2026-11-21T10:00:00Z phase Waiting, queue 1, approval Approved by bob: waiting: the maintenance window opens at 22:00
2026-11-21T10:00:00Z phase Running, step StopVM, approval Approved by bob: stopping VirtualMachine web (run strategy Halted; it was Always): its instance is Running
2026-11-21T10:00:00Z phase Running, step RestoreVM, approval Approved by bob: restoring VirtualMachine web from nightly-1: VirtualMachineRestore before-upgrade-restore: in progress
2026-11-21T10:00:00Z phase Succeeded, step StartVM, approval Approved by bob
Made: VirtualMachineRestore before-upgrade-restore
Result: Succeeded after 2m05s: restored from nightly-1; VirtualMachine web has its run strategy Always back
`

// writeStory writes the statuses to the request, each once the watch has shown the one
// before it (the line that says shown), as the controller would. The test waits for the
// returned channel before it ends.
func writeStory(t *testing.T, r *nwv1.VMOperationRequest, out *testenv.SyncBuffer, story []nwv1.VMOperationRequestStatus, shown func(i int) string) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, st := range story {
			waitForOutput(out, shown(i))
			if !strings.Contains(out.String(), shown(i)) {
				t.Errorf("the watch never showed %q:\n%s", shown(i), out.String())
				return
			}
			latest := &nwv1.VMOperationRequest{}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(r), latest); err != nil {
				t.Error(err)
				return
			}
			latest.Status = st
			if err := env.Client.Status().Update(context.Background(), latest); err != nil {
				t.Errorf("writing status %d: %v", i, err)
				return
			}
		}
	}()
	return done
}

// storyShown is what the watch shows before status i of requestStory is written.
func storyShown(i int) string {
	return []string{"phase Pending", "approval Required", "approval Approved by bob: waiting", "step StopVM", "step RestoreVM"}[i]
}

func restoreSpec() nwv1.VMOperationRequestSpec {
	return nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestore, VM: "web", Requester: alice(),
		Params: nwv1.VMOperationParams{Snapshot: "nightly-1"}, Reason: "the upgrade broke the database"}
}

var storyClock = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// request watch follows the request through the API server's watch, a line for each status
// the controller writes, and --wait gives the outcome's exit code.
func TestRequestWatchFollowsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		phase nwv1.VMOperationPhase
		code  int
	}{
		{"succeeded", []string{"--wait"}, nwv1.VMOperationSucceeded, ExitOK},
		{"failed", []string{"--wait"}, nwv1.VMOperationFailed, ExitFailed},
		{"failed-without-wait", nil, nwv1.VMOperationFailed, ExitOK}, // ending is all that counts
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := env.Namespace(t)
			r := createRequest(t, ns, "before-upgrade", restoreSpec(), nwv1.VMOperationRequestStatus{})
			story := requestStory(metav1.NewTime(storyClock))
			story[len(story)-1].Phase = c.phase
			out := &testenv.SyncBuffer{}
			written := writeStory(t, r, out, story, storyShown)
			run := plugin(t, runOpts{stdout: out, now: storyClock}, append([]string{"request", "watch", "before-upgrade", "-n", ns}, c.args...)...)
			<-written
			run.wantCode(t, c.code)
			want := strings.ReplaceAll(requestStoryLog, "NS/", ns+"/")
			want = strings.ReplaceAll(want, "-n NS", "-n "+ns)
			want = strings.ReplaceAll(want, "Succeeded", string(c.phase))
			if run.stdout != want {
				t.Errorf("watch log:\n%s\nwant:\n%s", run.stdout, want)
			}
			if run.stderr != "" {
				t.Errorf("stderr %q", run.stderr)
			}
		})
	}
}

func TestRequestWatchEndsEarly(t *testing.T) {
	ns := env.Namespace(t)
	createRequest(t, ns, "slow", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "web"},
		nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationWaiting, QueuePosition: 2, Message: "waiting: the queue"})

	// --timeout: exit code 3, saying where it stood.
	r := plugin(t, runOpts{}, "request", "watch", "slow", "-n", ns, "--wait", "--timeout", "1s")
	r.wantCode(t, ExitNotFinished)
	if want := "Error: timed out after 1s waiting for vmoperationrequest/slow: phase Waiting\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Interrupted (Ctrl-C): 3 too.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "phase Waiting")
		cancel()
	}()
	r = plugin(t, runOpts{ctx: ctx, stdout: out}, "request", "watch", "slow", "-n", ns, "--wait")
	r.wantCode(t, ExitNotFinished)
	if want := "Error: interrupted waiting for vmoperationrequest/slow: phase Waiting\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Deleted while waited on: 1.
	out = &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "phase Waiting")
		_ = env.Client.Delete(context.Background(), &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow"}})
	}()
	r = plugin(t, runOpts{stdout: out}, "request", "watch", "slow", "-n", ns, "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: vmoperationrequest/slow was deleted before it finished (phase Waiting)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Not there at all: 1 at once.
	r = plugin(t, runOpts{}, "request", "watch", "nope", "-n", ns, "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: vmoperationrequest/nope not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Ended already: the result at once; Refused fails a --wait.
	createRequest(t, ns, "refused", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "web"},
		nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationRefused, Message: "refused, nothing done: VirtualMachine web does not run"})
	r = plugin(t, runOpts{now: storyClock}, "request", "watch", "refused", "-n", ns, "--wait")
	r.wantCode(t, ExitFailed)
	if want := "vmoperationrequest " + ns + "/refused: Restart of VM web\n2026-11-21T10:00:00Z phase Refused\n" +
		"Result: Refused: refused, nothing done: VirtualMachine web does not run\n"; r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, want %q; stderr %q", r.stdout, want, r.stderr)
	}
}

// request restore --wait creates the request and follows it like request watch --wait.
func TestRequestWait(t *testing.T) {
	ns := env.Namespace(t)
	out := &testenv.SyncBuffer{}
	r := &nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before-upgrade"}}
	story := requestStory(metav1.NewTime(storyClock))
	written := writeStory(t, r, out, story[len(story)-1:], func(int) string { return "phase Pending" })
	run := plugin(t, runOpts{stdout: out, now: storyClock}, "request", "restore", "web", "nightly-1", "-n", ns, "--name", "before-upgrade",
		"--reason", "the upgrade broke the database", "--wait", "--timeout", "1m")
	<-written
	run.wantCode(t, ExitOK)
	want := "vmoperationrequest/before-upgrade created: Restore of VM web from snapshot nightly-1\n" +
		"vmoperationrequest " + ns + "/before-upgrade: Restore of VM web from snapshot nightly-1\n" +
		"Reason: the upgrade broke the database\n" +
		"2026-11-21T10:00:00Z phase Pending\n" +
		"2026-11-21T10:00:00Z phase Succeeded, step StartVM, approval Approved by bob\n" +
		"Made: VirtualMachineRestore before-upgrade-restore\n" +
		"Result: Succeeded after 2m05s: restored from nightly-1; VirtualMachine web has its run strategy Always back\n"
	if run.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", run.stdout, want)
	}
}

// request approve writes the approve annotation with the operation, once; it refuses a
// request that needs no approval or started, and one the user may not update.
func TestRequestApprove(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	waiting := nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationWaiting, QueuePosition: 1, Approval: nwv1.ApprovalRequired,
		Message: "waiting: approval: an administrator approves Restore"}
	createRequest(t, ns, "before-upgrade", restoreSpec(), waiting)

	r := plugin(t, runOpts{}, "request", "approve", "before-upgrade", "-n", ns)
	r.wantCode(t, ExitOK)
	if want := "vmoperationrequest/before-upgrade: approved: Restore of VM web from snapshot nightly-1, asked by alice\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	got := getRequest(t, ns, "before-upgrade")
	if a := got.Annotations[nwv1.AnnotationApprove]; a != string(nwv1.VMRestore) {
		t.Fatalf("approve annotation %q, want Restore", a)
	}

	// Again: already approved, by whom the webhook stamped; nothing is written.
	got.Annotations[nwv1.AnnotationApprovedBy] = "bob"
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	version := getRequest(t, ns, "before-upgrade").ResourceVersion
	r = plugin(t, runOpts{}, "request", "approve", "before-upgrade", "-n", ns)
	r.wantCode(t, ExitOK)
	if want := "vmoperationrequest/before-upgrade: already approved by bob\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if v := getRequest(t, ns, "before-upgrade").ResourceVersion; v != version {
		t.Errorf("an approval already given was written again")
	}

	for _, c := range []struct {
		name   string
		status nwv1.VMOperationRequestStatus
		want   string
	}{
		{"automatic", nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationWaiting, Approval: nwv1.ApprovalNotRequired},
			"Error: vmoperationrequest/automatic needs no approval: the SelfServicePolicy approves Restore without one (status.approval NotRequired)\n"},
		{"running", nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationRunning, Step: nwv1.StepStopVM, Approval: nwv1.ApprovalRequired},
			"Error: vmoperationrequest/running is Running: a request is approved before it starts\n"},
		{"refused", nwv1.VMOperationRequestStatus{Phase: nwv1.VMOperationRefused},
			"Error: vmoperationrequest/refused is Refused: a request is approved before it starts\n"},
	} {
		createRequest(t, ns, c.name, restoreSpec(), c.status)
		r = plugin(t, runOpts{}, "request", "approve", c.name, "-n", ns)
		r.wantCode(t, ExitFailed)
		if r.stderr != c.want {
			t.Errorf("%s: stderr %q, want %q", c.name, r.stderr, c.want)
		}
		if a := getRequest(t, ns, c.name).Annotations[nwv1.AnnotationApprove]; a != "" {
			t.Errorf("%s: approved: %q", c.name, a)
		}
	}
	r = plugin(t, runOpts{}, "request", "approve", "nope", "-n", ns)
	r.wantCode(t, ExitFailed)
	if want := "Error: vmoperationrequest/nope not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// A user who may read requests but not update them is told so; one who may not list them
	// either is told so by request watch, which lists and watches the one request.
	createRequest(t, ns, "by-owner", restoreSpec(), waiting)
	const owner = "request-approve-owner"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: owner}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"vmoperationrequests"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: owner},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: owner}}}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, func() string {
		r = plugin(t, runOpts{}, "request", "approve", "by-owner", "-n", ns, "--as", owner)
		if strings.Contains(r.stderr, "cannot get resource") {
			return "the owner cannot read the request yet: " + r.stderr
		}
		return ""
	})
	r.wantCode(t, ExitFailed)
	const want = "Error: you may not approve vmoperationrequest/by-owner: the API server refused the update: "
	if !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, `User "`+owner+`" cannot patch resource "vmoperationrequests"`) {
		t.Errorf("stderr %q, want it to start with %q and say which right is missing", r.stderr, want)
	}
	r = plugin(t, runOpts{}, "request", "watch", "by-owner", "-n", ns, "--as", owner)
	r.wantCode(t, ExitFailed)
	if !strings.HasPrefix(r.stderr, "Error: vmoperationrequests: ") || !strings.Contains(r.stderr, `User "`+owner+`" cannot list resource "vmoperationrequests"`) {
		t.Errorf("request watch without the right to list: stderr %q", r.stderr)
	}
}

// Completion offers the namespace's requests, its VMs, a VM's snapshots and a VM's volumes.
func TestRequestCompletion(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	createRequest(t, ns, "web-restart-abcde", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "web"}, nwv1.VMOperationRequestStatus{})
	createRequest(t, ns, "db-restart-abcde", nwv1.VMOperationRequestSpec{Operation: nwv1.VMRestart, VM: "db"}, nwv1.VMOperationRequestStatus{})
	volumes := []virtv1.Volume{{Name: "root"}, {Name: "data"}}
	for _, name := range []string{"web", "db"} {
		vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyHalted),
			Template:    &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Devices: virtv1.Devices{}}, Volumes: volumes}},
		}}
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		snap := &snapv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-nightly"},
			Spec: snapv1.VirtualMachineSnapshotSpec{Source: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: name}}}
		if err := env.Client.Create(ctx, snap); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"request", "watch", "web-"}, "web-restart-abcde\n:4\n"},
		{[]string{"request", "approve", ""}, "db-restart-abcde\nweb-restart-abcde\n:4\n"},
		{[]string{"request", "snapshot", "w"}, "web\n:4\n"},
		{[]string{"request", "restore", "web", ""}, "web-nightly\n:4\n"},
		{[]string{"request", "migrate", "db", "r"}, "root\n:4\n"},
		{[]string{"request", "restart", "web", ""}, ":4\n"},
	} {
		r := plugin(t, runOpts{}, append(append([]string{"__complete"}, c.args[:len(c.args)-1]...), "-n", ns, c.args[len(c.args)-1])...)
		r.wantCode(t, ExitOK)
		if !strings.HasPrefix(r.stdout, c.want) {
			t.Errorf("completing %v: %q, want %q", c.args, r.stdout, c.want)
		}
	}
}

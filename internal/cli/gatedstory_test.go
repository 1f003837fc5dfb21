package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// storySnapshot is a version of a workflow and when it arrived.
type storySnapshot[O gatedWorkflow] struct {
	At  time.Time
	Obj O
}

// gatedStory writes the versions of a cluster-wide workflow's status as its controller would:
// the transitions through the shared workflow machine and status code (internal/workflow) on
// the workflow's plan, the Held condition of the gates, the approval as the webhook stamps it,
// and what the controller derives besides (derive); each version is kept with the time it
// arrived.
type gatedStory[O gatedWorkflow] struct {
	t     *testing.T
	plan  workflow.GatedPlan
	kind  workflow.Kind
	obj   O
	state workflow.State
	now   time.Time
	snaps []storySnapshot[O]
	// derive writes what the controller derives from the move from one state to the next by
	// an event, besides the steps (a flip's nodes); e is "" when a gate admitted the step.
	derive func(from, to workflow.State, e workflow.Event)
}

// newGatedStory starts the story of obj at t0. The first version is obj as created.
func newGatedStory[O gatedWorkflow](t *testing.T, plan workflow.GatedPlan, kind workflow.Kind, obj O, t0 time.Time,
	derive func(from, to workflow.State, e workflow.Event)) *gatedStory[O] {
	s := &gatedStory[O]{t: t, plan: plan, kind: kind, obj: obj, state: workflow.Pending, now: t0, derive: derive}
	s.obj.SetCreationTimestamp(metav1.NewTime(t0))
	s.snap()
	return s
}

func (s *gatedStory[O]) after(d time.Duration) *gatedStory[O] {
	s.now = s.now.Add(d)
	return s
}

func (s *gatedStory[O]) snap() {
	s.snaps = append(s.snaps, storySnapshot[O]{At: s.now, Obj: s.obj.DeepCopyObject().(O)})
}

// edit changes the object (what else its controller writes: counts, progress) and snaps it.
func (s *gatedStory[O]) edit(change func(O)) *gatedStory[O] {
	change(s.obj)
	s.snap()
	return s
}

// event moves the machine on by e (the running step ending with message), and lets derive
// write the rest. A step it leaves Waiting is held, or admitted, by the gates' next check
// (held, admit).
func (s *gatedStory[O]) event(e workflow.Event, message string) *gatedStory[O] {
	s.t.Helper()
	next, err := workflow.Next(s.plan, s.state, e)
	if err != nil {
		s.t.Fatal(err)
	}
	workflow.Transition(s.obj.GetWorkflowStatus(), s.plan, s.kind, 1, s.state, next, e, message, false, metav1.NewTime(s.now))
	from := s.state
	s.state = next
	if s.derive != nil {
		s.derive(from, next, e)
	}
	s.snap()
	return s
}

func (s *gatedStory[O]) setHeld(status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.obj.GetWorkflowStatus().Conditions, metav1.Condition{Type: nwv1.ConditionHeld, Status: status,
		Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(s.now), ObservedGeneration: 1})
}

// held has a gate hold the waiting step, as the engine says.
func (s *gatedStory[O]) held(reason, message string) *gatedStory[O] {
	s.setHeld(metav1.ConditionTrue, reason, message)
	s.snap()
	return s
}

// awaitingApproval holds the waiting step for a person, with the engine's message.
func (s *gatedStory[O]) awaitingApproval() *gatedStory[O] {
	return s.held(nwv1.ReasonAwaitingApproval, fmt.Sprintf("awaiting approval: kubectl nodewright approve %s/%s", strings.ToLower(s.kind.Name), s.obj.GetName()))
}

// approve sets the approve annotation to the waiting step, stamped with by, as approve and
// the admission webhook do.
func (s *gatedStory[O]) approve(by string) *gatedStory[O] {
	s.obj.SetAnnotations(map[string]string{nwv1.AnnotationApprove: string(s.state.Step), nwv1.AnnotationApprovedBy: by})
	s.snap()
	return s
}

// admit starts the waiting step, its gates open.
func (s *gatedStory[O]) admit() *gatedStory[O] {
	by := ""
	if a := s.obj.GetAnnotations(); a[nwv1.AnnotationApprove] == string(s.state.Step) {
		by = a[nwv1.AnnotationApprovedBy]
	}
	workflow.Admit(s.obj.GetWorkflowStatus(), s.state.Step, by, metav1.NewTime(s.now))
	s.setHeld(metav1.ConditionFalse, nwv1.ReasonGatesOpen, "no gate holds the next step")
	if s.derive != nil {
		s.derive(s.state, s.state, "")
	}
	s.snap()
	return s
}

// says sets the running step's message.
func (s *gatedStory[O]) says(message string) *gatedStory[O] {
	workflow.StepMessage(s.obj.GetWorkflowStatus(), s.state.Step, message)
	s.snap()
	return s
}

// succeed ends the running step and, when the next waits at gates that are open (all but
// the approval of a Manual workflow), admits it.
func (s *gatedStory[O]) succeed(message string) *gatedStory[O] {
	s.event(workflow.StepSucceeded, message)
	approval, _ := s.obj.GetGates()
	forPerson := approval == nwv1.ApprovalManual && s.plan.Gates(s.state.Step).Has(workflow.GateApproval)
	if workflow.Waiting(s.obj.GetWorkflowStatus(), s.state.Step) && !forPerson {
		s.after(time.Second).admit()
	}
	return s
}

// firstVersion is the first of snaps's objects for which is holds; the test fails without one.
func firstVersion[O gatedWorkflow](t *testing.T, snaps []storySnapshot[O], what string, is func(O) bool) O {
	t.Helper()
	for _, s := range snaps {
		if is(s.Obj) {
			return s.Obj.DeepCopyObject().(O)
		}
	}
	t.Fatalf("the story never has %s", what)
	var none O
	return none
}

// deleteWhenDone deletes obj (by its name) when the test ends.
func deleteWhenDone(t *testing.T, obj client.Object) {
	t.Helper()
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// readBack is obj as the API server has it now.
func readBack[O client.Object](t *testing.T, obj O) O {
	t.Helper()
	got := obj.DeepCopyObject().(O)
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// storeWorkflow stores the workflow of a story's version with its status (and annotations), as
// the operator and the webhook would have written them, and deletes it when the test ends.
func storeWorkflow[O gatedWorkflow](t *testing.T, v O) O {
	t.Helper()
	ctx := context.Background()
	created := v.DeepCopyObject().(O)
	created.SetCreationTimestamp(metav1.Time{})
	if err := env.Client.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	deleteWhenDone(t, created)
	stored := withVersion(v, created)
	if err := env.Client.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	return stored
}

// withVersion is a copy of v that replaces the stored object like: its identity and
// resourceVersion.
func withVersion[O gatedWorkflow](v, stored O) O {
	o := v.DeepCopyObject().(O)
	o.SetUID(stored.GetUID())
	o.SetResourceVersion(stored.GetResourceVersion())
	o.SetCreationTimestamp(stored.GetCreationTimestamp())
	return o
}

// replayWorkflow stores the first version of a story's workflow and, once the watch has shown
// it, writes each later version: its annotations as the approve command and the webhook
// would, its status through the status subresource as the operator would. The test waits for
// the returned channel before it ends.
func replayWorkflow[O gatedWorkflow](t *testing.T, snaps []storySnapshot[O], shown func()) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	stored := storeWorkflow(t, snaps[0].Obj)
	done := make(chan struct{})
	go func() {
		defer close(done)
		shown()
		prev := snaps[0].Obj
		for i, s := range snaps[1:] {
			sameButAnnotations := prev.DeepCopyObject().(O)
			sameButAnnotations.SetAnnotations(s.Obj.GetAnnotations())
			if !equality.Semantic.DeepEqual(prev.GetAnnotations(), s.Obj.GetAnnotations()) {
				stored = withVersion(s.Obj, stored)
				if err := env.Client.Update(ctx, stored); err != nil {
					t.Errorf("writing the annotations of version %d: %v", i+2, err)
					return
				}
			}
			if !equality.Semantic.DeepEqual(sameButAnnotations, s.Obj) {
				stored = withVersion(s.Obj, stored)
				if err := env.Client.Status().Update(ctx, stored); err != nil {
					t.Errorf("writing version %d: %v", i+2, err)
					return
				}
			}
			prev = s.Obj
		}
	}()
	return done
}

// wantAll fails the test for each of wants that got (what) does not say.
func wantAll(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s does not say %q:\n%s", what, want, got)
		}
	}
}

// usageCase is a command line and the start of the usage error it gets.
type usageCase struct {
	args []string
	want string
}

// wantUsageErrors runs each case: a usage error (exit code 2) that starts with want and
// points at --help; nothing of the kind newList lists is created.
func wantUsageErrors(t *testing.T, newList func() client.ObjectList, cases []usageCase) {
	t.Helper()
	count := func() int {
		list := newList()
		if err := env.Client.List(context.Background(), list); err != nil {
			t.Fatal(err)
		}
		return meta.LenList(list)
	}
	before := count()
	for _, c := range cases {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%v: stderr %q, want it to start with %q and point at --help", c.args, r.stderr, c.want)
		}
	}
	if after := count(); after != before {
		t.Fatalf("a usage error created something: %d objects, %d before", after, before)
	}
}

// wantNoneListed runs the list command args when there is nothing of the kind newList lists:
// nothing on standard output, the note on standard error, exit code 0.
func wantNoneListed(t *testing.T, newList func() client.ObjectList, note string, args ...string) {
	t.Helper()
	if list := newList(); env.Client.List(context.Background(), list) != nil || meta.LenList(list) > 0 {
		return // another test's are there
	}
	r := plugin(t, runOpts{}, args...)
	r.wantCode(t, ExitOK)
	if r.stdout != "" || r.stderr != note+"\n" {
		t.Errorf("%v: stdout %q stderr %q", args, r.stdout, r.stderr)
	}
}

// ages are the AGE column's values, for a table that does not depend on the clock.
var ages = regexp.MustCompile(`(?m)   \d+s$`)

// completionCase is what the shell completes args to, as cobra's __complete writes it.
type completionCase struct {
	args []string
	want string
}

func wantCompletions(t *testing.T, cases []completionCase) {
	t.Helper()
	for _, c := range cases {
		r := plugin(t, runOpts{}, append([]string{"__complete"}, c.args...)...)
		if !strings.HasPrefix(r.stdout, c.want) {
			t.Errorf("completing %v: %q, want %q", c.args, r.stdout, c.want)
		}
	}
}

// watchReplay runs `COMMAND watch NAME args` (command: flip) while the story's versions of
// NAME are written, and checks its exit code and that it wrote exactly the log of the golden
// file (times aside, the story's name storyName replaced by NAME).
func watchReplay[O gatedWorkflow](t *testing.T, command string, snaps []storySnapshot[O], golden, storyName string, args []string, code int) {
	t.Helper()
	name := snaps[0].Obj.GetName()
	out := &testenv.SyncBuffer{}
	replayed := replayWorkflow(t, snaps, func() { waitForOutput(out, "phase Pending") })
	r := plugin(t, runOpts{stdout: out}, append([]string{command, "watch", name}, args...)...)
	<-replayed
	r.wantCode(t, code)
	want, err := os.ReadFile(filepath.Join("testdata", golden))
	if err != nil {
		t.Fatal(err)
	}
	expected := strings.ReplaceAll(timestamps.ReplaceAllString(string(want), "T "), storyName, name)
	if got := timestamps.ReplaceAllString(r.stdout, "T "); got != expected {
		t.Errorf("watch log:\n%s\nwant:\n%s", got, expected)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q", r.stderr)
	}
}

// createAndEnd runs args, a command that creates the workflow named like last and waits for
// it, writing last's status into it once the command has shown it Pending, as its controller
// would at the end.
func createAndEnd[O gatedWorkflow](t *testing.T, newObject func() O, last O, args ...string) invocation {
	t.Helper()
	deleteWhenDone(t, last)
	out := &testenv.SyncBuffer{}
	written := make(chan struct{})
	go func() {
		defer close(written)
		waitForOutput(out, "phase Pending")
		got := newObject()
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(last), got); err != nil {
			t.Error(err)
			return
		}
		if err := env.Client.Status().Update(context.Background(), withVersion(last, got)); err != nil {
			t.Error(err)
		}
	}()
	r := plugin(t, runOpts{stdout: out}, args...)
	<-written
	return r
}

// wantError runs args and wants the exit code and exactly that error on standard error.
func wantError(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	r := plugin(t, runOpts{}, args...)
	r.wantCode(t, code)
	if r.stderr != want {
		t.Errorf("%v: stderr %q, want %q", args, r.stderr, want)
	}
}

// approvedOnATerminal stores held, a version of a workflow whose step waits for a person,
// and runs `COMMAND watch NAME` on a terminal until it shows the command that approves the
// step (approve ref --step step); then approves the step as approve and the webhook would, and
// interrupts the watch once it shows who approved it.
func approvedOnATerminal[O gatedWorkflow](t *testing.T, command string, held O, ref, step string) invocation {
	t.Helper()
	stored := storeWorkflow(t, held)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() {
		done <- plugin(t, runOpts{ctx: ctx, stdout: out, terminal: true}, command, "watch", held.GetName())
	}()
	waitForOutput(out, "Approve it: kubectl nodewright approve "+ref+" --step "+step)
	stored.SetAnnotations(map[string]string{nwv1.AnnotationApprove: step, nwv1.AnnotationApprovedBy: "ada@example.com"})
	if err := env.Client.Update(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	waitForOutput(out, "step "+step+" is approved by ada@example.com")
	cancel()
	r := <-done
	r.wantCode(t, ExitNotFinished) // interrupted
	if !strings.Contains(r.stdout, "step "+step+" is approved by ada@example.com") {
		t.Errorf("the approval is not shown:\n%s", r.stdout)
	}
	return r
}

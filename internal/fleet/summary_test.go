package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// lineSink keeps the lines a Log writes.
type lineSink struct {
	mu          sync.Mutex
	records     []string
	checkpoints []string
}

func (s *lineSink) Append(_ context.Context, entries []audit.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range entries {
		if e.Checkpoint != nil {
			s.checkpoints = append(s.checkpoints, string(e.Line())+"\n")
		} else {
			s.records = append(s.records, string(e.Line())+"\n")
		}
	}
	return nil
}

func (s *lineSink) Close() error { return nil }

// trail writes an audit trail as the operator does, signed with a key of its own: for each
// count, that many records (named after seed, so that two trails fork) and a checkpoint. It
// returns the checkpoint lines, as the operator publishes them, and the record lines.
func trail(t *testing.T, seed string, counts ...int) (checkpoints, records []string) {
	t.Helper()
	key, _, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	sink := &lineSink{}
	log := audit.NewLog(sink, signer, audit.ChainState{}, audit.LogOptions{})
	ctx := context.Background()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	n := 0
	for _, count := range counts {
		for range count {
			n++
			subject := audit.Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "BondModeFlipPlan", Name: seed,
				UID: types.UID(fmt.Sprintf("%s-%d", seed, n))}
			if _, err := log.Append(ctx, audit.Transition(subject, "operator", "Step", "", "Running", "Test", "", "", at.Add(time.Duration(n)*time.Second))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := log.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.checkpoints, sink.records
}

func TestSetCheckpoint(t *testing.T) {
	main, records := trail(t, "main", 2, 2) // checkpoints at sequences 2 and 5
	fork, _ := trail(t, "fork", 2, 2)       // the same sequences, other hashes
	parsed := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseCheckpoint(Published{Found: true, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at2, at5, fork5 := parsed(main[0]), parsed(main[1]), parsed(fork[1])
	if at2.Sequence != 2 || at5.Sequence != 5 || fork5.Sequence != 5 || fork5.Hash == at5.Hash {
		t.Fatalf("the trails' checkpoints: %+v %+v %+v", at2, at5, fork5)
	}
	published := func(line string) Published { return Published{Found: true, Line: line} }
	for _, tc := range []struct {
		name                    string
		recorded, wasPublished  *fleetv1alpha1.AuditCheckpoint
		published               Published
		wantStatus              metav1.ConditionStatus
		wantReason              string
		wantRecorded, wantShown *fleetv1alpha1.AuditCheckpoint
	}{
		{name: "none yet", wantStatus: metav1.ConditionUnknown, wantReason: fleetv1alpha1.ReasonNoCheckpoint},
		{name: "gone", recorded: at2, wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonNoCheckpoint, wantRecorded: at2},
		{name: "first", published: published(main[0]), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at2},
		{name: "forward", recorded: at2, published: published(main[1]), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		// A forked trail's later checkpoint is recorded too: the hub cannot tell without the trail.
		{name: "forward on a fork", recorded: at2, published: published(fork[1]), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: fork5},
		{name: "same", recorded: at5, published: published(main[1]), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		{name: "same again after a mismatch", recorded: at5, wasPublished: fork5, published: published(main[1]), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		{name: "forked", recorded: at5, published: published(fork[1]), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointForked, wantRecorded: at5, wantShown: fork5},
		{name: "behind", recorded: at5, published: published(main[0]), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointBehind, wantRecorded: at5, wantShown: at2},
		{name: "unreadable", recorded: at2, published: published("not json\n"), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointBad, wantRecorded: at2},
		{name: "tampered", recorded: at2, published: published(strings.Replace(main[1], `"size":5`, `"size":6`, 1)), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointBad, wantRecorded: at2},
		{name: "a record", published: published(records[0]), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointBad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := &fleetv1alpha1.NodewrightClusterSummaryStatus{Checkpoint: tc.recorded, PublishedCheckpoint: tc.wasPublished}
			setCheckpoint(status, tc.published, WitnessOptions{}, time.Now())
			c := meta.FindStatusCondition(status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message == "" {
				t.Errorf("condition %+v; want %s %s with a message", c, tc.wantStatus, tc.wantReason)
			}
			if !equality.Semantic.DeepEqual(status.Checkpoint, tc.wantRecorded) {
				t.Errorf("recorded %+v; want %+v", status.Checkpoint, tc.wantRecorded)
			}
			if !equality.Semantic.DeepEqual(status.PublishedCheckpoint, tc.wantShown) {
				t.Errorf("publishedCheckpoint %+v; want %+v", status.PublishedCheckpoint, tc.wantShown)
			}
		})
	}
}

func steps(states ...nodewrightv1alpha1.StepState) []nodewrightv1alpha1.WorkflowStep {
	var out []nodewrightv1alpha1.WorkflowStep
	for i, s := range states {
		out = append(out, nodewrightv1alpha1.WorkflowStep{Name: fmt.Sprintf("s%d", i+1), State: s})
	}
	return out
}

func TestWorkflowStep(t *testing.T) {
	const (
		pending   = nodewrightv1alpha1.StepPending
		waiting   = nodewrightv1alpha1.StepWaiting
		running   = nodewrightv1alpha1.StepRunning
		succeeded = nodewrightv1alpha1.StepSucceeded
		failed    = nodewrightv1alpha1.StepFailed
		skipped   = nodewrightv1alpha1.StepSkipped
	)
	for _, tc := range []struct {
		steps []nodewrightv1alpha1.WorkflowStep
		want  string
	}{
		{nil, ""},
		{steps(pending, pending), ""},
		// A step a gate holds (a Manual flip's next node, waiting for its approval).
		{steps(waiting, pending), "s1 (waiting)"},
		{steps(succeeded, running, pending), "s2"},
		// Between two steps: the latest that started, not the last of the plan.
		{steps(succeeded, pending, pending), "s1"},
		{steps(succeeded, waiting, pending), "s2 (waiting)"},
		{steps(succeeded, skipped, failed, pending), "s3"},
		// A rollback step running after the step it undoes.
		{steps(succeeded, failed, running), "s3"},
	} {
		got := workflow("BondModeFlipPlan", "f", nodewrightv1alpha1.WorkflowStatus{Phase: nodewrightv1alpha1.WorkflowRunning, Steps: tc.steps}, "1/3")
		if got.Step != tc.want || got.Kind != "BondModeFlipPlan" || got.Name != "f" || got.Phase != "Running" || got.Progress != "1/3" {
			t.Errorf("steps %v: %+v; want step %q", tc.steps, got, tc.want)
		}
	}
}

func TestWorkflowColumn(t *testing.T) {
	w := func(name, step, progress string) fleetv1alpha1.MemberWorkflow {
		return fleetv1alpha1.MemberWorkflow{Kind: "ReplicationUpgrade", Name: name, Step: step, Progress: progress}
	}
	for _, tc := range []struct {
		ws   []fleetv1alpha1.MemberWorkflow
		want string
	}{
		{nil, ""},
		{[]fleetv1alpha1.MemberWorkflow{w("up", "", "")}, "ReplicationUpgrade/up"},
		{[]fleetv1alpha1.MemberWorkflow{w("up", "Sync", "")}, "ReplicationUpgrade/up Sync"},
		{[]fleetv1alpha1.MemberWorkflow{w("up", "", "2/3")}, "ReplicationUpgrade/up 2/3"},
		{[]fleetv1alpha1.MemberWorkflow{w("up", "Sync", "2/3"), w("b", "", ""), w("c", "", "")}, "ReplicationUpgrade/up Sync 2/3 (+2)"},
		{[]fleetv1alpha1.MemberWorkflow{w(strings.Repeat("n", 600), "", "")}, ("ReplicationUpgrade/" + strings.Repeat("n", 600))[:512]},
	} {
		if got := workflowColumn(tc.ws, len(tc.ws)); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.ws, got, tc.want)
		}
	}
	// More run than the summary lists: the column counts them all.
	if got, want := workflowColumn([]fleetv1alpha1.MemberWorkflow{w("up", "", "")}, 40), "ReplicationUpgrade/up (+39)"; got != want {
		t.Errorf("one listed of 40: %q; want %q", got, want)
	}
}

func TestSetObserved(t *testing.T) {
	// seen is what workflowReader keeps of the flips and the upgrades, as it reads them.
	seen := func(flips []string, upgrades []string, phases map[string]nodewrightv1alpha1.WorkflowPhase) WorkflowsSeen {
		var w WorkflowsSeen
		for _, name := range flips {
			w.see("BondModeFlipPlan", name, nodewrightv1alpha1.WorkflowStatus{Phase: phases[name]}, "")
		}
		for _, name := range upgrades {
			w.see("ReplicationUpgrade", name, nodewrightv1alpha1.WorkflowStatus{Phase: phases[name]}, "1/2")
		}
		return w
	}
	cluster := &nodewrightv1alpha1.NodewrightCluster{}
	cluster.Status.Phase = "MultiNode"
	cluster.Status.Management = "Managed"
	cluster.Status.Nodes = nodewrightv1alpha1.NodeCounts{Ready: 2, Total: 3}
	cluster.Status.Profile = &nodewrightv1alpha1.ActiveProfile{Name: "site", Version: "1.2.0"}

	t.Run("everything", func(t *testing.T) {
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setObserved(&status, Observed{Cluster: cluster, NodewrightVersion: "0.2.0",
			Workflows: seen([]string{"done", "new", "held"}, []string{"failed", "back", "undoing"}, map[string]nodewrightv1alpha1.WorkflowPhase{
				"done": nodewrightv1alpha1.WorkflowSucceeded, "held": nodewrightv1alpha1.WorkflowPending, "failed": nodewrightv1alpha1.WorkflowFailed,
				"back": nodewrightv1alpha1.WorkflowRolledBack, "undoing": nodewrightv1alpha1.WorkflowRollingBack})})
		want := fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "MultiNode", Management: "Managed", Nodes: fleetv1alpha1.MemberNodes{Ready: 2, Total: 3},
			Profile: &fleetv1alpha1.MemberProfile{Name: "site", Version: "1.2.0"}, NodewrightVersion: "0.2.0",
			Workflows: []fleetv1alpha1.MemberWorkflow{{Kind: "BondModeFlipPlan", Name: "new"}, {Kind: "BondModeFlipPlan", Name: "held", Phase: "Pending"},
				{Kind: "ReplicationUpgrade", Name: "undoing", Phase: "RollingBack", Progress: "1/2"}},
			Workflow: "BondModeFlipPlan/new (+2)"}
		if !equality.Semantic.DeepEqual(status, want) {
			t.Errorf("status\n %+v\nwant\n %+v", status, want)
		}
	})
	t.Run("cleared", func(t *testing.T) {
		// What the member no longer has leaves the summary; what the health check and the
		// checkpoint set stays.
		status := fleetv1alpha1.NodewrightClusterSummaryStatus{Phase: "MultiNode", Management: "Managed", Nodes: fleetv1alpha1.MemberNodes{Ready: 1, Total: 1},
			Profile: &fleetv1alpha1.MemberProfile{Name: "site"}, NodewrightVersion: "0.1.0", KubernetesVersion: "v1.34.2",
			Workflows: []fleetv1alpha1.MemberWorkflow{{Kind: "BondModeFlipPlan", Name: "old"}}, Workflow: "BondModeFlipPlan/old",
			Checkpoint: &fleetv1alpha1.AuditCheckpoint{Sequence: 3}}
		setObserved(&status, Observed{})
		want := fleetv1alpha1.NodewrightClusterSummaryStatus{KubernetesVersion: "v1.34.2", Checkpoint: &fleetv1alpha1.AuditCheckpoint{Sequence: 3}}
		if !equality.Semantic.DeepEqual(status, want) {
			t.Errorf("status\n %+v\nwant\n %+v", status, want)
		}
	})
	t.Run("at most 32 workflows, all counted", func(t *testing.T) {
		var flips []string
		phases := map[string]nodewrightv1alpha1.WorkflowPhase{}
		for i := range 40 {
			flips = append(flips, fmt.Sprintf("f%02d", i))
			phases[flips[i]] = nodewrightv1alpha1.WorkflowRunning
		}
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setObserved(&status, Observed{Workflows: seen(flips, nil, phases)})
		if len(status.Workflows) != 32 || status.Workflows[31].Name != "f31" || status.Workflow != "BondModeFlipPlan/f00 (+39)" {
			t.Errorf("%d workflows, column %q", len(status.Workflows), status.Workflow)
		}
	})
	t.Run("stripped of what a terminal acts on", func(t *testing.T) {
		// A member's API server answers what it likes: a terminal's escapes and new lines in
		// every string kubectl nodewright fleet prints.
		evil := "x\x1b]0;owned\x07\x1b[2J\n\u202e"
		c := cluster.DeepCopy()
		c.Status.Phase, c.Status.Management = nodewrightv1alpha1.ClusterPhase(evil), nodewrightv1alpha1.ManagementMode(evil)
		c.Status.Profile = &nodewrightv1alpha1.ActiveProfile{Name: evil, Version: evil}
		var w WorkflowsSeen
		w.see(evil, evil, nodewrightv1alpha1.WorkflowStatus{Phase: nodewrightv1alpha1.WorkflowPhase(evil),
			Steps: []nodewrightv1alpha1.WorkflowStep{{Name: evil, State: nodewrightv1alpha1.StepRunning}}}, evil)
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setObserved(&status, Observed{Cluster: c, Workflows: w, NodewrightVersion: evil})
		setHealth(&status, Health{Known: true, Reason: fleetv1alpha1.ReasonNotAnswering, Message: evil, KubernetesVersion: evil})
		ws := status.Workflows[0]
		for _, got := range []string{status.Phase, status.Management, status.Profile.Name, status.Profile.Version, status.NodewrightVersion,
			status.KubernetesVersion, status.Conditions[0].Message, ws.Kind, ws.Name, ws.Phase, ws.Step, ws.Progress, status.Workflow} {
			if strings.IndexFunc(got, func(r rune) bool { return !unicode.IsGraphic(r) }) >= 0 {
				t.Errorf("the summary keeps %q", got)
			}
		}
	})
	t.Run("clipped to the summary's limits", func(t *testing.T) {
		long := strings.Repeat("x", 300)
		c := cluster.DeepCopy()
		c.Status.Phase, c.Status.Management = nodewrightv1alpha1.ClusterPhase(long), nodewrightv1alpha1.ManagementMode(long)
		c.Status.Profile = &nodewrightv1alpha1.ActiveProfile{Name: long, Version: long}
		var w WorkflowsSeen
		w.see("BondModeFlipPlan", "f", nodewrightv1alpha1.WorkflowStatus{Phase: nodewrightv1alpha1.WorkflowPhase(long),
			Steps: []nodewrightv1alpha1.WorkflowStep{{Name: long, State: nodewrightv1alpha1.StepRunning}}}, long)
		var status fleetv1alpha1.NodewrightClusterSummaryStatus
		setObserved(&status, Observed{Cluster: c, Workflows: w, NodewrightVersion: long})
		setHealth(&status, Health{Known: true, Reachable: true, KubernetesVersion: long})
		got := []int{len(status.Phase), len(status.Management), len(status.Profile.Name), len(status.Profile.Version), len(status.NodewrightVersion),
			len(status.KubernetesVersion), len(status.Workflows[0].Phase), len(status.Workflows[0].Step), len(status.Workflows[0].Progress)}
		if want := []int{32, 32, 253, 64, 64, 64, 32, 64, 64}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("lengths %v; want %v", got, want)
		}
	})
}

func TestSetHealth(t *testing.T) {
	reachable := metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonAnswering, Message: "answers"}
	for _, tc := range []struct {
		name        string
		health      Health
		before      []metav1.Condition
		wantStatus  metav1.ConditionStatus // "" for no condition
		wantReason  string
		wantVersion string
	}{
		{name: "unknown leaves nothing", health: Health{}, wantVersion: "v1.33.0"},
		{name: "unknown keeps the last finding", health: Health{}, before: []metav1.Condition{reachable}, wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonAnswering, wantVersion: "v1.33.0"},
		{name: "answering", health: Health{Known: true, Reachable: true, Reason: fleetv1alpha1.ReasonAnswering, Message: "answers", KubernetesVersion: "v1.34.2"},
			wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonAnswering, wantVersion: "v1.34.2"},
		{name: "refused, version kept", health: Health{Known: true, Reason: fleetv1alpha1.ReasonUnauthorized, Message: "401"}, before: []metav1.Condition{reachable},
			wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonUnauthorized, wantVersion: "v1.33.0"},
		{name: "not answering", health: Health{Known: true, Reason: fleetv1alpha1.ReasonNotAnswering, Message: "timeout"},
			wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonNotAnswering, wantVersion: "v1.33.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := &fleetv1alpha1.NodewrightClusterSummaryStatus{KubernetesVersion: "v1.33.0", Conditions: tc.before}
			setHealth(status, tc.health)
			c := meta.FindStatusCondition(status.Conditions, fleetv1alpha1.ConditionReachable)
			switch {
			case tc.wantStatus == "" && c != nil:
				t.Errorf("condition %+v; want none", c)
			case tc.wantStatus != "" && (c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason):
				t.Errorf("condition %+v; want %s %s", c, tc.wantStatus, tc.wantReason)
			}
			if status.KubernetesVersion != tc.wantVersion {
				t.Errorf("version %q; want %q", status.KubernetesVersion, tc.wantVersion)
			}
		})
	}
}

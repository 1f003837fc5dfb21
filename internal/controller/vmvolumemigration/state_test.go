package vmvolumemigration

import (
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// TestStatusRecordsTheMachineState walks every path of every plan through the machine and
// checks that the status written for each transition reads back as the state the machine
// moved to: the controller resumes from its status after a restart, so the two must agree.
func TestStatusRecordsTheMachineState(t *testing.T) {
	now := metav1.NewTime(time.Unix(1_800_000_000, 0))
	for _, mode := range []nwv1.MigrationMode{nwv1.MigrationCold, nwv1.MigrationHot} {
		for _, retain := range []bool{true, false} {
			m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{UID: "6e0c4a5e-1111-4c2b-9d7e-000000000001"},
				Spec: nwv1.VMVolumeMigrationSpec{Mode: mode, RetainSource: ptr.To(retain)}}
			plan := migration.PlanOf(m)
			stateOf := func(m *nwv1.VMVolumeMigration) migration.State {
				return workflow.StateOf(&m.Status.WorkflowStatus, plan)
			}
			type node struct {
				m     *nwv1.VMVolumeMigration
				depth int
			}
			queue := []node{{m: m}}
			visited := 0
			for len(queue) > 0 {
				n := queue[0]
				queue = queue[1:]
				from := stateOf(n.m)
				for _, e := range migration.Events() {
					to, err := plan.Next(from, e)
					if err != nil || to == from {
						continue
					}
					next := n.m.DeepCopy()
					workflow.Transition(&next.Status.WorkflowStatus, plan, migration.Kind, next.Generation, from, to, e, "because", false, now)
					if got := stateOf(next); got != to {
						t.Fatalf("%+v: %s --%s--> %s, but the status reads back as %s (steps %v)", plan, from, e, to, got, next.Status.Steps)
					}
					// The audit trail rebuilt from the status has one record per transition
					// so far, the newest for this one, each with the same ID every time.
					recs := engine.TransitionRecords(next, plan, migration.Kind, "tester")
					if from.Phase == nwv1.WorkflowPending && e == migration.Cancel {
						if len(recs) != 0 {
							t.Fatalf("a migration cancelled before it started has %d records", len(recs))
						}
					} else {
						last := recs[len(recs)-1]
						if len(recs) != n.depth+1 || last.From != from.String() || last.To != to.String() || last.Reason != string(e) {
							t.Fatalf("%+v: after %s --%s--> %s the status rebuilds %d records, the last %s -> %s (%s); want %d",
								plan, from, e, to, len(recs), last.From, last.To, last.Reason, n.depth+1)
						}
						if again := engine.TransitionRecords(next.DeepCopy(), plan, migration.Kind, "tester"); again[len(again)-1].ID != last.ID {
							t.Fatal("rebuilding a record gave another ID")
						}
					}
					if len(next.Status.Steps) > 32 {
						t.Fatalf("%+v: %d steps, more than the API allows", plan, len(next.Status.Steps))
					}
					visited++
					queue = append(queue, node{m: next, depth: n.depth + 1})
				}
			}
			if visited < 20 {
				t.Errorf("%+v: only %d transitions walked", plan, visited)
			}
		}
	}
}

func TestChildNamesFitALabel(t *testing.T) {
	long := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Name: "a-very-long-migration-name-that-goes-on-and-on-for-quite-a-while-indeed"}}
	for _, suffix := range []string{migration.SuffixBefore, migration.SuffixAfter, migration.SuffixTarget, migration.SuffixView, migration.SuffixCopy, migration.SuffixVerify} {
		name := migration.ChildName(long, suffix)
		if len(name) > children.MaxName || name[len(name)-len(suffix):] != suffix {
			t.Errorf("%q: %d characters", name, len(name))
		}
		if migration.ChildName(long, suffix) != name {
			t.Error("child names are not deterministic")
		}
	}
	if got := migration.ChildName(&nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, migration.SuffixTarget); got != "web-target" {
		t.Errorf("short name %q", got)
	}
}

// truncate bounds the messages of the status and of Events in bytes without cutting a
// character in two: what it keeps is valid UTF-8 when the text was.
func TestTruncateKeepsWholeCharacters(t *testing.T) {
	for _, c := range []struct {
		text string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefg..."},
		{"abcdefé☃xyz", 10, "abcdef..."},               // "é" would be cut in two at byte 7
		{"abcdeé☃xyz", 10, "abcdeé..."},                // "é" ends at byte 7
		{"abcde☃☃☃", 10, "abcde..."},                   // "☃" would be cut at byte 7
		{"☃☃☃☃", 5, "..."},                             // not even one character fits beside the marker
		{"a\xffb\xffcdefghij", 10, "a\xffb\xffcde..."}, // invalid bytes are one byte each
	} {
		got := audit.Shorten(c.text, c.n)
		if got != c.want || len(got) > c.n {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.text, c.n, got, c.want)
		}
		if utf8.ValidString(c.text) && !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q: not valid UTF-8", c.text, c.n, got)
		}
	}
}

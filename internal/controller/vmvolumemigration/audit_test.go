package vmvolumemigration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site"
)

// oversizedLog stands for a record the builder cannot bound (an actor of a megabyte, say):
// before the real log sees them, it pads the records of transitions into one state past the
// line limit, so that the log refuses each as it refuses any record too long for a line.
type oversizedLog struct {
	vmvolumemigration.AuditLog
	to string
}

func (o oversizedLog) Append(ctx context.Context, records ...audit.Record) ([]audit.Appended, error) {
	padded := slices.Clone(records)
	for i := range padded {
		if padded[i].To == o.to {
			padded[i].Actor += strings.Repeat("x", audit.MaxLineBytes)
		}
	}
	return o.AuditLog.Append(ctx, padded...)
}

// TestARecordTooLongForTheTrailIsLeftOut: the log refuses the record of one transition for
// good. It is left out, with a Warning Event, and the records of the transitions after it are
// still written: it is not resent with them on every reconcile, which would keep them all out.
func TestARecordTooLongForTheTrailIsLeftOut(t *testing.T) {
	f := newFixture(t, site.Options{})
	tr := openTrail(t)
	env.StartManagerAsWithCache(t, asOperator(t), operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager) error {
		return (&vmvolumemigration.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("test"), Audit: oversizedLog{tr.log, "Running/Copy"}, Actor: operatorActor}, Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	f.create(f.migration("oversized", nwv1.MigrationCold, linstorClass))
	f.waitPhase("oversized", nwv1.WorkflowSucceeded)
	f.assertEvents("oversized", vmvolumemigration.EventAuditRecordTooLong)
	// Start and the eight steps, less the one into Copy.
	f.eventually(func() (bool, string) {
		lines := tr.lines(t, f.ns, "oversized")
		return len(lines) == 8, fmt.Sprintf("the trail holds %d records of the migration, want 8:\n%s", len(lines), strings.Join(lines, "\n"))
	})
	raw := strings.Join(tr.lines(t, f.ns, "oversized"), "\n")
	for to, want := range map[string]int{"Running/Copy": 0, "Running/Repoint": 1, "Succeeded": 1} {
		if got := strings.Count(raw, `"to":"`+to+`"`); got != want {
			t.Errorf("the trail holds %d records into %s, want %d", got, to, want)
		}
	}
	if err := tr.log.Close(); err != nil {
		t.Fatal(err)
	}
	if report := tr.report(t); !report.OK {
		t.Errorf("the trail does not verify: %v", report.Problems)
	}
}

package linstorgate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// counting keeps the records appended to it.
type counting struct {
	mu      sync.Mutex
	records []audit.Record
}

func (c *counting) Append(_ context.Context, records ...audit.Record) ([]audit.Appended, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, records...)
	return make([]audit.Appended, len(records)), nil
}

// TestAFloodOfRefusalsIsPaced: a compromised operator's flood of refused requests (each
// answered 403) is recorded one by one up to the pace, 60 at once then 1 a second, so that it
// cannot fill the trail's volume and have the gate's pod, and its trail, evicted; the refusals
// over the pace are counted in the next record.
func TestAFloodOfRefusalsIsPaced(t *testing.T) {
	trail := &counting{}
	g := &Gate{Audit: trail, Log: logr.Discard()}
	refuse := func() {
		w := httptest.NewRecorder()
		g.refused(context.Background(), w, "system:serviceaccount:nodewright-system:nodewright-operator", &Refusal{
			RefusedBy: "nodewright-linstor-gate", Method: http.MethodPut, Path: "/v1/resource-definitions/pvc-1",
			Rule: "not in the allowlist", Message: "refused", Status: http.StatusForbidden})
		if w.Code != http.StatusForbidden {
			t.Fatalf("a refusal answered %d", w.Code)
		}
	}
	for range 10_000 {
		refuse()
	}
	trail.mu.Lock()
	recorded := len(trail.records)
	trail.mu.Unlock()
	// The burst, and at most a few more for the seconds a slow machine took.
	if recorded < refusalRecordsBurst || recorded > refusalRecordsBurst+30 {
		t.Fatalf("%d of 10,000 refusals recorded; want the burst of %d (and one a second after)", recorded, refusalRecordsBurst)
	}
	// The next one recorded says how many were not.
	g.refusalsMu.Lock()
	g.refusals = rate.NewLimiter(rate.Inf, 1) // the pace allows the next one at once
	g.refusalsMu.Unlock()
	refuse()
	trail.mu.Lock()
	last := trail.records[len(trail.records)-1]
	trail.mu.Unlock()
	var said string
	for _, d := range last.Details {
		if d.Name == "unrecorded" {
			said = d.Value
		}
	}
	if !strings.Contains(said, " refusals before this one, over the pace of 1 a second") {
		t.Errorf("the record after the flood says %q of the refusals not recorded", said)
	}
}

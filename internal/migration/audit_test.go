package migration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// TestEveryTransitionHasADistinctStableRecord walks every transition of every plan and builds
// its audit record: each names the migration, both states and the event, the same transition
// built again has the same ID, and no two transitions share one.
func TestEveryTransitionHasADistinctStableRecord(t *testing.T) {
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "db-root", UID: "u-1", Generation: 1}}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, p := range plans() {
		ids := map[string]string{}
		for _, s := range states(p) {
			for _, e := range Events() {
				next, err := p.Next(s, e)
				if err != nil || next == s {
					continue
				}
				r := AuditRecord(m, "system:serviceaccount:nodewright-system:nodewright-operator", s, next, e, "", at,
					audit.Detail{Name: "targetPVC", Value: "db-root-rwx"})
				again := AuditRecord(m, "system:serviceaccount:nodewright-system:nodewright-operator", s, next, e, "", at.Add(time.Minute))
				if r.ID != again.ID {
					t.Errorf("%s → %s: unstable ID", s, next)
				}
				key := s.String() + " → " + next.String()
				if other, dup := ids[r.ID]; dup && other != key {
					t.Errorf("%s and %s share a record ID", key, other)
				}
				ids[r.ID] = key
				if r.Subject.Name != "db-root" || r.Subject.UID != "u-1" || r.From != s.String() || r.To != next.String() || r.Reason != string(e) {
					t.Errorf("record %+v does not describe %s", r, key)
				}
			}
		}
	}
}

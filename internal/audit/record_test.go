package audit

import (
	"testing"
	"time"
)

func TestTransitionIDIsStableAndDistinct(t *testing.T) {
	subject := Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration", Namespace: "vms", Name: "m", UID: "uid-1"}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	a := Transition(subject, "system:serviceaccount:nodewright-system:operator", "Step", "Copy", "Repoint", "StepSucceeded", "", "", at)
	again := Transition(subject, "someone-else", "Step", "Copy", "Repoint", "StepSucceeded", "retried", "", at.Add(time.Hour))
	if a.ID != again.ID {
		t.Errorf("the same transition built twice got two IDs: %s, %s", a.ID, again.ID)
	}
	if a.Time.Location() != time.UTC || !a.Time.Equal(at) {
		t.Errorf("time %v is not the same instant in UTC", a.Time)
	}
	distinct := []Record{
		a,
		Transition(subject, "", "Step", "Copy", "RollbackCleanup", "", "", "", at),
		Transition(Subject{UID: "uid-2"}, "", "Step", "Copy", "Repoint", "", "", "", at),
		Transition(subject, "", "Step", "Copy", "Repoint", "", "", "2", at),
		// Field boundaries cannot be shifted to forge another record's ID.
		Transition(subject, "", "Step|Copy", "", "Repoint", "", "", "", at),
		Transition(subject, "", "Step", "Copy|", "Repoint", "", "", "", at),
	}
	seen := map[string]int{}
	for i, r := range distinct {
		if j, dup := seen[r.ID]; dup {
			t.Errorf("records %d and %d share the ID %s", j, i, r.ID)
		}
		seen[r.ID] = i
	}
}

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

// A content ID changes with any member of the record and with nothing else: not the ID the
// record had, nor the zone its time was written in.
func TestContentIDCoversTheWholeRecord(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	base := Record{Time: at, Actor: "alice", Subject: Subject{APIVersion: "v1", Kind: "Node", Namespace: "ns", Name: "edge-1", UID: "u", Generation: 3},
		Action: "Note", From: "a", To: "b", Reason: "Maintenance", Message: "first", Details: []Detail{{Name: "ticket", Value: "OPS-1"}}}
	id := ContentID(base)
	if len(id) != 32 {
		t.Fatalf("content ID %q: want 32 hex digits", id)
	}
	same := base
	same.ID, same.Time, same.Details = "another", at.In(time.FixedZone("CET", 3600)), []Detail{{Name: "ticket", Value: "OPS-1"}}
	if got := ContentID(same); got != id {
		t.Errorf("the same record (another ID, its time in another zone): %s, want %s", got, id)
	}
	for name, change := range map[string]func(r *Record){
		"time":               func(r *Record) { r.Time = at.Add(time.Nanosecond) },
		"actor":              func(r *Record) { r.Actor = "bob" },
		"subject.apiVersion": func(r *Record) { r.Subject.APIVersion = "v2" },
		"subject.kind":       func(r *Record) { r.Subject.Kind = "Pod" },
		"subject.namespace":  func(r *Record) { r.Subject.Namespace = "other" },
		"subject.name":       func(r *Record) { r.Subject.Name = "edge-2" },
		"subject.uid":        func(r *Record) { r.Subject.UID = "v" },
		"subject.generation": func(r *Record) { r.Subject.Generation = 4 },
		"action":             func(r *Record) { r.Action = "Reboot" },
		"from":               func(r *Record) { r.From = "" },
		"to":                 func(r *Record) { r.To = "c" },
		"reason":             func(r *Record) { r.Reason = "" },
		"message":            func(r *Record) { r.Message = "second" },
		"a detail's value":   func(r *Record) { r.Details = []Detail{{Name: "ticket", Value: "OPS-2"}} },
		"a detail's name":    func(r *Record) { r.Details = []Detail{{Name: "issue", Value: "OPS-1"}} },
		"one more detail":    func(r *Record) { r.Details = append([]Detail{{Name: "x"}}, r.Details...) },
		"no details":         func(r *Record) { r.Details = nil },
		// A member's text cannot be moved into the next one to forge another record's ID.
		"text moved across members": func(r *Record) { r.Reason, r.Message = "Maintenance\",\"message\":\"first", "" },
	} {
		r := base
		r.Details = append([]Detail(nil), base.Details...)
		change(&r)
		if got := ContentID(r); got == id {
			t.Errorf("a record with another %s has the same content ID %s", name, id)
		}
	}
	if tr := Transition(base.Subject, base.Actor, base.Action, base.From, base.To, base.Reason, base.Message, "", at, base.Details...); tr.ID == id {
		t.Errorf("the content ID is the transition's ID")
	}
}

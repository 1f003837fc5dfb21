package migration

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// The record of a transition always fits one line of the trail, whatever the migration's
// status and annotations hold: its message and details are cut, on a character boundary, so
// that the log takes it and the verifier reads it back. Otherwise the log refuses it, and
// every later record of the migration, which is appended after it, for ever.
func TestAuditRecordFitsALineWhateverTheObjectSays(t *testing.T) {
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "db-root", UID: "u-1", Generation: 1}}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	// Every byte of a control character is six in the trail (\u0001); "é" and "☃" are two and
	// three bytes, so a cut by bytes can fall inside them.
	huge := strings.Repeat("\x01é☃", audit.MaxLineBytes/6+1)
	signer, err := audit.LoadSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		message string
		details []audit.Detail
	}{
		{"a long message", huge, nil},
		{"a long requester", "started", []audit.Detail{{Name: "requestedBy", Value: huge}}},
		{"both", huge, []audit.Detail{{Name: "requestedBy", Value: huge}, {Name: "other", Value: "kept"}}},
		{"short ones, kept whole", "copy verified \x01 é ☃", []audit.Detail{{Name: "requestedBy", Value: "alice"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := AuditRecord(m, "system:serviceaccount:nodewright-system:nodewright-operator", Pending, Pending, Start, c.message, at, c.details...)
			checkCut(t, "message", r.Message, c.message)
			if len(r.Details) != len(c.details) {
				t.Fatalf("%d details, want %d", len(r.Details), len(c.details))
			}
			for i, d := range r.Details {
				if d.Name != c.details[i].Name {
					t.Errorf("detail %d is named %q, want %q", i, d.Name, c.details[i].Name)
				}
				checkCut(t, "detail "+d.Name, d.Value, c.details[i].Value)
			}
			var buf bytes.Buffer
			l := audit.NewLog(audit.NewWriterSink(&buf), signer, audit.ChainState{}, audit.LogOptions{})
			if _, err := l.Append(context.Background(), r); err != nil {
				t.Fatalf("the log refuses the record: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			report, err := audit.Verify(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{signer.PublicKey()}}, audit.Input{Name: "trail", Reader: &buf})
			if err != nil || !report.OK || report.Records != 1 {
				t.Fatalf("the trail does not verify: %v %+v", err, report)
			}
		})
	}
}

// checkCut checks that got is was, or was cut: valid UTF-8, its beginning, marked as cut.
func checkCut(t *testing.T, what, got, was string) {
	t.Helper()
	if got == was {
		if len(was) > 4096 {
			t.Errorf("%s: %d bytes kept whole", what, len(was))
		}
		return
	}
	kept, marked := strings.CutSuffix(got, "...")
	if !marked || !strings.HasPrefix(was, kept) || !utf8.ValidString(got) || len(kept) == 0 {
		t.Errorf("%s: %d bytes cut to %d, %q...: want valid UTF-8, the beginning of the text, and \"...\"", what, len(was), len(got), got[:min(len(got), 40)])
	}
}

// A rollback that found the VM deleted does not say the VM is as it was before.
func TestARollbackWithoutTheVMSaysSo(t *testing.T) {
	gone := &nwv1.WorkflowStatus{Steps: []nwv1.WorkflowStep{
		{Name: string(Copy), State: nwv1.StepFailed, Message: VMDeleted("web", Copy, false)},
		{Name: string(RollbackStartVM), State: nwv1.StepSkipped, Message: VMDeleted("web", RollbackStartVM, true)},
	}}
	if got := rolledBackWithoutTheVM(gone); !strings.Contains(got, "rolled back without the VM, which was deleted during the migration") {
		t.Errorf("VM deleted: %q", got)
	}
	there := &nwv1.WorkflowStatus{Steps: []nwv1.WorkflowStep{
		{Name: string(Copy), State: nwv1.StepFailed, Message: "Job m-copy failed: bad input"},
		{Name: string(RollbackStartVM), State: nwv1.StepSkipped, Message: "the VM was not running before the migration; it stays stopped"},
	}}
	if got := rolledBackWithoutTheVM(there); got != "" {
		t.Errorf("VM there: %q, want the kind's RolledBack", got)
	}
}

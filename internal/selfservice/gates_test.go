package selfservice

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func request(name string, created time.Time, op nwv1.VMOperation, vm string, phase nwv1.VMOperationPhase, started *time.Time) nwv1.VMOperationRequest {
	r := nwv1.VMOperationRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Spec: nwv1.VMOperationRequestSpec{Operation: op, VM: vm}, Status: nwv1.VMOperationRequestStatus{Phase: phase}}
	if started != nil {
		r.Status.StartTime = &metav1.Time{Time: *started}
	}
	return r
}

// The gates of one request, each alone and all together: what holds it is said, in order,
// and when a gate that opens by itself opens.
func TestGates(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) // a Monday
	hourAgo, minutesAgo := now.Add(-50*time.Minute), now.Add(-5*time.Minute)
	me := request("me", now, nwv1.VMSnapshotNow, "web", nwv1.VMOperationWaiting, nil)
	for _, c := range []struct {
		name      string
		rules     nwv1.SelfServiceOperation
		others    []nwv1.VMOperationRequest
		annotated map[string]string
		want      []string
		position  int32
		approval  string
		retry     time.Time
	}{
		{name: "nothing holds it", want: nil, position: 1, approval: nwv1.ApprovalNotRequired},
		{name: "approval awaited", rules: nwv1.SelfServiceOperation{Approval: nwv1.ApprovalManual},
			want: []string{"awaiting an administrator's approval"}, position: 1, approval: nwv1.ApprovalRequired},
		{name: "approval of another operation", rules: nwv1.SelfServiceOperation{Approval: nwv1.ApprovalManual},
			annotated: map[string]string{nwv1.AnnotationApprove: "Restart", nwv1.AnnotationApprovedBy: "admin"},
			want:      []string{"awaiting an administrator's approval"}, position: 1, approval: nwv1.ApprovalRequired},
		{name: "approved", rules: nwv1.SelfServiceOperation{Approval: nwv1.ApprovalManual},
			annotated: map[string]string{nwv1.AnnotationApprove: "SnapshotNow", nwv1.AnnotationApprovedBy: "admin"},
			position:  1, approval: nwv1.ApprovalGiven},
		{name: "window closed", rules: nwv1.SelfServiceOperation{MaintenanceWindow: &nwv1.MaintenanceWindow{Days: []nwv1.Weekday{"Saturday"}, Start: "22:00", End: "02:00"}},
			want: []string{"the maintenance window (Sat 22:00-02:00 UTC) is closed; it opens at 2026-12-05T22:00:00Z"}, position: 1, approval: nwv1.ApprovalNotRequired,
			retry: time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)},
		{name: "over the rate", rules: nwv1.SelfServiceOperation{Rate: &nwv1.SelfServiceRate{Requests: 2, Period: metav1.Duration{Duration: time.Hour}}},
			others: []nwv1.VMOperationRequest{
				request("a", hourAgo, nwv1.VMSnapshotNow, "db", nwv1.VMOperationSucceeded, &hourAgo),
				request("b", minutesAgo, nwv1.VMSnapshotNow, "db", nwv1.VMOperationSucceeded, &minutesAgo),
				request("c", minutesAgo, nwv1.VMRestart, "db", nwv1.VMOperationSucceeded, &minutesAgo)},
			want:     []string{"the rate of SnapshotNow in this namespace: 2 started in the last 1h0m0s (at most 2); the next may start at 2026-11-30T12:10:00Z"},
			position: 1, approval: nwv1.ApprovalNotRequired, retry: now.Add(10 * time.Minute)},
		{name: "under the rate", rules: nwv1.SelfServiceOperation{Rate: &nwv1.SelfServiceRate{Requests: 2, Period: metav1.Duration{Duration: time.Hour}}},
			others:   []nwv1.VMOperationRequest{request("b", minutesAgo, nwv1.VMSnapshotNow, "db", nwv1.VMOperationSucceeded, &minutesAgo)},
			position: 1, approval: nwv1.ApprovalNotRequired},
		{name: "another runs", others: []nwv1.VMOperationRequest{
			request("a", hourAgo, nwv1.VMRestart, "db", nwv1.VMOperationWaiting, nil),
			request("b", minutesAgo, nwv1.VMRestore, "db", nwv1.VMOperationRunning, &minutesAgo)},
			want: []string{"the namespace's requests run one at a time: b (Restore of VM db) runs"}, position: 3, approval: nwv1.ApprovalNotRequired},
		{name: "a later one runs", others: []nwv1.VMOperationRequest{
			request("z", now.Add(time.Minute), nwv1.VMRestart, "db", nwv1.VMOperationRunning, &now)},
			want: []string{"the namespace's requests run one at a time: z (Restart of VM db) runs"}, position: 1, approval: nwv1.ApprovalNotRequired},
		{name: "an earlier one on the VM waits", others: []nwv1.VMOperationRequest{
			request("a", hourAgo, nwv1.VMRestart, "web", nwv1.VMOperationWaiting, nil),
			request("z", now.Add(time.Minute), nwv1.VMRestore, "web", nwv1.VMOperationWaiting, nil)},
			want: []string{"an earlier request on VM web, a (Restart), has not ended"}, position: 2, approval: nwv1.ApprovalNotRequired},
		{name: "an earlier one on another VM waits", others: []nwv1.VMOperationRequest{
			request("a", hourAgo, nwv1.VMRestart, "db", nwv1.VMOperationWaiting, nil)},
			position: 2, approval: nwv1.ApprovalNotRequired},
		{name: "made in the same second, by name", others: []nwv1.VMOperationRequest{
			request("lt", now, nwv1.VMRestart, "web", nwv1.VMOperationWaiting, nil),
			request("zz", now, nwv1.VMRestart, "web", nwv1.VMOperationWaiting, nil)},
			want: []string{"an earlier request on VM web, lt (Restart), has not ended"}, position: 2, approval: nwv1.ApprovalNotRequired},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := me.DeepCopy()
			r.Annotations = c.annotated
			reqs := append([]nwv1.VMOperationRequest{*r}, c.others...)
			h, err := Gates(r, &c.rules, reqs, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Blockers) != len(c.want) {
				t.Fatalf("blocked by %q, want %q", h.Blockers, c.want)
			}
			for i := range c.want {
				if !strings.HasPrefix(h.Blockers[i], c.want[i]) {
					t.Errorf("blocker %d is %q, want %q", i, h.Blockers[i], c.want[i])
				}
			}
			if h.Position != c.position || h.Approval != c.approval || !h.Retry.Equal(c.retry) {
				t.Errorf("position %d, approval %s, retry %s; want %d, %s, %s", h.Position, h.Approval, h.Retry, c.position, c.approval, c.retry)
			}
		})
	}
}

// Offered: no policy, a namespace it does not select, an operation it does not list.
func TestOffered(t *testing.T) {
	p := &nwv1.SelfServicePolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: nwv1.SelfServicePolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"self-service": "on"}},
		Operations:        []nwv1.SelfServiceOperation{{Operation: nwv1.VMSnapshotNow}}}}
	on := map[string]string{"self-service": "on"}
	for _, c := range []struct {
		policy *nwv1.SelfServicePolicy
		op     nwv1.VMOperation
		labels map[string]string
		want   string
	}{
		{nil, nwv1.VMSnapshotNow, on, "there is no SelfServicePolicy default"},
		{p, nwv1.VMSnapshotNow, nil, "SelfServicePolicy default does not select namespace team-a (spec.namespaceSelector)"},
		{p, nwv1.VMRestart, on, "SelfServicePolicy default does not offer Restart (spec.operations)"},
		{p, nwv1.VMSnapshotNow, on, ""},
	} {
		rules, why := Offered(c.policy, c.op, "team-a", c.labels)
		if !strings.HasPrefix(why, c.want) || (why == "") != (rules != nil) {
			t.Errorf("%s in %v: %q, want %q", c.op, c.labels, why, c.want)
		}
	}
}

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestASnapshotPolicyIsRefusedWhatItCannotRun: admission refuses, naming the field and the
// reason, a cron expression or time zone the schedule's parser refuses, minGood above
// keepLast, and a selector that reaches for another namespace; a good policy is admitted with
// its defaults.
func TestASnapshotPolicyIsRefusedWhatItCannotRun(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	policy := func(name string, edit func(*nwv1.VMSnapshotPolicy)) *nwv1.VMSnapshotPolicy {
		p := &nwv1.VMSnapshotPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: nwv1.VMSnapshotPolicySpec{
				VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"backup": "nightly"}},
				Schedule:   nwv1.SnapshotSchedule{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"},
				Retention:  nwv1.SnapshotRetention{KeepLast: 3, KeepDaily: 7, MinGood: 2},
			},
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	good := policy("nightly", nil)
	if err := as(t, "alice").Create(ctx, good); err != nil {
		t.Fatalf("a good policy was refused: %v", err)
	}
	if s := good.Spec; s.Consistency.Require != nwv1.SnapshotGuestAgent || s.CatchUp != nwv1.SnapshotCatchUpSkip ||
		s.FailureDeadline.Duration.String() != "10m0s" || s.StartingDeadline.Duration.String() != "5m0s" || s.DegradedAfter != 3 {
		t.Errorf("defaults: %+v", s)
	}

	for _, c := range []struct {
		name, want string
		edit       func(*nwv1.VMSnapshotPolicy)
		webhook    bool
	}{
		{"bad-cron", `spec.schedule.cron`, func(p *nwv1.VMSnapshotPolicy) { p.Spec.Schedule.Cron = "61 * * * *" }, true},
		{"cron-tz", `spec.schedule.cron`, func(p *nwv1.VMSnapshotPolicy) { p.Spec.Schedule.Cron = "CRON_TZ=Asia/Tokyo 0 3 * * *" }, true},
		{"every", `spec.schedule.cron`, func(p *nwv1.VMSnapshotPolicy) { p.Spec.Schedule.Cron = "@every 1h" }, true},
		{"bad-zone", `spec.schedule.timeZone`, func(p *nwv1.VMSnapshotPolicy) { p.Spec.Schedule.TimeZone = "Mars/Olympus_Mons" }, true},
		{"min-good", `spec.retention.minGood: Invalid value: "object": minGood must not be greater than keepLast`, func(p *nwv1.VMSnapshotPolicy) {
			p.Spec.Retention.MinGood = 4
		}, false},
		{"other-ns-name", `names are of VMs in the policy's own namespace`, func(p *nwv1.VMSnapshotPolicy) {
			p.Spec.VMSelector.Names = []string{"team-b/db"}
		}, false},
		{"other-ns-label", `spec.vmSelector.matchLabels[kubernetes.io/metadata.name]: a policy selects VMs in its own namespace`, func(p *nwv1.VMSnapshotPolicy) {
			p.Spec.VMSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "team-b"}
		}, true},
		{"other-ns-expression", `spec.vmSelector.matchExpressions[0].key: kubernetes.io/metadata.name`, func(p *nwv1.VMSnapshotPolicy) {
			p.Spec.VMSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-b"}}}
		}, true},
		{"bad-selector", `spec.vmSelector.matchExpressions[0].operator`, func(p *nwv1.VMSnapshotPolicy) {
			p.Spec.VMSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near", Values: []string{"db"}}}
		}, true},
	} {
		err := as(t, "alice").Create(ctx, policy(c.name, c.edit))
		if c.webhook {
			refused(t, err, c.want)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a refusal saying %q", c.name, err, c.want)
		}
	}

	// An update is checked as a create is.
	bad := &nwv1.VMSnapshotPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(good), bad); err != nil {
		t.Fatal(err)
	}
	bad.Spec.Schedule.Cron = "0 0 30 2 *"
	refused(t, as(t, "alice").Update(ctx, bad), "spec.schedule.cron")
}

package kairossite

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// TestTheAgentReportsTheNamedUnits: a real agent process on a played Kairos host reports the
// systemd units the BootRecoveryPolicy names, as the host's (played) systemctl show says them,
// and a unit that fails later at its next report.
func TestTheAgentReportsTheNamedUnits(t *testing.T) {
	k := newKairosNode(t)
	if err := k.host.SetUnit("k3s.service", &kairosplay.UnitState{ActiveState: "active", SubState: "running"}); err != nil {
		t.Fatal(err)
	}
	p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName},
		Spec: nwv1.BootRecoveryPolicySpec{PostBootHealth: nwv1.PostBootHealth{SystemdUnits: []nwv1.SystemdUnitName{"k3s.service", "edge-app.service"}}}}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p) })

	units := func(want ...string) func(o *nwv1.HostOSStatus) string {
		return func(o *nwv1.HostOSStatus) string {
			var got []string
			for _, u := range o.SystemdUnits {
				got = append(got, fmt.Sprintf("%s %s %s/%s", u.Name, u.LoadState, u.ActiveState, u.SubState))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("the agent reports the units %q; want %q", got, want)
			}
			return ""
		}
	}
	reported(t, units("k3s.service loaded active/running", "edge-app.service not-found inactive/dead"))

	if err := k.host.SetUnit("edge-app.service", &kairosplay.UnitState{ActiveState: "failed", SubState: "failed"}); err != nil {
		t.Fatal(err)
	}
	reported(t, units("k3s.service loaded active/running", "edge-app.service loaded failed/failed"))
}

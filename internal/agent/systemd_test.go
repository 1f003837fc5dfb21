package agent_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// setUnits sets the BootRecoveryPolicy's spec.postBootHealth.systemdUnits, creating the policy
// if there is none; it is deleted when the test ends.
func setUnits(t *testing.T, units ...nwv1.SystemdUnitName) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: nwv1.BootRecoveryPolicyName}, p); err != nil {
			p = &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
			p.Spec.PostBootHealth.SystemdUnits = units
			return env.Client.Create(ctx, p)
		}
		p.Spec.PostBootHealth.SystemdUnits = units
		return env.Client.Update(ctx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}})
	})
}

func hostObserved(t *testing.T, as *nwv1.NodewrightAgentStatus) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionHostObserved)
	if c == nil {
		t.Fatal("no HostObserved condition")
	}
	return c
}

// TestTheReportCarriesTheNamedUnits: the agent reports the units the BootRecoveryPolicy names,
// read with systemctl show on a played host (test/site/kairosplay: no systemd runs here), in
// the policy's order, a state change at the next report; none while the policy names none;
// and a systemctl that cannot be run is said in HostObserved, the rest of the report written.
func TestTheReportCarriesTheNamedUnits(t *testing.T) {
	const node = "units-edge-1"
	played := &kairosplay.Host{Root: t.TempDir(), Dir: t.TempDir()}
	units := &agent.SystemdUnits{Client: env.LiteClient(t), Runner: kairosplay.Runner{Host: played}, Systemctl: []string{"systemctl"}}
	r := &agent.Reporter{Client: env.LiteClient(t), Node: node, Observer: &agent.HostObserver{OS: hostos.Kairos{}, Host: kairosHost(t), Units: units}}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})

	// No policy: no units, and the host is observed.
	as, _ := report(t, r)
	if as.Status.OS == nil || as.Status.OS.Kairos == nil || as.Status.OS.SystemdUnits != nil || hostObserved(t, as).Status != metav1.ConditionTrue {
		t.Fatalf("without a policy: os %+v, HostObserved %+v", as.Status.OS, hostObserved(t, as))
	}

	if err := played.SetUnit("k3s.service", &kairosplay.UnitState{ActiveState: "active", SubState: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := played.SetUnit("edge-app.service", &kairosplay.UnitState{ActiveState: "failed", SubState: "failed"}); err != nil {
		t.Fatal(err)
	}
	setUnits(t, "edge-app.service", "k3s.service", "absent.mount")
	as, wrote := report(t, r)
	want := []nwv1.SystemdUnitStatus{
		{Name: "edge-app.service", LoadState: "loaded", ActiveState: "failed", SubState: "failed"},
		{Name: "k3s.service", LoadState: "loaded", ActiveState: "active", SubState: "running"},
		{Name: "absent.mount", LoadState: "not-found", ActiveState: "inactive", SubState: "dead"},
	}
	if !wrote || as.Status.OS == nil || !equalJSON(t, as.Status.OS.SystemdUnits, want) {
		t.Fatalf("the report's units (wrote %v): %+v; want %+v", wrote, as.Status.OS, want)
	}
	if c := hostObserved(t, as); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "the systemd units edge-app.service, k3s.service, absent.mount") {
		t.Errorf("HostObserved %+v; want True, saying it read the three units", c)
	}
	if _, wrote := report(t, r); wrote {
		t.Error("the same units were written again")
	}

	// The application's unit is started again.
	if err := played.SetUnit("edge-app.service", &kairosplay.UnitState{ActiveState: "active", SubState: "running"}); err != nil {
		t.Fatal(err)
	}
	as, _ = report(t, r)
	if u := as.Status.OS.SystemdUnits; len(u) != 3 || u[0].ActiveState != "active" || u[0].SubState != "running" {
		t.Fatalf("after edge-app.service started: %+v", u)
	}

	// A host without systemctl: the units are not reported, HostObserved says why, and the
	// rest of the report stands.
	units.Runner, units.Systemctl = agent.TailRunner{}, []string{"/nonexistent/systemctl"}
	as, _ = report(t, r)
	c := hostObserved(t, as)
	if as.Status.OS == nil || as.Status.OS.Kairos == nil || as.Status.OS.SystemdUnits != nil ||
		c.Status != metav1.ConditionFalse || c.Reason != nwv1.ReasonSystemdUnitsNotObserved || !strings.Contains(c.Message, "/nonexistent/systemctl") {
		t.Fatalf("without systemctl: os %+v, HostObserved %+v; want the units absent and HostObserved False %s", as.Status.OS, c, nwv1.ReasonSystemdUnitsNotObserved)
	}

	// The policy names no unit: none reported, the host observed.
	units.Runner, units.Systemctl = kairosplay.Runner{Host: played}, []string{"systemctl"}
	setUnits(t)
	as, _ = report(t, r)
	if as.Status.OS.SystemdUnits != nil || hostObserved(t, as).Status != metav1.ConditionTrue {
		t.Fatalf("a policy naming no unit: %+v, HostObserved %+v", as.Status.OS.SystemdUnits, hostObserved(t, as))
	}
}

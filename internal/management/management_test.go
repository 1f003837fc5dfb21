package management

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

var now = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func lease(node string, renewed *time.Time) coordinationv1.Lease {
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if renewed != nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
	}
	return l
}

func at(d time.Duration) *time.Time {
	t := now.Add(d)
	return &t
}

func TestAnAgentReportsWhileItsLeaseIsRenewedWithinTheThreshold(t *testing.T) {
	const staleAfter = 30 * time.Second
	leases := []coordinationv1.Lease{
		lease("fresh", at(-10*time.Second)),
		lease("at-the-threshold", at(-staleAfter)),
		lease("just-past", at(-staleAfter-time.Nanosecond)),
		lease("never-renewed", nil),
		lease("ahead", at(5*time.Second)),
		lease("not-a-node", at(0)),
	}
	got := Agents([]string{"ahead", "at-the-threshold", "fresh", "just-past", "never-renewed", "no-lease"}, leases, now, staleAfter)
	want := map[string]bool{"ahead": true, "at-the-threshold": true, "fresh": true}
	if len(got) != 6 {
		t.Fatalf("%d agents judged for 6 nodes: %+v", len(got), got)
	}
	for _, a := range got {
		if a.Reports != want[a.Node] {
			t.Errorf("%s reports %v, want %v", a.Node, a.Reports, want[a.Node])
		}
		if a.Reports && !a.StaleAt.Equal(a.Renewed.Add(staleAfter+time.Nanosecond)) {
			t.Errorf("%s goes stale at %s, want just past %s after %s", a.Node, a.StaleAt, staleAfter, a.Renewed)
		}
		if !a.Reports && !a.StaleAt.IsZero() {
			t.Errorf("%s does not report but goes stale at %s", a.Node, a.StaleAt)
		}
	}
	if next := NextStale(got); !next.Equal(now.Add(time.Nanosecond)) {
		t.Errorf("next stale at %s, want the agent renewed at the threshold, just after now", next)
	}
	if next := NextStale(Agents([]string{"no-lease"}, nil, now, staleAfter)); !next.IsZero() {
		t.Errorf("next stale at %s with no agent reporting, want none", next)
	}
}

func TestTheSilenceOfAnAgentDoesNotTick(t *testing.T) {
	silent := Agents([]string{"edge-1", "edge-2", "edge-3"},
		[]coordinationv1.Lease{lease("edge-2", nil), lease("edge-3", at(-time.Minute))}, now, 30*time.Second)
	want := []string{
		"edge-1 (no heartbeat Lease nodewright-agent/edge-1)",
		"edge-2 (heartbeat Lease nodewright-agent/edge-2 never renewed)",
		"edge-3 (heartbeat Lease nodewright-agent/edge-3 last renewed 2026-11-21T09:59:00Z, more than 30s ago)",
	}
	for i, a := range silent {
		if got := a.Silence("nodewright-agent", 30*time.Second); got != want[i] {
			t.Errorf("silence %q, want %q", got, want[i])
		}
	}
	// Judged later, the same silence says the same.
	later := Agents([]string{"edge-3"}, []coordinationv1.Lease{lease("edge-3", at(-time.Minute))}, now.Add(time.Hour), 30*time.Second)
	if got := later[0].Silence("nodewright-agent", 30*time.Second); got != want[2] {
		t.Errorf("an hour later: %q, want %q", got, want[2])
	}
}

func readiness(agents []Agent, legacy LegacyPods) Readiness {
	return Readiness{AgentNamespace: "nodewright-agent", StaleAfter: 30 * time.Second, Agents: agents, Legacy: legacy}
}

var ds = nwv1.NamespacedObjectReference{Namespace: "node-init", Name: "node-init"}

func TestTheHandoverWaitsForEveryAgentAndNoLegacyPod(t *testing.T) {
	reporting := Agents([]string{"edge-1", "edge-2"}, []coordinationv1.Lease{lease("edge-1", at(0)), lease("edge-2", at(0))}, now, 30*time.Second)
	halfSilent := Agents([]string{"edge-1", "edge-2"}, []coordinationv1.Lease{lease("edge-1", at(0))}, now, 30*time.Second)
	gone := LegacyPods{DaemonSet: ds}
	empty := LegacyPods{DaemonSet: ds, Found: true}
	running := LegacyPods{DaemonSet: ds, Found: true, Pods: []string{"node-init-a", "node-init-b"}}
	for _, c := range []struct {
		name  string
		r     Readiness
		wants []string // what the blockers say, in order; none: ready
	}{
		{"every agent reports, the DaemonSet is gone", readiness(reporting, gone), nil},
		{"every agent reports, the DaemonSet has no pods", readiness(reporting, empty), nil},
		{"a node without an agent", readiness(halfSilent, empty),
			[]string{"no agent reports for 1 of 2 nodes: edge-2 (no heartbeat Lease nodewright-agent/edge-2)"}},
		{"legacy pods", readiness(reporting, running),
			[]string{"the legacy DaemonSet node-init/node-init has 2 pods (node-init-a, node-init-b), and would go on deciding"}},
		{"both", readiness(halfSilent, running), []string{"no agent reports for 1 of 2 nodes", "the legacy DaemonSet node-init/node-init has 2 pods"}},
		{"no Nodes", readiness(nil, gone), []string{"there are no Nodes whose agents could report"}},
		{"no agent namespace", Readiness{Legacy: gone}, []string{"the operator was not given the agents' namespace (--agent-namespace"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			blockers := c.r.Blockers()
			if c.r.Ready() != (len(c.wants) == 0) || len(blockers) != len(c.wants) {
				t.Fatalf("blockers %q, ready %v; want %d blockers", blockers, c.r.Ready(), len(c.wants))
			}
			for i, want := range c.wants {
				if !strings.HasPrefix(blockers[i], want) {
					t.Errorf("blocker %q does not start %q", blockers[i], want)
				}
			}
		})
	}
	many := LegacyPods{DaemonSet: ds, Found: true, Pods: []string{"a", "b", "c", "d", "e", "f", "g"}}
	if got, want := many.Running(), "the legacy DaemonSet node-init/node-init has 7 pods (a, b, c, d, e and 2 more)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	one := LegacyPods{DaemonSet: ds, Found: true, Pods: []string{"a"}}
	if got, want := one.Running(), "the legacy DaemonSet node-init/node-init has 1 pod (a)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// Every requested mode × mode in effect × readiness.
func TestDecide(t *testing.T) {
	reporting := Agents([]string{"edge-1"}, []coordinationv1.Lease{lease("edge-1", at(0))}, now, 30*time.Second)
	silent := Agents([]string{"edge-1"}, nil, now, 30*time.Second)
	ready := readiness(reporting, LegacyPods{DaemonSet: ds})
	noAgent := readiness(silent, LegacyPods{DaemonSet: ds})
	legacyBack := readiness(reporting, LegacyPods{DaemonSet: ds, Found: true, Pods: []string{"node-init-x"}})
	const (
		observe = nwv1.ManagementObserve
		managed = nwv1.ManagementManaged
	)
	for _, c := range []struct {
		requested, current nwv1.ManagementMode
		r                  Readiness
		mode               nwv1.ManagementMode
		status             metav1.ConditionStatus
		reason             string
	}{
		{observe, "", ready, observe, metav1.ConditionTrue, nwv1.ReasonObserving},
		{observe, observe, noAgent, observe, metav1.ConditionTrue, nwv1.ReasonObserving},
		{observe, managed, ready, observe, metav1.ConditionTrue, nwv1.ReasonObserving},
		{"", managed, ready, observe, metav1.ConditionTrue, nwv1.ReasonObserving},
		{managed, "", ready, managed, metav1.ConditionTrue, nwv1.ReasonHandedOver},
		{managed, observe, ready, managed, metav1.ConditionTrue, nwv1.ReasonHandedOver},
		{managed, observe, noAgent, observe, metav1.ConditionFalse, nwv1.ReasonHandoverRefused},
		{managed, observe, legacyBack, observe, metav1.ConditionFalse, nwv1.ReasonHandoverRefused},
		// Once in effect, a silent agent is the cluster's health, not the handover's.
		{managed, managed, noAgent, managed, metav1.ConditionTrue, nwv1.ReasonHandedOver},
		{managed, managed, legacyBack, managed, metav1.ConditionFalse, nwv1.ReasonLegacyDaemonSetRunning},
	} {
		d := Decide(c.requested, c.current, c.r, 7)
		if d.Mode != c.mode || d.Condition.Status != c.status || d.Condition.Reason != c.reason ||
			d.Condition.Type != nwv1.ConditionManagementApplied || d.Condition.ObservedGeneration != 7 {
			t.Errorf("asked %q, in effect %q, ready %v: %s, %+v; want %s, %s %s", c.requested, c.current, c.r.Ready(),
				d.Mode, d.Condition, c.mode, c.status, c.reason)
		}
	}
	refused := Decide(managed, observe, noAgent, 1).Condition.Message
	if want := "spec.management asks for Managed, which is refused while no agent reports for 1 of 1 node: edge-1 (no heartbeat Lease nodewright-agent/edge-1); Observe stays in effect"; refused != want {
		t.Errorf("refusal %q, want %q", refused, want)
	}
}

func TestInEffectNeedsTheSpecTheStatusAndTheCondition(t *testing.T) {
	cluster := func(spec, status nwv1.ManagementMode, cond metav1.ConditionStatus) *nwv1.NodewrightCluster {
		c := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName}}
		c.Spec.Management, c.Status.Management = spec, status
		if cond != "" {
			c.Status.Conditions = []metav1.Condition{{Type: nwv1.ConditionManagementApplied, Status: cond, Reason: "X", Message: "the legacy DaemonSet is back"}}
		}
		return c
	}
	if !InEffect(cluster(nwv1.ManagementManaged, nwv1.ManagementManaged, metav1.ConditionTrue)) {
		t.Error("Managed asked, in effect and holding: not in effect")
	}
	for name, c := range map[string]*nwv1.NodewrightCluster{
		"switched back, not yet observed": cluster(nwv1.ManagementObserve, nwv1.ManagementManaged, metav1.ConditionTrue),
		"asked, not yet handed over":      cluster(nwv1.ManagementManaged, nwv1.ManagementObserve, metav1.ConditionFalse),
		"asked, never observed":           cluster(nwv1.ManagementManaged, "", ""),
		"legacy DaemonSet back":           cluster(nwv1.ManagementManaged, nwv1.ManagementManaged, metav1.ConditionFalse),
		"the default":                     cluster("", "", ""),
	} {
		if InEffect(c) {
			t.Errorf("%s: in effect", name)
		}
		if why := WhyNot(c); !strings.HasPrefix(why, "NodewrightCluster nodewright ") {
			t.Errorf("%s: %q", name, why)
		}
	}
	if why := WhyNot(cluster(nwv1.ManagementManaged, nwv1.ManagementManaged, metav1.ConditionFalse)); !strings.HasSuffix(why, "but the legacy DaemonSet is back") {
		t.Errorf("WhyNot does not give the condition's message: %q", why)
	}
}

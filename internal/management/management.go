// Package management holds the rules of the handover from the legacy DaemonSet to Nodewright
// (NodewrightCluster spec.management, Observe or Managed): which nodes have an agent that
// reports, when the switch to Managed may take effect, and whether it is in effect. The rules
// are pure functions; observe.go reads what they judge from the API server.
//
// An agent reports for a node when the heartbeat Lease named after the node, in the agents'
// namespace, was renewed (spec.renewTime) no longer than the cluster's heartbeat threshold ago
// (spec.heartbeatStaleAfter, the EdgeProfile's once one is in force), judged by the operator's
// clock. Every Node of the cluster must have one. The legacy DaemonSet "has no pods" when it
// does not exist, or when no pod of its namespace that its selector matches is still there
// and has not ended (a terminating pod still runs, and still counts).
package management

import (
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Requested is the mode spec.management asks for; unset is Observe.
func Requested(c *nwv1.NodewrightCluster) nwv1.ManagementMode {
	if c.Spec.Management == nwv1.ManagementManaged {
		return nwv1.ManagementManaged
	}
	return nwv1.ManagementObserve
}

// InEffect reports whether Nodewright manages the nodes now, so that a workflow may change
// them: the spec asks for Managed (a switch back to Observe counts at once, before the
// controller has seen it), the handover took effect (status.management), and it still holds
// (ManagementApplied True: the legacy DaemonSet has no pods).
func InEffect(c *nwv1.NodewrightCluster) bool {
	return Requested(c) == nwv1.ManagementManaged && c.Status.Management == nwv1.ManagementManaged &&
		meta.IsStatusConditionTrue(c.Status.Conditions, nwv1.ConditionManagementApplied)
}

// WhyNot says, for a person, why Nodewright does not manage the nodes (InEffect is false).
func WhyNot(c *nwv1.NodewrightCluster) string {
	name := "NodewrightCluster " + c.Name
	if Requested(c) != nwv1.ManagementManaged {
		return name + " is in the Observe mode (spec.management): the legacy DaemonSet decides about the nodes"
	}
	why := "the handover has not been observed yet"
	if cond := meta.FindStatusCondition(c.Status.Conditions, nwv1.ConditionManagementApplied); cond != nil && cond.Status != metav1.ConditionTrue {
		why = cond.Message
	}
	return name + " asks for Managed (spec.management), but " + why
}

// Agent is what one Node's agent showed of itself.
type Agent struct {
	// Node is the Node's name, and its Lease's.
	Node string
	// HasLease: the heartbeat Lease exists.
	HasLease bool
	// Renewed is the Lease's spec.renewTime; zero when it has none.
	Renewed time.Time
	// Reports: renewed within the threshold.
	Reports bool
	// StaleAt is when a reporting agent stops reporting unless its Lease is renewed; zero when
	// it does not report.
	StaleAt time.Time
}

// Agents judges the agent of each node from the Leases of the agents' namespace, at now with
// the threshold staleAfter, in the nodes' order. A Lease renewed in the future (a clock ahead
// of the operator's) reports until staleAfter past that time.
func Agents(nodes []string, leases []coordinationv1.Lease, now time.Time, staleAfter time.Duration) []Agent {
	renewed := make(map[string]*coordinationv1.Lease, len(leases))
	for i := range leases {
		renewed[leases[i].Name] = &leases[i]
	}
	out := make([]Agent, 0, len(nodes))
	for _, n := range nodes {
		a := Agent{Node: n}
		if l, ok := renewed[n]; ok {
			a.HasLease = true
			if l.Spec.RenewTime != nil {
				a.Renewed = l.Spec.RenewTime.Time
			}
		}
		if !a.Renewed.IsZero() && now.Sub(a.Renewed) <= staleAfter {
			a.Reports = true
			// Stale once strictly older than the threshold, as the legacy heartbeats.
			a.StaleAt = a.Renewed.Add(staleAfter + time.Nanosecond)
		}
		out = append(out, a)
	}
	return out
}

// NextStale is the earliest moment a reporting agent stops reporting; zero when none reports.
func NextStale(agents []Agent) time.Time {
	var next time.Time
	for _, a := range agents {
		if a.Reports && (next.IsZero() || a.StaleAt.Before(next)) {
			next = a.StaleAt
		}
	}
	return next
}

// Silence says why the agent of a node does not report, in words that do not change while it
// stays silent (a condition message must not tick). Empty when it reports.
func (a Agent) Silence(namespace string, staleAfter time.Duration) string {
	switch {
	case a.Reports:
		return ""
	case !a.HasLease:
		return fmt.Sprintf("%s (no heartbeat Lease %s/%s)", a.Node, namespace, a.Node)
	case a.Renewed.IsZero():
		return fmt.Sprintf("%s (heartbeat Lease %s/%s never renewed)", a.Node, namespace, a.Node)
	}
	return fmt.Sprintf("%s (heartbeat Lease %s/%s last renewed %s, more than %s ago)", a.Node, namespace, a.Node, a.Renewed.UTC().Format(time.RFC3339), staleAfter)
}

// LegacyPods is what was found of the legacy DaemonSet.
type LegacyPods struct {
	// DaemonSet is the legacy DaemonSet's namespace and name.
	DaemonSet nwv1.NamespacedObjectReference
	// Found: the DaemonSet exists.
	Found bool
	// Pods are the names of its pods that have not ended, sorted.
	Pods []string
}

// Running says, when the legacy DaemonSet still has pods, how many and which; empty when it
// is gone or has none.
func (l LegacyPods) Running() string {
	if !l.Found || len(l.Pods) == 0 {
		return ""
	}
	names := l.Pods
	const shown = 5
	more := ""
	if len(names) > shown {
		names, more = names[:shown], fmt.Sprintf(" and %d more", len(l.Pods)-shown)
	}
	noun := "pods"
	if len(l.Pods) == 1 {
		noun = "pod"
	}
	return fmt.Sprintf("the legacy DaemonSet %s/%s has %d %s (%s%s)", l.DaemonSet.Namespace, l.DaemonSet.Name, len(l.Pods), noun,
		strings.Join(names, ", "), more)
}

// Readiness is everything the switch to Managed depends on.
type Readiness struct {
	// AgentNamespace is where the agents keep their heartbeat Leases; empty when the operator
	// was not told (no agents are installed).
	AgentNamespace string
	StaleAfter     time.Duration
	// Agents are the cluster's Nodes' agents, by node name.
	Agents []Agent
	Legacy LegacyPods
}

// Ready reports whether the switch to Managed may take effect: there are Nodes, each with an
// agent that reports, and the legacy DaemonSet is gone or has no pods.
func (r Readiness) Ready() bool { return len(r.Blockers()) == 0 }

// Blockers are what keeps the switch from taking effect, each said for a person, in words
// that do not change while nothing changes.
func (r Readiness) Blockers() []string {
	var out []string
	switch {
	case r.AgentNamespace == "":
		out = append(out, "the operator was not given the agents' namespace (--agent-namespace; the chart's agent.enabled), so no agent can report")
	case len(r.Agents) == 0:
		out = append(out, "there are no Nodes whose agents could report")
	default:
		var silent []string
		for _, a := range r.Agents {
			if s := a.Silence(r.AgentNamespace, r.StaleAfter); s != "" {
				silent = append(silent, s)
			}
		}
		if len(silent) > 0 {
			noun := "nodes"
			if len(r.Agents) == 1 {
				noun = "node"
			}
			out = append(out, fmt.Sprintf("no agent reports for %d of %d %s: %s", len(silent), len(r.Agents), noun, strings.Join(silent, ", ")))
		}
	}
	if running := r.Legacy.Running(); running != "" {
		out = append(out, running+", and would go on deciding")
	}
	return out
}

// Decision is the management mode in effect and the ManagementApplied condition.
type Decision struct {
	Mode      nwv1.ManagementMode
	Condition metav1.Condition
}

// Decide is the mode in effect, given the mode spec.management asks for (requested), the one
// in effect so far (current, status.management) and what the handover depends on.
//
// Observe takes effect at once. Managed takes effect once, when readiness allows it; from then
// on it stays in effect while the spec asks for it, whatever the agents do (a stale agent is
// a Degraded cluster, not a reason to hand the nodes back to a DaemonSet that is gone), but
// the condition turns False while the legacy DaemonSet has pods again, which holds every
// workflow (InEffect).
func Decide(requested, current nwv1.ManagementMode, r Readiness, generation int64) Decision {
	cond := func(status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: nwv1.ConditionManagementApplied, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	if requested != nwv1.ManagementManaged {
		return Decision{Mode: nwv1.ManagementObserve, Condition: cond(metav1.ConditionTrue, nwv1.ReasonObserving,
			"spec.management is Observe: the legacy DaemonSet decides about the nodes and Nodewright reads its ConfigMap")}
	}
	if current == nwv1.ManagementManaged {
		if running := r.Legacy.Running(); running != "" {
			return Decision{Mode: nwv1.ManagementManaged, Condition: cond(metav1.ConditionFalse, nwv1.ReasonLegacyDaemonSetRunning,
				"Managed, but "+running+": it and Nodewright would both decide about the nodes, so no workflow changes a node until it has none")}
		}
		return Decision{Mode: nwv1.ManagementManaged, Condition: cond(metav1.ConditionTrue, nwv1.ReasonHandedOver, handedOver(r))}
	}
	if blockers := r.Blockers(); len(blockers) > 0 {
		return Decision{Mode: nwv1.ManagementObserve, Condition: cond(metav1.ConditionFalse, nwv1.ReasonHandoverRefused,
			"spec.management asks for Managed, which is refused while "+strings.Join(blockers, "; ")+"; Observe stays in effect")}
	}
	return Decision{Mode: nwv1.ManagementManaged, Condition: cond(metav1.ConditionTrue, nwv1.ReasonHandedOver, handedOver(r))}
}

// handedOver is the message of the condition while Managed holds. It names no time: it must
// not change as the agents renew their Leases.
func handedOver(r Readiness) string {
	ds := r.Legacy.DaemonSet
	gone := "has no pods"
	if !r.Legacy.Found {
		gone = "is gone"
	}
	return fmt.Sprintf("Nodewright manages the nodes: their agents report through their heartbeat Leases in %s, and the legacy DaemonSet %s/%s %s",
		orNone(r.AgentNamespace), ds.Namespace, ds.Name, gone)
}

func orNone(s string) string {
	if s == "" {
		return "(no namespace)"
	}
	return s
}

// NodeNames sorts names and drops duplicates.
func NodeNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

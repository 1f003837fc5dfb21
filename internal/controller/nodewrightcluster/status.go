package nodewrightcluster

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/management"
)

// maxWarnings bounds status.recentWarnings (the CRD allows 20).
const maxWarnings = 20

// maxConditionMessage keeps a condition readable when the ConfigMap is full of garbage.
const maxConditionMessage = 2048

// observed is everything one reconcile saw.
type observed struct {
	// managed: the mode in effect is Managed, and the agents report the nodes; configMap and
	// daemonSet are not read.
	managed bool
	agents  []management.Agent
	// holdingData are the nodes whose agents report a DRBD resource with data on the node (a
	// diskful replica), in Managed.
	holdingData    []string
	agentNamespace string
	configMap      bridge.Observation
	daemonSet      *appsv1.DaemonSet
	events         []corev1.Event // Warning Events from the legacy component
	now            time.Time
	staleAfter     time.Duration
	cluster        *nwv1.NodewrightCluster
}

// computeStatus derives the new status from what was observed. It is pure: the same
// observation gives the same status, so a heartbeat that only ticks forward changes nothing.
// It also returns the contract violations seen for the first time and the next moment a
// heartbeat goes stale (zero when none will).
func computeStatus(o observed) (nwv1.NodewrightClusterStatus, []legacy.Anomaly, time.Time) {
	old := o.cluster.Status
	st := *old.DeepCopy()
	st.ObservedGeneration = o.cluster.Generation
	ref := o.cluster.Spec.Legacy.ConfigMapRef
	var anomalies []legacy.Anomaly
	var deadline time.Time

	switch {
	case o.managed:
		deadline = rollAgents(&st, o.agents, o.holdingData, o.agentNamespace, o.staleAfter)
	case !o.configMap.Found:
		st.Phase = nwv1.ClusterUnknown
		st.LegacyState, st.LegacyStateSince, st.Nodes = "", nil, nwv1.NodeCounts{}
		msg := fmt.Sprintf("ConfigMap %s/%s not found", ref.Namespace, ref.Name)
		setCondition(&st, nwv1.ConditionObserved, metav1.ConditionFalse, nwv1.ReasonConfigMapNotFound, msg, st.ObservedGeneration)
		setCondition(&st, nwv1.ConditionStateRecognized, metav1.ConditionUnknown, nwv1.ReasonNotObserved, msg, st.ObservedGeneration)
		setCondition(&st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionUnknown, nwv1.ReasonNotObserved, msg, st.ObservedGeneration)
	default:
		obs := o.configMap.Legacy
		roll := legacy.Roll(obs, o.configMap.Problems, o.now, o.staleAfter)
		deadline = roll.NextDeadline
		st.Phase = roll.Phase
		st.LegacyState = obs.State
		st.LegacyStateSince = timeOrNil(obs.Since)
		st.Nodes = nwv1.NodeCounts{Ready: roll.Ready, Total: int32(len(roll.Nodes))}
		setCondition(&st, nwv1.ConditionObserved, metav1.ConditionTrue, nwv1.ReasonConfigMapRead,
			fmt.Sprintf("reading ConfigMap %s/%s", ref.Namespace, ref.Name), st.ObservedGeneration)
		setRecognized(&st, obs, o.configMap.Problems)
		setHeartbeats(&st, roll, o.staleAfter)
		if len(o.configMap.Problems) == 0 {
			anomalies = legacy.Check(obs, old.LegacyGeneration)
			st.LegacyGeneration = obs.Generation
		}
	}
	if !o.managed {
		setDaemonSet(&st, o.daemonSet, o.cluster.Spec.Legacy.DaemonSetRef)
	}

	warnings := slices.Clone(old.RecentWarnings)
	for _, a := range anomalies {
		warnings = append(warnings, nwv1.ClusterWarning{Time: metav1.NewTime(o.now.Truncate(time.Second)),
			Source: nwv1.WarningFromTransition, Reason: string(a.Kind), Message: audit.Shorten(a.Message, 1024)})
	}
	for i := range o.events {
		warnings = append(warnings, warningFromEvent(&o.events[i]))
	}
	st.RecentWarnings = newestWarnings(warnings)
	return st, anomalies, deadline
}

// rollAgents is the rollup of the Managed mode, from the agents of the cluster's Nodes: the
// nodes are the Nodes, a node is ready while its agent reports, and the phase is SingleNode
// or MultiNode by their number, Degraded while an agent does not report, Unknown without
// Nodes. Where the agents report DRBD data on exactly one node (holdingData), the storage is
// not replicated yet whatever the number of Nodes: the phase is SingleNode until a
// ReplicationUpgrade places the joining nodes' replicas. The legacy state and the conditions about the legacy objects are not observed any
// more, and go; legacyGeneration stays, so that a switch back to Observe raises no anomaly the
// bridge already saw. It returns when the next agent goes stale.
func rollAgents(st *nwv1.NodewrightClusterStatus, agents []management.Agent, holdingData []string, namespace string, staleAfter time.Duration) time.Time {
	st.LegacyState, st.LegacyStateSince = "", nil
	for _, t := range []string{nwv1.ConditionObserved, nwv1.ConditionStateRecognized, nwv1.ConditionDaemonSetAvailable} {
		meta.RemoveStatusCondition(&st.Conditions, t)
	}
	var silent []string
	ready := int32(0)
	for _, a := range agents {
		if a.Reports {
			ready++
		} else {
			silent = append(silent, a.Silence(namespace, staleAfter))
		}
	}
	st.Nodes = nwv1.NodeCounts{Ready: ready, Total: int32(len(agents))}
	switch {
	case namespace == "":
		st.Phase = nwv1.ClusterUnknown
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionUnknown, nwv1.ReasonNotObserved,
			"the operator was not given the agents' namespace (--agent-namespace): no agent is read", st.ObservedGeneration)
	case len(agents) == 0:
		st.Phase = nwv1.ClusterUnknown
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionUnknown, nwv1.ReasonNoNodes,
			"the cluster has no Nodes", st.ObservedGeneration)
	case len(silent) > 0:
		st.Phase = nwv1.ClusterDegraded
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionFalse, nwv1.ReasonHeartbeatsStale,
			audit.Shorten(fmt.Sprintf("no agent heartbeat within %s: %s", staleAfter, strings.Join(silent, ", ")), maxConditionMessage), st.ObservedGeneration)
	default:
		st.Phase = nwv1.ClusterMultiNode
		msg := fmt.Sprintf("the agents of all %d nodes renewed their heartbeat Leases within %s", len(agents), staleAfter)
		switch {
		case len(agents) == 1:
			st.Phase = nwv1.ClusterSingleNode
		case len(holdingData) == 1:
			st.Phase = nwv1.ClusterSingleNode
			msg += "; only " + holdingData[0] + " holds DRBD data"
		}
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionTrue, nwv1.ReasonHeartbeatsFresh, msg, st.ObservedGeneration)
	}
	return management.NextStale(agents)
}

func setRecognized(st *nwv1.NodewrightClusterStatus, obs legacy.Observation, problems []legacy.Problem) {
	if len(problems) == 0 {
		msg := "state " + string(st.LegacyState) + " and every key parsed"
		// The phase follows the state; a previous state no one knows only leaves the
		// transition unchecked, which the condition says rather than hides.
		if unchecked := legacy.UncheckedTransition(obs); unchecked != "" {
			msg = "state " + string(st.LegacyState) + " parsed; " + unchecked
		}
		setCondition(st, nwv1.ConditionStateRecognized, metav1.ConditionTrue, nwv1.ReasonStateParsed, msg, st.ObservedGeneration)
		return
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	setCondition(st, nwv1.ConditionStateRecognized, metav1.ConditionFalse, nwv1.ReasonInvalidLegacyData,
		audit.Shorten(strings.Join(msgs, "; "), maxConditionMessage), st.ObservedGeneration)
}

func setHeartbeats(st *nwv1.NodewrightClusterStatus, roll legacy.Rollup, staleAfter time.Duration) {
	if len(roll.Nodes) == 0 {
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionUnknown, nwv1.ReasonNoNodes,
			"the legacy ConfigMap lists no nodes", st.ObservedGeneration)
		return
	}
	var stale []string
	for _, n := range roll.Nodes {
		switch {
		case !n.Stale:
		case n.Heartbeat.IsZero():
			stale = append(stale, n.Name+" (no heartbeat)")
		default:
			// The stale heartbeat's time does not tick, so the message stays stable.
			stale = append(stale, n.Name+" (last heartbeat "+n.Heartbeat.UTC().Format(time.RFC3339)+")")
		}
	}
	if len(stale) == 0 {
		setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionTrue, nwv1.ReasonHeartbeatsFresh,
			fmt.Sprintf("all %d nodes heartbeating within %s", len(roll.Nodes), staleAfter), st.ObservedGeneration)
		return
	}
	setCondition(st, nwv1.ConditionHeartbeatsFresh, metav1.ConditionFalse, nwv1.ReasonHeartbeatsStale,
		audit.Shorten(fmt.Sprintf("heartbeat older than %s: %s", staleAfter, strings.Join(stale, ", ")), maxConditionMessage), st.ObservedGeneration)
}

func setDaemonSet(st *nwv1.NodewrightClusterStatus, ds *appsv1.DaemonSet, ref nwv1.NamespacedObjectReference) {
	switch {
	case ds == nil:
		setCondition(st, nwv1.ConditionDaemonSetAvailable, metav1.ConditionFalse, nwv1.ReasonDaemonSetNotFound,
			fmt.Sprintf("DaemonSet %s/%s not found", ref.Namespace, ref.Name), st.ObservedGeneration)
	case ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady < ds.Status.DesiredNumberScheduled:
		setCondition(st, nwv1.ConditionDaemonSetAvailable, metav1.ConditionFalse, nwv1.ReasonPodsNotReady,
			fmt.Sprintf("%d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled), st.ObservedGeneration)
	default:
		setCondition(st, nwv1.ConditionDaemonSetAvailable, metav1.ConditionTrue, nwv1.ReasonAllPodsReady,
			fmt.Sprintf("%d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled), st.ObservedGeneration)
	}
}

func setCondition(st *nwv1.NodewrightClusterStatus, t string, s metav1.ConditionStatus, reason, msg string, gen int64) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

var eventReason = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

func warningFromEvent(ev *corev1.Event) nwv1.ClusterWarning {
	when := ev.LastTimestamp.Time
	if when.IsZero() {
		when = ev.EventTime.Time
	}
	if when.IsZero() {
		when = ev.CreationTimestamp.Time
	}
	reason := ev.Reason
	if !eventReason.MatchString(reason) || len(reason) > 128 {
		reason = nwv1.ReasonLegacyWarningEvent
	}
	about := ev.InvolvedObject.Kind + " " + ev.InvolvedObject.Name
	return nwv1.ClusterWarning{Time: metav1.NewTime(when.Truncate(time.Second)), Source: nwv1.WarningFromEvent,
		Reason: reason, Message: audit.Shorten(about+": "+ev.Message, 1024)}
}

// newestWarnings drops duplicates and keeps the newest maxWarnings, oldest first.
func newestWarnings(in []nwv1.ClusterWarning) []nwv1.ClusterWarning {
	type key struct {
		unix                int64
		source, reason, msg string
	}
	seen := map[key]bool{}
	var out []nwv1.ClusterWarning
	for _, w := range in {
		k := key{w.Time.Unix(), string(w.Source), w.Reason, w.Message}
		if !seen[k] {
			seen[k] = true
			out = append(out, w)
		}
	}
	// A total order: with ties on time broken by the listing order (the cache's, which is
	// arbitrary), a burst of warnings in one second would keep a different set on every
	// reconcile, and every reconcile would write.
	slices.SortFunc(out, func(a, b nwv1.ClusterWarning) int {
		return cmp.Or(a.Time.Compare(b.Time.Time), cmp.Compare(a.Source, b.Source),
			cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Message, b.Message))
	})
	if len(out) > maxWarnings {
		out = out[len(out)-maxWarnings:]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}

package agentstatus

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// computeStatus derives a node's status from its rollup and the ConfigMap's problems (a value
// that is there but unreadable is named, not reported missing). heartbeat.lastSeen moves only
// when the node's freshness changes, so a heartbeat that merely ticks forward changes nothing.
// A node whose agent reports it keeps what the agent said of its storage and network: the
// ConfigMap's are the legacy DaemonSet's (apply.go).
func computeStatus(old nwv1.NodewrightAgentStatusStatus, n legacy.NodeHealth, staleAfter time.Duration, problems []legacy.Problem) nwv1.NodewrightAgentStatusStatus {
	st := *old.DeepCopy()
	st.Role = n.Role
	if !agentReports(old) {
		st.Reporter = nwv1.ReporterLegacy
		st.Network.BondMode = n.BondMode
		st.Storage = nil
		if n.DRBD != nil {
			st.Storage = &nwv1.DRBDStatus{Resources: n.DRBD.Resources, Connected: n.DRBD.Connected,
				UpToDate: n.DRBD.UpToDate, OutOfSyncKiB: n.DRBD.OutOfSyncKiB}
		}
	}

	freshnessChanged := old.Heartbeat.LastSeen == nil || old.Heartbeat.Stale != n.Stale
	st.Heartbeat.Stale = n.Stale
	if freshnessChanged {
		st.Heartbeat.LastSeen = nil
		if !n.Heartbeat.IsZero() {
			seen := metav1.NewTime(n.Heartbeat.Truncate(time.Second))
			st.Heartbeat.LastSeen = &seen
		}
	}

	switch bad := problemOf(problems, legacy.NodeKey(n.Name, legacy.FieldHeartbeat)); {
	case bad != nil:
		setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionFalse, nwv1.ReasonInvalidLegacyData, bad.Error())
	case n.Heartbeat.IsZero():
		setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionFalse, nwv1.ReasonNoHeartbeat,
			"the legacy ConfigMap has no heartbeat for this node")
	case n.Stale:
		setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionFalse, nwv1.ReasonHeartbeatStale,
			fmt.Sprintf("last heartbeat %s is older than %s", n.Heartbeat.UTC().Format(time.RFC3339), staleAfter))
	default:
		setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionTrue, nwv1.ReasonHeartbeatFresh,
			fmt.Sprintf("heartbeat within %s", staleAfter))
	}

	switch d, bad := st.Storage, problemOf(problems, legacy.NodeKey(n.Name, legacy.FieldDRBD)); {
	case agentReports(old):
		// The agent's condition, from drbdsetup.
	case bad != nil:
		setCondition(&st, nwv1.ConditionStorageHealthy, metav1.ConditionUnknown, nwv1.ReasonInvalidLegacyData, bad.Error())
	case d == nil:
		setCondition(&st, nwv1.ConditionStorageHealthy, metav1.ConditionUnknown, nwv1.ReasonDRBDNotReported,
			"the legacy ConfigMap has no DRBD report for this node")
	case d.Connected == d.Resources && d.UpToDate == d.Resources && d.OutOfSyncKiB == 0:
		setCondition(&st, nwv1.ConditionStorageHealthy, metav1.ConditionTrue, nwv1.ReasonDRBDHealthy,
			fmt.Sprintf("%d of %d DRBD resources connected and up to date", d.UpToDate, d.Resources))
	default:
		setCondition(&st, nwv1.ConditionStorageHealthy, metav1.ConditionFalse, nwv1.ReasonDRBDDegraded,
			fmt.Sprintf("DRBD: %d of %d connected, %d up to date, %d KiB out of sync", d.Connected, d.Resources, d.UpToDate, d.OutOfSyncKiB))
	}
	return st
}

// problemOf is the problem reported on key, or nil.
func problemOf(problems []legacy.Problem, key string) *legacy.Problem {
	for i := range problems {
		if problems[i].Key == key {
			return &problems[i]
		}
	}
	return nil
}

func setCondition(st *nwv1.NodewrightAgentStatusStatus, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg})
}

package nodewrightcluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/management"
)

// ActionManagementSwitched is the audit action of the mode in effect changing between
// Observe and Managed.
const ActionManagementSwitched = "ManagementSwitched"

// Event reasons of the handover, on the NodewrightCluster.
const (
	// EventManagementSwitched (Normal): the mode in effect changed.
	EventManagementSwitched = "ManagementSwitched"
	// EventHandoverRefused (Warning): spec.management asks for Managed, which cannot take
	// effect yet (the condition says why).
	EventHandoverRefused = nwv1.ReasonHandoverRefused
	// EventLegacyDaemonSetRunning (Warning): Managed, and the legacy DaemonSet has pods again.
	EventLegacyDaemonSetRunning = nwv1.ReasonLegacyDaemonSetRunning
)

// handover is what the reconcile decided about the management mode.
type handover struct {
	management.Decision
	readiness management.Readiness
}

// decideHandover checks, when the spec asks for Managed, everything the handover depends on,
// as the admission webhook did (which can be bypassed), and decides the mode in effect.
// observedAs is the cluster with its profile's names and threshold in force.
func (r *Reconciler) decideHandover(ctx context.Context, nwc, observedAs *nwv1.NodewrightCluster, now time.Time, staleAfter time.Duration) (handover, error) {
	var h handover
	if management.Requested(nwc) == nwv1.ManagementManaged {
		var err error
		h.readiness, err = r.agents().Readiness(ctx, observedAs, now, staleAfter)
		if err != nil {
			return h, err
		}
	}
	h.Decision = management.Decide(management.Requested(nwc), nwc.Status.Management, h.readiness, nwc.Generation)
	return h, nil
}

// agents reads what the handover depends on: the Nodes, Leases and legacy DaemonSet from the
// cache, the legacy pods from the API server.
func (r *Reconciler) agents() management.Reader {
	live := r.APIReader
	if live == nil {
		live = r.Client
	}
	return management.Reader{Cache: r.Client, Live: live, AgentNamespace: r.AgentNamespace}
}

// setHandover writes the decision into the status being computed.
func setHandover(st *nwv1.NodewrightClusterStatus, h handover) {
	st.Management = h.Mode
	meta.SetStatusCondition(&st.Conditions, h.Condition)
}

// switchedFrom is the mode in effect before this reconcile; a cluster never observed was
// observed (Observe is where every cluster starts).
func switchedFrom(nwc *nwv1.NodewrightCluster) nwv1.ManagementMode {
	if nwc.Status.Management == nwv1.ManagementManaged {
		return nwv1.ManagementManaged
	}
	return nwv1.ManagementObserve
}

// switchRecord is the audit record of the mode in effect changing to next; nil when it does
// not change. The record names the user who set spec.management (the admission webhook's
// stamp): it is built the same from the same object, so that a crash between the record and
// the status that shows the switch writes it once.
func switchRecord(nwc *nwv1.NodewrightCluster, next handover, actor string, at time.Time) *audit.Record {
	from := switchedFrom(nwc)
	if from == next.Mode {
		return nil
	}
	by, stamped := nwc.Annotations[nwv1.AnnotationManagementSetBy]
	if !stamped {
		by = "unknown (no admission webhook stamped " + nwv1.AnnotationManagementSetBy + ")"
	}
	message := next.Condition.Message
	if next.Mode == nwv1.ManagementObserve {
		message = "spec.management is Observe: Nodewright reads the legacy DaemonSet's ConfigMap again, and no workflow changes a node"
	}
	gen := strconv.FormatInt(nwc.Generation, 10)
	subject := audit.Subject{APIVersion: nwv1.GroupVersion.String(), Kind: "NodewrightCluster", Name: nwc.Name, UID: nwc.UID, Generation: nwc.Generation}
	// The annotation is the webhook's stamp, or anything where no webhook ran: cut, as the
	// admission records cut what they quote, so that the record always fits a line.
	details := []audit.Detail{{Name: "requestedBy", Value: audit.Shorten(by, 1024)}}
	if next.Mode == nwv1.ManagementManaged {
		details = append(details, audit.Detail{Name: "agents", Value: reportingAgents(next.readiness)})
	}
	rec := audit.Transition(subject, actor, ActionManagementSwitched, string(from), string(next.Mode), next.Condition.Reason,
		audit.Shorten(message, 4096), gen, at, details...)
	return &rec
}

// reportingAgents names the nodes whose agents reported at the handover.
func reportingAgents(r management.Readiness) string {
	names := make([]string, 0, len(r.Agents))
	for _, a := range r.Agents {
		if a.Reports {
			names = append(names, a.Node)
		}
	}
	return audit.Shorten(strings.Join(names, ","), 1024)
}

// recordSwitch appends the record of a switch before the status that shows it is written. A
// switch to Managed, which lets workflows change nodes, fails closed: without its record it
// does not take effect, and the reconcile is retried. A switch back to Observe, the safe
// direction, is never held up: a failure to record it is logged.
func (r *Reconciler) recordSwitch(ctx context.Context, nwc *nwv1.NodewrightCluster, next handover, at time.Time) error {
	rec := switchRecord(nwc, next, r.Actor, at)
	if rec == nil || r.Audit == nil {
		return nil
	}
	if _, err := r.Audit.Append(ctx, *rec); err != nil {
		if next.Mode == nwv1.ManagementManaged {
			return fmt.Errorf("recording the switch from %s to %s in the audit trail: %w", rec.From, rec.To, err)
		}
		ctrl.LoggerFrom(ctx).Error(err, "Recording the switch back to Observe in the audit trail failed")
	}
	return nil
}

// announceHandover raises the Events of the decision, once the status that shows it was
// written: a switch, and a handover refused or a legacy DaemonSet back when the condition
// turned to it.
func (r *Reconciler) announceHandover(ctx context.Context, nwc *nwv1.NodewrightCluster, before nwv1.NodewrightClusterStatus, next handover) {
	log := ctrl.LoggerFrom(ctx)
	if from := switchedFrom(&nwv1.NodewrightCluster{Status: before}); from != next.Mode {
		log.Info("Management mode switched", "from", from, "to", next.Mode, "requestedBy", nwc.Annotations[nwv1.AnnotationManagementSetBy])
		r.Recorder.Event(nwc, corev1.EventTypeNormal, EventManagementSwitched, audit.Shorten(fmt.Sprintf("%s to %s: %s", from, next.Mode, next.Condition.Message), 1024))
	}
	old := meta.FindStatusCondition(before.Conditions, nwv1.ConditionManagementApplied)
	if old != nil && old.Reason == next.Condition.Reason && old.Status == next.Condition.Status {
		return
	}
	if next.Condition.Status == metav1.ConditionFalse {
		r.Recorder.Event(nwc, corev1.EventTypeWarning, next.Condition.Reason, audit.Shorten(next.Condition.Message, 1024))
	}
}

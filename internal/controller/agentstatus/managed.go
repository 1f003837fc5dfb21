package agentstatus

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/management"
)

// agents reads the Nodes and the agents' Leases from the cache.
func (r *Reconciler) agents() management.Reader {
	return management.Reader{Cache: r.Client, Live: r.Client, AgentNamespace: r.AgentNamespace}
}

// reconcileAgent is Reconcile in the Managed mode: the node is a Node of the cluster, and its
// heartbeat is its agent's Lease. The legacy ConfigMap is not read: the bridge's heartbeat and
// HeartbeatFresh come from the Lease, the role (the operator's decision) stays as it was, and
// the bridge lets go of the report fields (apply.go): the legacy DaemonSet's word on the
// node's storage and bond is not observed any more, and only the node's agent reports them.
func (r *Reconciler) reconcileAgent(ctx context.Context, name string, nwc *nwv1.NodewrightCluster, now time.Time) (ctrl.Result, error) {
	if r.AgentNamespace == "" {
		// No agent can be read (the NodewrightCluster says so); keep what exists.
		return ctrl.Result{}, nil
	}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, management.NodeMeta())
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading Node %s: %w", name, err)
	}
	present := err == nil
	as, exists, err := r.ensure(ctx, name, nwc, func(*nwv1.NodewrightAgentStatus) bool { return present })
	if err != nil || as == nil {
		return ctrl.Result{}, err
	}
	var leases []coordinationv1.Lease
	l := coordinationv1.Lease{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: r.AgentNamespace, Name: name}, &l)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("reading the heartbeat Lease of node %s: %w", name, err)
	}
	if err == nil {
		leases = append(leases, l)
	}
	staleAfter := bridge.StaleAfter(nwc)
	agent := management.Agents([]string{name}, leases, now, staleAfter)[0]
	if err := r.write(ctx, as, exists, agentStatus(as.Status, agent, r.AgentNamespace, staleAfter), false, staleAfter); err != nil {
		return ctrl.Result{}, err
	}
	if !agent.Reports {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: agent.StaleAt.Sub(now)}, nil
}

// agentStatus derives a node's heartbeat from its agent. As with the legacy heartbeats,
// heartbeat.lastSeen moves only when the node's freshness changes, so that a Lease renewed
// every 10 s changes nothing.
func agentStatus(old nwv1.NodewrightAgentStatusStatus, a management.Agent, namespace string, staleAfter time.Duration) nwv1.NodewrightAgentStatusStatus {
	st := *old.DeepCopy()
	stale := !a.Reports
	if old.Heartbeat.LastSeen == nil || old.Heartbeat.Stale != stale {
		st.Heartbeat.LastSeen = nil
		if !a.Renewed.IsZero() {
			st.Heartbeat.LastSeen = &metav1.Time{Time: a.Renewed.Truncate(time.Second)}
		}
	}
	st.Heartbeat.Stale = stale
	if a.Reports {
		setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionTrue, nwv1.ReasonHeartbeatFresh,
			fmt.Sprintf("the agent renewed its heartbeat Lease %s/%s within %s", namespace, a.Node, staleAfter))
		return st
	}
	reason := nwv1.ReasonHeartbeatStale
	if a.Renewed.IsZero() {
		reason = nwv1.ReasonNoHeartbeat
	}
	setCondition(&st, nwv1.ConditionHeartbeatFresh, metav1.ConditionFalse, reason, "no agent heartbeat: "+a.Silence(namespace, staleAfter))
	return st
}

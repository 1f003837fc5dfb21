package replicationupgrade

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/management"
)

// The Verify waits on the original node's agent, which runs DRBD's online verify of each
// volume. An agent that has stopped renewing its heartbeat Lease runs none, so the Verify
// gives up on it once the Lease's last renewal no longer holds (the Lease's own duration, 40 s
// for the agent's), not at the verify's deadline (verifyDeadline); the Preflight starts no
// upgrade while a node's Lease does not hold. The rollback waits on no agent: LINSTOR and the
// Nodes alone.

// wakeMargin is how long after a Lease stops holding a step waiting on its agent looks again.
const wakeMargin = 100 * time.Millisecond

// heartbeat is node's agent's heartbeat, as its Lease in the agents' namespace says.
func (r *Reconciler) heartbeat(ctx context.Context, node string) (management.Heartbeat, error) {
	l := &coordinationv1.Lease{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.AgentNamespace, Name: node}, l)
	if apierrors.IsNotFound(err) {
		return management.LeaseHeartbeat(r.AgentNamespace, node, nil), nil
	}
	if err != nil {
		return management.Heartbeat{}, fmt.Errorf("reading the heartbeat Lease of %s: %w", node, err)
	}
	return management.LeaseHeartbeat(r.AgentNamespace, node, l), nil
}

// silent says why node's agent is to be given up, with what it last reported; empty while its
// Lease holds, with how long it still does.
func (r *Reconciler) silent(ctx context.Context, node string, now time.Time) (string, time.Duration, error) {
	h, err := r.heartbeat(ctx, node)
	if err != nil {
		return "", 0, err
	}
	msg := h.Silent(now)
	if msg == "" {
		return "", h.Left(now) + wakeMargin, nil
	}
	a := &nwv1.NodewrightAgentStatus{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: node}, a); {
	case apierrors.IsNotFound(err):
		return msg + "; it never reported (no NodewrightAgentStatus)", 0, nil
	case err != nil:
		return "", 0, err
	case a.Status.Storage != nil:
		d := a.Status.Storage
		return fmt.Sprintf("%s; it last reported %d of %d DRBD resources connected and %d UpToDate, %d KiB out of sync",
			msg, d.Connected, d.Resources, d.UpToDate, d.OutOfSyncKiB), 0, nil
	}
	return msg + "; it last reported no DRBD", 0, nil
}

package management

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// DefaultLeaseDuration is what a heartbeat Lease that states no duration holds for: the
// agent's own (internal/agent LeaseDurationSeconds).
const DefaultLeaseDuration = 40 * time.Second

// Heartbeat is what a node agent's heartbeat Lease says of it by its own terms: when it was
// last renewed and how long that renewal holds (spec.leaseDurationSeconds). A workflow step
// that waits for an agent judges it so, not by the cluster's heartbeatStaleAfter: the Lease
// says when its holder is to be given up, and a step should give up on it then.
type Heartbeat struct {
	Node, Namespace string
	// Found: the Lease exists.
	Found bool
	// Renewed is its spec.renewTime; zero when it has none.
	Renewed time.Time
	// Duration is its spec.leaseDurationSeconds (DefaultLeaseDuration when unset).
	Duration time.Duration
}

// LeaseHeartbeat is the heartbeat of node's agent from its Lease l in namespace, nil when it
// has none.
func LeaseHeartbeat(namespace, node string, l *coordinationv1.Lease) Heartbeat {
	h := Heartbeat{Node: node, Namespace: namespace, Duration: DefaultLeaseDuration}
	if l == nil {
		return h
	}
	h.Found = true
	if l.Spec.RenewTime != nil {
		h.Renewed = l.Spec.RenewTime.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		h.Duration = time.Duration(*d) * time.Second
	}
	return h
}

// Expires is when the last renewal stops holding; zero when the Lease was never renewed.
func (h Heartbeat) Expires() time.Time {
	if h.Renewed.IsZero() {
		return time.Time{}
	}
	return h.Renewed.Add(h.Duration)
}

// Silent says, at now, why the agent is to be given up, empty while its Lease holds: no
// Lease, a Lease never renewed, or one whose last renewal is older than its duration. The
// words name the node and its last renewal, and do not change while it stays silent.
func (h Heartbeat) Silent(now time.Time) string {
	switch {
	case !h.Found:
		return fmt.Sprintf("%s's agent has no heartbeat Lease %s/%s", h.Node, h.Namespace, h.Node)
	case h.Renewed.IsZero():
		return fmt.Sprintf("%s's agent never renewed its heartbeat Lease %s/%s", h.Node, h.Namespace, h.Node)
	case now.Before(h.Expires()):
		return ""
	}
	return fmt.Sprintf("%s's agent last renewed its heartbeat Lease %s/%s at %s, more than its duration of %s ago",
		h.Node, h.Namespace, h.Node, h.Renewed.UTC().Format(time.RFC3339), h.Duration)
}

// Left is how long, at now, the Lease still holds: zero when it does not.
func (h Heartbeat) Left(now time.Time) time.Duration {
	if h.Silent(now) != "" {
		return 0
	}
	return h.Expires().Sub(now)
}

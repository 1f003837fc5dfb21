// Package agent is the node agent: the thin privileged process, one per node, that reports its
// node and performs only the typed operations (NodeOperation) the operator delegates to it,
// for its own node. This file is its heartbeat.
package agent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The heartbeat is a Lease per node, named after the node, in the agent's namespace, renewed
// as the kubelet renews its node Lease: one update every RenewInterval, with the lease
// duration four times that. So the agent's liveness costs six small writes a minute and its
// status object is written only when something it reports changed.
const (
	// RenewInterval is how often the heartbeat Lease is renewed.
	RenewInterval = 10 * time.Second
	// LeaseDurationSeconds is how long the Lease says its holder may go unheard of.
	LeaseDurationSeconds = 40
)

// Heartbeat renews the node's Lease until its context ends.
type Heartbeat struct {
	Client    kubernetes.Interface
	Node      string
	Namespace string
	// Interval is the renewal interval; RenewInterval when zero.
	Interval time.Duration
	Clock    clock.Clock
}

// Run renews the Lease until ctx ends. The Lease is owned by the Node object, when there is
// one, so that it goes with the node.
func (h *Heartbeat) Run(ctx context.Context) error {
	if h.Node == "" || h.Namespace == "" {
		return fmt.Errorf("the heartbeat needs the node's name and the agent's namespace")
	}
	interval := h.Interval
	if interval == 0 {
		interval = RenewInterval
	}
	clk := h.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	duration := int32(LeaseDurationSeconds)
	if interval != RenewInterval {
		duration = int32(max(4*interval/time.Second, 1))
	}
	c := lease.NewController(clk, h.Client, h.Node, duration, func() {
		klog.FromContext(ctx).Info("The heartbeat Lease failed to renew several times in a row", "node", h.Node)
	}, interval, h.Node, h.Namespace, h.ownedByNode(ctx))
	c.Run(ctx)
	return nil
}

// ownedByNode makes the Node the Lease's owner, as the kubelet does with its node Lease. It
// never holds a renewal up: a node not (yet) there, or an error reading it, leaves the Lease
// without an owner this time, and an agent that may not read Nodes (the chart grants it no
// such right) stops asking.
func (h *Heartbeat) ownedByNode(ctx context.Context) lease.ProcessLeaseFunc {
	forbidden := false
	return func(l *coordinationv1.Lease) error {
		if len(l.OwnerReferences) > 0 || forbidden {
			return nil
		}
		node, err := h.Client.CoreV1().Nodes().Get(ctx, h.Node, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			forbidden = true
			klog.FromContext(ctx).Info("The agent may not read its Node: its heartbeat Lease has no owner", "node", h.Node)
		}
		if err != nil {
			return nil
		}
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Node", Name: node.Name, UID: node.UID,
		}}
		return nil
	}
}

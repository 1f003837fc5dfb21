// Package agent is the node agent: the thin privileged process, one per node, that reports its
// node and performs only the typed operations (NodeOperation) the operator delegates to it,
// for its own node. This file is its heartbeat.
package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/spectrocloud/nodewright/internal/kubelite"
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

// The API's resources the heartbeat writes and reads.
var (
	Leases = kubelite.Resource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	Nodes  = kubelite.Resource{Version: "v1", Resource: "nodes"}
)

// Heartbeat renews the node's Lease until its context ends, as the kubelet's lease controller
// (k8s.io/component-helpers/apimachinery/lease) renews its node Lease: the same requests, the
// same retries and backoff.
type Heartbeat struct {
	Client    *kubelite.Client
	Node      string
	Namespace string
	// Interval is the renewal interval; RenewInterval when zero.
	Interval time.Duration
	Clock    clock.Clock

	duration int32
	// latest is the Lease as last written or read; renewals update it without reading it
	// first, as long as nobody else writes it.
	latest *coordinationv1.Lease
	// nodeForbidden: reading the Node was forbidden, and is not tried again.
	nodeForbidden bool
}

// The lease controller's: successive renewals tried before waiting for the next interval,
// and the longest wait while the Lease cannot be read or created.
const (
	maxUpdateRetries = 5
	maxEnsureBackoff = 7 * time.Second
)

// Run renews the Lease until ctx ends: at once, then every interval (plus up to 4 %, as the
// kubelet, so that renewals of many nodes spread). The Lease is owned by the Node object, when
// there is one, so that it goes with the node.
func (h *Heartbeat) Run(ctx context.Context) error {
	if h.Node == "" || h.Namespace == "" || h.Client == nil {
		return fmt.Errorf("the heartbeat needs a client, the node's name and the agent's namespace")
	}
	interval := h.Interval
	if interval == 0 {
		interval = RenewInterval
	}
	if h.Clock == nil {
		h.Clock = clock.RealClock{}
	}
	h.duration = int32(LeaseDurationSeconds)
	if interval != RenewInterval {
		h.duration = int32(max(4*interval/time.Second, 1))
	}
	for ctx.Err() == nil {
		h.sync(ctx, interval)
		t := time.NewTimer(interval + rand.N(interval/25+1))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// sync renews the Lease once: from the Lease last written when there is one, else read or
// created first.
func (h *Heartbeat) sync(ctx context.Context, interval time.Duration) {
	log := klog.FromContext(ctx)
	if h.latest != nil {
		err := h.retryUpdate(ctx, h.latest)
		if err == nil {
			return
		}
		log.Info("Renewing the heartbeat Lease as last written failed; reading it again", "err", err.Error())
	}
	lease, created := h.backoffEnsure(ctx)
	h.latest = lease
	if !created && lease != nil {
		if err := h.retryUpdate(ctx, lease); err != nil {
			log.Error(err, "Renewing the heartbeat Lease failed; trying again", "in", interval)
		}
	}
}

// backoffEnsure reads the Lease, or creates it when there is none, until it succeeds or ctx
// ends, waiting from 200 ms doubling to 7 s between tries. It says whether it created it.
func (h *Heartbeat) backoffEnsure(ctx context.Context) (*coordinationv1.Lease, bool) {
	sleep := 100 * time.Millisecond
	for {
		lease, created, err := h.ensure(ctx)
		if err == nil {
			return lease, created
		}
		sleep = min(2*sleep, maxEnsureBackoff)
		klog.FromContext(ctx).Error(err, "Reading or creating the heartbeat Lease failed; trying again", "in", sleep)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-t.C:
		}
	}
}

func (h *Heartbeat) ensure(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease := &coordinationv1.Lease{}
	err := h.Client.Get(ctx, Leases.Path(h.Namespace, h.Node), lease)
	if kubelite.IsNotFound(err) {
		create := h.newLease(ctx, nil)
		created := &coordinationv1.Lease{}
		if err := h.Client.Create(ctx, Leases.Path(h.Namespace, ""), create, created); err != nil {
			return nil, false, err
		}
		return created, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lease, false, nil
}

// retryUpdate renews the Lease from base, up to maxUpdateRetries times: after a Conflict from
// the Lease read again.
func (h *Heartbeat) retryUpdate(ctx context.Context, base *coordinationv1.Lease) error {
	for i := range maxUpdateRetries {
		renewed := &coordinationv1.Lease{}
		err := h.Client.Update(ctx, Leases.Path(h.Namespace, h.Node), h.newLease(ctx, base), renewed)
		if err == nil {
			h.latest = renewed
			return nil
		}
		klog.FromContext(ctx).Error(err, "Renewing the heartbeat Lease failed")
		if kubelite.IsConflict(err) {
			base, _ = h.backoffEnsure(ctx)
			continue
		}
		if i > 0 {
			klog.FromContext(ctx).Info("The heartbeat Lease failed to renew several times in a row", "node", h.Node)
		}
	}
	return fmt.Errorf("failed %d attempts to update the heartbeat Lease", maxUpdateRetries)
}

// newLease is the Lease to write: a new one when base is nil, else a copy of base; held by
// the node, for the lease duration, renewed now, and owned by the Node when it has no owner
// yet.
func (h *Heartbeat) newLease(ctx context.Context, base *coordinationv1.Lease) *coordinationv1.Lease {
	var lease *coordinationv1.Lease
	if base == nil {
		lease = &coordinationv1.Lease{
			TypeMeta:   metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Name: h.Node, Namespace: h.Namespace},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h.Node)},
		}
	} else {
		lease = base.DeepCopy()
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(h.duration)
	lease.Spec.RenewTime = &metav1.MicroTime{Time: h.Clock.Now()}
	h.ownedByNode(ctx, lease)
	return lease
}

// ownedByNode makes the Node the Lease's owner, as the kubelet does with its node Lease. It
// never holds a renewal up: a node not (yet) there, or an error reading it, leaves the Lease
// without an owner this time, and an agent that may not read Nodes (the chart grants it no
// such right) stops asking.
func (h *Heartbeat) ownedByNode(ctx context.Context, l *coordinationv1.Lease) {
	if len(l.OwnerReferences) > 0 || h.nodeForbidden {
		return
	}
	node := &metav1.PartialObjectMetadata{}
	err := h.Client.Get(ctx, Nodes.Path("", h.Node), node)
	if kubelite.IsForbidden(err) {
		h.nodeForbidden = true
		klog.FromContext(ctx).Info("The agent may not read its Node: its heartbeat Lease has no owner", "node", h.Node)
	}
	if err != nil {
		return
	}
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Node", Name: node.Name, UID: node.UID,
	}}
}

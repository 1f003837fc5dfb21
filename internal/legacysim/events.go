package legacysim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Event reasons the simulated DaemonSet uses.
const (
	ReasonStateChanged = "StateChanged"
	ReasonNodeJoined   = "NodeJoined"
	ReasonNodeLeft     = "NodeLeft"
)

// nodeEventNamespace holds Events about Nodes. The API server accepts an Event about a
// cluster-scoped object only in "default" (kubelet does the same), so this is not
// configurable the way the ConfigMap's namespace is.
const nodeEventNamespace = metav1.NamespaceDefault

// EventType is the type of the Event a move into a state carries: Warning for the states in
// which the cluster is hurt, Normal for the rest (including states that are not one of the 21).
func EventType(to legacy.State) string {
	switch to {
	case legacy.PeerLost, legacy.DRBDDegraded, legacy.SplitBrain, legacy.Failed:
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// stateEvent reports a write of the state key, about the ConfigMap, from the primary's pod.
func (s *Simulator) stateEvent(ctx context.Context, cm *corev1.ConfigMap, from, to legacy.State, generation int64) error {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name,
		UID: cm.UID, ResourceVersion: cm.ResourceVersion}
	msg := fmt.Sprintf("State %s -> %s (generation %d)", orNone(from), to, generation)
	return s.emit(ctx, cm.Namespace, ref, EventType(to), ReasonStateChanged, msg, s.Primary().Name)
}

// nodeEvent reports a node joining or leaving, about the Node, from that node's pod.
func (s *Simulator) nodeEvent(ctx context.Context, node, reason, msg string) error {
	ref := corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node}
	return s.emit(ctx, nodeEventNamespace, ref, corev1.EventTypeNormal, reason, msg, node)
}

func (s *Simulator) emit(ctx context.Context, namespace string, about corev1.ObjectReference, eventType, reason, msg, host string) error {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: about.Name + ".", Namespace: namespace},
		InvolvedObject:      about,
		Reason:              reason,
		Message:             msg,
		Type:                eventType,
		Source:              corev1.EventSource{Component: s.cfg.Component, Host: host},
		ReportingController: s.cfg.Component,
		ReportingInstance:   s.cfg.Component + "-" + host,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if err := s.cfg.Client.Create(ctx, ev); err != nil {
		return fmt.Errorf("emitting %s Event %s about %s %s: %w", eventType, reason, about.Kind, about.Name, err)
	}
	return nil
}

func orNone(s legacy.State) legacy.State {
	if s == "" {
		return "(none)"
	}
	return s
}

package site

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// The scheduler's part for VirtualMachineInstances: which of the site's nodes a VMI's
// virt-launcher pod would be bound to. There is no pod; the site plays the checks the scheduler
// makes of such a pod's node: the Node exists and is Ready, it is not cordoned, its labels
// match the node selector, and the VMI tolerates its NoSchedule and NoExecute taints.

// Reasons a node does not fit, in the scheduler's words.
const (
	unfitSelector = "node(s) didn't match Pod's node affinity/selector"
	unfitCordoned = "node(s) were unschedulable"
	unfitTaint    = "node(s) had untolerated taint"
	unfitNotReady = "node(s) were not ready"
)

// nodeUnfit says why a pod with selector and tolerations cannot be bound to node, "" if it can.
func nodeUnfit(node *corev1.Node, selector map[string]string, tolerations []corev1.Toleration) string {
	for k, v := range selector {
		if got, ok := node.Labels[k]; !ok || got != v {
			return unfitSelector
		}
	}
	if node.Spec.Unschedulable {
		return unfitCordoned
	}
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(t corev1.Toleration) bool { return t.ToleratesTaint(taint) }) {
			return unfitTaint
		}
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return unfitNotReady
	}
	return ""
}

// placeOn picks the first of the site's nodes, other than exclude, whose Node fits a pod with
// selector and tolerations. With none, it returns "" and why, as the scheduler words it.
func (s *Site) placeOn(ctx context.Context, selector map[string]string, tolerations []corev1.Toleration, exclude string) (string, string, error) {
	unfit := map[string]int{}
	considered := 0
	for _, name := range s.opts.Nodes {
		node := &corev1.Node{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", "", err
		}
		considered++
		if name == exclude {
			unfit["node(s) didn't match pod anti-affinity rules"]++ // the source's pod is there
			continue
		}
		why := nodeUnfit(node, selector, tolerations)
		if why == "" {
			return name, "", nil
		}
		unfit[why]++
	}
	msg := fmt.Sprintf("0/%d nodes are available", considered)
	if len(unfit) > 0 {
		var reasons []string
		for _, why := range slices.Sorted(maps.Keys(unfit)) {
			reasons = append(reasons, fmt.Sprintf("%d %s", unfit[why], why))
		}
		msg += ": " + strings.Join(reasons, ", ")
	}
	return "", msg + ".", nil
}

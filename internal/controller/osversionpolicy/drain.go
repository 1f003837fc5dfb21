package osversionpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// maxDrained is the most pods status.nodes[].drained lists.
const maxDrained = 32

// poll is how often a drain looks again at pods it waits for, and a VM step at the VMs and
// their migrations (their changes wake no policy).
const poll = 2 * time.Second

// drain evicts node k's pods through the Eviction API (which keeps their
// PodDisruptionBudgets): not those of DaemonSets (which tolerate the cordon and come back), nor
// mirror pods (the kubelet's own), nor the node agents' (whose agent reboots the node), nor
// the operator's own namespace's (the operator and its LINSTOR gate: on a single node, evicted,
// they could not come back to finish the upgrade), nor pods that have ended. Unlike kubectl
// drain it also evicts pods no controller owns and pods with emptyDir volumes: the node
// reboots either way. It records what it evicted and waits until they are gone,
// within drainTimeout. A VM's virt-launcher pod is evicted too: KubeVirt's evictionStrategy
// decides what happens to the VM (LiveMigrate moves it).
func (r *Reconciler) drain(ctx context.Context, s *scope, k int) (engine.Outcome, error) {
	rec := &s.p.Status.Nodes[k-1]
	rec.Phase = nwv1.NodeOSDraining
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.MatchingFields{"spec.nodeName": rec.Name}); err != nil {
		return engine.Outcome{}, fmt.Errorf("listing the pods of %s: %w", rec.Name, err)
	}
	var left, blocked []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !r.drains(pod) {
			continue
		}
		name := pod.Namespace + "/" + pod.Name
		left = append(left, name)
		if !slices.Contains(rec.Drained, name) && len(rec.Drained) < maxDrained {
			rec.Drained = append(rec.Drained, name)
		}
		if pod.DeletionTimestamp != nil {
			continue
		}
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
		switch err := r.Client.SubResource("eviction").Create(ctx, pod, eviction); {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			blocked = append(blocked, name)
		case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// Its namespace is being deleted, which refuses any eviction in it: the namespace
			// controller deletes the pod, and the drain waits for that, as kubectl drain does.
		default:
			return engine.Outcome{}, fmt.Errorf("evicting %s from %s: %w", name, rec.Name, err)
		}
	}
	if len(left) == 0 {
		if len(rec.Drained) == 0 {
			return engine.Skipped("%s had no pod to drain", rec.Name), nil
		}
		return engine.Succeeded("drained %s: %s", rec.Name, strings.Join(rec.Drained, ", ")), nil
	}
	if passed, _ := s.Deadline(drainTimeout); passed {
		msg := fmt.Sprintf("%s: not drained within %s: %s still there", s.describe(k), drainTimeout, strings.Join(left, ", "))
		if len(blocked) > 0 {
			msg += "; refused by their disruption budgets: " + strings.Join(blocked, ", ")
		}
		return engine.Failed("%s", msg), nil
	}
	msg := fmt.Sprintf("draining %s: waiting for %s to go", rec.Name, strings.Join(left, ", "))
	if len(blocked) > 0 {
		msg += "; refused for now by their disruption budgets: " + strings.Join(blocked, ", ")
	}
	return engine.Waiting(poll, "%s", msg), nil
}

// drains reports whether a drain evicts pod.
func (r *Reconciler) drains(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.Namespace == r.AgentNamespace ||
		(r.LockNamespace != "" && pod.Namespace == r.LockNamespace) {
		return false
	}
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}

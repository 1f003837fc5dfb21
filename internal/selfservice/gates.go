package selfservice

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// Offered is what policy says of op in a namespace with nsLabels: its rules, or why it is not
// offered there ("" with the rules). A nil policy offers nothing.
func Offered(policy *nwv1.SelfServicePolicy, op nwv1.VMOperation, ns string, nsLabels map[string]string) (*nwv1.SelfServiceOperation, string) {
	if policy == nil {
		return nil, fmt.Sprintf("there is no SelfServicePolicy %s: an administrator has not offered self-service on this cluster", nwv1.SelfServicePolicyName)
	}
	if s := policy.Spec.NamespaceSelector; s != nil {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			return nil, fmt.Sprintf("SelfServicePolicy %s: spec.namespaceSelector: %v", policy.Name, err)
		}
		if !sel.Matches(labels.Set(nsLabels)) {
			return nil, fmt.Sprintf("SelfServicePolicy %s does not select namespace %s (spec.namespaceSelector)", policy.Name, ns)
		}
	}
	rules := policy.Operation(op)
	if rules == nil {
		return nil, fmt.Sprintf("SelfServicePolicy %s does not offer %s (spec.operations)", policy.Name, op)
	}
	return rules, ""
}

// Permits says why rules refuse r's parameters ("" when they do not): a MigrateVolume's
// StorageClass must be one the policy lists.
func Permits(rules *nwv1.SelfServiceOperation, r *nwv1.VMOperationRequest) string {
	if r.Spec.Operation != nwv1.VMMigrateVolume || slices.Contains(rules.StorageClasses, r.Spec.Params.StorageClass) {
		return ""
	}
	return fmt.Sprintf("spec.params.storageClass: %s is not a StorageClass SelfServicePolicy %s lets a volume be moved to (spec.operations[MigrateVolume].storageClasses: %s)",
		r.Spec.Params.StorageClass, nwv1.SelfServicePolicyName, strings.Join(rules.StorageClasses, ", "))
}

// Unfinished reports whether a request in phase p has not ended.
func Unfinished(p nwv1.VMOperationPhase) bool {
	switch p {
	case nwv1.VMOperationSucceeded, nwv1.VMOperationFailed, nwv1.VMOperationRefused:
		return false
	}
	return true
}

// Queued counts the unfinished requests of op among reqs: what maxQueued bounds.
func Queued(reqs []nwv1.VMOperationRequest, op nwv1.VMOperation) int {
	n := 0
	for i := range reqs {
		if reqs[i].Spec.Operation == op && Unfinished(reqs[i].Status.Phase) {
			n++
		}
	}
	return n
}

// before orders requests by creation, then by name: the namespace's queue.
func before(a, b *nwv1.VMOperationRequest) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Hold is what holds a request back now, as its status says it.
type Hold struct {
	// Blockers say, for a person, each thing that holds it; none: it may start.
	Blockers []string
	// Position is its place in the namespace's queue of unfinished requests, 1 first.
	Position int32
	// Approval is ApprovalNotRequired, ApprovalRequired or ApprovalGiven; ApprovedBy who gave
	// it.
	Approval, ApprovedBy string
	// Window is the maintenance window's text, "" for any time; NextWindowStart when it opens
	// next, while it is closed.
	Window          string
	NextWindowStart *time.Time
	// Retry is when a gate that holds it opens by itself (the window, the rate); zero: only a
	// change of something watched opens it.
	Retry time.Time
}

// Gates weighs the self-service gates of r at now, given the rules the policy has for its
// operation and every request of its namespace (r among them):
//
//   - approval: with approval Manual, an administrator set the approve annotation to the
//     operation's name (the webhook stamped who, and refused the requester);
//   - the maintenance window is open;
//   - the rate: fewer than rate.requests requests of the operation started in the namespace
//     within the last rate.period;
//   - the queue: no other request of the namespace runs, and no earlier one on the same VM
//     is unfinished: a namespace's requests run one at a time, each VM's in the order they
//     were made. A request on another VM may start before an earlier one that waits (for its
//     approval, say).
//
// The cluster-wide workflows' claim is the controller's to weigh: it reads the API server.
func Gates(r *nwv1.VMOperationRequest, rules *nwv1.SelfServiceOperation, reqs []nwv1.VMOperationRequest, now time.Time) (Hold, error) {
	var h Hold
	ahead := make([]*nwv1.VMOperationRequest, 0, len(reqs))
	for i := range reqs {
		o := &reqs[i]
		if o.UID != r.UID && Unfinished(o.Status.Phase) && before(o, r) {
			ahead = append(ahead, o)
		}
	}
	sort.Slice(ahead, func(i, j int) bool { return before(ahead[i], ahead[j]) })
	h.Position = int32(len(ahead) + 1)

	h.Approval = nwv1.ApprovalNotRequired
	if rules.Approval == nwv1.ApprovalManual {
		h.Approval = nwv1.ApprovalRequired
		if by := r.Annotations[nwv1.AnnotationApprovedBy]; r.Annotations[nwv1.AnnotationApprove] == string(r.Spec.Operation) && by != "" {
			h.Approval, h.ApprovedBy = nwv1.ApprovalGiven, by
		} else {
			h.Blockers = append(h.Blockers, fmt.Sprintf("awaiting an administrator's approval (kubectl annotate vmoperationrequest %s -n %s %s=%s)",
				r.Name, r.Namespace, nwv1.AnnotationApprove, r.Spec.Operation))
		}
	}

	if rules.MaintenanceWindow != nil {
		w, err := workflow.ParseWindow(rules.MaintenanceWindow, "SelfServicePolicy spec.operations["+string(r.Spec.Operation)+"].maintenanceWindow")
		if err != nil {
			return Hold{}, err
		}
		h.Window = w.String()
		if open, opens, _ := w.At(now); !open {
			h.NextWindowStart = &opens
			h.Blockers = append(h.Blockers, fmt.Sprintf("the maintenance window (%s) is closed; it opens at %s", h.Window, opens.UTC().Format(time.RFC3339)))
			h.retryAt(opens)
		}
	}

	if rate := rules.Rate; rate != nil {
		since := now.Add(-rate.Period.Duration)
		var started []time.Time
		for i := range reqs {
			o := &reqs[i]
			if o.UID != r.UID && o.Spec.Operation == r.Spec.Operation && o.Status.StartTime != nil && o.Status.StartTime.After(since) {
				started = append(started, o.Status.StartTime.Time)
			}
		}
		if n := len(started); n >= int(rate.Requests) {
			sort.Slice(started, func(i, j int) bool { return started[i].Before(started[j]) })
			// The oldest of the newest rate.requests starts leaves the period first.
			free := started[n-int(rate.Requests)].Add(rate.Period.Duration)
			h.Blockers = append(h.Blockers, fmt.Sprintf("the rate of %s in this namespace: %d started in the last %s (at most %d); the next may start at %s",
				r.Spec.Operation, n, rate.Period.Duration, rate.Requests, free.UTC().Format(time.RFC3339)))
			h.retryAt(free)
		}
	}

	// Any request of the namespace that runs holds it, earlier or not (a later one may have
	// started while this one waited for its approval); so does an earlier one on its VM.
	for i := range reqs {
		if o := &reqs[i]; o.UID != r.UID && o.Status.Phase == nwv1.VMOperationRunning {
			h.Blockers = append(h.Blockers, fmt.Sprintf("the namespace's requests run one at a time: %s (%s of VM %s) runs", o.Name, o.Spec.Operation, o.Spec.VM))
			break
		}
	}
	for _, o := range ahead {
		if o.Spec.VM == r.Spec.VM && o.Status.Phase != nwv1.VMOperationRunning {
			h.Blockers = append(h.Blockers, fmt.Sprintf("an earlier request on VM %s, %s (%s), has not ended", o.Spec.VM, o.Name, o.Spec.Operation))
			break
		}
	}
	return h, nil
}

func (h *Hold) retryAt(t time.Time) {
	if h.Retry.IsZero() || t.Before(h.Retry) {
		h.Retry = t
	}
}

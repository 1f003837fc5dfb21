// Package fleet is the fleet hub: it engages every member cluster that a kubeconfig Secret
// or a ClusterProfile registers (sigs.k8s.io/multicluster-runtime), watches each member's
// NodewrightCluster, cluster-wide workflows and audit checkpoint, and keeps one
// NodewrightClusterSummary per member on the hub. It never writes to a member.
package fleet

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Observed is what the hub read from one member's cache.
type Observed struct {
	// Cluster is the member's NodewrightCluster; nil when it has none.
	Cluster *nodewrightv1alpha1.NodewrightCluster
	// Workflows are the member's workflows as the hub keeps them (workflowReader).
	Workflows WorkflowsSeen
	Published Published
	// NodewrightVersion is the operator's version: the NodewrightCluster's
	// status.operatorVersion, or the operator Deployment's app.kubernetes.io/version label
	// when the status does not say it.
	NodewrightVersion string
}

// Health is what the hub's health check of a member found.
type Health struct {
	// Known is false until the first check finished.
	Known             bool
	Reachable         bool
	Reason, Message   string
	KubernetesVersion string
}

// setObserved fills status from the member's objects.
func setObserved(status *fleetv1alpha1.NodewrightClusterSummaryStatus, o Observed) {
	status.Phase, status.Management, status.Nodes, status.Profile = "", "", fleetv1alpha1.MemberNodes{}, nil
	// Each field clipped to the summary's limits (a member's CRDs may allow more) and stripped
	// of what a terminal or a page would act on (printable).
	if c := o.Cluster; c != nil {
		status.Phase = printable(string(c.Status.Phase), 32)
		status.Management = printable(string(c.Status.Management), 32)
		status.Nodes = fleetv1alpha1.MemberNodes{Ready: c.Status.Nodes.Ready, Total: c.Status.Nodes.Total}
		if p := c.Status.Profile; p != nil {
			status.Profile = &fleetv1alpha1.MemberProfile{Name: printable(p.Name, 253), Version: printable(p.Version, 64)}
		}
	}
	status.Workflows = nil
	if ws := o.Workflows.Listed; len(ws) > 0 {
		status.Workflows = slices.Clone(ws[:min(len(ws), maxWorkflows)])
	}
	status.Workflow = workflowColumn(status.Workflows, o.Workflows.Unfinished)
	status.NodewrightVersion = printable(o.NodewrightVersion, 64)
}

func unfinished(p nodewrightv1alpha1.WorkflowPhase) bool {
	switch p {
	case nodewrightv1alpha1.WorkflowSucceeded, nodewrightv1alpha1.WorkflowFailed, nodewrightv1alpha1.WorkflowRolledBack:
		return false
	}
	return true
}

// workflow summarises one workflow: its running step; else the step a gate holds, "(waiting)"
// (a Manual flip's next node, waiting for its approval); else the latest one that started.
// The workflows list every planned step from the start, Pending until it starts, so a Pending
// one does not count.
func workflow(kind, name string, s nodewrightv1alpha1.WorkflowStatus, progress string) fleetv1alpha1.MemberWorkflow {
	w := fleetv1alpha1.MemberWorkflow{Kind: kind, Name: name, Phase: string(s.Phase), Progress: progress}
	for _, step := range s.Steps {
		switch step.State {
		case nodewrightv1alpha1.StepRunning:
			w.Step = step.Name
			return w
		case nodewrightv1alpha1.StepWaiting:
			w.Step = step.Name + " (waiting)"
			return w
		case nodewrightv1alpha1.StepPending:
		default:
			w.Step = step.Name
		}
	}
	return w
}

// workflowColumn is the Workflow column: the first workflow, and how many more of the
// unfinished ones run, listed or not.
func workflowColumn(ws []fleetv1alpha1.MemberWorkflow, unfinished int) string {
	if len(ws) == 0 {
		return ""
	}
	w := ws[0]
	parts := []string{w.Kind + "/" + w.Name}
	for _, p := range []string{w.Step, w.Progress} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	s := strings.Join(parts, " ")
	if more := max(unfinished, len(ws)) - 1; more > 0 {
		s += fmt.Sprintf(" (+%d)", more)
	}
	return clip(s, 512)
}

// setHealth sets Reachable and the Kubernetes version from the latest health check; before
// the first one it leaves both as they were.
func setHealth(status *fleetv1alpha1.NodewrightClusterSummaryStatus, h Health) {
	if !h.Known {
		return
	}
	cond := metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse, Reason: h.Reason, Message: printable(h.Message, 32768)}
	if h.Reachable {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if h.KubernetesVersion != "" {
		status.KubernetesVersion = printable(h.KubernetesVersion, 64)
	}
}

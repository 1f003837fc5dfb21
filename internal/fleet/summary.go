// Package fleet is the fleet hub: it engages every member cluster that a kubeconfig Secret
// or a ClusterProfile registers (sigs.k8s.io/multicluster-runtime), watches each member's
// NodewrightCluster, cluster-wide workflows and audit checkpoint, and keeps one
// NodewrightClusterSummary per member on the hub. It never writes to a member.
package fleet

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Observed is what the hub read from one member's cache.
type Observed struct {
	// Cluster is the member's NodewrightCluster; nil when it has none.
	Cluster   *nodewrightv1alpha1.NodewrightCluster
	Flips     []nodewrightv1alpha1.BondModeFlipPlan
	Upgrades  []nodewrightv1alpha1.ReplicationUpgrade
	Published Published
	// NodewrightVersion is the operator Deployment's app.kubernetes.io/version label.
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
	if c := o.Cluster; c != nil {
		status.Phase = string(c.Status.Phase)
		status.Management = string(c.Status.Management)
		status.Nodes = fleetv1alpha1.MemberNodes{Ready: c.Status.Nodes.Ready, Total: c.Status.Nodes.Total}
		if p := c.Status.Profile; p != nil {
			status.Profile = &fleetv1alpha1.MemberProfile{Name: p.Name, Version: p.Version}
		}
	}
	status.Workflows = nil
	for _, f := range o.Flips {
		if unfinished(f.Status.Phase) {
			status.Workflows = append(status.Workflows, workflow("BondModeFlipPlan", f.Name, f.Status.WorkflowStatus, f.Status.Progress))
		}
	}
	for _, u := range o.Upgrades {
		if unfinished(u.Status.Phase) {
			status.Workflows = append(status.Workflows, workflow("ReplicationUpgrade", u.Name, u.Status.WorkflowStatus, u.Status.Progress))
		}
	}
	if len(status.Workflows) > 32 {
		status.Workflows = status.Workflows[:32]
	}
	status.Workflow = workflowColumn(status.Workflows)
	status.NodewrightVersion = o.NodewrightVersion
}

func unfinished(p nodewrightv1alpha1.WorkflowPhase) bool {
	switch p {
	case nodewrightv1alpha1.WorkflowSucceeded, nodewrightv1alpha1.WorkflowFailed, nodewrightv1alpha1.WorkflowRolledBack:
		return false
	}
	return true
}

// workflow summarises one workflow: its running step, or else the latest one that started.
// The workflows list every planned step from the start, Pending until it starts (Waiting
// while a gate holds it), so neither counts as started.
func workflow(kind, name string, s nodewrightv1alpha1.WorkflowStatus, progress string) fleetv1alpha1.MemberWorkflow {
	w := fleetv1alpha1.MemberWorkflow{Kind: kind, Name: name, Phase: string(s.Phase), Progress: progress}
	for _, step := range s.Steps {
		switch step.State {
		case nodewrightv1alpha1.StepRunning:
			w.Step = step.Name
			return w
		case nodewrightv1alpha1.StepPending, nodewrightv1alpha1.StepWaiting:
		default:
			w.Step = step.Name
		}
	}
	return w
}

// workflowColumn is the Workflow column: the first workflow, and how many more run.
func workflowColumn(ws []fleetv1alpha1.MemberWorkflow) string {
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
	if len(ws) > 1 {
		s += fmt.Sprintf(" (+%d)", len(ws)-1)
	}
	if len(s) > 512 {
		s = s[:512]
	}
	return s
}

// setHealth sets Reachable and the Kubernetes version from the latest health check; before
// the first one it leaves both as they were.
func setHealth(status *fleetv1alpha1.NodewrightClusterSummaryStatus, h Health) {
	if !h.Known {
		return
	}
	cond := metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse, Reason: h.Reason, Message: h.Message}
	if h.Reachable {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if h.KubernetesVersion != "" {
		status.KubernetesVersion = h.KubernetesVersion
	}
}

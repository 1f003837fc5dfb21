package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// GatedObject is a cluster-wide workflow's object: its spec says whether a person approves
// each step that changes a node, and in which maintenance window such a step may start.
type GatedObject interface {
	Object
	GetGates() (nwv1.Approval, *nwv1.MaintenanceWindow)
}

// GateConfig configures the gates of a kind whose plan is a workflow.GatedPlan.
type GateConfig struct {
	// LockNamespace is where the cluster-wide workflow Lease is kept (the operator's own
	// namespace). Required for a plan with GateLock.
	LockNamespace string
	// ClusterPhases are the NodewrightCluster phases in which a step with GateHealth may
	// start.
	ClusterPhases []nwv1.ClusterPhase
}

// Verdict is what one gate says about the step waiting at it.
type Verdict struct {
	// Open: the gate lets the step start.
	Open bool
	// Reason is the Held condition's reason (and the Event's) when the gate holds the step.
	Reason string
	// Message says why, for a person.
	Message string
	// Recheck, when set, is when the verdict may change with nothing to watch (a window
	// opening); otherwise a watch wakes the workflow.
	Recheck time.Time
	// ApprovedBy is who approved the step (the approval gate, open).
	ApprovedBy string
}

// Gate is one named check of the chain. Checking a gate only reads: what a gate takes once
// every gate is open (the claim) the engine takes then, with an optimistic lock.
type Gate struct {
	Name string
	// Which are the steps it holds: those whose gates (workflow.GatedPlan) include these.
	Which workflow.Gates
	Check func(ctx context.Context, env GateEnv, o GatedObject, step workflow.Step, now time.Time) (Verdict, error)
}

// GateEnv is what a gate reads.
type GateEnv struct {
	Client    client.Client
	APIReader client.Reader
	Config    GateConfig
	Kind      workflow.Kind
}

// Chain is the gates, in the order they are checked: the management mode first, so that a
// workflow on a cluster the legacy DaemonSet still decides about takes no claim; the claim
// next, so that a workflow that waits for another never asks a person for anything; the
// approval before the window, so that a person can approve a step outside the window and it
// starts when the window opens. A kind's own gates (Descriptor.Gates) come after these.
var Chain = []Gate{
	{Name: "Managed", Which: workflow.GateManaged, Check: checkManaged},
	{Name: "OneWorkflowAtATime", Which: workflow.GateLock, Check: checkLock},
	{Name: "ClusterHealthy", Which: workflow.GateHealth, Check: checkHealth},
	{Name: "Approval", Which: workflow.GateApproval, Check: checkApproval},
	{Name: "MaintenanceWindow", Which: workflow.GateWindow, Check: checkWindow},
}

// gate checks the gates of the Waiting step of run: when all let it, the step starts;
// otherwise the Held condition, the step's message and an Event say which gate holds it and
// why, and the workflow waits for a watch event or the gate's recheck time.
func (e *Engine[O]) gate(ctx context.Context, base O, run *Run[O]) (ctrl.Result, error) {
	o, st, step := run.Object, run.Object.GetWorkflowStatus(), run.State.Step
	g, ok := any(o).(GatedObject)
	if !ok {
		return ctrl.Result{}, fmt.Errorf("%s %s: step %s has gates, but the kind has no approval or maintenance window", e.Descriptor.Kind.Name, o.GetName(), step)
	}
	kind := e.Descriptor.Kind
	env := GateEnv{Client: e.Client, APIReader: e.APIReader, Config: e.gates, Kind: kind}
	gates := workflow.GatesOf(run.Plan, step)
	var held *Verdict
	approvedBy := ""
	for _, gate := range append(slices.Clip(Chain), e.Descriptor.Gates...) {
		if gate.Which == 0 || !gates.Has(gate.Which) {
			continue
		}
		v, err := gate.Check(ctx, env, g, step, run.Now.Time)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("checking gate %s: %w", gate.Name, err)
		}
		if !v.Open {
			held = &v
			break
		}
		if v.ApprovedBy != "" {
			approvedBy = v.ApprovedBy
		}
	}
	log := ctrl.LoggerFrom(ctx)
	if held == nil && gates.Has(workflow.GateLock) {
		// Every gate let the step start: the claim is taken now, or the step waits for the
		// next look (another workflow took it in between).
		v, err := claim(ctx, env, g, run.Now.Time)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("claiming the cluster: %w", err)
		}
		if !v.Open {
			held = &v
		}
	}
	if held == nil {
		workflow.Admit(st, step, approvedBy, run.Now)
		msg := fmt.Sprintf("step %s started: its gates let it", step)
		if approvedBy != "" {
			msg += "; approved by " + approvedBy
		}
		setHeld(st, o.GetGeneration(), metav1.ConditionFalse, nwv1.ReasonGatesOpen, msg)
		workflow.SetSucceededCondition(st, kind, o.GetGeneration(), run.State)
		if err := e.patchStatus(ctx, base, o); err != nil {
			return ctrl.Result{}, err
		}
		e.recordTransitions(ctx, o, run.Plan)
		log.Info("Workflow step started", "kind", kind.Name, "object", klog.KObj(o), "step", step, "approvedBy", approvedBy)
		if e.Recorder != nil {
			e.Recorder.Event(o, corev1.EventTypeNormal, workflow.EventStepStarted, audit.Shorten(msg, workflow.MaxEventMessageBytes))
		}
		return ctrl.Result{RequeueAfter: again}, nil
	}
	msg := fmt.Sprintf("step %s waits: %s", step, held.Message)
	// An Event when the gate that holds the step changes, not each time its words do (a
	// stale node's age, say).
	before := meta.FindStatusCondition(st.Conditions, nwv1.ConditionHeld)
	changed := before == nil || before.Status != metav1.ConditionTrue || before.Reason != held.Reason
	setHeld(st, o.GetGeneration(), metav1.ConditionTrue, held.Reason, msg)
	workflow.StepMessage(st, step, held.Message)
	st.NextWindowStart = nil
	if held.Reason == nwv1.ReasonOutsideWindow && !held.Recheck.IsZero() {
		st.NextWindowStart = ptr.To(metav1.NewTime(held.Recheck))
	}
	workflow.SetSucceededCondition(st, kind, o.GetGeneration(), run.State)
	if err := e.patchStatus(ctx, base, o); err != nil {
		return ctrl.Result{}, err
	}
	if changed {
		log.Info("Workflow step held by a gate", "kind", kind.Name, "object", klog.KObj(o), "step", step, "reason", held.Reason, "message", held.Message)
		if e.Recorder != nil {
			e.Recorder.Event(o, corev1.EventTypeNormal, held.Reason, audit.Shorten(msg, workflow.MaxEventMessageBytes))
		}
	}
	var result ctrl.Result
	if !held.Recheck.IsZero() {
		result.RequeueAfter = max(held.Recheck.Sub(run.Now.Time), again)
	}
	return result, nil
}

// setHeld sets the Held condition.
func setHeld(st *nwv1.WorkflowStatus, generation int64, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: nwv1.ConditionHeld, Status: status,
		Reason: reason, Message: audit.Shorten(message, workflow.MaxConditionMessageBytes), ObservedGeneration: generation})
}

// checkManaged: Nodewright manages the nodes (management.InEffect). A workflow admitted in
// Managed holds here when the cluster is switched back to Observe, before its next step
// starts (a step that started runs to its end, and a rollback never waits), and goes on when
// it is Managed again. The NodewrightCluster's watch wakes a held workflow.
func checkManaged(ctx context.Context, e GateEnv, _ GatedObject, _ workflow.Step, _ time.Time) (Verdict, error) {
	var c nwv1.NodewrightCluster
	if err := e.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, &c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return Verdict{Reason: nwv1.ReasonNotManaged, Message: fmt.Sprintf(
				"there is no NodewrightCluster %s to hand the nodes over to Nodewright; a %s changes nodes only in the Managed mode", nwv1.NodewrightClusterName, e.Kind.Noun)}, nil
		}
		return Verdict{}, err
	}
	if !management.InEffect(&c) {
		return Verdict{Reason: nwv1.ReasonNotManaged, Message: fmt.Sprintf("%s; a %s changes nodes only in the Managed mode", management.WhyNot(&c), e.Kind.Noun)}, nil
	}
	return Verdict{Open: true}, nil
}

// checkHealth: the cluster's phase is one the workflow allows, and every node's heartbeat is
// fresh. The NodewrightCluster's watch wakes a held workflow.
func checkHealth(ctx context.Context, e GateEnv, _ GatedObject, _ workflow.Step, _ time.Time) (Verdict, error) {
	held := func(format string, args ...any) (Verdict, error) {
		return Verdict{Reason: nwv1.ReasonClusterNotReady, Message: fmt.Sprintf(format, args...)}, nil
	}
	var c nwv1.NodewrightCluster
	if err := e.Client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, &c); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return held("there is no NodewrightCluster %s to say the cluster is healthy", nwv1.NodewrightClusterName)
		}
		return Verdict{}, err
	}
	if !slices.Contains(e.Config.ClusterPhases, c.Status.Phase) {
		phases := make([]string, len(e.Config.ClusterPhases))
		for i, p := range e.Config.ClusterPhases {
			phases[i] = string(p)
		}
		return held("the cluster is %s; a %s runs only when it is %s", orUnknown(string(c.Status.Phase)), e.Kind.Noun, strings.Join(phases, " or "))
	}
	fresh := meta.FindStatusCondition(c.Status.Conditions, nwv1.ConditionHeartbeatsFresh)
	if fresh == nil || fresh.Status != metav1.ConditionTrue {
		why := "not reported"
		if fresh != nil {
			why = fresh.Message
		}
		return held("a node is stale: %s", why)
	}
	return Verdict{Open: true}, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "not yet observed"
	}
	return s
}

// checkWindow: the maintenance window, when the spec sets one, is open. Closed, it says when
// the next one opens, and the workflow is woken then.
func checkWindow(_ context.Context, _ GateEnv, o GatedObject, _ workflow.Step, now time.Time) (Verdict, error) {
	_, spec := o.GetGates()
	if spec == nil {
		return Verdict{Open: true}, nil
	}
	w, err := workflow.ParseWindow(spec, "spec.maintenanceWindow")
	if err != nil {
		// Admission refuses such a window; one written past it holds the workflow until
		// a person deletes it.
		return Verdict{Reason: nwv1.ReasonOutsideWindow, Message: err.Error()}, nil
	}
	open, opens, _ := w.At(now)
	if open {
		return Verdict{Open: true}, nil
	}
	return Verdict{Reason: nwv1.ReasonOutsideWindow, Recheck: opens,
		Message: fmt.Sprintf("outside the maintenance window (%s); the next one opens at %s", w, opens.UTC().Format(time.RFC3339))}, nil
}

// checkApproval: with spec.approval Manual, the approve annotation names the step. The
// object's own watch wakes the workflow when it is set.
func checkApproval(_ context.Context, e GateEnv, o GatedObject, step workflow.Step, _ time.Time) (Verdict, error) {
	if approval, _ := o.GetGates(); approval != nwv1.ApprovalManual {
		return Verdict{Open: true}, nil
	}
	if o.GetAnnotations()[nwv1.AnnotationApprove] != string(step) {
		return Verdict{Reason: nwv1.ReasonAwaitingApproval, Message: fmt.Sprintf(
			"awaiting approval: kubectl nodewright approve %s/%s", strings.ToLower(e.Kind.Name), o.GetName())}, nil
	}
	by := o.GetAnnotations()[nwv1.AnnotationApprovedBy]
	if by == "" {
		by = "unknown (no admission webhook stamped " + nwv1.AnnotationApprovedBy + ")"
	}
	return Verdict{Open: true, ApprovedBy: by}, nil
}

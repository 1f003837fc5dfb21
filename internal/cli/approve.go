package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	_ "github.com/spectrocloud/nodewright/internal/workflows" // every workflow kind
)

const approveHelp = `Approve the step a cluster-wide workflow (a BondModeFlipPlan, a ReplicationUpgrade or an
OSVersionPolicy) waits on. With spec.approval Manual, each step that changes a node waits (state Waiting, the Held
condition's reason AwaitingApproval) until a person approves it: this command sets the
annotation nodewright.spectrocloud.com/approve to the step's name, and the admission webhook
stamps you in nodewright.spectrocloud.com/approved-by. It needs the right to update (patch) the
workflow.

KIND is bondmodeflipplan (bondmodeflipplans, bmfp, bondflip), replicationupgrade
(replicationupgrades, rupg, replup) or osversionpolicy (osversionpolicies, osvp, osversion), in
any case; the kinds are cluster-scoped.

The command reads the workflow and approves its waiting step; --step makes sure it is the one
you mean. It refuses when no step waits, when the workflow is not Manual and nothing waits for
approval, or when --step names another step. The annotation is written with the workflow's
resourceVersion: if the workflow changed in between, it is read and checked again. When another
gate holds the step as well (the maintenance window, another workflow, the cluster's health),
the step stays Waiting after the approval, and the command says which gate holds it.

Exit codes: 0 approved (or already approved); 1 refused (nothing to approve, another step, no
right to update the workflow) or the workflow cannot be read; 2 usage.`

const approveExamples = `  # Approve the step the flip waits on
  kubectl nodewright approve bondmodeflipplan/to-lacp

  # Only if the step waiting is the one you reviewed
  kubectl nodewright approve bmfp/to-lacp --step Node2

  # What waits, and why (the Waiting and Held By columns)
  kubectl get bondmodeflipplans,replicationupgrades
  kubectl nodewright approve rupg/to-three`

// approvable is a workflow kind whose steps can wait for approval.
type approvable struct {
	// name is the kind as the command prints it, lower case.
	name string
	// aliases are the other names KIND accepts, as kubectl does: the plural and the CRD's
	// short names.
	aliases   []string
	newObject func() gatedWorkflow
	newList   func() client.ObjectList
}

// gatedWorkflow is what approval reads of a workflow: its approval policy (GetGates) and its
// status.
type gatedWorkflow interface {
	client.Object
	GetGates() (nwv1.Approval, *nwv1.MaintenanceWindow)
	GetWorkflowStatus() *nwv1.WorkflowStatus
}

// approvables are the workflow kinds whose objects have an approval policy (GetGates), as
// the workflow engine describes them (internal/workflows registers every kind).
func approvables() []approvable {
	var out []approvable
	for _, k := range engine.Described() {
		if _, ok := k.New().(gatedWorkflow); !ok {
			continue
		}
		name := strings.ToLower(k.Kind.Name)
		out = append(out, approvable{name: name, aliases: append([]string{strings.ToLower(plural(k.Kind.Name))}, k.ShortNames...),
			newObject: func() gatedWorkflow { return k.New().(gatedWorkflow) }, newList: k.NewList})
	}
	return out
}

// approvableKind is the kind KIND names (in any case, optionally with the API group).
func approvableKind(kind string) (approvable, bool) {
	kind = strings.TrimSuffix(strings.ToLower(kind), "."+nwv1.GroupVersion.Group)
	for _, a := range approvables() {
		if kind == a.name || slices.Contains(a.aliases, kind) {
			return a, true
		}
	}
	return approvable{}, false
}

// parseApprovable splits KIND/NAME; mistakes in it are usage errors.
func parseApprovable(ref string) (approvable, string, error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return approvable{}, "", usageErrorf("%q: want KIND/NAME, e.g. bondmodeflipplan/to-lacp", ref)
	}
	a, ok := approvableKind(kind)
	if !ok {
		return approvable{}, "", usageErrorf("%q: not a kind whose steps wait for approval: want one of %s", kind,
			strings.Join(mapSlice(approvables(), func(a approvable) string { return a.name }), ", "))
	}
	return a, name, nil
}

func newApproveCommand(f *Factory) *cobra.Command {
	var step string
	cmd := &cobra.Command{
		Use:               "approve KIND/NAME [--step STEP]",
		Short:             "Approve the step a Manual BondModeFlipPlan or ReplicationUpgrade waits on",
		Long:              approveHelp,
		Example:           approveExamples,
		Args:              exactArgs(1, "KIND/NAME (bondmodeflipplan/NAME or replicationupgrade/NAME)"),
		ValidArgsFunction: completeApprovables(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := parseApprovable(args[0])
			if err != nil {
				return err
			}
			c, err := f.Client()
			if err != nil {
				return err
			}
			done, err := approve(cmd.Context(), c, kind, name, step)
			if err != nil {
				return err
			}
			return printLines(f, done.Lines())
		},
	}
	cmd.Flags().StringVar(&step, "step", "", "Approve only if this is the step that waits (its name in status.steps).")
	return cmd
}

// approveTries bounds how often approve reads the workflow again because it changed between
// the read and the write.
const approveTries = 5

// Approval is what an approval did.
type Approval struct {
	// Object is the workflow as messages name it: bondmodeflipplan/NAME.
	Object string
	// Step is the step approved.
	Step string
	// Already: the step was approved before; nothing was written. By is who approved it then,
	// as the admission webhook stamped them ("" when it did not).
	Already bool
	By      string
	// StillHeld is the Held condition when another gate than approval holds the step too:
	// it stays Waiting until that gate opens.
	StillHeld *metav1.Condition
}

// Lines say what the approval did, as approve prints it.
func (a Approval) Lines() []string {
	first := fmt.Sprintf("%s: approved step %s", a.Object, a.Step)
	if a.Already {
		first = fmt.Sprintf("%s: step %s is already approved", a.Object, a.Step)
		if a.By != "" {
			first += " by " + a.By
		}
	}
	lines := []string{first}
	if h := a.StillHeld; h != nil && h.Reason != nwv1.ReasonAwaitingApproval {
		held := fmt.Sprintf("%s: step %s still waits for another gate: %s", a.Object, a.Step, h.Reason)
		if h.Message != "" {
			held += ": " + h.Message
		}
		lines = append(lines, held)
	}
	return lines
}

// Approve approves the step a workflow waits on, as `kubectl nodewright approve KIND/NAME
// [--step STEP]` does: kind is one of the names KIND takes (bondmodeflipplan, bmfp, ...), step
// the step that must be the one waiting ("" for whichever waits). It reads the workflow with
// c and sets the approve annotation to the waiting step with a merge patch carrying the
// resourceVersion it read, reading and checking again when the workflow changed in between;
// the admission webhook stamps the user c authenticates as in approved-by. Its errors say why
// nothing was approved, naming the workflow.
//
// The web UI approves through it, so that an approval is recorded the same way from both.
func Approve(ctx context.Context, c client.Client, kind, name, step string) (Approval, error) {
	a, ok := approvableKind(kind)
	if !ok {
		return Approval{}, usageErrorf("%q: not a kind whose steps wait for approval: want bondmodeflipplan or replicationupgrade", kind)
	}
	return approve(ctx, c, a, name, step)
}

// approve sets the approve annotation of the workflow kind/name to its waiting step (the one
// named step, when given), with the resourceVersion it read.
func approve(ctx context.Context, c client.Client, kind approvable, name, step string) (Approval, error) {
	object := kind.name + "/" + name
	for try := 1; ; try++ {
		obj := kind.newObject()
		if err := c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return Approval{}, apiError(err, kind.name, name)
		}
		approval, _ := obj.GetGates()
		status := obj.GetWorkflowStatus()
		waiting, held, err := stepToApprove(approval, status, step)
		if err != nil {
			return Approval{}, fmt.Errorf("%s: %w", object, err)
		}
		done := Approval{Object: object, Step: waiting, StillHeld: held}
		annotations := obj.GetAnnotations()
		if annotations[nwv1.AnnotationApprove] == waiting {
			done.Already, done.By = true, annotations[nwv1.AnnotationApprovedBy]
			return done, nil
		}
		before := obj.DeepCopyObject().(client.Object)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[nwv1.AnnotationApprove] = waiting
		obj.SetAnnotations(annotations)
		err = c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return done, nil
		case apierrors.IsConflict(err) && try < approveTries:
			continue // changed since the read: read it and check again
		case apierrors.IsConflict(err):
			return Approval{}, fmt.Errorf("%s changed each of the %d times it was read to be approved; nothing was approved, try again", object, approveTries)
		case refusedByRBAC(err):
			return Approval{}, fmt.Errorf("you may not approve %s: the API server refused the update: %w", object, err)
		}
		return Approval{}, apiError(err, kind.name, name)
	}
}

// refusedByRBAC reports whether err is the API server's Forbidden for want of a right, not an
// admission webhook's refusal (which is Forbidden too).
func refusedByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && !strings.Contains(err.Error(), deniedMarker)
}

// stepToApprove is the waiting step to approve (the one named want, when given) and the Held
// condition when it is True; an error says why there is none.
func stepToApprove(approval nwv1.Approval, status *nwv1.WorkflowStatus, want string) (string, *metav1.Condition, error) {
	held := meta.FindStatusCondition(status.Conditions, nwv1.ConditionHeld)
	if held != nil && held.Status != metav1.ConditionTrue {
		held = nil
	}
	if approval == "" {
		approval = nwv1.ApprovalAutomatic
	}
	var waiting []string
	for _, s := range status.Steps {
		if s.State == nwv1.StepWaiting {
			waiting = append(waiting, s.Name)
		}
	}
	awaitsApproval := held != nil && held.Reason == nwv1.ReasonAwaitingApproval
	phase := status.Phase
	if phase == "" {
		phase = nwv1.WorkflowPending
	}
	switch {
	case len(waiting) == 0 && approval != nwv1.ApprovalManual:
		return "", nil, fmt.Errorf("spec.approval is %s: its steps do not wait for approval, and none is waiting (phase %s)", approval, phase)
	case len(waiting) == 0 && want != "":
		return "", nil, fmt.Errorf("no step is waiting for approval (phase %s); %s", phase, stepState(status, want))
	case len(waiting) == 0:
		return "", nil, fmt.Errorf("no step is waiting for approval (phase %s)", phase)
	case approval != nwv1.ApprovalManual && !awaitsApproval:
		return "", nil, fmt.Errorf("spec.approval is %s: step %s waits for %s, not for approval", approval, waiting[0], heldReason(held))
	case want != "" && !slices.Contains(waiting, want):
		return "", nil, fmt.Errorf("%s; %s waits", stepState(status, want), strings.Join(waiting, ", "))
	case want != "":
		return want, held, nil
	case len(waiting) > 1:
		return "", nil, fmt.Errorf("steps %s are waiting: name the one to approve with --step", strings.Join(waiting, ", "))
	}
	return waiting[0], held, nil
}

// stepState says where the step --step named stands: "step NAME is STATE", or "it has no step
// NAME".
func stepState(status *nwv1.WorkflowStatus, name string) string {
	for _, s := range status.Steps {
		if s.Name == name {
			return fmt.Sprintf("step %s is %s", name, s.State)
		}
	}
	return "it has no step " + name
}

// heldReason is the gate the Held condition names, for a message.
func heldReason(held *metav1.Condition) string {
	if held == nil {
		return "a gate the Held condition does not name"
	}
	return held.Reason
}

// completeApprovables completes KIND/ and then the names of that kind's workflows.
func completeApprovables(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kind, prefix, ok := strings.Cut(toComplete, "/")
		if !ok {
			var kinds []string
			for _, a := range approvables() {
				if strings.HasPrefix(a.name, strings.ToLower(kind)) {
					kinds = append(kinds, a.name+"/")
				}
			}
			return kinds, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		a, found := approvableKind(kind)
		if !found {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, directive := completeNames(f, a.newList(), false, prefix)
		for i := range names {
			names[i] = kind + "/" + names[i]
		}
		return names, directive
	}
}

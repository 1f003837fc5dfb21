// Package v1alpha1 is the admission of Nodewright's custom resources: defaulting and
// validation per kind, the stamping of the requesting user on every object, and an audit
// record of every decision that changed or refused something.
//
// The webhooks refuse early, with a message that names the field; they are not the last
// line. Every safety rule here is checked again by the controller that acts, because a
// webhook can be deleted or bypassed.
package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/edgeprofile"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
)

// kindWebhook adapts one kind's checks to controller-runtime's CustomDefaulter and
// CustomValidator: it stamps the requester, runs the kind's defaults and checks, and records
// the decisions.
type kindWebhook[T client.Object] struct {
	kind      string
	decisions *Decisions
	// defaults fills in what a new object leaves unset and says what it set
	// ("spec.mode=Cold"). Optional.
	defaults func(ctx context.Context, obj T) (set []string, err error)
	// create and update check a new or changed object. A returned error refuses it; its
	// text is shown to the user as is, so it names the field and the reason. Optional.
	create func(ctx context.Context, obj T) (admission.Warnings, error)
	update func(ctx context.Context, old, obj T) (admission.Warnings, error)
	// workflow: the kind is a workflow, whose deletion cancels it and is recorded.
	workflow bool
}

// register installs the kind's mutating and validating webhooks.
func (w *kindWebhook[T]) register(mgr ctrl.Manager, obj T) error {
	return ctrl.NewWebhookManagedBy(mgr).For(obj).WithDefaulter(w).WithValidator(w).Complete()
}

// Default stamps the requester and, on create, fills in the kind's defaults.
func (w *kindWebhook[T]) Default(ctx context.Context, raw runtime.Object) error {
	obj, ok := raw.(T)
	if !ok {
		return fmt.Errorf("expected a %s, got %T", w.kind, raw)
	}
	if _, err := stampRequester(ctx, obj); err != nil {
		return err
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil || req.Operation != admissionv1.Create || w.defaults == nil {
		return err
	}
	set, err := w.defaults(ctx, obj)
	if err != nil {
		return err
	}
	if len(set) > 0 {
		details := make([]audit.Detail, 0, len(set))
		for _, s := range set {
			name, value, _ := strings.Cut(s, "=")
			details = append(details, audit.Detail{Name: name, Value: value})
		}
		w.decisions.record(ctx, obj, w.kind, Defaulted, "set "+strings.Join(set, ", "), details...)
	}
	return nil
}

// ValidateCreate checks a new object; the decision is recorded either way.
func (w *kindWebhook[T]) ValidateCreate(ctx context.Context, raw runtime.Object) (admission.Warnings, error) {
	obj, ok := raw.(T)
	if !ok {
		return nil, fmt.Errorf("expected a %s, got %T", w.kind, raw)
	}
	warnings, err := w.check(ctx, obj, func() (admission.Warnings, error) {
		if w.create == nil {
			return nil, nil
		}
		return w.create(ctx, obj)
	})
	if err != nil {
		return warnings, err
	}
	w.decisions.record(ctx, obj, w.kind, Admitted, "created")
	return warnings, nil
}

// ValidateUpdate checks a changed object. Only refusals are recorded: an update allowed as
// asked decides nothing.
func (w *kindWebhook[T]) ValidateUpdate(ctx context.Context, oldRaw, raw runtime.Object) (admission.Warnings, error) {
	obj, ok := raw.(T)
	old, okOld := oldRaw.(T)
	if !ok || !okOld {
		return nil, fmt.Errorf("expected a %s, got %T", w.kind, raw)
	}
	return w.check(ctx, obj, func() (admission.Warnings, error) {
		if w.update == nil {
			return nil, nil
		}
		return w.update(ctx, old, obj)
	})
}

// ValidateDelete allows every deletion; a workflow's is recorded, since it cancels it.
func (w *kindWebhook[T]) ValidateDelete(ctx context.Context, raw runtime.Object) (admission.Warnings, error) {
	obj, ok := raw.(T)
	if ok && w.workflow && obj.GetDeletionTimestamp() == nil {
		w.decisions.record(ctx, obj, w.kind, DeletionAllowed, "deletion requested: the workflow is cancelled and rolled back")
	}
	return nil, nil
}

// check runs the requester check and then fn, and records a refusal.
func (w *kindWebhook[T]) check(ctx context.Context, obj T, fn func() (admission.Warnings, error)) (admission.Warnings, error) {
	err := checkRequester(ctx, obj)
	var warnings admission.Warnings
	if err == nil {
		warnings, err = fn()
	}
	if err != nil {
		w.decisions.record(ctx, obj, w.kind, Refused, err.Error())
	}
	return warnings, err
}

// Options configure the webhooks.
type Options struct {
	// Decisions records the admission decisions.
	Decisions *Decisions
	// Trust holds the trusted keys EdgeProfiles are verified with; its Reader is replaced
	// by the API reader.
	Trust edgeprofile.Trust
	// Migrations: the cluster serves the KubeVirt and snapshot APIs VMVolumeMigrations use;
	// without them, migrations are only stamped and recorded.
	Migrations bool
}

// Setup registers the webhooks of every Nodewright kind with the manager's webhook server.
// They read the API server directly rather than the operator's cache: an object created a
// moment before (the VM a migration names, say) must be seen.
func Setup(mgr ctrl.Manager, o Options) error {
	reader := mgr.GetAPIReader()
	trust := o.Trust
	trust.Reader = reader
	d := o.Decisions

	mig := &migrations{checker: vmvolumemigration.Checker{Client: reader, APIReader: reader}, client: reader}
	migHook := &kindWebhook[*nwv1.VMVolumeMigration]{kind: "VMVolumeMigration", decisions: d, workflow: true}
	if o.Migrations {
		migHook.defaults, migHook.create = mig.defaults, mig.create
	}
	cl := &clusters{client: reader, trust: trust}
	pr := &profiles{client: reader, trust: trust}
	wf := &clusterWorkflows{client: reader}
	return errors.Join(
		migHook.register(mgr, &nwv1.VMVolumeMigration{}),
		(&kindWebhook[*nwv1.NodewrightCluster]{kind: "NodewrightCluster", decisions: d, create: cl.create, update: cl.update}).register(mgr, &nwv1.NodewrightCluster{}),
		(&kindWebhook[*nwv1.EdgeProfile]{kind: "EdgeProfile", decisions: d, create: pr.create, update: pr.update}).register(mgr, &nwv1.EdgeProfile{}),
		(&kindWebhook[*nwv1.BondModeFlipPlan]{kind: "BondModeFlipPlan", decisions: d, create: wf.createFlip, workflow: true}).register(mgr, &nwv1.BondModeFlipPlan{}),
		(&kindWebhook[*nwv1.ReplicationUpgrade]{kind: "ReplicationUpgrade", decisions: d, create: wf.createUpgrade, workflow: true}).register(mgr, &nwv1.ReplicationUpgrade{}),
	)
}

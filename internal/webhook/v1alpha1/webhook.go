// Package v1alpha1 is the admission of Nodewright's custom resources: defaulting and
// validation per kind, the stamping of who asked and who approved on every object, and an
// audit record of every decision that changed or refused something.
//
// The webhooks refuse early, with a message that names the field; they are not the last
// line. Every safety rule here is checked again by the controller that acts, because a
// webhook can be deleted or bypassed.
package v1alpha1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/migration/preflight"
	"github.com/spectrocloud/nodewright/internal/profiletrust"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/internal/workflows"
)

// kindWebhook is one kind's admission: a mutating handler that stamps who asked (and who
// approved) and fills in defaults, and controller-runtime's CustomValidator for the checks.
// Each decision that changed or refused something is recorded.
type kindWebhook[T client.Object] struct {
	kind      string
	decisions *Decisions
	decoder   admission.Decoder
	// newObject makes an empty T to decode into.
	newObject func() T
	// defaults says what a new object leaves unset and what it gets. Optional.
	defaults func(ctx context.Context, obj T) ([]fieldDefault, error)
	// create and update check a new or changed object. A returned error refuses it; its
	// text is shown to the user as is, so it names the field and the reason. Optional.
	create func(ctx context.Context, obj T) (admission.Warnings, error)
	update func(ctx context.Context, old, obj T) (admission.Warnings, error)
	// workflow: the kind is a workflow, whose deletion cancels it and is recorded.
	workflow bool
	// malformed says what is wrong with a request's object, as sent, that the Go types cannot
	// decode or that the CRD's schema would refuse without naming the value; empty: nothing.
	// The mutating webhook, which runs before the schema's checks, refuses it. Optional.
	malformed func(raw []byte) string
}

// fieldDefault is one field the mutating webhook fills in: its path for people
// ("spec.mode"), its JSON pointer ("/spec/mode"), its value, and the value as the audit
// record shows it.
type fieldDefault struct {
	field, pointer string
	value          any
	text           string
}

// register installs the kind's webhooks: the mutating handler, the validator for creates and
// updates, and the same validator for deletes on a path of its own (its configuration fails
// open: a deletion only records who asked, and must not hang while the operator is down).
func (w *kindWebhook[T]) register(mgr ctrl.Manager, obj T) error {
	gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
	if err != nil {
		return err
	}
	w.decoder = admission.NewDecoder(mgr.GetScheme())
	suffix := strings.ReplaceAll(gvk.Group, ".", "-") + "-" + gvk.Version + "-" + strings.ToLower(gvk.Kind)
	server := mgr.GetWebhookServer()
	server.Register("/mutate-"+suffix, &admission.Webhook{Handler: w})
	validator := admission.WithCustomValidator(mgr.GetScheme(), obj, w)
	server.Register("/validate-"+suffix, validator)
	if w.workflow {
		server.Register("/validate-delete-"+suffix, admission.WithCustomValidator(mgr.GetScheme(), obj, w))
	}
	return nil
}

// Handle is the mutating webhook. It answers with only the JSON patch operations it means,
// never with a re-encoded object (the Go types write some values differently from how they
// are stored: "5m" as "5m0s"):
//
//   - the stamps: requested-by, and approved-by when the approve annotation is set or changed;
//   - on create, the defaults;
//   - on update, when the request's spec means what the stored one means but is written
//     differently (a client that read the object into the Go types and wrote it back), the
//     stored spec as it is, so that a spec that may not change is not seen to change.
func (w *kindWebhook[T]) Handle(ctx context.Context, req admission.Request) admission.Response {
	obj := w.newObject()
	decodeErr := w.decoder.Decode(req, obj)
	ctx = admission.NewContextWithRequest(ctx, req)
	if w.malformed != nil {
		if problem := w.malformed(req.Object.Raw); problem != "" {
			if decodeErr == nil {
				w.decisions.record(ctx, obj, w.kind, Refused, problem)
			}
			return admission.Denied(problem)
		}
	}
	if decodeErr != nil {
		return admission.Errored(http.StatusBadRequest, decodeErr)
	}
	patches, tries, err := stampPatches(req, obj)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	for _, try := range tries {
		w.decisions.record(ctx, obj, w.kind, try.to, try.message)
	}
	switch req.Operation {
	case admissionv1.Create:
		if w.defaults == nil {
			break
		}
		set, err := w.defaults(ctx, obj)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if len(set) > 0 {
			texts := make([]string, 0, len(set))
			details := make([]audit.Detail, 0, len(set))
			for _, d := range set {
				patches = append(patches, jsonpatch.NewOperation("add", d.pointer, d.value))
				texts = append(texts, d.field+"="+d.text)
				details = append(details, audit.Detail{Name: d.field, Value: d.text})
			}
			w.decisions.record(ctx, obj, w.kind, Defaulted, "set "+strings.Join(texts, ", "), details...)
		}
	case admissionv1.Update:
		old := w.newObject()
		if err := w.decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if keep, ok := storedSpec(req, obj, old); ok {
			patches = append(patches, jsonpatch.NewOperation("replace", "/spec", keep))
		}
	}
	if len(patches) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("", patches...)
}

// storedSpec is the stored spec, as written, when the request's spec is written differently
// but means the same (both encode alike through the Go types).
func storedSpec(req admission.Request, obj, old client.Object) (json.RawMessage, bool) {
	sent, stored := rawSpec(req.Object.Raw), rawSpec(req.OldObject.Raw)
	if sent == nil || stored == nil || bytes.Equal(sent, stored) {
		return nil, false
	}
	newMeaning, errNew := json.Marshal(obj)
	oldMeaning, errOld := json.Marshal(old)
	if errNew != nil || errOld != nil || !bytes.Equal(rawSpec(newMeaning), rawSpec(oldMeaning)) {
		return nil, false
	}
	return stored, true
}

// rawSpec is the "spec" member of a JSON object, as written; nil when there is none.
func rawSpec(object []byte) json.RawMessage {
	var members map[string]json.RawMessage
	if json.Unmarshal(object, &members) != nil {
		return nil
	}
	return members["spec"]
}

// ValidateCreate checks a new object; the decision is recorded either way.
func (w *kindWebhook[T]) ValidateCreate(ctx context.Context, raw runtime.Object) (admission.Warnings, error) {
	obj, ok := raw.(T)
	if !ok {
		return nil, fmt.Errorf("expected a %s, got %T", w.kind, raw)
	}
	warnings, err := w.check(ctx, obj, func() (admission.Warnings, error) {
		if err := approvesAWaitingStep(obj, nil); err != nil {
			return nil, err
		}
		if w.create == nil {
			return nil, nil
		}
		return w.create(ctx, obj)
	})
	if err != nil {
		return warnings, err
	}
	w.decisions.record(ctx, obj, w.kind, Admitted, "allowed to be created")
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
		if err := approvesAWaitingStep(obj, old); err != nil {
			return nil, err
		}
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

// check runs the stamps' check and then fn, and records a refusal.
func (w *kindWebhook[T]) check(ctx context.Context, obj T, fn func() (admission.Warnings, error)) (admission.Warnings, error) {
	err := checkStamps(ctx, obj)
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
	Trust profiletrust.Trust
	// MigrationAPIs returns the APIs VMVolumeMigrations need that the cluster does not serve;
	// a migration is refused, naming them, while any is missing. Nil: none is.
	MigrationAPIs func() (servedapis.Kinds, error)
	// LegacyNamespace, when set, is the only namespace the operator reads legacy objects in;
	// a NodewrightCluster naming others is refused.
	LegacyNamespace string
	// AgentNamespace is where the node agents keep their heartbeat Leases; empty: no agents,
	// and spec.management Managed is refused.
	AgentNamespace string
}

// Setup registers the webhooks of every Nodewright kind, and of KubeVirt's
// VirtualMachineRestore, with the manager's webhook server.
// They read the API server directly rather than the operator's cache: an object created a
// moment before (the VM a migration names, say) must be seen.
func Setup(mgr ctrl.Manager, o Options) error {
	reader := mgr.GetAPIReader()
	trust := o.Trust
	trust.Reader = reader
	d := o.Decisions

	cl := &clusters{client: reader, trust: trust, legacyNamespace: o.LegacyNamespace,
		agents: management.Reader{Cache: reader, Live: reader, AgentNamespace: o.AgentNamespace}}
	pr := &profiles{client: reader, trust: trust}
	ops := &nodeOperations{client: reader}
	rs := &restores{client: reader}
	vr := &vmOperationRequests{reader: reader, client: mgr.GetClient(), decisions: d}
	if d != nil {
		rs.clock, vr.clock = d.Clock, d.Clock
	}
	return errors.Join(
		workflowWebhooks(mgr, o),
		(&kindWebhook[*nwv1.NodewrightCluster]{kind: "NodewrightCluster", decisions: d, create: cl.create, update: cl.update,
			newObject: func() *nwv1.NodewrightCluster { return &nwv1.NodewrightCluster{} }}).register(mgr, &nwv1.NodewrightCluster{}),
		(&kindWebhook[*nwv1.EdgeProfile]{kind: "EdgeProfile", decisions: d, create: pr.create, update: pr.update,
			newObject: func() *nwv1.EdgeProfile { return &nwv1.EdgeProfile{} }}).register(mgr, &nwv1.EdgeProfile{}),
		(&kindWebhook[*nwv1.NodeOperation]{kind: "NodeOperation", decisions: d, create: ops.create, update: ops.update,
			newObject: func() *nwv1.NodeOperation { return &nwv1.NodeOperation{} }}).register(mgr, &nwv1.NodeOperation{}),
		(&kindWebhook[*nwv1.BootRecoveryPolicy]{kind: "BootRecoveryPolicy", decisions: d, create: admitBootRecovery,
			update: func(ctx context.Context, _, p *nwv1.BootRecoveryPolicy) (admission.Warnings, error) {
				return admitBootRecovery(ctx, p)
			},
			newObject: func() *nwv1.BootRecoveryPolicy { return &nwv1.BootRecoveryPolicy{} }}).register(mgr, &nwv1.BootRecoveryPolicy{}),
		(&kindWebhook[*nwv1.VMSnapshotPolicy]{kind: "VMSnapshotPolicy", decisions: d, create: admitSnapshotPolicy,
			update: func(ctx context.Context, _, p *nwv1.VMSnapshotPolicy) (admission.Warnings, error) {
				return admitSnapshotPolicy(ctx, p)
			},
			newObject: func() *nwv1.VMSnapshotPolicy { return &nwv1.VMSnapshotPolicy{} }}).register(mgr, &nwv1.VMSnapshotPolicy{}),
		(&kindWebhook[*nwv1.VMOperationRequest]{kind: "VMOperationRequest", decisions: d, create: vr.create, update: vr.update, defaults: vr.defaults,
			newObject: func() *nwv1.VMOperationRequest { return &nwv1.VMOperationRequest{} }}).register(mgr, &nwv1.VMOperationRequest{}),
		(&kindWebhook[*nwv1.SelfServicePolicy]{kind: "SelfServicePolicy", decisions: d, create: admitSelfServicePolicy,
			update: func(ctx context.Context, _, p *nwv1.SelfServicePolicy) (admission.Warnings, error) {
				return admitSelfServicePolicy(ctx, p)
			},
			newObject: func() *nwv1.SelfServicePolicy { return &nwv1.SelfServicePolicy{} }}).register(mgr, &nwv1.SelfServicePolicy{}),
		(&kindWebhook[*snapv1.VirtualMachineRestore]{kind: "VirtualMachineRestore", decisions: d, create: rs.create, defaults: rs.defaults,
			newObject: func() *snapv1.VirtualMachineRestore { return &snapv1.VirtualMachineRestore{} }}).register(mgr, &snapv1.VirtualMachineRestore{}),
	)
}

// workflowWebhooks registers the admission of every workflow kind (internal/workflows): who
// asked, who approved, and what its descriptor asks to check (clusterWorkflows.admit); a
// migration's, its defaults and the controller's own checks instead (migrations).
func workflowWebhooks(mgr ctrl.Manager, o Options) error {
	reader := mgr.GetAPIReader()
	wf := &clusterWorkflows{client: reader}
	mig := &migrations{checker: preflight.Checker{Client: reader, APIReader: reader}, client: reader, missing: o.MigrationAPIs}
	var errs []error
	for _, k := range workflows.All() {
		s, ok := described(k.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s is registered but not described (engine.Describe)", k.Name))
			continue
		}
		hook := &kindWebhook[engine.Object]{kind: k.Name, decisions: o.Decisions, workflow: true, newObject: s.New, create: wf.admit(s), update: wf.renamed(s)}
		if k.Name == migration.Descriptor.Kind.Name {
			hook.defaults = typed(mig.defaults)
			hook.create = typed(mig.create)
			hook.malformed = malformedTargetSize
		}
		errs = append(errs, hook.register(mgr, s.New()))
	}
	return errors.Join(errs...)
}

// described is the kind named name as engine.Describe knows it.
func described(name string) (engine.Summary, bool) {
	for _, s := range engine.Described() {
		if s.Kind.Name == name {
			return s, true
		}
	}
	return engine.Summary{}, false
}

// typed adapts a hook of one kind to the workflows' webhook, which decodes into the kind's
// own type.
func typed[T engine.Object, R any](fn func(context.Context, T) (R, error)) func(context.Context, engine.Object) (R, error) {
	return func(ctx context.Context, o engine.Object) (R, error) {
		t, ok := o.(T)
		if !ok {
			var zero R
			return zero, fmt.Errorf("expected a %T, got %T", *new(T), o)
		}
		return fn(ctx, t)
	}
}

package v1alpha1

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// ActionAdmission is the audit action of an admission decision.
const ActionAdmission = "AdmissionDecision"

// The outcomes of an admission decision, the records' "to".
const (
	// Defaulted: the mutating webhook filled in fields the request left unset.
	Defaulted = "Defaulted"
	// RequesterKept: the request tried to set the requested-by annotation; the stamp was
	// kept.
	RequesterKept = "RequesterKept"
	// ApproverKept: the request tried to set, change or remove the approved-by annotation;
	// it says who set the approve annotation, whatever the request said.
	ApproverKept = "ApproverKept"
	// AcknowledgerKept: the request tried to set, change or remove the acknowledged-by
	// annotation; it says who set the acknowledge-fallback annotation, whatever the request
	// said.
	AcknowledgerKept = "AcknowledgerKept"
	// ManagementSetterKept: the request tried to set, change or remove the management-set-by
	// annotation; it says who last set spec.management, whatever the request said.
	ManagementSetterKept = "ManagementSetterKept"
	// Admitted: the validating webhook allowed a create. The API server may still fail to
	// store it (a name already taken, say): the record is of the decision.
	Admitted = "Admitted"
	// Refused: the validating webhook refused the request; the reason names the field.
	Refused = "Refused"
	// DeletionAllowed: a workflow's deletion (its cancellation) was allowed.
	DeletionAllowed = "DeletionAllowed"
)

// The most of a decision's message and of a detail's value its record keeps: far below
// audit.MaxLineBytes even with every byte escaped (six for one).
const (
	maxMessageBytes = 4096
	maxDetailBytes  = 1024
)

// Decisions records admission decisions in the audit trail, under the requesting user's
// name. A dry run is not recorded: it decides nothing.
type Decisions struct {
	// Trail receives the records; nil: they are only logged.
	Trail audit.Appender
	// Ready reports whether this replica holds the trail. Only the leader does; a decision
	// taken by a standby replica is logged, not recorded (see docs/audit.md).
	Ready func() bool
	// Clock is the real clock unless a test sets another.
	Clock clock.PassiveClock
}

// record appends the record of one decision about obj of kind: to is the outcome, reason
// the operation, message what was decided and why.
func (d *Decisions) record(ctx context.Context, obj client.Object, kind, to, message string, details ...audit.Detail) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil || (req.DryRun != nil && *req.DryRun) {
		return
	}
	log := ctrl.LoggerFrom(ctx).WithValues("kind", kind, "name", obj.GetName(), "namespace", obj.GetNamespace(),
		"user", req.UserInfo.Username, "operation", req.Operation, "decision", to)
	if d == nil || d.Trail == nil {
		log.Info("Admission decision", "message", message)
		return
	}
	if d.Ready != nil && !d.Ready() {
		log.Info("Admission decision not recorded in the audit trail: this replica does not hold it", "message", message)
		return
	}
	clk := d.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	// The request's kind says the object's group and version: a Nodewright kind's, or another
	// group's admitted here (KubeVirt's VirtualMachineRestore).
	apiVersion := nwv1.GroupVersion.String()
	if req.Kind.Version != "" {
		apiVersion = schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()
	}
	subject := audit.Subject{
		APIVersion: apiVersion, Kind: kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), Generation: obj.GetGeneration(),
	}
	if r := requester(obj); r != "" && r != req.UserInfo.Username {
		details = append(details, audit.Detail{Name: "requestedBy", Value: r})
	}
	// A generated name is chosen after the mutating webhook: say what it will start with.
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		details = append(details, audit.Detail{Name: "generateName", Value: obj.GetGenerateName()})
	}
	// The admission request's UID ties the records of one request together: the mutating
	// webhook's (made before the object has a UID of its own) and the validating one's.
	details = append(details, audit.Detail{Name: "admissionRequest", Value: string(req.UID)})
	// The message and details quote the request, which can hold far more than one line of the
	// trail: cut, so that the log never refuses the record of a decision (a forger would
	// otherwise choose whether the attempt is recorded).
	cut := make([]audit.Detail, len(details))
	for i, d := range details {
		cut[i] = audit.Detail{Name: d.Name, Value: audit.Shorten(d.Value, maxDetailBytes)}
	}
	// The admission request's UID tells this decision from every other about the object; the
	// same request asked again (the API server retries a webhook call) makes the same record.
	rec := audit.Transition(subject, req.UserInfo.Username, ActionAdmission, "", to, string(req.Operation),
		audit.Shorten(message, maxMessageBytes), string(req.UID), clk.Now(), cut...)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := d.Trail.Append(ctx, rec); err != nil {
		log.Error(err, "Recording an admission decision in the audit trail failed", "message", message)
	}
}

package v1alpha1

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration/preflight"
	"github.com/spectrocloud/nodewright/internal/servedapis"
)

// migrations admits VMVolumeMigrations: it fills in the mode and the target size, and
// refuses what the controller's Validate step would refuse, before anything starts.
type migrations struct {
	checker preflight.Checker
	client  client.Reader
	// missing returns the APIs migrations need that the cluster does not serve; nil: none.
	missing func() (servedapis.Kinds, error)
}

// unserved refuses every migration while the cluster lacks an API migrations need, naming
// it: the VM and its volumes cannot even be read.
func (w *migrations) unserved() error {
	if w.missing == nil {
		return nil
	}
	missing, err := w.missing()
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("VMVolumeMigrations cannot run on this cluster: the API server does not serve %s; "+
		"install them (KubeVirt; the CSI external-snapshotter's CustomResourceDefinitions) and create the migration again: "+
		"the operator picks them up without a restart", missing)
}

// defaults sets spec.target.size to the source's size and spec.mode to Cold when unset. A
// migration the checks will refuse is left as it is; the validator says why.
//
// The mode defaults to Cold whatever the backend: Hot keeps the VM running, so what the
// guest writes after the snapshot is not on the target; that is a choice only the user can
// make. Where the backend could clone, the validator's warning says Hot is available.
func (w *migrations) defaults(ctx context.Context, m *nwv1.VMVolumeMigration) ([]fieldDefault, error) {
	if w.unserved() != nil {
		return nil, nil // the validator refuses it, saying why
	}
	vm, err := w.vm(ctx, m)
	if err != nil || vm == nil {
		return nil, err
	}
	var set []fieldDefault
	if m.Spec.Target.Size == nil {
		pf, problem, err := w.checker.Source(ctx, m, vm)
		if err != nil {
			return nil, err
		}
		if problem == "" {
			size := pf.Size.String()
			set = append(set, fieldDefault{field: "spec.target.size", pointer: "/spec/target/size", value: size, text: size})
		}
	}
	if m.Spec.Mode == "" {
		mode := string(nwv1.MigrationCold)
		set = append(set, fieldDefault{field: "spec.mode", pointer: "/spec/mode", value: mode, text: mode})
	}
	return set, nil
}

// create runs the controller's checks, and refuses a second migration of a VM that already
// has one that has not finished, even one still Pending.
func (w *migrations) create(ctx context.Context, m *nwv1.VMVolumeMigration) (admission.Warnings, error) {
	if err := w.unserved(); err != nil {
		return nil, err
	}
	vm, err := w.vm(ctx, m)
	if err != nil {
		return nil, err
	}
	if vm != nil {
		if err := w.notPending(ctx, m); err != nil {
			return nil, err
		}
	}
	mode := m.Spec.Mode
	if mode == "" {
		mode = nwv1.MigrationCold
	}
	pf, problem, err := w.checker.Check(ctx, m, vm, mode)
	if err != nil {
		return nil, fmt.Errorf("checking the migration: %w", err)
	}
	if problem != "" {
		return nil, errors.New(problem)
	}
	return modeWarnings(mode, pf), nil
}

// modeWarnings tell the user what the mode implies.
func modeWarnings(mode nwv1.MigrationMode, pf *preflight.Preflight) admission.Warnings {
	sameDriver := pf.SourceClass.Provisioner == pf.TargetClass.Provisioner
	switch {
	case mode == nwv1.MigrationHot:
		return admission.Warnings{"spec.mode Hot: the VM keeps running during the clone; what the guest writes after the \"before\" snapshot is not on the target"}
	case sameDriver && pf.SourceBackend.SupportsClone():
		return admission.Warnings{fmt.Sprintf("spec.mode Cold: the VM is stopped for the copy; %s can clone, so spec.mode Hot would keep it running, at the cost of the guest's writes after the snapshot", pf.SourceBackend.Name())}
	}
	return nil
}

// notPending refuses a VM that another unfinished migration names.
func (w *migrations) notPending(ctx context.Context, m *nwv1.VMVolumeMigration) error {
	var list nwv1.VMVolumeMigrationList
	if err := w.client.List(ctx, &list, client.InNamespace(m.Namespace)); err != nil {
		return fmt.Errorf("listing the migrations of namespace %s: %w", m.Namespace, err)
	}
	for _, other := range list.Items {
		if other.Name == m.Name || other.Spec.VMName != m.Spec.VMName || other.DeletionTimestamp != nil {
			continue
		}
		if p := other.Status.Phase; p == nwv1.WorkflowSucceeded || p == nwv1.WorkflowRolledBack {
			continue
		}
		phase := other.Status.Phase
		if phase == "" {
			phase = nwv1.WorkflowPending
		}
		return fmt.Errorf("spec.vmName: VirtualMachine %s already has migration %s (%s); one migration per VM at a time", m.Spec.VMName, other.Name, phase)
	}
	return nil
}

// vm reads the migration's VM; nil when it does not exist.
func (w *migrations) vm(ctx context.Context, m *nwv1.VMVolumeMigration) (*virtv1.VirtualMachine, error) {
	vm := &virtv1.VirtualMachine{}
	err := w.client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.VMName}, vm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", m.Spec.VMName, err)
	}
	return vm, nil
}

// malformedTargetSize says what is wrong with a migration's spec.target.size as sent: an
// empty one, one that is not a quantity, or one not greater than zero. Without it the request
// is refused by the Go types' decoder without the field's name, or by the CRD's rule as
// `spec.target.size: Invalid value: ""` whatever the value (the API server shows the schema's
// type there, which a size, an integer or a string, does not have).
func malformedTargetSize(raw []byte) string {
	var obj struct {
		Spec struct {
			Target struct {
				Size json.RawMessage `json:"size"`
			} `json:"target"`
		} `json:"spec"`
	}
	if json.Unmarshal(raw, &obj) != nil {
		return "" // not this check's to say; the decoder does
	}
	sent := obj.Spec.Target.Size
	if len(sent) == 0 || string(sent) == "null" {
		return "" // unset: the source's size
	}
	text := string(sent)
	var s string
	if json.Unmarshal(sent, &s) == nil {
		text = s
	}
	if strings.TrimSpace(text) == "" {
		return "spec.target.size: empty, which is no size; leave the field out for the source's size, or give one such as 10Gi"
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(text))
	if err != nil {
		return fmt.Sprintf("spec.target.size: %s is not a size such as 10Gi or 10737418240", text)
	}
	if q.Sign() <= 0 {
		return fmt.Sprintf("spec.target.size: %s is not greater than zero; leave the field out for the source's size", text)
	}
	return ""
}

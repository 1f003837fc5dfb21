package vmvolumemigration

import (
	"context"
	"fmt"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/migration/preflight"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// validate runs the Checker, then takes the VM.
func (r *Reconciler) validate(ctx context.Context, s *scope) (engine.Outcome, error) {
	m, vm := s.m, s.vm
	pf, problem, err := r.checker().Check(ctx, m, vm, s.plan.Mode)
	if err != nil || problem != "" {
		return engine.Failed("%s", problem), err
	}
	if s.rec == nil {
		rec := vmRecord{
			Migration: m.Name, UID: m.UID,
			WasRunning:  wantsRunning(vm),
			RunStrategy: vm.Spec.RunStrategy, Running: vm.Spec.Running,
			Volume: *pf.Volume.VolumeSource.DeepCopy(),
		}
		if err := lockVM(ctx, r.Client, vm, rec); err != nil {
			return engine.Outcome{}, fmt.Errorf("taking VirtualMachine %s for the migration: %w", vm.Name, err)
		}
		s.rec = &rec
	}
	m.Status.SourcePVCName = pf.Claim
	m.Status.TargetPVCName = migration.ChildName(m, migration.SuffixTarget)
	m.Status.Checksum = &nwv1.MigrationChecksum{Algorithm: algorithmOf(m)}
	if q, ok := pf.Size.AsInt64(); ok {
		setProgress(m, 0, q)
	}
	mode := string(s.plan.Mode)
	if m.Spec.Mode == "" {
		mode += " (spec.mode unset)"
	}
	return engine.Succeeded("volume %s is PVC %s (%s on %s); target class %s on %s; mode %s",
		pf.Volume.Name, pf.Claim, pf.Size.String(), pf.SourceBackend.Name(), pf.TargetClass.Name, pf.TargetBackend.Name(), mode), nil
}

func (r *Reconciler) checker() preflight.Checker {
	return preflight.Checker{Client: r.Client, APIReader: r.APIReader}
}

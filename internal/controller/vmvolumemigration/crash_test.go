package vmvolumemigration_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site"
)

// TestCrashAtEveryStepBoundary kills the operator right after it recorded the start of each
// step, forward and rollback, and starts a new one: each migration still ends Succeeded or
// RolledBack, with the VM running and nothing orphaned.
func TestCrashAtEveryStepBoundary(t *testing.T) {
	type crash struct {
		mode     nwv1.MigrationMode
		step     migration.Step
		failCopy bool
	}
	var cases []crash
	for _, mode := range []nwv1.MigrationMode{nwv1.MigrationCold, nwv1.MigrationHot} {
		for _, step := range (migration.Plan{Mode: mode, RetainSource: true}).Forward() {
			cases = append(cases, crash{mode: mode, step: step})
		}
	}
	cases = append(cases, crash{mode: nwv1.MigrationCold, step: migration.RollbackStartVM, failCopy: true},
		crash{mode: nwv1.MigrationCold, step: migration.RollbackCleanup, failCopy: true})

	for _, c := range cases {
		name := string(c.mode) + "-" + string(c.step)
		if c.step == migration.Validate {
			// Validate's VM write comes before the status that ends the step.
			t.Run(name+"-vm-taken", func(t *testing.T) { crashAfterVMPatch(t, "taken", hasRecord) })
		}
		if c.step == migration.StopVM && c.mode == nwv1.MigrationCold {
			t.Run(name+"-vm-halted", func(t *testing.T) { crashAfterVMPatch(t, "halted", isHalted) })
		}
		t.Run(name, func(t *testing.T) {
			opts := site.Options{}
			if c.failCopy {
				opts.FailCopy = func(*batchv1.Job) bool { return true }
			}
			f := newFixture(t, opts)
			mig := strings.ToLower(name)
			f.create(f.migration(mig, c.mode, linstorClass))

			killAt(t, func(m *nwv1.VMVolumeMigration) bool {
				return m.Name == mig && strings.Contains(stepStates(m), string(c.step)+"=Running")
			}, nil)
			startOperator(t)
			want, claim := nwv1.WorkflowSucceeded, mig+"-target"
			pvcs, snaps := []string{"web-root", mig + "-target"}, []string{mig + "-before", mig + "-after"}
			if c.failCopy {
				want, claim, pvcs, snaps = nwv1.WorkflowRolledBack, "web-root", []string{"web-root"}, nil
			}
			f.waitPhase(mig, want)
			f.waitVMRunsOn(claim)
			if c.failCopy {
				f.assertVMAsBefore()
			}
			if !bytes.Equal(f.volumeBytes(claim), f.source) {
				t.Errorf("the bytes of %s differ from the source's", claim)
			}
			f.assertLeftBehind(pvcs, snaps)
		})
	}
}

// killAt runs the migration controller until it has written a status for which dead says
// true, and then kills it: every later call it makes fails, appends to log included, and its
// manager stops.
func killAt(t *testing.T, dead func(*nwv1.VMVolumeMigration) bool, log vmvolumemigration.AuditLog) {
	t.Helper()
	kill(t, dead, nil, log)
}

// kill runs the migration controller until it has written a status for which deadStatus
// says true, or patched a VM for which deadVM says true, and then kills it.
func kill(t *testing.T, deadStatus func(*nwv1.VMVolumeMigration) bool, deadVM func(*virtv1.VirtualMachine) bool, log vmvolumemigration.AuditLog) {
	t.Helper()
	crash := testenv.NewCrash(func(w testenv.Write) bool {
		switch o := w.Object.(type) {
		case *nwv1.VMVolumeMigration:
			return w.SubResource == "status" && deadStatus != nil && deadStatus(o)
		case *virtv1.VirtualMachine:
			return w.SubResource == "" && !w.Deleted && deadVM != nil && deadVM(o)
		}
		return false
	})
	env.RunUntilCrash(t, crash, operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager, c client.Client, apiReader client.Reader) error {
		r := &vmvolumemigration.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("crashing-operator")}, Client: c, APIReader: apiReader}
		if log != nil {
			r.Audit, r.Actor = dyingLog{log, crash.Guard}, operatorActor
		}
		return r.SetupWithManager(mgr)
	})
}

// dyingLog is an audit log that dies with the operator.
type dyingLog struct {
	vmvolumemigration.AuditLog
	guard func() error
}

func (d dyingLog) Append(ctx context.Context, records ...audit.Record) ([]audit.Appended, error) {
	if err := d.guard(); err != nil {
		return nil, err
	}
	return d.AuditLog.Append(ctx, records...)
}

// TestAuditRecordOfACrashIsWrittenAfterTheRestart kills the operator right after it recorded
// a transition in the status and before its audit record was appended: the operator that
// takes over appends it, and the chain holds every transition exactly once.
func TestAuditRecordOfACrashIsWrittenAfterTheRestart(t *testing.T) {
	f := newFixture(t, site.Options{})
	trail := openTrail(t)
	f.create(f.migration("crash-audit", nwv1.MigrationCold, linstorClass))
	killAt(t, func(m *nwv1.VMVolumeMigration) bool {
		return m.Name == "crash-audit" && strings.Contains(stepStates(m), "Copy=Running")
	}, trail.log)
	if n := len(trail.lines(t, f.ns, "crash-audit")); n != 4 {
		t.Fatalf("%d records before the restart, want 4 (the transition into Copy died with the operator)", n)
	}
	env.StartManagerAsWithCache(t, asOperator(t), operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager) error {
		return (&vmvolumemigration.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("test"), Audit: trail.log, Actor: operatorActor}, Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	f.waitPhase("crash-audit", nwv1.WorkflowSucceeded)
	trail.verify(t, f.ns, "crash-audit", 9)
}

func hasRecord(vm *virtv1.VirtualMachine) bool {
	_, ok := vm.Annotations[vmvolumemigration.AnnotationMigration]
	return ok
}

func isHalted(vm *virtv1.VirtualMachine) bool {
	return vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == virtv1.RunStrategyHalted
}

// crashAfterVMPatch kills the operator right after it changed the VM and before it wrote the
// status that records why: the next operator must still finish the migration.
func crashAfterVMPatch(t *testing.T, name string, dead func(*virtv1.VirtualMachine) bool) {
	f := newFixture(t, site.Options{})
	f.create(f.migration(name, nwv1.MigrationCold, linstorClass))
	kill(t, nil, dead, nil)
	startOperator(t)
	f.waitPhase(name, nwv1.WorkflowSucceeded)
	f.waitVMRunsOn(name + "-target")
	f.assertLeftBehind([]string{"web-root", name + "-target"}, []string{name + "-before", name + "-after"})
}

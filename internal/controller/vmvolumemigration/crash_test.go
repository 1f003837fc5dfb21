package vmvolumemigration_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/watch"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/operator"
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
	var killed atomic.Bool
	crashed := make(chan struct{})
	var once sync.Once
	gone := errors.New("the operator was killed")
	guard := func() error {
		if killed.Load() {
			return gone
		}
		return nil
	}
	funcs := interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := guard(); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := guard(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := guard(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := guard(); err != nil {
				return err
			}
			err := c.Patch(ctx, obj, patch, opts...)
			if vm, ok := obj.(*virtv1.VirtualMachine); ok && err == nil && deadVM != nil && deadVM(vm) {
				killed.Store(true)
				once.Do(func() { close(crashed) })
			}
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := guard(); err != nil {
				return err
			}
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if m, ok := obj.(*nwv1.VMVolumeMigration); ok && err == nil && deadStatus != nil && deadStatus(m) {
				killed.Store(true)
				once.Do(func() { close(crashed) })
			}
			return err
		},
	}
	stop := env.StartManagerWithCache(t, operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager) error {
		c := interceptor.NewClient(withWatch{mgr.GetClient()}, funcs)
		r := &vmvolumemigration.Reconciler{Client: c, Recorder: mgr.GetEventRecorderFor("crashing-operator")}
		if log != nil {
			r.Audit, r.Actor = dyingLog{log, guard}, operatorActor
		}
		return r.SetupWithManager(mgr)
	})
	select {
	case <-crashed:
	case <-time.After(patience):
		t.Fatal("the operator never reached the crash point")
	}
	stop()
}

// withWatch lets the manager's client pass where the interceptor wants a client.WithWatch;
// the controller never watches through it.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch is not supported")
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
	env.StartManagerWithCache(t, operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager) error {
		return (&vmvolumemigration.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("test"),
			Audit: trail.log, Actor: operatorActor}).SetupWithManager(mgr)
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

package vmvolumemigration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/test/site"
)

// waitStep waits until the migration's steps show want (e.g. "Copy=Running").
func (f *fix) waitStep(name, want string) *nwv1.VMVolumeMigration {
	f.t.Helper()
	var m *nwv1.VMVolumeMigration
	f.eventually(func() (bool, string) {
		m = f.get(name)
		return strings.Contains(stepStates(m), want), name + ": " + stepStates(m)
	})
	return m
}

func (f *fix) condition(m *nwv1.VMVolumeMigration) string {
	c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
	if c == nil {
		return ""
	}
	return c.Reason + ": " + c.Message
}

func (f *fix) patchVM(change func(*virtv1.VirtualMachine)) {
	f.t.Helper()
	vm := f.vm()
	base := vm.DeepCopy()
	change(vm)
	if err := env.Client.Patch(context.Background(), vm, client.MergeFrom(base)); err != nil {
		f.t.Fatal(err)
	}
}

func TestVMDeletedDuringTheMigrationRollsBackWhatItCan(t *testing.T) {
	hold := make(chan struct{})
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	startOperator(t)
	f.create(f.migration("orphaned", nwv1.MigrationCold, linstorClass))
	f.waitStep("orphaned", "Copy=Running")
	if err := env.Client.Delete(context.Background(), f.vm()); err != nil {
		t.Fatal(err)
	}
	close(hold)
	m := f.waitPhase("orphaned", nwv1.WorkflowRolledBack)
	if got := describeSteps(m); !strings.Contains(got, "Copy=Failed (VirtualMachine web was deleted during the migration, in step Copy; the migration stops and deletes what it made)") ||
		!strings.Contains(got, "RollbackStartVM=Skipped (VirtualMachine web was deleted during the migration: there is no VM to restore)") ||
		!strings.Contains(got, "RollbackCleanup=Succeeded (deleted the migration's target PVC, snapshots and data Jobs)") {
		t.Errorf("steps %s: want the step to fail, the VM's rollback step skipped and the cleanup done, each saying why", got)
	}
	// The rollback cannot have put the VM back as it was: it is gone.
	c := f.condition(m)
	if !strings.HasPrefix(c, "CopyFailed: step Copy failed: VirtualMachine web was deleted during the migration") ||
		!strings.Contains(c, "rolled back without the VM, which was deleted during the migration: what the migration made is deleted and there is no VM to restore") ||
		strings.Contains(c, "as it was before") {
		t.Errorf("condition %q, want it to say the VM was deleted and cannot be restored", c)
	}
	f.assertLeftBehind([]string{"web-root"}, nil)
}

// TestTargetNameTakenAfterValidateIsLeftUntouched: a claim named as the migration's target,
// made by someone else after Validate, fails CreateTarget; the rollback starts the VM on its
// source and deletes what the migration made, and says that it left the claim alone.
func TestTargetNameTakenAfterValidateIsLeftUntouched(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	ctx := context.Background()
	// A finalizer keeps the VMI, so StopVM waits while the claim is made.
	vmi := &virtv1.VirtualMachineInstance{}
	patchVMI := func(finalizers []string) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "web"}, vmi); err != nil {
			t.Fatal(err)
		}
		base := vmi.DeepCopy()
		vmi.Finalizers = finalizers
		if err := env.Client.Patch(ctx, vmi, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	patchVMI([]string{"example.com/hold"})
	f.create(f.migration("late", nwv1.MigrationCold, linstorClass))
	f.waitStep("late", "StopVM=Running")
	f.createVolume("late-target", linstorClass)
	patchVMI(nil)

	m := f.waitPhase("late", nwv1.WorkflowRolledBack)
	want := "CreateTarget=Failed (PersistentVolumeClaim " + f.ns + "/late-target exists and was not created by this migration)"
	if got := describeSteps(m); !strings.Contains(got, want) ||
		!strings.Contains(got, "RollbackStartVM=Succeeded") ||
		!strings.Contains(got, "RollbackCleanup=Succeeded (deleted the migration's snapshots and data Jobs; PersistentVolumeClaim late-target exists and was not made by this migration: left untouched)") {
		t.Errorf("steps %s: want CreateTarget failed and the cleanup to say the claim was left untouched", got)
	}
	if c := f.condition(m); !strings.HasPrefix(c, "CreateTargetFailed") || !strings.Contains(c, "rolled back: the VM is as it was before the migration") {
		t.Errorf("condition %q", c)
	}
	f.waitVMRunsOn("web-root")
	f.assertLeftBehind([]string{"web-root", "late-target"}, nil)
	f.assertVMAsBefore()
}

func TestTwoMigrationsOfOneVMAtOnceOneWins(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	f.create(f.migration("one", nwv1.MigrationCold, linstorClass))
	f.create(f.migration("two", nwv1.MigrationCold, linstorClass))
	var won, lost []string
	f.eventually(func() (bool, string) {
		won, lost = nil, nil
		for _, name := range []string{"one", "two"} {
			switch m := f.get(name); m.Status.Phase {
			case nwv1.WorkflowSucceeded:
				won = append(won, name)
			case nwv1.WorkflowRolledBack:
				if !strings.Contains(f.condition(m), "one migration per VM at a time") {
					t.Fatalf("%s rolled back for another reason: %s", name, f.condition(m))
				}
				lost = append(lost, name)
			}
		}
		return len(won)+len(lost) == 2, "not both finished yet"
	})
	if len(won) != 1 || len(lost) != 1 {
		t.Fatalf("succeeded %v, refused %v: want one of each", won, lost)
	}
}

func TestVMStartedDuringTheCopyRollsBack(t *testing.T) {
	hold := make(chan struct{})
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	startOperator(t)
	f.create(f.migration("restarted", nwv1.MigrationCold, linstorClass))
	f.waitStep("restarted", "Copy=Running")
	f.patchVM(func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways) })
	f.waitVMRunsOn("web-root")
	close(hold)
	m := f.waitPhase("restarted", nwv1.WorkflowRolledBack)
	if c := f.condition(m); !strings.HasPrefix(c, "CopyFailed") || !strings.Contains(c, "was started while its volume was copied") {
		t.Errorf("condition %q, want the copy refused because the VM was started", c)
	}
	f.waitVMRunsOn("web-root")
	f.assertLeftBehind([]string{"web-root"}, nil)
	f.assertVMAsBefore()
}

func TestUnreadableRecordOnTheVMIsRefused(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	f.patchVM(func(vm *virtv1.VirtualMachine) {
		vm.Annotations = map[string]string{vmvolumemigration.AnnotationMigration: "not json"}
	})
	f.create(f.migration("unreadable", nwv1.MigrationCold, linstorClass))
	m := f.waitPhase("unreadable", nwv1.WorkflowRolledBack)
	if c := f.condition(m); !strings.Contains(c, "spec.vmName: annotation "+vmvolumemigration.AnnotationMigration) {
		t.Errorf("condition %q, want the annotation named", c)
	}
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.eventually(func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)
		return err != nil, "the refused migration cannot be deleted"
	})
}

// TestFailedMigrationKeepsItsRecordWhenDeleted: a VM that starts neither on the target nor
// on its source leaves the migration Failed; deleting it keeps what the VM was like on the
// VM, and further migrations are refused until a person removes it.
func TestFailedMigrationKeepsItsRecordWhenDeleted(t *testing.T) {
	var broken atomic.Bool
	f := newFixture(t, site.Options{FailStart: func(*virtv1.VirtualMachine) bool { return broken.Load() }})
	startOperator(t)
	broken.Store(true)
	m := f.migration("doomed", nwv1.MigrationCold, linstorClass)
	m.Spec.Timeouts.VMStart = metav1.Duration{Duration: 10 * time.Second}
	f.create(m)
	m = f.waitPhase("doomed", nwv1.WorkflowFailed)
	if c := f.condition(m); !strings.HasPrefix(c, "StartVMFailed") || !strings.Contains(c, "then rollback step RollbackStartVM failed") ||
		!strings.HasSuffix(c, "a person must look: see status.steps") {
		t.Errorf("condition %q", c)
	}
	// What a Failed migration leaves (docs/migration.md): the rollback stops at the step that
	// failed; the data Jobs go, the target PVC and the snapshot stay, and the migration keeps
	// its finalizer and its hold on the VM.
	if got := stepStates(m); !strings.HasSuffix(got, "RollbackStopVM=Succeeded RollbackRepoint=Succeeded RollbackStartVM=Failed RollbackCleanup=Pending") {
		t.Errorf("steps %s: want the rollback stopped at RollbackStartVM, RollbackCleanup not run", got)
	}
	f.eventually(func() (bool, string) {
		m = f.get("doomed")
		c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionCleanedUp)
		return c != nil && c.Status == metav1.ConditionTrue &&
			c.Message == "the data Jobs are gone; VirtualMachine web stays held by the failed migration until it is deleted", fmt.Sprintf("CleanedUp %+v", c)
	})
	f.assertLeftBehind([]string{"web-root", "doomed-target"}, []string{"doomed-before"})
	if !slices.Contains(m.Finalizers, migration.Descriptor.Finalizer) {
		t.Errorf("finalizers %v: want the migration's kept", m.Finalizers)
	}
	if _, held := f.vm().Annotations[vmvolumemigration.AnnotationMigration]; !held {
		t.Error("the Failed migration let go of the VM")
	}

	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.eventually(func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)
		_, kept := f.vm().Annotations[vmvolumemigration.AnnotationFailedMigration]
		_, held := f.vm().Annotations[vmvolumemigration.AnnotationMigration]
		return err != nil && kept && !held, "the failed migration is not gone with its record moved on the VM"
	})
	// Its target PVC and snapshot outlive it: a person deletes them, by the migration's labels.
	f.assertLeftBehind([]string{"web-root", "doomed-target"}, []string{"doomed-before"})
	f.create(f.migration("after", nwv1.MigrationCold, linstorClass))
	after := f.waitPhase("after", nwv1.WorkflowRolledBack)
	if c := f.condition(after); !strings.Contains(c, "a failed migration left VirtualMachine web") {
		t.Errorf("condition %q, want the next migration refused", c)
	}
}

func TestTakenSnapshotNameIsRefused(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	f.create(&snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "taken-before", Namespace: f.ns},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("web-root")}},
	})
	f.create(f.migration("taken", nwv1.MigrationCold, linstorClass))
	m := f.waitPhase("taken", nwv1.WorkflowRolledBack)
	if c := f.condition(m); !strings.Contains(c, "metadata.name: VolumeSnapshot taken-before, a name this migration needs, is taken") {
		t.Errorf("condition %q", c)
	}
}

package vmvolumemigration_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site"
)

func TestColdMigrationMovesAndProvesTheBytes(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	f.create(f.migration("to-rwx", nwv1.MigrationCold, linstorClass))
	m := f.waitPhase("to-rwx", nwv1.WorkflowSucceeded)

	want := "Validate=Succeeded SnapshotSource=Succeeded StopVM=Succeeded CreateTarget=Succeeded Copy=Succeeded Repoint=Succeeded StartVM=Succeeded SnapshotTarget=Succeeded"
	if got := stepStates(m); got != want {
		t.Errorf("steps: %s\nwant   %s", got, want)
	}
	digest := blake3Digest(f.source)
	if c := m.Status.Checksum; c == nil || c.Algorithm != nwv1.ChecksumBLAKE3 || c.Source != digest || c.Target != digest {
		t.Errorf("checksum %+v, want both %s", c, digest)
	}
	if !bytes.Equal(f.volumeBytes("to-rwx-target"), f.source) {
		t.Error("the target's bytes differ from the source's")
	}
	if !bytes.Equal(f.volumeBytes("web-root"), f.source) {
		t.Error("the source changed")
	}
	if p := m.Status.Progress; p == nil || p.BytesDone != volumeSize || p.BytesTotal != volumeSize || p.Percent != 100 {
		t.Errorf("progress %+v, want all %d bytes", p, volumeSize)
	}
	if m.Status.SourcePVCName != "web-root" || m.Status.TargetPVCName != "to-rwx-target" ||
		m.Status.Snapshots.Before != "to-rwx-before" || m.Status.Snapshots.After != "to-rwx-after" {
		t.Errorf("status names %+v", m.Status)
	}
	for _, c := range []struct{ typ, reason string }{{nwv1.ConditionSucceeded, nwv1.ReasonSucceeded}, {nwv1.ConditionVerified, nwv1.ReasonChecksumMatch}} {
		got := meta.FindStatusCondition(m.Status.Conditions, c.typ)
		if got == nil || got.Status != metav1.ConditionTrue || got.Reason != c.reason {
			t.Errorf("condition %s = %+v, want True/%s", c.typ, got, c.reason)
		}
	}
	if m.Status.StartTime == nil || m.Status.CompletionTime == nil || m.Status.ObservedGeneration != m.Generation {
		t.Errorf("times %v %v, observedGeneration %d of %d", m.Status.StartTime, m.Status.CompletionTime, m.Status.ObservedGeneration, m.Generation)
	}
	f.waitVMRunsOn("to-rwx-target")
	target := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "to-rwx-target"}, target); err != nil {
		t.Fatal(err)
	}
	if target.Spec.AccessModes[0] != corev1.ReadWriteMany || *target.Spec.VolumeMode != corev1.PersistentVolumeBlock {
		t.Errorf("target PVC %v %v, want ReadWriteMany Block", target.Spec.AccessModes, *target.Spec.VolumeMode)
	}
	// The VM is released, the bookends and both PVCs stay, the Jobs went.
	f.eventually(func() (bool, string) {
		_, held := f.vm().Annotations[vmvolumemigration.AnnotationMigration]
		return !held, "the VM still carries the migration's record"
	})
	f.assertLeftBehind([]string{"web-root", "to-rwx-target"}, []string{"to-rwx-before", "to-rwx-after"})
	f.assertEvents("to-rwx", "Started", "StepSucceeded", "Succeeded")

	// Deleting a finished migration keeps what it made.
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.eventually(func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)
		return err != nil, "the migration is still there"
	})
	f.assertLeftBehind([]string{"web-root", "to-rwx-target"}, []string{"to-rwx-before", "to-rwx-after"})
}

func TestHotMigrationClonesVerifiesAndRestarts(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	m := f.migration("hot", nwv1.MigrationHot, linstorClass)
	m.Spec.RetainSource = ptr.To(false)
	f.create(m)
	m = f.waitPhase("hot", nwv1.WorkflowSucceeded)

	want := "Validate=Succeeded FreezeGuest=Skipped SnapshotSource=Succeeded CloneSource=Succeeded ThawGuest=Skipped VerifyClone=Succeeded StopVM=Succeeded Repoint=Succeeded StartVM=Succeeded SnapshotTarget=Succeeded ReleaseSource=Succeeded"
	if got := stepStates(m); got != want {
		t.Errorf("steps: %s\nwant   %s", got, want)
	}
	digest := blake3Digest(f.source)
	if c := m.Status.Checksum; c == nil || c.Source != digest || c.Target != digest {
		t.Errorf("checksum %+v, want both %s", c, digest)
	}
	if !bytes.Equal(f.volumeBytes("hot-target"), f.source) {
		t.Error("the clone's bytes differ from the source's")
	}
	f.waitVMRunsOn("hot-target")
	// The source went (retainSource: false); the snapshot view and the verify Job went too.
	f.assertLeftBehind([]string{"hot-target"}, []string{"hot-before", "hot-after"})
}

func TestRollbackWhenTheCopyFails(t *testing.T) {
	f := newFixture(t, site.Options{FailCopy: func(*batchv1.Job) bool { return true }})
	startOperator(t)
	f.create(f.migration("broken-copy", nwv1.MigrationCold, linstorClass))
	m := f.waitPhase("broken-copy", nwv1.WorkflowRolledBack)

	want := "Validate=Succeeded SnapshotSource=Succeeded StopVM=Succeeded CreateTarget=Succeeded Copy=Failed Repoint=Skipped StartVM=Skipped SnapshotTarget=Skipped RollbackStartVM=Succeeded RollbackCleanup=Succeeded"
	if got := stepStates(m); got != want {
		t.Errorf("steps: %s\nwant   %s", got, want)
	}
	c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "CopyFailed" || !strings.Contains(c.Message, "bad-input") {
		t.Errorf("Succeeded condition %+v, want False/CopyFailed naming nodewright-copy's error", c)
	}
	f.waitVMRunsOn("web-root")
	if !bytes.Equal(f.volumeBytes("web-root"), f.source) {
		t.Error("the source changed")
	}
	f.assertLeftBehind([]string{"web-root"}, nil)
	f.assertVMAsBefore()
	f.assertEvents("broken-copy", "RollingBack", "RolledBack")
}

func TestRollbackWhenTheCloneIsCorrupt(t *testing.T) {
	f := newFixture(t, site.Options{CorruptClone: func(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Name == "bad-clone-target" }})
	startOperator(t)
	f.create(f.migration("bad-clone", nwv1.MigrationHot, linstorClass))
	m := f.waitPhase("bad-clone", nwv1.WorkflowRolledBack)

	want := "Validate=Succeeded FreezeGuest=Skipped SnapshotSource=Succeeded CloneSource=Succeeded ThawGuest=Skipped VerifyClone=Failed StopVM=Skipped Repoint=Skipped StartVM=Skipped SnapshotTarget=Skipped RollbackCleanup=Succeeded"
	if got := stepStates(m); got != want {
		t.Errorf("steps: %s\nwant   %s", got, want)
	}
	v := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionVerified)
	if v == nil || v.Status != metav1.ConditionFalse || v.Reason != nwv1.ReasonChecksumMismatch {
		t.Errorf("Verified condition %+v, want False/ChecksumMismatch", v)
	}
	// nodewright-copy verify stops at the first difference and names it.
	if msg := describeSteps(m); !strings.Contains(msg, "VerifyClone=Failed (checksum mismatch") || !strings.Contains(msg, "first at byte") {
		t.Errorf("the VerifyClone step does not report the mismatch and where: %s", msg)
	}
	// The VM never stopped: a hot migration that fails before StopVM leaves it running.
	f.waitVMRunsOn("web-root")
	f.assertLeftBehind([]string{"web-root"}, nil)
	f.assertVMAsBefore()
}

func TestRollbackWhenTheVMWillNotStartOnTheTarget(t *testing.T) {
	f := newFixture(t, site.Options{FailStart: func(vm *virtv1.VirtualMachine) bool {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "no-boot-target" {
				return true
			}
		}
		return false
	}})
	startOperator(t)
	// The failed start is seen at once (the VMI fails); the default VMStart limit leaves the
	// start on the source, in the rollback, all the time a busy machine needs.
	m := f.migration("no-boot", nwv1.MigrationCold, linstorClass)
	f.create(m)
	m = f.waitPhase("no-boot", nwv1.WorkflowRolledBack)

	want := "Validate=Succeeded SnapshotSource=Succeeded StopVM=Succeeded CreateTarget=Succeeded Copy=Succeeded Repoint=Succeeded StartVM=Failed SnapshotTarget=Skipped RollbackStopVM=Succeeded RollbackRepoint=Succeeded RollbackStartVM=Succeeded RollbackCleanup=Succeeded"
	if got := stepStates(m); got != want {
		t.Errorf("steps: %s\nwant   %s", got, want)
	}
	c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
	if c == nil || c.Reason != "StartVMFailed" {
		t.Errorf("Succeeded condition %+v, want reason StartVMFailed", c)
	}
	f.waitVMRunsOn("web-root")
	f.assertLeftBehind([]string{"web-root"}, nil)
	f.assertVMAsBefore()
}

// TestRefusals checks what Validate refuses, with the field and the reason, leaving the VM
// untouched.
func TestRefusals(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.createVolume("other-root", genericClass)
	f.createVolume("taken-target", linstorClass)
	startOperator(t)
	cases := []struct {
		name   string
		change func(*nwv1.VMVolumeMigration)
		want   string
	}{
		{"no-vm", func(m *nwv1.VMVolumeMigration) { m.Spec.VMName = "nothing" }, `spec.vmName: VirtualMachine "nothing" not found`},
		{"no-volume", func(m *nwv1.VMVolumeMigration) { m.Spec.VolumeName = "data" }, `spec.volumeName: VirtualMachine web has no volume "data" (it has "root")`},
		{"no-class", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.StorageClassName = "nothing" }, `spec.target.storageClassName: StorageClass "nothing" not found`},
		{"no-rwx", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.StorageClassName = topolvmClass }, "spec.target.storageClassName: test-topolvm is TopoLVM, which cannot provide ReadWriteMany block volumes"},
		{"too-small", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.Size = ptr.To(resource.MustParse("4Mi")) }, "spec.target.size: 4Mi is smaller than the source PVC's 8Mi"},
		{"no-snapshot-class", func(m *nwv1.VMVolumeMigration) { m.Spec.SnapshotClassName = "nothing" }, `spec.snapshotClassName: VolumeSnapshotClass "nothing" not found`},
		{"taken", func(*nwv1.VMVolumeMigration) {}, "metadata.name: PersistentVolumeClaim taken-target, a name this migration needs, is taken by an object it did not create"},
		{"filesystem", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.VolumeMode = corev1.PersistentVolumeFilesystem }, "spec.target.volumeMode: Filesystem is not supported"},
		{"hot-across-drivers", func(m *nwv1.VMVolumeMigration) {
			m.Spec.Mode = nwv1.MigrationHot
			m.Spec.Target.StorageClassName = topolvmClass
			m.Spec.Target.AccessMode = corev1.ReadWriteOnce
		}, "spec.mode: Hot clones within one CSI driver, but the source is on linstor.csi.linbit.com and the target class on topolvm.io; use Cold"},
	}
	for _, c := range cases {
		m := f.migration(c.name, nwv1.MigrationCold, linstorClass)
		c.change(m)
		f.create(m)
		m = f.waitPhase(c.name, nwv1.WorkflowRolledBack)
		cond := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
		if cond == nil || cond.Reason != "ValidateFailed" || !strings.Contains(cond.Message, c.want) {
			t.Errorf("%s: Succeeded condition %+v, want ValidateFailed with %q", c.name, cond, c.want)
		}
		if got := stepStates(m); !strings.HasPrefix(got, "Validate=Failed") {
			t.Errorf("%s: steps %s", c.name, got)
		}
	}
	f.assertVMAsBefore()
	f.waitVMRunsOn("web-root")
}

// TestHotRefusedOnABackendThatCannotClone: the source is on a CSI driver Nodewright does not
// know, so Hot is refused rather than downgraded to Cold.
func TestHotRefusedOnABackendThatCannotClone(t *testing.T) {
	f := newFixture(t, site.Options{})
	startOperator(t)
	f.createVolume("plain", genericClass)
	vm := f.vm()
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, virtv1.Volume{Name: "plain", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "plain"}},
	}})
	if err := env.Client.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	m := f.migration("hot-generic", nwv1.MigrationHot, genericClass)
	m.Spec.VolumeName = "plain"
	m.Spec.Target.AccessMode = corev1.ReadWriteOnce
	f.create(m)
	m = f.waitPhase("hot-generic", nwv1.WorkflowRolledBack)
	cond := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
	want := "spec.mode: Hot needs a CSI clone, which generic CSI (csi.example.com) (the source's backend) cannot make; use Cold"
	if cond == nil || !strings.Contains(cond.Message, want) {
		t.Errorf("Succeeded condition %+v, want %q", cond, want)
	}
	if m.Spec.Mode != nwv1.MigrationHot {
		t.Errorf("the mode was changed to %s", m.Spec.Mode)
	}
}

func TestOneMigrationPerVM(t *testing.T) {
	hold := make(chan struct{})
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	startOperator(t)
	f.create(f.migration("first", nwv1.MigrationCold, linstorClass))
	f.eventually(func() (bool, string) {
		m := f.get("first")
		return strings.Contains(stepStates(m), "Copy=Running"), "first migration not copying yet: " + stepStates(m)
	})
	f.create(f.migration("second", nwv1.MigrationCold, linstorClass))
	m := f.waitPhase("second", nwv1.WorkflowRolledBack)
	cond := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded)
	if cond == nil || !strings.Contains(cond.Message, "held by migration first") {
		t.Errorf("second migration: %+v, want it refused as held by the first", cond)
	}
	close(hold)
	f.waitPhase("first", nwv1.WorkflowSucceeded)
}

func TestDeletingARunningMigrationRollsItBack(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	f := newFixture(t, site.Options{HoldCopy: func(*batchv1.Job) <-chan struct{} { return hold }})
	startOperator(t)
	m := f.migration("cancelled", nwv1.MigrationCold, linstorClass)
	f.create(m)
	f.eventually(func() (bool, string) {
		m = f.get("cancelled")
		return strings.Contains(stepStates(m), "Copy=Running"), "not copying yet: " + stepStates(m)
	})
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.eventually(func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), m)
		return err != nil, "the migration is still there: " + describeSteps(m)
	})
	f.waitVMRunsOn("web-root")
	f.assertLeftBehind([]string{"web-root"}, nil)
	f.assertVMAsBefore()
}

func (f *fix) get(name string) *nwv1.VMVolumeMigration {
	f.t.Helper()
	m := &nwv1.VMVolumeMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// assertVMAsBefore checks the VM runs as it did, on its source, with no record left on it.
func (f *fix) assertVMAsBefore() {
	f.t.Helper()
	f.eventually(func() (bool, string) {
		vm := f.vm()
		_, held := vm.Annotations[vmvolumemigration.AnnotationMigration]
		v := vm.Spec.Template.Spec.Volumes[0]
		ok := !held && ptr.Deref(vm.Spec.RunStrategy, "") == virtv1.RunStrategyAlways && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "web-root"
		return ok, "the VM is not as it was: annotations " + strings.Join(slices.Sorted(maps.Keys(vm.Annotations)), ",") + ", runStrategy " + string(ptr.Deref(vm.Spec.RunStrategy, ""))
	})
}

// assertEvents checks the migration's Events include these reasons.
func (f *fix) assertEvents(name string, reasons ...string) {
	f.t.Helper()
	f.eventually(func() (bool, string) {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(f.ns)); err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "VMVolumeMigration" {
				seen[e.Reason] = true
			}
		}
		for _, r := range reasons {
			if !seen[r] {
				return false, "no Event with reason " + r + " on " + name
			}
		}
		return true, ""
	})
}

// operatorActor is who the records of the tests' operator say acted.
const operatorActor = "system:serviceaccount:nodewright-system:nodewright-operator"

// trail is an audit log on a file sink, as the operator keeps one.
type trail struct {
	dir string
	log *audit.Log
	pub ed25519.PublicKey
}

func openTrail(t *testing.T) *trail {
	t.Helper()
	privPEM, pubPEM, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trail{dir: t.TempDir(), pub: pub}
	sink, err := audit.OpenFileSink(tr.dir, audit.FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr.log = audit.NewLog(sink, signer, sink.State(), audit.LogOptions{CheckpointEvery: 4})
	t.Cleanup(func() { _ = tr.log.Close() })
	return tr
}

// lines are the chain's entries about the migration ns/name, now. The operator records the
// transitions of every migration it sees, earlier tests' included, so a test counts its own.
func (tr *trail) lines(t *testing.T, ns, name string) []string {
	t.Helper()
	if _, err := tr.log.Checkpoint(context.Background()); err != nil && !errors.Is(err, audit.ErrClosed) {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tr.report(t).Files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, `"namespace":"`+ns+`","name":"`+name+`"`) {
				out = append(out, line)
			}
		}
	}
	return out
}

func (tr *trail) report(t *testing.T) *audit.Report {
	t.Helper()
	files, err := audit.ChainFiles(tr.dir)
	if err != nil {
		t.Fatal(err)
	}
	report, err := audit.VerifyFiles(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{tr.pub}}, files...)
	if err != nil {
		t.Fatal(err)
	}
	return report
}

// verify closes the log and checks the chain verifies and holds n records of the migration
// ns/name, each transition once, all by the operator.
func (tr *trail) verify(t *testing.T, ns, name string, n int) {
	t.Helper()
	// A transition's record is appended after the status that shows it is written, so the
	// status can show Succeeded a moment before the trail holds its record: wait for it.
	testenv.Eventually(t, 2*time.Minute, func() string {
		if got := len(tr.lines(t, ns, name)); got < n {
			return fmt.Sprintf("the chain holds %d records of %s/%s, waiting for %d", got, ns, name, n)
		}
		return ""
	})
	if err := tr.log.Close(); err != nil {
		t.Fatal(err)
	}
	report := tr.report(t)
	if !report.OK || report.Unsigned != 0 {
		t.Errorf("audit chain: ok=%v, %d unsigned, problems %v", report.OK, report.Unsigned, report.Problems)
	}
	lines := tr.lines(t, ns, name)
	if len(lines) != n {
		t.Errorf("the chain holds %d records of %s/%s, want %d", len(lines), ns, name, n)
	}
	raw := strings.Join(lines, "\n")
	for _, want := range []string{`"to":"Running/Validate"`, `"to":"Running/Copy"`, `"to":"Succeeded"`} {
		if strings.Count(raw, want) != 1 {
			t.Errorf("the audit trail holds %d of %s, want 1", strings.Count(raw, want), want)
		}
	}
	if got := strings.Count(raw, `"actor":"`+operatorActor+`"`); got != n {
		t.Errorf("%d of %d records name the operator as the actor", got, n)
	}
}

// TestEveryTransitionIsAudited runs a migration with an audit log on a file sink: one record
// per transition, in a chain that verifies.
func TestEveryTransitionIsAudited(t *testing.T) {
	f := newFixture(t, site.Options{})
	tr := openTrail(t)
	env.StartManagerAsWithCache(t, asOperator(t), operator.CacheOptions(operator.Scope{}), func(ctx context.Context, mgr manager.Manager) error {
		return (&vmvolumemigration.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("test"), Audit: tr.log, Actor: operatorActor}, Client: mgr.GetClient()}).SetupWithManager(mgr)
	})
	f.create(f.migration("audited", nwv1.MigrationCold, linstorClass))
	f.waitPhase("audited", nwv1.WorkflowSucceeded)
	// Start, then the eight steps of the cold path each succeeding.
	tr.verify(t, f.ns, "audited", 9)
}

package main_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/legacy"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
	"github.com/spectrocloud/nodewright/test/site"
)

// The storage the site serves in these tests.
const (
	siteDriver = "linstor.csi.linbit.com"
	siteClass  = "site-linstor"
)

// TestTheOperatorRunsWithoutTheThirdPartyAPIsAndMigratesOnceTheyAreInstalled starts the
// operator on an API server with only Nodewright's CRDs, as on a cluster without KubeVirt or
// the CSI external-snapshotter: the bridge runs, a migration waits and says why, and once the
// CRDs are installed the same process starts that migration and runs a new one to success.
func TestTheOperatorRunsWithoutTheThirdPartyAPIsAndMigratesOnceTheyAreInstalled(t *testing.T) {
	own := testenv.New().WithoutThirdPartyCRDs()
	own.StartForTest(t)
	ctx := context.Background()
	op := startReplica(t, buildOperator(t), own.Kubeconfig(t), metav1.NamespaceDefault)
	waitHTTP(t, "http://"+op.probeAddr+"/readyz", "")

	// The bridge runs.
	f := bt.New(t, own, time.Minute)
	f.SetNodes(f.Node(1))
	f.Transition(legacy.SingleNodeReady)
	bt.Eventually(t, patience, func() string {
		if c := f.Status(); c.Status.Phase != nwv1.ClusterSingleNode {
			return fmt.Sprintf("the NodewrightCluster's phase is %q, want SingleNode", c.Status.Phase)
		}
		return ""
	})

	// A migration waits before its start and says which APIs are missing, and why.
	early := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "early", Namespace: own.Namespace(t)},
		Spec:       nwv1.VMVolumeMigrationSpec{VMName: "absent", VolumeName: "root", Target: nwv1.MigrationTarget{StorageClassName: siteClass}},
	}
	if err := own.Client.Create(ctx, early); err != nil {
		t.Fatal(err)
	}
	for _, kind := range vmvolumemigration.APIs {
		waitsFor(t, own, early, kind.Kind+"."+kind.Group+"/v1 (no CustomResourceDefinition defines it)")
	}
	if !strings.Contains(op.log.String(), "VMVolumeMigrations wait for APIs the cluster does not serve") {
		t.Errorf("the operator's log does not say which APIs migrations wait for:\n%s", op.log)
	}

	// The third-party CRDs are installed; the same operator process goes on.
	if err := own.InstallCRDs(testenv.ThirdPartyCRDPaths(own.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	// The waiting migration starts: its VM does not exist, so its first step refuses it.
	m := waitMigration(t, own, early, nwv1.WorkflowRolledBack)
	if c := meta.FindStatusCondition(m.Status.Conditions, nwv1.ConditionSucceeded); c == nil || !strings.Contains(c.Message, `VirtualMachine "absent" not found`) {
		t.Errorf("migration early rolled back with %+v, want the missing VM named", c)
	}

	// A migration of a running VM succeeds, its target holding the source's bytes.
	ns := own.Namespace(t)
	operatortest.StorageClasses(t, own.Client, operatortest.Class{Name: siteClass, Driver: siteDriver})
	s := site.Start(t, own.Config, site.Options{Drivers: []string{siteDriver}, CopyBinary: site.BuildCopy(t), Namespaces: []string{ns}})
	data := s.RunningVM(t, own.Client, ns, "web", siteClass, 4<<20)
	mig := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "web-root", Namespace: ns},
		Spec:       nwv1.VMVolumeMigrationSpec{VMName: "web", VolumeName: "root", Mode: nwv1.MigrationCold, Target: nwv1.MigrationTarget{StorageClassName: siteClass}},
	}
	if err := own.Client.Create(ctx, mig); err != nil {
		t.Fatal(err)
	}
	done := waitMigration(t, own, mig, nwv1.WorkflowSucceeded)
	site.WaitVMRunsOn(t, own.Client, ns, "web", done.Status.TargetPVCName)
	if got := volumeBytes(t, s, ns, done.Status.TargetPVCName); !slices.Equal(got, data) {
		t.Errorf("the target PVC %s does not hold the source's bytes", done.Status.TargetPVCName)
	}

	// An API goes away: a new migration waits again, and starts once it is back.
	classes := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "volumesnapshotclasses.snapshot.storage.k8s.io"}}
	if err := own.Client.Delete(ctx, classes); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, patience, func() string {
		if err := own.Client.Get(ctx, client.ObjectKeyFromObject(classes), classes); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the CustomResourceDefinition %s is still there (%v)", classes.Name, err)
		}
		return ""
	})
	again := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "again", Namespace: ns},
		Spec:       nwv1.VMVolumeMigrationSpec{VMName: "web", VolumeName: "root", Mode: nwv1.MigrationCold, Target: nwv1.MigrationTarget{StorageClassName: siteClass}},
	}
	if err := own.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	waitsFor(t, own, again, "VolumeSnapshotClass.snapshot.storage.k8s.io/v1 (no CustomResourceDefinition defines it)")
	if err := own.InstallCRDs(testenv.ThirdPartyCRDPaths(own.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, patience, func() string {
		m := getMigration(t, own, again)
		if !slices.Contains([]nwv1.WorkflowPhase{nwv1.WorkflowSucceeded, nwv1.WorkflowRolledBack, nwv1.WorkflowFailed}, m.Status.Phase) {
			return fmt.Sprintf("migration again is %q once the API is back, want it to have run to its end", m.Status.Phase)
		}
		return ""
	})
	select {
	case err := <-op.done:
		t.Errorf("the operator exited (%v): it must go on as APIs come and go", err)
	default:
	}
}

// waitsFor waits until migration m waits before its start for the APIs it needs, its
// Succeeded condition naming want.
func waitsFor(t *testing.T, env *testenv.Env, m *nwv1.VMVolumeMigration, want string) {
	t.Helper()
	bt.Eventually(t, patience, func() string {
		got := getMigration(t, env, m)
		c := meta.FindStatusCondition(got.Status.Conditions, nwv1.ConditionSucceeded)
		if got.Status.Phase != nwv1.WorkflowPending || c == nil || c.Reason != nwv1.ReasonAPIsMissing || !strings.Contains(c.Message, want) {
			return fmt.Sprintf("migration %s: phase %q, Succeeded %+v; want Pending, reason %s, saying %q", m.Name, got.Status.Phase, c, nwv1.ReasonAPIsMissing, want)
		}
		return ""
	})
	bt.Eventually(t, patience, func() string {
		if !hasEvent(t, env, m, corev1.EventTypeWarning, vmvolumemigration.EventAPIsMissing) {
			return "no Warning " + vmvolumemigration.EventAPIsMissing + " Event on migration " + m.Name
		}
		return ""
	})
}

// TestAdmissionRefusesMigrationsUntilTheirAPIsAreServed runs the operator with its webhooks
// on an API server with only Nodewright's CRDs: a migration is refused, naming the missing
// APIs, until they are installed; then the webhook checks the migration itself.
func TestAdmissionRefusesMigrationsUntilTheirAPIsAreServed(t *testing.T) {
	own := testenv.New().WithoutThirdPartyCRDs().WithWebhooks()
	own.StartForTest(t)
	if _, err := operatortest.Start(own, operatortest.Options{TempPrefix: "nodewright-thirdparty-"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "web-root", Namespace: own.Namespace(t)},
		Spec:       nwv1.VMVolumeMigrationSpec{VMName: "web", VolumeName: "root", Target: nwv1.MigrationTarget{StorageClassName: siteClass}},
	}
	err := own.Client.Create(ctx, m.DeepCopy())
	if err == nil || !strings.Contains(err.Error(), "VMVolumeMigrations cannot run on this cluster: the API server does not serve VirtualMachine.kubevirt.io/v1, VirtualMachineInstance.kubevirt.io/v1, VolumeSnapshot.snapshot.storage.k8s.io/v1, VolumeSnapshotClass.snapshot.storage.k8s.io/v1") {
		t.Fatalf("creating a migration without the APIs it needs: %v; want a refusal naming them", err)
	}

	if err := own.InstallCRDs(testenv.ThirdPartyCRDPaths(own.RepoRoot)...); err != nil {
		t.Fatal(err)
	}
	// Without a restart, the webhook now reads the VM, and refuses the migration for its
	// own reasons; with the VM and the classes there, it admits it.
	err = own.Client.Create(ctx, m.DeepCopy(), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), `spec.vmName: VirtualMachine "web" not found`) {
		t.Fatalf("creating a migration of a VM that does not exist, once the APIs are served: %v", err)
	}
	operatortest.StorageClasses(t, own.Client, operatortest.Class{Name: siteClass, Driver: siteDriver})
	operatortest.HaltedVM(t, own.Client, m.Namespace, "web", siteClass)
	if err := own.Client.Create(ctx, m.DeepCopy(), client.DryRunAll); err != nil {
		t.Fatalf("creating a migration once the APIs are served: %v", err)
	}
}

func getMigration(t *testing.T, env *testenv.Env, m *nwv1.VMVolumeMigration) *nwv1.VMVolumeMigration {
	t.Helper()
	got := &nwv1.VMVolumeMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// waitMigration waits until migration m is in phase and returns it.
func waitMigration(t *testing.T, env *testenv.Env, m *nwv1.VMVolumeMigration, phase nwv1.WorkflowPhase) *nwv1.VMVolumeMigration {
	t.Helper()
	var got *nwv1.VMVolumeMigration
	bt.Eventually(t, patience, func() string {
		got = getMigration(t, env, m)
		if got.Status.Phase != phase {
			return fmt.Sprintf("migration %s is %q, want %s; conditions %+v", m.Name, got.Status.Phase, phase, got.Status.Conditions)
		}
		return ""
	})
	return got
}

// hasEvent says whether an Event of type and reason is recorded about obj.
func hasEvent(t *testing.T, env *testenv.Env, obj client.Object, eventType, reason string) bool {
	t.Helper()
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.UID == obj.GetUID() && e.Type == eventType && e.Reason == reason {
			return true
		}
	}
	return false
}

func volumeBytes(t *testing.T, s *site.Site, ns, claim string) []byte {
	t.Helper()
	data, err := s.ReadVolume(context.Background(), ns, claim)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

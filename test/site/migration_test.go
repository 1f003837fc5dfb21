package site_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/test/site"
)

// migration is a VirtualMachineInstanceMigration of the VMI, to a node matching selector.
func (f *fix) migration(name, vmi string, selector map[string]string) *virtv1.VirtualMachineInstanceMigration {
	return &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi, AddedNodeSelector: selector},
	}
}

// to is an addedNodeSelector naming node.
func to(node string) map[string]string { return map[string]string{corev1.LabelHostname: node} }

// migrationIs waits for the migration's phase and returns the migration.
func (f *fix) migrationIs(name string, phase virtv1.VirtualMachineInstanceMigrationPhase) *virtv1.VirtualMachineInstanceMigration {
	f.t.Helper()
	m := &virtv1.VirtualMachineInstanceMigration{}
	f.eventually(func() string {
		if err := f.get(name, m); err != nil {
			return err.Error()
		}
		if m.Status.Phase != phase {
			return fmt.Sprintf("migration %s is %q, want %q: %+v", name, m.Status.Phase, phase, m.Status)
		}
		return ""
	})
	return m
}

// over waits until the migration is over, finalizer gone, and returns it.
func (f *fix) over(name string, phase virtv1.VirtualMachineInstanceMigrationPhase) *virtv1.VirtualMachineInstanceMigration {
	f.t.Helper()
	m := &virtv1.VirtualMachineInstanceMigration{}
	f.eventually(func() string {
		if err := f.get(name, m); err != nil {
			return err.Error()
		}
		if m.Status.Phase != phase || len(m.Finalizers) > 0 {
			return fmt.Sprintf("migration %s is %q with finalizers %v, want %q and none", name, m.Status.Phase, m.Finalizers, phase)
		}
		return ""
	})
	return m
}

// phases lists the phases the migration went through.
func phases(m *virtv1.VirtualMachineInstanceMigration) []string {
	var out []string
	for _, t := range m.Status.PhaseTransitionTimestamps {
		out = append(out, string(t.Phase))
	}
	return out
}

// migrationEvent waits for an Event of the migration with reason and a message containing
// text, and returns its message.
func (f *fix) migrationEvent(name, eventType, reason, text string) string {
	f.t.Helper()
	var found string
	f.eventually(func() string {
		events := &corev1.EventList{}
		if err := env.Client.List(f.ctx, events, client.InNamespace(f.ns)); err != nil {
			return err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind != "VirtualMachineInstanceMigration" || e.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
			if e.Type == eventType && e.Reason == reason && strings.Contains(e.Message, text) {
				found = e.Message
				return ""
			}
		}
		return fmt.Sprintf("no %s %s Event saying %q for migration %s; seen %q", eventType, reason, text, name, seen)
	})
	return found
}

// migratableVM runs a VM on a ReadWriteMany claim and returns its VMI, which runs on the first
// node. It has no node selector: one naming its node would keep it there.
func (f *fix) migratableVM(name string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	f.rwxVolume(name + "-root")
	f.create(f.vm(name, name+"-root", virtv1.RunStrategyAlways))
	return f.runsOn(name, f.node(1))
}

var allPhases = []string{"Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"}

func TestMigrationMovesTheVMIToAnotherNodeAndBack(t *testing.T) {
	f := newNodesFixture(t, 3, site.Options{})
	vmi := f.migratableVM("web")

	// Without a selector: the first node that is not the VMI's.
	f.create(f.migration("away", "web", nil))
	away := f.over("away", virtv1.MigrationSucceeded)
	moved := f.runsOn("web", f.node(2))
	if got := phases(away); !slices.Equal(got, allPhases) {
		t.Errorf("the migration went through %q, want %q", got, allPhases)
	}
	ms := moved.Status.MigrationState
	if ms == nil || ms.SourceNode != f.node(1) || ms.TargetNode != f.node(2) || ms.MigrationUID != away.UID ||
		!ms.Completed || ms.Failed || ms.StartTimestamp == nil || ms.EndTimestamp == nil || ms.Mode != virtv1.MigrationPreCopy {
		t.Errorf("the VMI's migrationState: %+v", ms)
	}
	if moved.UID != vmi.UID {
		t.Error("a live migration replaced the VMI")
	}
	if _, ok := moved.Labels[virtv1.MigrationTargetNodeNameLabel]; ok {
		t.Errorf("the VMI keeps the migration's target label: %v", moved.Labels)
	}
	if away.Status.MigrationState == nil || away.Status.MigrationState.MigrationUID != away.UID || !away.Status.MigrationState.Completed {
		t.Errorf("the migration's final migrationState: %+v", away.Status.MigrationState)
	}
	if away.Labels[virtv1.MigrationSelectorLabel] != "web" {
		t.Errorf("the migration's labels %v", away.Labels)
	}
	f.migrationEvent("away", corev1.EventTypeNormal, "SuccessfulMigration", "Source node reported migration succeeded")
	if vm := f.vmIs("web", virtv1.VirtualMachineStatusRunning); !vm.Status.Ready {
		t.Errorf("VM status after the migration: %+v", vm.Status)
	}

	// Back, by the node's hostname, as a flip brings a node's VMs home.
	f.create(f.migration("home", "web", to(f.node(1))))
	home := f.over("home", virtv1.MigrationSucceeded)
	back := f.runsOn("web", f.node(1))
	if ms := back.Status.MigrationState; ms.MigrationUID != home.UID || ms.SourceNode != f.node(2) || ms.TargetNode != f.node(1) {
		t.Errorf("the VMI's migrationState after coming back: %+v", ms)
	}

	// Past the second node, to the third.
	f.create(f.migration("third", "web", to(f.node(3))))
	f.over("third", virtv1.MigrationSucceeded)
	f.runsOn("web", f.node(3))
}

func TestMigrationWithoutATargetFails(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{MigrationUnschedulableTimeout: 2 * time.Second})
	f.migratableVM("web")

	// The only other node is cordoned: no target. KubeVirt leaves the migration in Scheduling
	// while its target pod is unschedulable, then fails it.
	cordon(t, f.node(2), true)
	t.Cleanup(func() { cordon(t, f.node(2), false) })
	f.create(f.migration("away", "web", nil))
	f.migrationEvent("away", corev1.EventTypeWarning, "migrationTargetPodUnschedulable",
		fmt.Sprintf("Migration target pod for VMI [%s/web] is currently unschedulable.", f.ns))
	failed := f.over("away", virtv1.MigrationFailed)
	if got, want := phases(failed), []string{"Pending", "Scheduling", "Failed"}; !slices.Equal(got, want) {
		t.Errorf("the migration went through %q, want %q", got, want)
	}
	f.migrationEvent("away", corev1.EventTypeWarning, "FailedMigration",
		"unschedulable pod timeout period exceeded (0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 1 node(s) were unschedulable.)")

	// A selector naming the VMI's own node: never the source.
	f.create(f.migration("here", "web", to(f.node(1))))
	f.over("here", virtv1.MigrationFailed)
	vmi := f.runsOn("web", f.node(1))
	if vmi.Status.MigrationState != nil {
		t.Errorf("a migration that found no target touched the VMI: %+v", vmi.Status.MigrationState)
	}
}

func TestMigrationWaitsForATargetToFit(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{})
	f.migratableVM("web")
	cordon(t, f.node(2), true)
	m := f.migration("away", "web", nil)
	m.Annotations = map[string]string{"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "3600"}
	f.create(m)
	f.migrationIs("away", virtv1.MigrationScheduling)
	f.migrationEvent("away", corev1.EventTypeWarning, "migrationTargetPodUnschedulable", "is currently unschedulable")
	cordon(t, f.node(2), false)
	f.over("away", virtv1.MigrationSucceeded)
	f.runsOn("web", f.node(2))
}

func TestMigrationOfAVMIThatCannotMigrateFails(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{})
	f.volume("local", 31)
	f.create(f.vm("web", "local", virtv1.RunStrategyAlways))
	f.runsOn("web", f.node(1))

	// KubeVirt's admission webhook refuses the migration with this; the site fails it.
	f.create(f.migration("away", "web", nil))
	failed := f.over("away", virtv1.MigrationFailed)
	if got, want := phases(failed), []string{"Failed"}; !slices.Equal(got, want) {
		t.Errorf("the migration went through %q, want %q", got, want)
	}
	f.migrationEvent("away", corev1.EventTypeWarning, "FailedMigration",
		"Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC local is not shared, "+
			"live migration requires that all PVCs must be shared (using ReadWriteMany access mode)")
	if vmi := f.runsOn("web", f.node(1)); vmi.Status.MigrationState != nil {
		t.Errorf("a refused migration touched the VMI: %+v", vmi.Status.MigrationState)
	}
}

func TestMigrationOfAVMIThatDoesNotRunFails(t *testing.T) {
	f := newNodesFixture(t, 2, site.Options{})
	f.rwxVolume("root")
	f.create(f.vm("web", "root", virtv1.RunStrategyHalted))
	f.vmIs("web", virtv1.VirtualMachineStatusStopped)

	f.create(f.migration("away", "web", nil))
	f.over("away", virtv1.MigrationFailed)
	f.migrationEvent("away", corev1.EventTypeWarning, "FailedMigration", "Migration failed because vmi does not exist.")
}

func TestFailMigrationLeavesTheVMIWhereItRuns(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	f := newNodesFixture(t, 2, site.Options{FailMigration: func(vmi *virtv1.VirtualMachineInstance) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, vmi.Status.MigrationState.SourceNode+">"+vmi.Status.MigrationState.TargetNode)
		return true
	}})
	f.migratableVM("web")
	f.create(f.migration("away", "web", nil))
	failed := f.over("away", virtv1.MigrationFailed)
	if got, want := phases(failed), []string{"Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Failed"}; !slices.Equal(got, want) {
		t.Errorf("the migration went through %q, want %q", got, want)
	}
	f.migrationEvent("away", corev1.EventTypeWarning, "FailedMigration", "source node reported migration failed")
	vmi := f.runsOn("web", f.node(1))
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID != failed.UID || !ms.Failed || ms.Completed || ms.EndTimestamp == nil || ms.FailureReason == "" {
		t.Errorf("the VMI's migrationState: %+v", ms)
	}
	if failed.Status.MigrationState == nil || !failed.Status.MigrationState.Failed {
		t.Errorf("the migration's final migrationState: %+v", failed.Status.MigrationState)
	}
	f.eventually(func() string {
		if err := f.get("web", vmi); err != nil {
			return err.Error()
		}
		if _, ok := vmi.Labels[virtv1.MigrationTargetNodeNameLabel]; ok {
			return fmt.Sprintf("the VMI keeps the failed migration's target label: %v", vmi.Labels)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || asked[0] != f.node(1)+">"+f.node(2) {
		t.Errorf("FailMigration was asked about %q", asked)
	}
}

func TestHeldMigrationRunsUntilReleasedAndDeletingOneAbortsIt(t *testing.T) {
	holds := map[string]chan struct{}{}
	var mu sync.Mutex
	hold := func(source string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if holds[source] == nil {
			holds[source] = make(chan struct{})
		}
		return holds[source]
	}
	f := newNodesFixture(t, 2, site.Options{HoldMigration: func(vmi *virtv1.VirtualMachineInstance) <-chan struct{} {
		return hold(vmi.Status.MigrationState.SourceNode)
	}})
	f.migratableVM("web")

	// Held: it runs, and the VM says so, until released.
	f.create(f.migration("away", "web", nil))
	f.migrationIs("away", virtv1.MigrationRunning)
	f.vmIs("web", virtv1.VirtualMachineStatusMigrating)
	vmi := f.runsOn("web", f.node(1))
	if ms := vmi.Status.MigrationState; ms == nil || ms.StartTimestamp == nil || ms.EndTimestamp != nil || ms.TargetNode != f.node(2) {
		t.Errorf("the running migration's state: %+v", ms)
	}
	if vmi.Labels[virtv1.MigrationTargetNodeNameLabel] != f.node(2) {
		t.Errorf("the migrating VMI's labels %v", vmi.Labels)
	}
	// A second migration of the VMI meanwhile: KubeVirt refuses it.
	f.create(f.migration("meanwhile", "web", nil))
	f.over("meanwhile", virtv1.MigrationFailed)
	f.migrationEvent("meanwhile", corev1.EventTypeWarning, "FailedMigration", "another migration job is in progress")
	close(hold(f.node(1)))
	f.over("away", virtv1.MigrationSucceeded)
	f.runsOn("web", f.node(2))
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)

	// Held on the way back, then deleted: KubeVirt aborts it, and the VMI stays.
	f.create(f.migration("home", "web", nil))
	home := f.migrationIs("home", virtv1.MigrationRunning)
	f.delete(home)
	f.eventually(func() string {
		err := f.get("home", &virtv1.VirtualMachineInstanceMigration{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the deleted migration is still there (%v)", err)
		}
		return ""
	})
	vmi = f.runsOn("web", f.node(2))
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID != home.UID || !ms.AbortRequested || ms.AbortStatus != virtv1.MigrationAbortSucceeded || !ms.Failed || ms.Completed {
		t.Errorf("the aborted migration's state: %+v", ms)
	}
	f.migrationEvent("home", corev1.EventTypeWarning, "FailedMigration", "source node reported migration failed")
	f.vmIs("web", virtv1.VirtualMachineStatusRunning)
}

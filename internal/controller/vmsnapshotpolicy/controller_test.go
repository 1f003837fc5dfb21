package vmsnapshotpolicy_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmsnapshotpolicy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/vmsnapshot"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// wait is the generous bound of every wait on observed state: a busy machine is slow.
const wait = 60 * time.Second

// site is one test's namespace, with the controller running as the operator (its user under
// the chart's ValidatingAdmissionPolicies) on a fake clock, and KubeVirt's snapshot controller played by the test.
type site struct {
	t     *testing.T
	ns    string
	clock *clocktesting.FakePassiveClock
	apis  *discovery.DiscoveryClient
}

// start is a site with its operator running.
func start(t *testing.T, now time.Time) *site {
	t.Helper()
	s := newSite(t, now)
	s.startOperator()
	return s
}

// newSite is a site whose operator is not started.
func newSite(t *testing.T, now time.Time) *site {
	t.Helper()
	s := &site{t: t, ns: env.Namespace(t), clock: clocktesting.NewFakePassiveClock(now)}
	apis, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	s.apis = apis
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(s.ns)); err == nil {
			for _, e := range events.Items {
				t.Logf("event %s %s %s: %s", e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
			}
		}
	})
	return s
}

// cacheOptions are the operator's, but of the site's namespace alone: the tests run in
// parallel, each on its own clock.
func (s *site) cacheOptions() cache.Options {
	opts := operator.CacheOptions(operator.Scope{})
	opts.DefaultNamespaces = map[string]cache.Config{s.ns: {}}
	return opts
}

// lockNamespace is where the cluster-wide workflows' claim is, as the operator's namespace.
const lockNamespace = "nodewright-system"

func (s *site) reconciler(c client.Client, live client.Reader, r record.EventRecorder) *vmsnapshotpolicy.Reconciler {
	return &vmsnapshotpolicy.Reconciler{Client: c, APIReader: live, Recorder: r, Discovery: s.apis, Clock: s.clock, LockNamespace: lockNamespace}
}

// startOperator runs the controller as the operator (its user, under the chart's
// ValidatingAdmissionPolicies), until the test ends
// or it is stopped.
func (s *site) startOperator() (stop func()) {
	s.t.Helper()
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	return env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		return s.reconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorderFor("vmsnapshotpolicy-test")).SetupWithManager(mgr)
	})
}

// vm creates a running VM with one volume on a claim, labelled.
func (s *site) vm(name string, labels map[string]string) {
	s.t.Helper()
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: labels},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
				Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{{Name: "root"}}}},
				Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
					PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-root"},
					},
				}}},
			}},
		},
	}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		s.t.Fatal(err)
	}
}

// at sets the clock and wakes the policy, as its requeue at the scheduled time would.
func (s *site) at(p *nwv1.VMSnapshotPolicy, when time.Time) {
	s.t.Helper()
	s.clock.SetTime(when)
	patch := client.RawPatch("application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{"test.nodewright/clock":%q}}}`, when.Format(time.RFC3339))))
	if err := env.Client.Patch(context.Background(), p.DeepCopy(), patch); err != nil {
		s.t.Fatal(err)
	}
}

// edit changes the policy's spec, on its newest version.
func (s *site) edit(name string, change func(p *nwv1.VMSnapshotPolicy)) {
	s.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &nwv1.VMSnapshotPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, p); err != nil {
			return err
		}
		change(p)
		return env.Client.Update(context.Background(), p)
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// policy waits until check says nothing is wrong with the policy, and returns it.
func (s *site) policy(name string, check func(p *nwv1.VMSnapshotPolicy) string) *nwv1.VMSnapshotPolicy {
	s.t.Helper()
	p := &nwv1.VMSnapshotPolicy{}
	testenv.Eventually(s.t, wait, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, p); err != nil {
			return err.Error()
		}
		return check(p)
	})
	return p
}

// snapshots are the names of the VM's snapshots there, not being deleted, sorted.
func (s *site) snapshots(vm string) []string {
	s.t.Helper()
	var list snapv1.VirtualMachineSnapshotList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(s.ns), client.MatchingLabels{nwv1.LabelSnapshotVM: vm}); err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, v := range list.Items {
		if v.DeletionTimestamp.IsZero() {
			out = append(out, v.Name)
		}
	}
	slices.Sort(out)
	return out
}

// snapshotsAre waits until the VM's snapshots are exactly want.
func (s *site) snapshotsAre(vm string, want ...string) {
	s.t.Helper()
	slices.Sort(want)
	testenv.Eventually(s.t, wait, func() string {
		if got := s.snapshots(vm); !slices.Equal(got, want) {
			return fmt.Sprintf("%s's snapshots are %v, want %v", vm, got, want)
		}
		return ""
	})
}

// outcome is how the played snapshot controller ends a snapshot.
type outcome int

const (
	good      outcome = iota // frozen by the guest agent, every volume ready
	noAgent                  // online, without the guest agent's freeze
	freezeErr                // the freeze failed: phase Failed
	excluded                 // the volume excluded: no VolumeSnapshotClass for its class
)

// play ends snapshot name as KubeVirt's snapshot controller does: its content with the
// volume's snapshot, its phase, readiness, indications and volumes.
func (s *site) play(name string, o outcome) {
	s.t.Helper()
	ctx := context.Background()
	vms := &snapv1.VirtualMachineSnapshot{}
	testenv.Eventually(s.t, wait, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, vms); err != nil {
			return err.Error()
		}
		return ""
	})
	st := &snapv1.VirtualMachineSnapshotStatus{SourceUID: ptr.To(vms.UID)}
	switch o {
	case freezeErr:
		st.Phase = snapv1.Failed
		st.ReadyToUse = ptr.To(false)
		st.Error = &snapv1.Error{Message: ptr.To("failed to freeze the guest: guest agent not responding")}
	default:
		content := &snapv1.VirtualMachineSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "vmsnapshot-content-" + string(vms.UID)},
			Spec: snapv1.VirtualMachineSnapshotContentSpec{VirtualMachineSnapshotName: ptr.To(name),
				VolumeBackups: []snapv1.VolumeBackup{{VolumeName: "root", VolumeSnapshotName: ptr.To("vmsnapshot-" + string(vms.UID) + "-volume-root")}}},
		}
		if err := env.Client.Create(ctx, content); apierrors.IsAlreadyExists(err) {
			// Played before: played again, the same.
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(content), content); err != nil {
				s.t.Fatal(err)
			}
		} else if err != nil {
			s.t.Fatal(err)
		}
		content.Status = &snapv1.VirtualMachineSnapshotContentStatus{ReadyToUse: ptr.To(true),
			VolumeSnapshotStatus: []snapv1.VolumeSnapshotStatus{{VolumeSnapshotName: "vmsnapshot-" + string(vms.UID) + "-volume-root", ReadyToUse: ptr.To(true)}}}
		if err := env.Client.Status().Update(ctx, content); err != nil {
			s.t.Fatal(err)
		}
		st.Phase, st.ReadyToUse = snapv1.Succeeded, ptr.To(true)
		st.VirtualMachineSnapshotContentName = ptr.To(content.Name)
		st.SnapshotVolumes = &snapv1.SnapshotVolumesLists{IncludedVolumes: []string{"root"}}
		st.Indications = []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotGuestAgentIndication}
		switch o {
		case noAgent:
			st.Indications = []snapv1.Indication{snapv1.VMSnapshotOnlineSnapshotIndication, snapv1.VMSnapshotNoGuestAgentIndication}
		case excluded:
			st.SnapshotVolumes = &snapv1.SnapshotVolumesLists{ExcludedVolumes: []string{"root"}}
		}
	}
	vms.Status = st
	if err := env.Client.Status().Update(ctx, vms); err != nil {
		s.t.Fatal(err)
	}
}

func vmStatus(p *nwv1.VMSnapshotPolicy, vm string) nwv1.VMSnapshotStatus {
	for _, v := range p.Status.VMs {
		if v.Name == vm {
			return v
		}
	}
	return nwv1.VMSnapshotStatus{}
}

// TestAScheduleKeepsTheGoodAndNeverDeletesTheLastGood runs an hourly policy on a fake clock
// through a day: the runs create a snapshot of each selected VM (and none of another), a
// failure burst never deletes the last good snapshot and makes the policy Degraded, the
// failures are deleted once a newer one is good, a snapshot KubeVirt never ends stops
// nothing, a run missed past its starting deadline is skipped or run once late as catchUp
// says, and a suspension is not caught up when lifted.
func TestAScheduleKeepsTheGoodAndNeverDeletesTheLastGood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	hour := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	s := start(t, hour(9, 30))
	hourly := map[string]string{"backup": "hourly"}
	s.vm("web", hourly)
	s.vm("app", hourly)
	s.vm("other", nil)
	name := func(vm string, h int) string { return vmsnapshotpolicy.SnapshotName("hourly", vm, hour(h, 0)) }

	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{MatchLabels: hourly},
			Schedule:   nwv1.SnapshotSchedule{Cron: "0 * * * *"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 2},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 2 || p.Status.NextRun == nil || !p.Status.NextRun.Time.Equal(hour(10, 0)) {
			return fmt.Sprintf("selected %d, next run %v; want 2 and 10:00", p.Status.Selected, p.Status.NextRun)
		}
		return ""
	})

	// 10:00: a snapshot of each selected VM, labelled, annotated, with the failure deadline.
	s.at(p, hour(10, 0).Add(5*time.Second))
	s.snapshotsAre("web", name("web", 10))
	s.snapshotsAre("app", name("app", 10))
	if got := s.snapshots("other"); len(got) != 0 {
		t.Errorf("the VM the selector does not select has snapshots %v", got)
	}
	made := &snapv1.VirtualMachineSnapshot{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name("web", 10)}, made); err != nil {
		t.Fatal(err)
	}
	if made.Spec.Source.Name != "web" || made.Spec.Source.Kind != "VirtualMachine" || made.Spec.FailureDeadline == nil || made.Spec.FailureDeadline.Duration != 10*time.Minute ||
		made.Annotations[nwv1.AnnotationSnapshotPolicyUID] != string(p.UID) || made.Annotations[nwv1.AnnotationSnapshotVolumes] != "root" ||
		made.Annotations[nwv1.AnnotationSnapshotScheduled] != "2026-11-30T10:00:00Z" {
		t.Errorf("the snapshot made: spec %+v, annotations %v", made.Spec, made.Annotations)
	}
	s.play(name("web", 10), good)
	s.play(name("app", 10), good)
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		web := vmStatus(p, "web")
		if web.LastGood == nil || web.LastGood.Name != name("web", 10) || web.Kept != 1 || p.Status.Kept != 2 ||
			!strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy), "True Running:") {
			return fmt.Sprintf("web %+v, kept %d, healthy %s", web, p.Status.Kept, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy))
		}
		return ""
	})

	// 11:00 to 13:00: web's freeze fails every time; app's runs are good. Web's last good
	// snapshot stays, its failures are kept as evidence, and from the second the policy is
	// Degraded; app keeps its last two.
	for h := 11; h <= 13; h++ {
		s.at(p, hour(h, 0).Add(5*time.Second))
		s.play(name("web", h), freezeErr)
		s.play(name("app", h), good)
		s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
			if web := vmStatus(p, "web"); web.ConsecutiveFailures != int32(h-10) || web.LastGood == nil || web.LastGood.Name != name("web", 10) {
				return fmt.Sprintf("at %d:00, web %+v", h, web)
			}
			return ""
		})
		want := []string{name("web", 10)}
		for f := 11; f <= h; f++ {
			want = append(want, name("web", f))
		}
		s.snapshotsAre("web", want...)
		s.snapshotsAre("app", name("app", h-1), name("app", h))
	}
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionDegraded); !strings.HasPrefix(got, "True ConsecutiveFailures: 1 VM(s) failed 3 or more runs in a row: web (3: phase Failed: failed to freeze the guest") {
			return "Degraded " + got
		}
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy); !strings.HasPrefix(got, "False Failing:") {
			return "Healthy " + got
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeWarning, vmsnapshotpolicy.ReasonDegraded, "web (3")

	// 14:00: web's run is good: its failures go, and it keeps its last two good ones.
	s.at(p, hour(14, 0).Add(5*time.Second))
	s.play(name("web", 14), good)
	s.play(name("app", 14), good)
	s.snapshotsAre("web", name("web", 10), name("web", 14))
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionDegraded); !strings.HasPrefix(got, "False ") {
			return "Degraded " + got
		}
		if web := vmStatus(p, "web"); web.ConsecutiveFailures != 0 || web.Kept != 2 || !slices.Equal(web.KeptSnapshots, []string{name("web", 14), name("web", 10)}) {
			return fmt.Sprintf("web %+v", web)
		}
		return ""
	})

	// 17:30, the operator down since 14:00: 15:00 and 16:00 are missed, 17:00 is past its
	// starting deadline (5m) and catchUp is Skip: no snapshot, and the status says why.
	s.at(p, hour(17, 30))
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		web := vmStatus(p, "web")
		if web.LastSkipped == nil || !web.LastSkipped.Scheduled.Time.Equal(hour(17, 0)) ||
			!strings.Contains(web.LastSkipped.Reason, "missed by 30m0s, more than the starting deadline 5m0s, and catchUp is Skip") {
			return fmt.Sprintf("web's last skipped %+v", web.LastSkipped)
		}
		if p.Status.LastSkipped == nil || !strings.HasPrefix(p.Status.LastSkipped.Reason, "app: ") {
			return fmt.Sprintf("the policy's last skipped %+v", p.Status.LastSkipped)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeWarning, vmsnapshotpolicy.ReasonRunSkipped, "web: 2 scheduled runs before 2026-11-30T17:00:00Z were missed")
	s.snapshotsAre("web", name("web", 10), name("web", 14))

	// catchUp RunOnce: at 19:20, 18:00 is missed and 19:00 runs, late, once. Web is at its
	// cap of two good snapshots, the newest good: the older one is deleted first.
	s.edit("hourly", func(p *nwv1.VMSnapshotPolicy) { p.Spec.CatchUp = nwv1.SnapshotCatchUpRunOnce })
	s.at(p, hour(19, 20))
	s.snapshotsAre("web", name("web", 14), name("web", 19))
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeNormal, vmsnapshotpolicy.ReasonSnapshotDeleted, "web: deleted "+name("web", 10), "at the cap of 2")
	// Its failure deadline counts from 19:20, when it was made, not from 19:00.
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if web := vmStatus(p, "web"); web.LastRun == nil || web.LastRun.Name != name("web", 19) || !strings.HasPrefix(web.LastRun.Reason, "InProgress") {
			return fmt.Sprintf("web's last run %+v", web.LastRun)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeNormal, vmsnapshotpolicy.ReasonSnapshotCreated, "web: created "+name("web", 19), "late: catchUp RunOnce")

	// KubeVirt never ends web's 19:00 snapshot: a minute past its failure deadline (19:30) it
	// counts as failed, and 20:00's run is not held by it; with the newest snapshot failed, the run
	// deletes nothing first.
	s.play(name("app", 19), good)
	s.at(p, hour(20, 0).Add(5*time.Second))
	s.snapshotsAre("web", name("web", 14), name("web", 19), name("web", 20))
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		web := vmStatus(p, "web")
		if web.LastFailed == nil || web.LastFailed.Name != name("web", 19) || !strings.Contains(web.LastFailed.Reason, "not ended 1m0s past its failure deadline of 10m0s") {
			return fmt.Sprintf("web's last failed %+v", web.LastFailed)
		}
		return ""
	})
	s.play(name("web", 20), good)
	s.play(name("app", 20), good)
	s.snapshotsAre("web", name("web", 14), name("web", 20))

	// Suspended: no run at 21:00; lifted at 22:30, the held runs are not caught up, even with
	// catchUp RunOnce.
	s.edit("hourly", func(p *nwv1.VMSnapshotPolicy) { p.Spec.Suspend = true })
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if !strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionSuspended), "True Suspended:") || p.Status.NextRun != nil {
			return fmt.Sprintf("suspended %s, next run %v", testenv.ConditionText(p.Status.Conditions, nwv1.ConditionSuspended), p.Status.NextRun)
		}
		return ""
	})
	s.at(p, hour(21, 0).Add(5*time.Second))
	s.clock.SetTime(hour(22, 30))
	s.edit("hourly", func(p *nwv1.VMSnapshotPolicy) { p.Spec.Suspend = false })
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if !strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionSuspended), "False NotSuspended:") || p.Status.NextRun == nil || !p.Status.NextRun.Time.Equal(hour(23, 0)) {
			return fmt.Sprintf("suspended %s, next run %v", testenv.ConditionText(p.Status.Conditions, nwv1.ConditionSuspended), p.Status.NextRun)
		}
		return ""
	})
	s.snapshotsAre("web", name("web", 14), name("web", 20))

	// The policy deleted, its snapshots stay: they are backups, not its children.
	if err := env.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	s.snapshotsAre("web", name("web", 14), name("web", 20))
}

// TestWhatCountsAsGood: a snapshot of a running VM without the guest agent's freeze fails a
// policy that requires GuestAgent and is good, marked NoGuestAgent, under BestEffort; a
// snapshot that leaves out a volume of the VM is never good.
func TestWhatCountsAsGood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ten := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := start(t, ten.Add(-time.Minute))
	s.vm("strict-vm", map[string]string{"policy": "strict"})
	s.vm("excluded-vm", map[string]string{"policy": "strict"})
	s.vm("lenient-vm", map[string]string{"policy": "lenient"})
	for _, c := range []struct {
		name string
		need nwv1.SnapshotConsistency
	}{{"strict", nwv1.SnapshotGuestAgent}, {"lenient", nwv1.SnapshotBestEffort}} {
		p := &nwv1.VMSnapshotPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: c.name},
			Spec: nwv1.VMSnapshotPolicySpec{
				VMSelector:  nwv1.VMSelector{MatchLabels: map[string]string{"policy": c.name}},
				Schedule:    nwv1.SnapshotSchedule{Cron: "@hourly"},
				Retention:   nwv1.SnapshotRetention{KeepLast: 1},
				Consistency: nwv1.SnapshotConsistencySpec{Require: c.need},
			},
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		s.policy(c.name, func(p *nwv1.VMSnapshotPolicy) string {
			if p.Status.NextRun == nil || p.Status.Selected == 0 {
				return "no next run yet"
			}
			return ""
		})
	}
	s.clock.SetTime(ten.Add(5 * time.Second))
	for _, name := range []string{"strict", "lenient"} {
		s.at(&nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}, ten.Add(5*time.Second))
	}
	s.play(vmsnapshotpolicy.SnapshotName("strict", "strict-vm", ten), noAgent)
	s.play(vmsnapshotpolicy.SnapshotName("strict", "excluded-vm", ten), excluded)
	s.play(vmsnapshotpolicy.SnapshotName("lenient", "lenient-vm", ten), noAgent)
	s.policy("strict", func(p *nwv1.VMSnapshotPolicy) string {
		strict, ex := vmStatus(p, "strict-vm"), vmStatus(p, "excluded-vm")
		if strict.LastFailed == nil || !strings.Contains(strict.LastFailed.Reason, "without the guest agent's freeze") || strict.LastGood != nil {
			return fmt.Sprintf("strict-vm %+v", strict)
		}
		if ex.LastFailed == nil || !strings.Contains(ex.LastFailed.Reason, "volume root not included (KubeVirt excluded root") || ex.LastGood != nil {
			return fmt.Sprintf("excluded-vm %+v", ex)
		}
		return ""
	})
	// strict-vm's guest is left frozen after its failed snapshot (kubevirt#9998): said, not
	// thawed; once thawed, no longer said.
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "strict-vm"},
		Status: virtv1.VirtualMachineInstanceStatus{FSFreezeStatus: "frozen"}}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	strict := &nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "strict"}}
	s.at(strict, ten.Add(6*time.Second))
	s.policy("strict", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "strict-vm"); !v.GuestFrozen || vmStatus(p, "excluded-vm").GuestFrozen ||
			!strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy), "False GuestLeftFrozen: the guest of strict-vm was left frozen") {
			return fmt.Sprintf("strict-vm %+v, healthy %s", v, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy))
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeWarning, vmsnapshotpolicy.ReasonGuestFrozen, "strict-vm: the guest's file systems are frozen")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		t.Fatal(err)
	}
	if vmi.Status.FSFreezeStatus != "frozen" {
		t.Errorf("the policy thawed the guest: fsFreezeStatus %q", vmi.Status.FSFreezeStatus)
	}
	vmi.Status.FSFreezeStatus = ""
	if err := env.Client.Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	s.at(strict, ten.Add(7*time.Second))
	s.policy("strict", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "strict-vm"); v.GuestFrozen || !strings.HasPrefix(testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy), "False Failing:") {
			return fmt.Sprintf("strict-vm %+v, healthy %s", v, testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy))
		}
		return ""
	})

	s.policy("lenient", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "lenient-vm"); v.LastGood == nil || !v.LastGood.NoGuestAgent || v.LastRun == nil || !v.LastRun.NoGuestAgent || v.Kept != 1 {
			return fmt.Sprintf("lenient-vm %+v", v)
		}
		return ""
	})

	// The VM deleted and made again under its name: the new VM's good snapshot does not push
	// the old VM's out (keepLast 1), since those are the only copy of what the old one held.
	old := vmsnapshotpolicy.SnapshotName("lenient", "lenient-vm", ten)
	if err := env.Client.Delete(ctx, &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "lenient-vm"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, wait, func() string {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "lenient-vm"}, &virtv1.VirtualMachine{})
		if !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the VM is still there (%v)", err)
		}
		return ""
	})
	s.policy("lenient", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 0 {
			return "the deleted VM is still selected"
		}
		return ""
	})
	s.vm("lenient-vm", map[string]string{"policy": "lenient"})
	s.policy("lenient", func(p *nwv1.VMSnapshotPolicy) string {
		if vmStatus(p, "lenient-vm").LastScheduled == nil {
			return "the new VM is not selected yet"
		}
		return ""
	})
	// Its runs start when it is first seen: the next is 12:00.
	twelve := ten.Add(2 * time.Hour)
	s.at(&nwv1.VMSnapshotPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "lenient"}}, twelve.Add(5*time.Second))
	s.play(vmsnapshotpolicy.SnapshotName("lenient", "lenient-vm", twelve), good)
	s.policy("lenient", func(p *nwv1.VMSnapshotPolicy) string {
		if v := vmStatus(p, "lenient-vm"); v.LastGood == nil || v.LastGood.Name != vmsnapshotpolicy.SnapshotName("lenient", "lenient-vm", twelve) || v.Kept != 1 {
			return fmt.Sprintf("lenient-vm %+v", v)
		}
		return ""
	})
	s.snapshotsAre("lenient-vm", old, vmsnapshotpolicy.SnapshotName("lenient", "lenient-vm", twelve))
}

// TestARunIsPutOffWhileNodeWorkHoldsTheCluster: while a bond flip holds the cluster-wide
// workflows' claim, and which nodes it changes is not known, a due run makes no snapshot and
// its status says why; once the flip gives the claim up, the run goes ahead within its
// starting deadline. Not parallel: the claim is the cluster's.
func TestARunIsPutOffWhileNodeWorkHoldsTheCluster(t *testing.T) {
	ctx := context.Background()
	ten := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := start(t, ten.Add(-time.Minute))
	s.vm("web", map[string]string{"backup": "hourly"})
	// Its status says no step: which nodes it changes is not known.
	flip, claim := s.holdTheClaim(nil)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"backup": "hourly"}},
			Schedule:   nwv1.SnapshotSchedule{Cron: "@hourly"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 2},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 1 {
			return "not running yet"
		}
		return ""
	})
	s.at(p, ten.Add(5*time.Second))
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		web := vmStatus(p, "web")
		if web.LastSkipped == nil || !strings.HasPrefix(web.LastSkipped.Reason, "put off: BondModeFlipPlan "+flip.Name+" holds the cluster (node work)") ||
			p.Status.LastSkipped == nil || !strings.HasPrefix(p.Status.LastSkipped.Reason, "web: put off") {
			return fmt.Sprintf("web's last skipped %+v, the policy's %+v", web.LastSkipped, p.Status.LastSkipped)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeNormal, vmsnapshotpolicy.ReasonRunPutOff, "web: put off: BondModeFlipPlan "+flip.Name)
	if got := s.snapshots("web"); len(got) != 0 {
		t.Fatalf("a snapshot was made while the flip held the cluster: %v", got)
	}

	goesAhead := func(at, run time.Time) {
		t.Helper()
		s.at(p, at)
		want := []string{vmsnapshotpolicy.SnapshotName("hourly", "web", ten)}
		if !run.Equal(ten) {
			want = append(want, vmsnapshotpolicy.SnapshotName("hourly", "web", run))
		}
		s.snapshotsAre("web", want...)
		s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
			if web := vmStatus(p, "web"); web.LastSkipped != nil || web.LastRun == nil || p.Status.LastSkipped != nil {
				return fmt.Sprintf("web %+v, the policy's last skipped %+v", web, p.Status.LastSkipped)
			}
			return ""
		})
	}

	// The flip fails, and keeps the claim until a person deletes it; no node work goes on, and
	// at 10:03, within the starting deadline, the run goes ahead. Its put-off is no longer the
	// last skipped run, the VM's or the policy's.
	flip.Status.Phase = nwv1.WorkflowFailed
	if err := env.Client.Status().Update(ctx, flip); err != nil {
		t.Fatal(err)
	}
	goesAhead(ten.Add(3*time.Minute), ten)

	// 11:00, the flip running again: put off; once it gives the claim up, at 11:02, it goes ahead.
	s.play(vmsnapshotpolicy.SnapshotName("hourly", "web", ten), good)
	flip.Status.Phase = nwv1.WorkflowRunning
	if err := env.Client.Status().Update(ctx, flip); err != nil {
		t.Fatal(err)
	}
	eleven := ten.Add(time.Hour)
	s.at(p, eleven.Add(5*time.Second))
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if web := vmStatus(p, "web"); web.LastSkipped == nil || !web.LastSkipped.Scheduled.Time.Equal(eleven) || !strings.HasPrefix(web.LastSkipped.Reason, "put off:") {
			return fmt.Sprintf("web's last skipped %+v", web.LastSkipped)
		}
		return ""
	})
	claim.Spec.HolderIdentity = nil
	if err := env.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	goesAhead(eleven.Add(2*time.Minute), eleven)
}

// holdTheClaim makes a bond flip of the nodes in order, Running with steps, hold the
// cluster-wide workflows' claim until the test ends.
func (s *site) holdTheClaim(order []string, steps ...nwv1.WorkflowStep) (*nwv1.BondModeFlipPlan, *coordinationv1.Lease) {
	s.t.Helper()
	ctx := context.Background()
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "flip-" + s.ns}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad", NodeOrder: order}}
	if err := env.Client.Create(ctx, flip); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), flip) })
	flip.Status.Phase, flip.Status.Steps = nwv1.WorkflowRunning, steps
	if err := env.Client.Status().Update(ctx, flip); err != nil {
		s.t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lockNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatal(err)
	}
	claim := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lockNamespace, Name: "nodewright-workflow"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("BondModeFlipPlan/" + flip.Name + "/" + string(flip.UID))}}
	if err := env.Client.Create(ctx, claim); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	return flip, claim
}

// linstorVolume binds the claim of the VM's volume (s.vm names it <vm>-root) to a new LINSTOR
// volume, and returns its DRBD resource.
func (s *site) linstorVolume(vm string) string {
	s.t.Helper()
	ctx := context.Background()
	name := "pvc-" + string(uuid.NewUUID())
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity: size, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "linstor.csi.linbit.com", VolumeHandle: name}},
		ClaimRef:               &corev1.ObjectReference{Namespace: s.ns, Name: vm + "-root"},
	}}
	if err := env.Client.Create(ctx, pv); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pv) })
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: vm + "-root"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: pv.Spec.AccessModes, Resources: corev1.VolumeResourceRequirements{Requests: size}, VolumeName: name}}
	if err := env.Client.Create(ctx, pvc); err != nil {
		s.t.Fatal(err)
	}
	return name
}

// inSync is a node's report of a DRBD resource whose disk is UpToDate, Connected and
// Established with each peer's UpToDate disk.
func inSync(resource string, peers ...string) nwv1.DRBDResourceStatus {
	r := nwv1.DRBDResourceStatus{Name: resource, Role: "Secondary", Volumes: []nwv1.DRBDVolumeStatus{{DiskState: "UpToDate"}}}
	for _, p := range peers {
		r.Peers = append(r.Peers, nwv1.DRBDPeerStatus{Name: p, ConnectionState: "Connected", Role: "Secondary",
			Volumes: []nwv1.DRBDPeerVolumeStatus{{ReplicationState: "Established", PeerDiskState: "UpToDate"}}})
	}
	return r
}

// report writes what the node's agent reports of its DRBD resources, until the test ends.
func (s *site) report(node string, resources ...nwv1.DRBDResourceStatus) {
	s.t.Helper()
	ctx := context.Background()
	a := &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, a); apierrors.IsAlreadyExists(err) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
			s.t.Fatal(err)
		}
	} else if err != nil {
		s.t.Fatal(err)
	} else {
		s.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), a) })
	}
	a.Status.Reporter = nwv1.ReporterAgent
	a.Status.Storage = &nwv1.DRBDStatus{Resources: int32(len(resources)), ResourceStatuses: resources}
	if err := env.Client.Status().Update(ctx, a); err != nil {
		s.t.Fatal(err)
	}
}

// TestARunIsPutOffWhileAReplicaIsOutOfSync: a VM whose LINSTOR volume has a replica
// synchronising makes no snapshot, its status naming the resource, the node and how far it
// is; once the agents report it UpToDate and Established, the run goes ahead within its
// starting deadline. A VM not on LINSTOR is not held by it.
func TestARunIsPutOffWhileAReplicaIsOutOfSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ten := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := start(t, ten.Add(-time.Minute))
	hourly := map[string]string{"backup": "hourly"}
	s.vm("db", hourly)
	s.vm("web", hourly) // its claim is not there: not on LINSTOR
	res := s.linstorVolume("db")
	a, b := s.ns+"-a", s.ns+"-b"
	source, target := inSync(res, b), inSync(res, a)
	source.Peers[0].Volumes[0] = nwv1.DRBDPeerVolumeStatus{ReplicationState: "SyncSource", PeerDiskState: "Inconsistent", OutOfSyncKiB: 1234}
	target.Volumes[0].DiskState = "Inconsistent"
	target.Peers[0].Volumes[0] = nwv1.DRBDPeerVolumeStatus{ReplicationState: "SyncTarget", PeerDiskState: "UpToDate", OutOfSyncKiB: 1234}
	s.report(a, source)
	s.report(b, target)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{MatchLabels: hourly}, Schedule: nwv1.SnapshotSchedule{Cron: "@hourly"},
			Retention: nwv1.SnapshotRetention{KeepLast: 2}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 2 {
			return "not running yet"
		}
		return ""
	})

	s.at(p, ten.Add(5*time.Second))
	s.snapshotsAre("web", vmsnapshotpolicy.SnapshotName("hourly", "web", ten))
	why := "put off: replica of " + res + " on " + b + " is Inconsistent (SyncTarget); the run starts once it is in sync"
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if db := vmStatus(p, "db"); db.LastSkipped == nil || !strings.HasPrefix(db.LastSkipped.Reason, why) {
			return fmt.Sprintf("db's last skipped %+v", db.LastSkipped)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeNormal, vmsnapshotpolicy.ReasonRunPutOff, "db: "+why)
	if got := s.snapshots("db"); len(got) != 0 {
		t.Fatalf("a snapshot was made while a replica synchronised: %v", got)
	}

	// In sync: at 10:02 the run goes ahead.
	s.report(a, inSync(res, b))
	s.report(b, inSync(res, a))
	s.at(p, ten.Add(2*time.Minute))
	s.snapshotsAre("db", vmsnapshotpolicy.SnapshotName("hourly", "db", ten))
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if db := vmStatus(p, "db"); db.LastSkipped != nil || db.LastRun == nil {
			return fmt.Sprintf("db %+v", db)
		}
		return ""
	})
}

// TestNodeWorkPutsOffOnlyTheRunsOfItsNodesVMs: while a flip holds the claim, the run of a VM
// with a replica on the node it changes is put off, naming the node, and that of a VM whose
// replicas are elsewhere goes ahead; once the flip moves on to another node, the first goes
// ahead, and a VM running on that node is put off. Not parallel: the claim is the cluster's.
func TestNodeWorkPutsOffOnlyTheRunsOfItsNodesVMs(t *testing.T) {
	ctx := context.Background()
	ten := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := start(t, ten.Add(-time.Minute))
	hourly := map[string]string{"backup": "hourly"}
	s.vm("near", hourly)
	s.vm("far", hourly)
	nearRes, farRes := s.linstorVolume("near"), s.linstorVolume("far")
	a, b, c, d := s.ns+"-a", s.ns+"-b", s.ns+"-c", s.ns+"-d"
	s.report(a, inSync(nearRes, b))
	s.report(b, inSync(nearRes, a), inSync(farRes, c))
	s.report(c, inSync(farRes, b))
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "far"}, Status: virtv1.VirtualMachineInstanceStatus{NodeName: d}}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	flip, _ := s.holdTheClaim([]string{a, d}, nwv1.WorkflowStep{Name: "Preflight", State: nwv1.StepSucceeded}, nwv1.WorkflowStep{Name: "Node1", State: nwv1.StepRunning})
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{MatchLabels: hourly}, Schedule: nwv1.SnapshotSchedule{Cron: "@hourly"},
			Retention: nwv1.SnapshotRetention{KeepLast: 2}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p = s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 2 {
			return "not running yet"
		}
		return ""
	})
	name := func(vm string, t time.Time) string { return vmsnapshotpolicy.SnapshotName("hourly", vm, t) }
	putOff := func(vm string, scheduled time.Time, why string) {
		t.Helper()
		s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
			if v := vmStatus(p, vm); v.LastSkipped == nil || !v.LastSkipped.Scheduled.Time.Equal(scheduled) || !strings.HasPrefix(v.LastSkipped.Reason, why) {
				return fmt.Sprintf("%s's last skipped %+v", vm, v.LastSkipped)
			}
			return ""
		})
	}

	// 10:00, the flip changing a: near, with a replica there, is put off; far goes ahead.
	s.at(p, ten.Add(5*time.Second))
	s.snapshotsAre("far", name("far", ten))
	putOff("near", ten, "put off: BondModeFlipPlan "+flip.Name+" holds the cluster (node work) and changes "+a+", which holds a replica of "+nearRes+
		"; the run starts once it has moved on from "+a)
	if got := s.snapshots("near"); len(got) != 0 {
		t.Fatalf("a snapshot was made while the flip changed a node of its replicas: %v", got)
	}

	// 10:02, the flip moved on to d: near goes ahead.
	flip.Status.Steps = []nwv1.WorkflowStep{{Name: "Preflight", State: nwv1.StepSucceeded}, {Name: "Node1", State: nwv1.StepSucceeded}, {Name: "Node2", State: nwv1.StepRunning}}
	if err := env.Client.Status().Update(ctx, flip); err != nil {
		t.Fatal(err)
	}
	s.at(p, ten.Add(2*time.Minute))
	s.snapshotsAre("near", name("near", ten))

	// 11:00, the flip still on d, where far runs: far is put off, near goes ahead.
	s.play(name("near", ten), good)
	s.play(name("far", ten), good)
	eleven := ten.Add(time.Hour)
	s.at(p, eleven.Add(5*time.Second))
	s.snapshotsAre("near", name("near", ten), name("near", eleven))
	putOff("far", eleven, "put off: BondModeFlipPlan "+flip.Name+" holds the cluster (node work) and changes "+d+", where the VM runs")
	s.snapshotsAre("far", name("far", ten))
}

// TestADaylightSavingChange runs a daily 02:30 policy in Berlin through both changes of 2026:
// on 29 March 02:30 does not exist, and the day has no run, with nothing said missed; on 25
// October 02:30 comes twice, and runs once, at the first.
func TestADaylightSavingChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(month time.Month, day, h, m int) time.Time {
		return time.Date(2026, month, day, h, m, 0, 0, berlin)
	}
	s := start(t, at(3, 28, 1, 0))
	s.vm("web", nil)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "nightly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{Names: []string{"web"}},
			Schedule:   nwv1.SnapshotSchedule{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 5},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	// skippedBefore: the policy's last skipped run, if any, is one before it (the months the
	// test leaves out between the changes are skipped, and said so).
	var skippedBefore time.Time
	next := func(want time.Time) {
		t.Helper()
		s.policy("nightly", func(p *nwv1.VMSnapshotPolicy) string {
			if p.Status.NextRun == nil || !p.Status.NextRun.Time.Equal(want) ||
				(p.Status.LastSkipped != nil && !p.Status.LastSkipped.Scheduled.Time.Before(skippedBefore)) {
				return fmt.Sprintf("next run %v, last skipped %+v; want %s, none since %s", p.Status.NextRun, p.Status.LastSkipped, want, skippedBefore)
			}
			return ""
		})
	}
	run := func(when time.Time, want ...time.Time) {
		t.Helper()
		s.at(p, when)
		var names []string
		for _, w := range want {
			names = append(names, vmsnapshotpolicy.SnapshotName("nightly", "web", w))
		}
		s.snapshotsAre("web", names...)
	}
	// reconciledAt sets the clock and waits until the controller has looked at the policy
	// then: a change of its spec (keepLast, 5 or 6) is observed.
	reconciledAt := func(when time.Time) {
		t.Helper()
		s.clock.SetTime(when)
		s.edit("nightly", func(p *nwv1.VMSnapshotPolicy) { p.Spec.Retention.KeepLast = 11 - p.Spec.Retention.KeepLast })
		s.policy("nightly", func(p *nwv1.VMSnapshotPolicy) string {
			if p.Status.ObservedGeneration != p.Generation {
				return fmt.Sprintf("generation %d not observed yet (%d)", p.Generation, p.Status.ObservedGeneration)
			}
			return ""
		})
	}
	next(at(3, 28, 2, 30))
	run(at(3, 28, 2, 30).Add(5*time.Second), at(3, 28, 2, 30))
	s.play(vmsnapshotpolicy.SnapshotName("nightly", "web", at(3, 28, 2, 30)), good)
	// The spring change: at 03:30 CEST on the 29th no run was due, and none is missed.
	next(at(3, 30, 2, 30))
	reconciledAt(at(3, 29, 3, 30))
	s.snapshotsAre("web", vmsnapshotpolicy.SnapshotName("nightly", "web", at(3, 28, 2, 30)))
	next(at(3, 30, 2, 30))
	run(at(3, 30, 2, 30).Add(5*time.Second), at(3, 28, 2, 30), at(3, 30, 2, 30))
	s.play(vmsnapshotpolicy.SnapshotName("nightly", "web", at(3, 30, 2, 30)), good)

	// The autumn change: 02:30 CEST runs; 02:30 CET, an hour later, does not.
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC) // 02:30 CEST
	skippedBefore = first
	s.at(p, first.Add(-time.Hour))
	next(first)
	run(first.Add(5*time.Second), at(3, 28, 2, 30), at(3, 30, 2, 30), first)
	s.play(vmsnapshotpolicy.SnapshotName("nightly", "web", first), good)
	next(at(10, 26, 2, 30))
	reconciledAt(first.Add(time.Hour + 5*time.Second)) // 02:30 CET
	run(first.Add(time.Hour+10*time.Second), at(3, 28, 2, 30), at(3, 30, 2, 30), first)
	next(at(10, 26, 2, 30))
}

// TestAPolicyOverItsBoundSaysSo: a policy that selects more VMs than it snapshots (500) says
// so in Healthy and in a Warning Event, naming how many are left out and from which.
func TestAPolicyOverItsBoundSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, time.Date(2026, 11, 30, 9, 30, 0, 0, time.UTC))
	for i := range nwv1.MaxSnapshotPolicyVMs + 2 {
		vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("vm-%03d", i), Labels: map[string]string{"fleet": "all"}},
			Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted), Template: &virtv1.VirtualMachineInstanceTemplateSpec{}}}
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "all"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"fleet": "all"}},
			Schedule: nwv1.SnapshotSchedule{Cron: "@daily"}, Retention: nwv1.SnapshotRetention{KeepLast: 1}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	const want = "False TooManyVMs: the selector selects 502 VMs: only the first 500 by name are snapshotted, the 2 after vm-499 are not"
	s.policy("all", func(p *nwv1.VMSnapshotPolicy) string {
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionHealthy); !strings.HasPrefix(got, want) || len(p.Status.VMs) != 500 || p.Status.Selected != 502 {
			return fmt.Sprintf("healthy %s, %d VMs in status, selected %d", got, len(p.Status.VMs), p.Status.Selected)
		}
		return ""
	})
	testenv.EventSaid(t, env.Client, wait, "VMSnapshotPolicy", corev1.EventTypeWarning, vmsnapshotpolicy.ReasonTooManyVMs, "the 2 after vm-499 are not")
}

// TestAFailureStreakOutlivesItsSnapshots: retention keeps only the newest failures of a burst,
// yet the streak is counted whole, so a degradedAfter above that still turns the policy
// Degraded.
func TestAFailureStreakOutlivesItsSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	hour := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	s := start(t, hour(9).Add(30*time.Minute))
	s.vm("web", nil)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{Names: []string{"web"}}, Schedule: nwv1.SnapshotSchedule{Cron: "@hourly"},
			Retention: nwv1.SnapshotRetention{KeepLast: 1}, DegradedAfter: 5},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	name := func(h int) string { return vmsnapshotpolicy.SnapshotName("hourly", "web", hour(h)) }
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.NextRun == nil {
			return "no next run yet"
		}
		return ""
	})
	s.at(p, hour(10).Add(5*time.Second))
	s.play(name(10), good)
	for h := 11; h <= 16; h++ {
		s.at(p, hour(h).Add(5*time.Second))
		s.play(name(h), freezeErr)
		s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
			if web := vmStatus(p, "web"); web.ConsecutiveFailures != int32(h-10) || web.LastFailed == nil || web.LastFailed.Name != name(h) {
				return fmt.Sprintf("at %d:00, web %+v", h, web)
			}
			return ""
		})
		want := []string{name(10)}
		for f := max(11, h-vmsnapshot.MaxFailedKept+1); f <= h; f++ {
			want = append(want, name(f))
		}
		s.snapshotsAre("web", want...)
		degraded := testenv.ConditionText(s.policy("hourly", func(*nwv1.VMSnapshotPolicy) string { return "" }).Status.Conditions, nwv1.ConditionDegraded)
		if h-10 < 5 && strings.HasPrefix(degraded, "True") {
			t.Errorf("at %d:00, %d failures: Degraded %s before degradedAfter 5", h, h-10, degraded)
		}
	}
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if got := testenv.ConditionText(p.Status.Conditions, nwv1.ConditionDegraded); !strings.HasPrefix(got, "True ConsecutiveFailures: 1 VM(s) failed 5 or more runs in a row: web (6:") {
			return "Degraded " + got
		}
		return ""
	})
}

// TestASnapshotBeingRestoredIsKept: retention does not delete a snapshot a
// VirtualMachineRestore not ended restores from; once the restore is complete, it does.
func TestASnapshotBeingRestoredIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	hour := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	s := start(t, hour(9).Add(30*time.Minute))
	s.vm("web", nil)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{Names: []string{"web"}}, Schedule: nwv1.SnapshotSchedule{Cron: "@hourly"},
			Retention: nwv1.SnapshotRetention{KeepLast: 1}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	name := func(h int) string { return vmsnapshotpolicy.SnapshotName("hourly", "web", hour(h)) }
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.NextRun == nil {
			return "no next run yet"
		}
		return ""
	})
	s.at(p, hour(10).Add(5*time.Second))
	s.play(name(10), good)
	restore := &snapv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "back"},
		Spec: snapv1.VirtualMachineRestoreSpec{VirtualMachineSnapshotName: name(10),
			Target: corev1.TypedLocalObjectReference{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "web"}}}
	if err := env.Client.Create(ctx, restore); err != nil {
		t.Fatal(err)
	}
	// 11:00, keepLast 1: the 10:00 snapshot would go, but the restore uses it.
	s.at(p, hour(11).Add(5*time.Second))
	s.play(name(11), good)
	s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
		if web := vmStatus(p, "web"); web.LastGood == nil || web.LastGood.Name != name(11) {
			return fmt.Sprintf("web %+v", web)
		}
		return ""
	})
	s.at(p, hour(11).Add(time.Minute))
	s.snapshotsAre("web", name(10), name(11))
	// The restore complete, retention deletes it.
	restore.Status = &snapv1.VirtualMachineRestoreStatus{Complete: ptr.To(true)}
	if err := env.Client.Status().Update(ctx, restore); err != nil {
		t.Fatal(err)
	}
	s.at(p, hour(11).Add(2*time.Minute))
	s.snapshotsAre("web", name(11))
}

// TestKeepDailyAndWeeklyAcrossDays runs a nightly policy in Berlin for 17 days on the fake
// clock, against the API server: keepDaily and keepWeekly keep the newest good snapshot of
// each of the last days and ISO weeks of Berlin's calendar, and the others go.
func TestKeepDailyAndWeeklyAcrossDays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	night := func(day int) time.Time { return time.Date(2026, 11, day, 23, 30, 0, 0, berlin) }
	s := start(t, night(2).Add(-time.Hour)) // Monday 2 November, week 45
	s.vm("web", nil)
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "nightly"},
		Spec: nwv1.VMSnapshotPolicySpec{VMSelector: nwv1.VMSelector{Names: []string{"web"}},
			Schedule:  nwv1.SnapshotSchedule{Cron: "30 23 * * *", TimeZone: "Europe/Berlin"},
			Retention: nwv1.SnapshotRetention{KeepLast: 1, KeepDaily: 3, KeepWeekly: 2}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	s.policy("nightly", func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.NextRun == nil || !p.Status.NextRun.Time.Equal(night(2)) {
			return fmt.Sprintf("next run %v", p.Status.NextRun)
		}
		return ""
	})
	name := func(day int) string { return vmsnapshotpolicy.SnapshotName("nightly", "web", night(day)) }
	names := func(days ...int) []string {
		var out []string
		for _, d := range days {
			out = append(out, name(d))
		}
		return out
	}
	for day := 2; day <= 18; day++ {
		s.at(p, night(day).Add(5*time.Second))
		s.play(name(day), good)
		s.policy("nightly", func(p *nwv1.VMSnapshotPolicy) string {
			if web := vmStatus(p, "web"); web.LastGood == nil || web.LastGood.Name != name(day) {
				return fmt.Sprintf("on the %d, web %+v", day, web)
			}
			return ""
		})
		switch day {
		case 11: // Wednesday of week 46: the last three days, and week 45's newest (Sunday the 8th)
			s.at(p, night(day).Add(time.Minute))
			s.snapshotsAre("web", names(11, 10, 9, 8)...)
		case 18: // Wednesday of week 47: the last three days, and week 46's newest (the 15th)
			s.at(p, night(day).Add(time.Minute))
			s.snapshotsAre("web", names(18, 17, 16, 15)...)
		}
	}
}

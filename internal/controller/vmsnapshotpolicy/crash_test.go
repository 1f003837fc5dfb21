package vmsnapshotpolicy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmsnapshotpolicy"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestTheOperatorKilledMidRun kills the operator in the middle of a run, twice, and starts a
// new one each time:
//
//   - right after the first of a run's deletions at the cap, before any snapshot of the run
//     is made: the new operator makes the run's snapshots, deletes what the cap drops, and
//     never the snapshot the first one kept;
//   - right after the first snapshot of a run is made, before the others and the status: the
//     new operator makes the others, once each, and records the run.
func TestTheOperatorKilledMidRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	hour := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour) }
	s := newSite(t, hour(9).Add(30*time.Minute))
	vms := []string{"a", "b", "c"}
	for _, vm := range vms {
		s.vm(vm, map[string]string{"backup": "hourly"})
	}
	name := func(vm string, h int) string { return vmsnapshotpolicy.SnapshotName("hourly", vm, hour(h)) }
	p := &nwv1.VMSnapshotPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "hourly"},
		Spec: nwv1.VMSnapshotPolicySpec{
			VMSelector: nwv1.VMSelector{MatchLabels: map[string]string{"backup": "hourly"}},
			Schedule:   nwv1.SnapshotSchedule{Cron: "0 * * * *"},
			Retention:  nwv1.SnapshotRetention{KeepLast: 2},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	crashAt := func(at func(testenv.Write) bool) {
		t.Helper()
		k := testenv.NewCrash(at)
		env.RunUntilCrash(t, k, s.cacheOptions(), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
			return s.reconciler(c, r, mgr.GetEventRecorderFor("vmsnapshotpolicy-crashing")).SetupWithManager(mgr)
		})
	}
	ready := func(p *nwv1.VMSnapshotPolicy) string {
		if p.Status.Selected != 3 || p.Status.NextRun == nil {
			return "not running yet"
		}
		return ""
	}

	// 10:00 and 11:00, good, with an operator that is not killed: each VM is at its cap of two.
	func() {
		defer s.startOperator()()
		p = s.policy("hourly", ready)
		for _, h := range []int{10, 11} {
			s.at(p, hour(h).Add(5*time.Second))
			for _, vm := range vms {
				s.play(name(vm, h), good)
			}
			s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
				for _, vm := range vms {
					if v := vmStatus(p, vm); v.LastGood == nil || v.LastGood.Name != name(vm, h) {
						return fmt.Sprintf("%s: %+v", vm, v)
					}
				}
				return ""
			})
		}
	}()

	// 12:00: killed right after the first deletion at the cap.
	s.clock.SetTime(hour(12).Add(5 * time.Second))
	crashAt(func(w testenv.Write) bool {
		_, ok := w.Object.(*snapv1.VirtualMachineSnapshot)
		return ok && w.Deleted
	})
	// Killed right after the first deletion: one VM lost its 10:00 snapshot, none has 12:00.
	left := 0
	for _, vm := range vms {
		left += len(s.snapshots(vm))
	}
	if left != 2*len(vms)-1 {
		t.Fatalf("%d snapshots after the crash, want %d: the crash was not right after the first deletion", left, 2*len(vms)-1)
	}
	stop := s.startOperator()
	recorded := func(h int) {
		t.Helper()
		s.policy("hourly", func(p *nwv1.VMSnapshotPolicy) string {
			for _, vm := range vms {
				if v := vmStatus(p, vm); v.LastRun == nil || v.LastRun.Name != name(vm, h) || v.LastGood == nil || v.LastGood.Name != name(vm, h) || v.Kept != 2 {
					return fmt.Sprintf("%s: %+v", vm, v)
				}
			}
			return ""
		})
	}
	for _, vm := range vms {
		s.snapshotsAre(vm, name(vm, 11), name(vm, 12))
		s.play(name(vm, 12), good)
	}
	recorded(12)
	stop()

	// 13:00: killed right after the run's first snapshot is made (its VM's deletion before
	// it done): the new operator makes the others, and does not delete again for the first.
	s.clock.SetTime(hour(13).Add(5 * time.Second))
	crashAt(func(w testenv.Write) bool {
		_, ok := w.Object.(*snapv1.VirtualMachineSnapshot)
		return ok && !w.Deleted && w.SubResource == ""
	})
	// KubeVirt ends that one before the new operator starts: planned again, its run would
	// find its VM at the cap with the newest good, and delete 12:00.
	made := 0
	for _, vm := range vms {
		if slices.Contains(s.snapshots(vm), name(vm, 13)) {
			s.play(name(vm, 13), good)
			made++
		}
	}
	if made != 1 {
		t.Fatalf("%d snapshots of 13:00 after the crash, want 1", made)
	}
	s.startOperator()
	for _, vm := range vms {
		s.snapshotsAre(vm, name(vm, 12), name(vm, 13))
		s.play(name(vm, 13), good)
	}
	recorded(13)
}

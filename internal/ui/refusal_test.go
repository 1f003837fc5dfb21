package ui

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func TestRefusalNamesTheField(t *testing.T) {
	gk := schema.GroupKind{Group: nwv1.GroupVersion.Group, Kind: "VMVolumeMigration"}
	denied := func(text string) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: gk.Group, Resource: "vmvolumemigrations"}, "m",
			errors.New(`admission webhook "vvmvolumemigration-v1alpha1.nodewright.spectrocloud.com" denied the request: `+text))
	}
	for _, tc := range []struct {
		name string
		err  error
		want []fieldError
	}{
		{"webhook, target class", denied("spec.target.storageClassName: local is TopoLVM, which cannot provide ReadWriteMany block volumes"),
			[]fieldError{{"spec.target.storageClassName", "spec.target.storageClassName: local is TopoLVM, which cannot provide ReadWriteMany block volumes"}}},
		{"webhook, VM", denied(`spec.vmName: VirtualMachine "x" not found in namespace a`),
			[]fieldError{{"spec.vmName", `spec.vmName: VirtualMachine "x" not found in namespace a`}}},
		{"webhook, no field", denied("checking the migration: boom"), []fieldError{{"", "checking the migration: boom"}}},
		{"schema, two fields", apierrors.NewInvalid(gk, "m", field.ErrorList{
			field.Invalid(field.NewPath("spec", "vmName"), "Web", "must match"),
			field.Required(field.NewPath("spec", "target", "storageClassName"), ""),
		}), []fieldError{
			{"spec.vmName", `spec.vmName: Invalid value: "Web": must match`},
			{"spec.target.storageClassName", "spec.target.storageClassName: Required value"},
		}},
		{"not found", apierrors.NewNotFound(schema.GroupResource{Resource: "vmvolumemigrations"}, "m"),
			[]fieldError{{"", `vmvolumemigrations "m" not found`}}},
		{"no API status", errors.New("connection refused"), []fieldError{{"", "connection refused"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusal(tc.err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("%d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestTimelineRecordsEachNewState(t *testing.T) {
	at := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	cluster := func(state string, gen int64) *nwv1.NodewrightCluster {
		c := &nwv1.NodewrightCluster{}
		c.Status.LegacyState, c.Status.LegacyGeneration = nwv1.LegacyState(state), gen
		c.Status.LegacyStateSince = &metav1.Time{Time: at}
		return c
	}
	var tl timeline
	steps := []struct {
		c         *nwv1.NodewrightCluster
		recorded  bool
		from, src string
		missed    int64
	}{
		{cluster("SINGLE_NODE_READY", 4), true, "", "status", 0},
		{cluster("SINGLE_NODE_READY", 4), false, "", "", 0}, // a heartbeat: nothing new
		{cluster("PEER_DETECTED", 5), true, "SINGLE_NODE_READY", "live", 0},
		{cluster("DRBD_CONNECTING", 9), true, "PEER_DETECTED", "live", 3},
		{cluster("", 10), false, "", "", 0}, // unreadable: the status says why, not the timeline
	}
	for i, s := range steps {
		got, ok := tl.observe(s.c, at)
		if ok != s.recorded || (ok && (got.From != s.from || got.Source != s.src || got.Missed != s.missed)) {
			t.Errorf("step %d: recorded %v %+v", i, ok, got)
		}
	}
	if len(tl.entries) != 3 {
		t.Errorf("%d entries", len(tl.entries))
	}
}

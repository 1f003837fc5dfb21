package nodewrightcluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

func clusterObject() *nwv1.NodewrightCluster {
	return &nwv1.NodewrightCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewright", Generation: 1},
		Spec: nwv1.NodewrightClusterSpec{Legacy: nwv1.LegacySource{
			ConfigMapRef: nwv1.NamespacedObjectReference{Namespace: "ns", Name: "cm"},
			DaemonSetRef: nwv1.NamespacedObjectReference{Namespace: "ns", Name: "ds"}, EventComponent: "c"}},
	}
}

// TestTickingHeartbeatChangesNothing is the zero-writes rule as a pure property: the status
// computed after heartbeats moved forward (all still fresh) equals the one before.
func TestTickingHeartbeatChangesNothing(t *testing.T) {
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	obsAt := func(hb time.Time) bridge.Observation {
		return bridge.Observation{Found: true, Legacy: legacy.Observation{State: legacy.MultiNodeReady,
			PreviousState: legacy.TaintsReleasing, Since: start, Generation: 14,
			Nodes: []legacy.Node{{Name: "a", Heartbeat: hb}, {Name: "b", Heartbeat: hb}}}}
	}
	nwc := clusterObject()
	first, _, _ := computeStatus(observed{configMap: obsAt(start), now: start.Add(time.Second), staleAfter: 30 * time.Second, cluster: nwc})
	nwc.Status = first
	for tick := 1; tick <= 6; tick++ {
		hb := start.Add(time.Duration(tick) * 10 * time.Second)
		next, anomalies, deadline := computeStatus(observed{configMap: obsAt(hb), now: hb.Add(time.Second), staleAfter: 30 * time.Second, cluster: nwc})
		if !equality.Semantic.DeepEqual(next, first) || len(anomalies) != 0 {
			t.Fatalf("tick %d changed the status:\n%+v\nvs\n%+v", tick, next, first)
		}
		if want := hb.Add(30*time.Second + time.Nanosecond); !deadline.Equal(want) {
			t.Errorf("tick %d: deadline %v, want %v", tick, deadline, want)
		}
	}
}

func TestRecentWarningsAreBoundedAndDeduplicated(t *testing.T) {
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	var in []nwv1.ClusterWarning
	for i := 0; i < 30; i++ {
		w := nwv1.ClusterWarning{Time: metav1.NewTime(base.Add(time.Duration(29-i) * time.Second)),
			Source: nwv1.WarningFromEvent, Reason: "R", Message: fmt.Sprint(29 - i)}
		in = append(in, w, w)
	}
	out := newestWarnings(in)
	if len(out) != maxWarnings {
		t.Fatalf("%d warnings kept, want %d", len(out), maxWarnings)
	}
	if out[0].Message != "10" || out[len(out)-1].Message != "29" {
		t.Errorf("kept %s..%s, want the newest 10..29 oldest first", out[0].Message, out[len(out)-1].Message)
	}
}

// TestWarningBurstIsStable feeds a burst of legacy Warning Events, more than the status
// keeps and all within one second, in a different order on each reconcile (the cache lists
// in no particular order) and expects the same status every time: otherwise each reconcile
// would write.
func TestWarningBurstIsStable(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	var events []corev1.Event
	for i := 0; i < maxWarnings+5; i++ {
		events = append(events, corev1.Event{Type: corev1.EventTypeWarning, Reason: "BondLinkDown",
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: fmt.Sprintf("n%02d", i)},
			Message:        "carrier lost", LastTimestamp: at})
	}
	nwc := clusterObject()
	obs := bridge.Observation{Found: true, Legacy: legacy.Observation{State: legacy.SingleNodeReady, Generation: 4}}
	first, _, _ := computeStatus(observed{configMap: obs, events: events, now: at.Time, staleAfter: time.Minute, cluster: nwc})
	nwc.Status = first
	slices.Reverse(events)
	second, _, _ := computeStatus(observed{configMap: obs, events: events, now: at.Time, staleAfter: time.Minute, cluster: nwc})
	if !equality.Semantic.DeepEqual(first.RecentWarnings, second.RecentWarnings) {
		t.Errorf("the same Events listed in another order changed the warnings:\n%+v\nvs\n%+v", first.RecentWarnings, second.RecentWarnings)
	}
}

// TestLongMessagesAreCutBetweenCharacters: a message cut inside a multi-byte character is
// not valid UTF-8, the API server stores it with U+FFFD instead, and the status computed
// next time never equals the stored one again, so every reconcile would write.
func TestLongMessagesAreCutBetweenCharacters(t *testing.T) {
	for n := range 3 { // shift the text so that the cut falls on each byte of a character
		pad := strings.Repeat("x", n)
		ev := corev1.Event{Type: corev1.EventTypeWarning, Reason: "Overheat",
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"},
			Message:        pad + strings.Repeat("€", 1000)}
		w := warningFromEvent(&ev)
		if !utf8.ValidString(w.Message) || len(w.Message) > 1024 {
			t.Errorf("padding %q: message of %d bytes, valid UTF-8 %v: ...%q", pad, len(w.Message), utf8.ValidString(w.Message), w.Message[len(w.Message)-8:])
		}
	}
}

// TestUnknownPreviousStateLeavesThePhaseToTheState: the legacy DaemonSet moved from a state
// it should not have written to MULTI_NODE_READY. The phase and StateRecognized follow state;
// the unchecked transition is a warning once, and the same ConfigMap observed again (a
// reconcile, a restart, the ConfigMap recreated) raises nothing more.
func TestUnknownPreviousStateLeavesThePhaseToTheState(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	data := map[string]string{legacy.KeyState: "MULTI_NODE_READY", legacy.KeyPreviousState: "WARP_DRIVE_ENGAGED",
		legacy.KeyStateSince: "2026-11-21T09:59:00Z", legacy.KeyGeneration: "7", legacy.KeyNodes: "a",
		legacy.NodeKey("a", legacy.FieldHeartbeat): "2026-11-21T09:59:55Z"}
	parsed, problems := legacy.Parse(data)
	obs := bridge.Observation{Found: true, Legacy: parsed, Problems: problems}
	nwc := clusterObject()
	nwc.Status.LegacyGeneration = 6

	st, anomalies, _ := computeStatus(observed{configMap: obs, now: at, staleAfter: time.Minute, cluster: nwc})
	cond := meta.FindStatusCondition(st.Conditions, nwv1.ConditionStateRecognized)
	if st.Phase != nwv1.ClusterMultiNode || cond == nil || cond.Status != metav1.ConditionTrue ||
		!strings.Contains(cond.Message, `previousState "WARP_DRIVE_ENGAGED"`) {
		t.Fatalf("phase %s, StateRecognized %+v; want MultiNode, True, naming the previous state", st.Phase, cond)
	}
	if len(anomalies) != 1 || anomalies[0].Kind != legacy.UnknownPreviousState || st.LegacyGeneration != 7 ||
		len(st.RecentWarnings) != 1 || st.RecentWarnings[0].Reason != string(legacy.UnknownPreviousState) {
		t.Fatalf("anomalies %+v, warnings %+v, legacy generation %d", anomalies, st.RecentWarnings, st.LegacyGeneration)
	}

	nwc.Status = st
	again, anomalies, _ := computeStatus(observed{configMap: obs, now: at.Add(time.Second), staleAfter: time.Minute, cluster: nwc})
	if len(anomalies) != 0 || !equality.Semantic.DeepEqual(again, st) {
		t.Errorf("observing the same ConfigMap again: anomalies %+v, status changed %v", anomalies, !equality.Semantic.DeepEqual(again, st))
	}
}

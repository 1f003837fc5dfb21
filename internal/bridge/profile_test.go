package bridge

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func TestAProfileReplacesTheNamesAndThresholdItSets(t *testing.T) {
	own := nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "own", Name: "state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "own", Name: "ds"},
		EventComponent: "own",
	}
	nwc := &nwv1.NodewrightCluster{Spec: nwv1.NodewrightClusterSpec{Legacy: own, HeartbeatStaleAfter: metav1.Duration{Duration: 30 * time.Second}}}

	site := nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "edge", Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "edge", Name: "node-init"},
		EventComponent: "node-init",
	}
	full := &nwv1.EdgeProfile{Spec: nwv1.EdgeProfileSpec{Legacy: &site,
		Thresholds: nwv1.ProfileThresholds{HeartbeatStaleAfter: metav1.Duration{Duration: 45 * time.Second}}}}
	got := WithProfile(nwc, full)
	if got.Spec.Legacy != site || StaleAfter(got) != 45*time.Second {
		t.Errorf("with a full profile: legacy %+v, stale after %s; want the profile's", got.Spec.Legacy, StaleAfter(got))
	}
	if nwc.Spec.Legacy != own {
		t.Error("WithProfile changed the cluster it was given")
	}

	// What the profile leaves unset stays the cluster's.
	got = WithProfile(nwc, &nwv1.EdgeProfile{})
	if got.Spec.Legacy != own || StaleAfter(got) != 30*time.Second {
		t.Errorf("with an empty profile: legacy %+v, stale after %s; want the cluster's own", got.Spec.Legacy, StaleAfter(got))
	}
}

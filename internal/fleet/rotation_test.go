package fleet

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// TestCredentialsRotated: a member's token is revoked (the Secret it is bound to deleted): the
// hub shows it Unauthorized, keeping its summary. The registration then gets a new token, in
// the kubeconfig Secret for one member and in the Secret Reader's Secret for the other: the
// running hub takes it (no restart), the member is reachable again, and a change made on it
// afterwards reaches its summary.
func TestCredentialsRotated(t *testing.T) {
	hub, members := startFleet(t, 2)
	m1, m2 := members[0], members[1]
	ctx := context.Background()
	for _, m := range members {
		createCluster(t, m)
	}
	old1, old2 := m1.hubToken(t, "hub-credential-1"), m2.hubToken(t, "hub-credential-1")
	kubeconfigSecret := registerKubeconfig(t, hub, "site-a", m1, bearer(old1))
	registerProfile(t, hub, "site-b", m2, old2)
	reachable := func(want metav1.ConditionStatus, reason string) func(*fleetv1alpha1.NodewrightClusterSummary) string {
		return func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
			if c == nil || c.Status != want || c.Reason != reason || s.Status.Phase != "MultiNode" {
				return fmt.Sprintf("Reachable %+v, phase %q; want %s %s", c, s.Status.Phase, want, reason)
			}
			return ""
		}
	}
	for _, name := range []string{"site-a", profileSummary("site-b")} {
		waitSummary(t, hub.Client, name, reachable(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	}

	m1.revokeToken(t, "hub-credential-1", old1)
	m2.revokeToken(t, "hub-credential-1", old2)
	for _, name := range []string{"site-a", profileSummary("site-b")} {
		waitSummary(t, hub.Client, name, reachable(metav1.ConditionFalse, fleetv1alpha1.ReasonUnauthorized))
	}

	rotate := func(secret *corev1.Secret, key string, value []byte) {
		t.Helper()
		if err := hub.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		secret.Data[key] = value
		if err := hub.Client.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	rotate(kubeconfigSecret, "kubeconfig", m1.kubeconfig(t, bearer(m1.hubToken(t, "hub-credential-2"))))
	rotate(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hubNS, Name: SecretReaderSecretName(inventoryNS, "site-b")}},
		SecretReaderTokenKey, []byte(m2.hubToken(t, "hub-credential-2")))
	for _, name := range []string{"site-a", profileSummary("site-b")} {
		waitSummary(t, hub.Client, name, reachable(metav1.ConditionTrue, fleetv1alpha1.ReasonAnswering))
	}

	// Changes made after the rotation come through the new credentials' watches.
	setReadyNodes(t, m1, 3)
	setReadyNodes(t, m2, 1)
	for name, ready := range map[string]int32{"site-a": 3, profileSummary("site-b"): 1} {
		waitSummary(t, hub.Client, name, func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			if s.Status.Nodes.Ready != ready {
				return fmt.Sprintf("nodes %+v; want %d ready", s.Status.Nodes, ready)
			}
			return ""
		})
	}
}

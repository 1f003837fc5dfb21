package v1alpha1_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestAnOSVersionPolicyForAnImageTheProfileDoesNotAllowIsRefused: with a signed EdgeProfile
// in force whose spec.osImages lists a repository and one image pinned by digest, a policy for
// an image of another repository, of a repository whose name merely begins like the allowed
// one, or of the pinned image's tag under another digest is refused at admission, naming
// spec.image, the profile and what it allows (every node's agent would refuse to stage it). An
// image of the allowed repository, and the pinned image itself, are admitted. The test needs
// the cluster's singleton NodewrightCluster: it does not run in parallel.
func TestAnOSVersionPolicyForAnImageTheProfileDoesNotAllowIsRefused(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	key := signer(t)
	alice := as(t, "alice")
	noClusterWorkflows(t)
	eventually(t, "no OSVersionPolicy", func() bool {
		var policies nwv1.OSVersionPolicyList
		return env.Client.List(ctx, &policies) == nil && len(policies.Items) == 0
	})

	// The version of the profile: not below the floor another test of the package may have
	// raised (no profile is applied below it), and not above 1.0.0 otherwise (which would
	// refuse the lower versions the other tests apply).
	version := "1.0.0"
	floor := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNS, Name: "nodewright-profile-floor"}, floor); err == nil && floor.Data["version"] != "" {
		version = floor.Data["version"]
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	const (
		pinnedDigest = "sha256:4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b4f2b"
		otherDigest  = "sha256:9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c9e1c"
		pinned       = "registry.local:5000/edge/kairos:v3.5.0@" + pinnedDigest
	)
	p := edgeProfile("wh-os-images", version)
	p.Spec.Legacy = nil
	p.Spec.OSImages = []string{"quay.io/kairos/ubuntu", pinned}
	sign(t, p, key)
	if err := alice.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	noCluster(t)
	heartbeats(t)
	c := legacyIn("wh-nowhere", "wh-nowhere")
	c.Spec.Management, c.Spec.ProfileRef = nwv1.ManagementManaged, &nwv1.ProfileReference{Name: p.Name}
	if err := alice.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	inEffect(t, nwv1.ManagementManaged)
	eventually(t, "the profile wh-os-images in force", func() bool {
		got := &nwv1.NodewrightCluster{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(c), got) == nil && got.Status.Profile != nil && got.Status.Profile.Name == p.Name
	})

	policy := func(image string) *nwv1.OSVersionPolicy {
		return &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "whos-images"}, Spec: nwv1.OSVersionPolicySpec{Image: image}}
	}
	allows := "spec.image: the EdgeProfile wh-os-images " + version + " in force allows only quay.io/kairos/ubuntu, " + pinned + " (spec.osImages): "
	for _, bad := range []struct{ image, repository string }{
		{"evil.example/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0@" + otherDigest, "evil.example/kairos/ubuntu"},
		{"quay.io/kairos/ubuntu-evil:24.04-standard-amd64-generic-v3.5.0@" + otherDigest, "quay.io/kairos/ubuntu-evil"},
		{"quay.io/kairos/ubuntu/evil:24.04-standard-amd64-generic-v3.5.0@" + otherDigest, "quay.io/kairos/ubuntu/evil"},
		{"registry.local:5000/edge/kairos:v3.5.0@" + otherDigest, "registry.local:5000/edge/kairos"},
	} {
		err := alice.Create(ctx, policy(bad.image))
		refused(t, err, allows+"neither "+bad.image+" nor its repository "+bad.repository+"; the nodes' agents would refuse to stage it")
	}
	for _, image := range []string{osImage, pinned} {
		if err := alice.Create(ctx, policy(image), client.DryRunAll); err != nil {
			t.Errorf("a policy for %s, which the profile allows: %v", image, err)
		}
	}
}

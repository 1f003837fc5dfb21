package main

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const osImage = "quay.io/kairos/ubuntu:24.04-v2@sha256:2222222222222222222222222222222222222222222222222222222222222222"

// os plan is refused by the admission webhook in its own words while the cluster is not
// Managed; admitted on a Managed cluster with --ack, the webhook stamping who acknowledged;
// os ack then adds a node to the names already there, and says who the webhook stamped.
func TestOSPlanAndAckStamped(t *testing.T) {
	startOperator(t)
	kubeconfig := env.Kubeconfig(t)
	ctx := context.Background()
	noCluster(t)

	_, stderr, code := plugin(t, kubeconfig, "os", "plan", "--image", osImage, "--name", "kn-os")
	if code != 1 || !strings.HasPrefix(stderr, "Error: osversionpolicy/kn-os: spec.management: ") {
		t.Errorf("not Managed: exit code %d (want 1), stderr %q", code, stderr)
	}

	managedCluster(t)
	// Deleted before the cluster is (cleanups run last first), and gone before the next test:
	// one cluster-wide workflow at a time.
	t.Cleanup(func() {
		key := client.ObjectKey{Name: "kn-os"}
		err := env.Client.Delete(ctx, &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: key.Name}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		waitFor(t, "the policy to be gone", func() bool { return apierrors.IsNotFound(env.Client.Get(ctx, key, &nwv1.OSVersionPolicy{})) })
	})
	stdout, stderr, code := plugin(t, kubeconfig, "os", "plan", "--image", osImage, "--name", "kn-os", "--order", "kn-edge-1",
		"--approval", "Manual", "--ack", "kn-edge-1")
	if code != 0 || !strings.HasPrefix(stdout, "osversionpolicy/kn-os created: to "+osImage+", every node, kn-edge-1 first in that order, ") ||
		!strings.Contains(stdout, "fallback acknowledged on kn-edge-1, approval Manual") {
		t.Fatalf("on a Managed cluster: exit code %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	got := &nwv1.OSVersionPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kn-os"}, got); err != nil {
		t.Fatal(err)
	}
	by := got.Annotations[nwv1.AnnotationAcknowledgedBy]
	if by == "" || got.Annotations[nwv1.AnnotationAcknowledgeFallback] != "kn-edge-1" {
		t.Fatalf("the acknowledgement of os plan --ack is not stamped: %v", got.Annotations)
	}

	stdout, stderr, code = plugin(t, kubeconfig, "os", "ack", "kn-os", "kn-edge-2")
	if code != 0 || !strings.Contains(stdout, "osversionpolicy/kn-os: acknowledged the fallback of kn-edge-2 (the policy's acknowledge-fallback now names kn-edge-1, kn-edge-2)\n") ||
		!strings.Contains(stdout, "Stamped: acknowledged-by "+by+"\n") {
		t.Fatalf("os ack: exit code %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kn-os"}, got); err != nil {
		t.Fatal(err)
	}
	if a := got.Annotations; a[nwv1.AnnotationAcknowledgeFallback] != "kn-edge-1,kn-edge-2" || a[nwv1.AnnotationAcknowledgedBy] != by {
		t.Errorf("after os ack: %v", a)
	}
}

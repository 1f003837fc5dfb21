package v1alpha1_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// osImage is a Kairos image as a policy names it.
const osImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0@sha256:" +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// invalid checks that err is the API server's refusal of an invalid object (its schema's
// rules, before any webhook), saying want.
func invalid(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want a refusal saying %q", want)
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q is not the schema's saying %q", err.Error(), want)
	}
}

// TestAnOSVersionPolicyWithBadInputIsRefused: a policy whose image is not pinned by digest (or
// names no tag to check the booted node against), whose soak or reboot timeout is out of
// range, whose selector cannot select, or that names a node the cluster does not have (in its
// order or its holds) is refused at admission, naming the field; a good one is admitted.
func TestAnOSVersionPolicyWithBadInputIsRefused(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	alice := as(t, "alice")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "whos-edge-1"}}
	if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	noClusterWorkflows(t)
	managedCluster(t)
	policy := func(change func(*nwv1.OSVersionPolicySpec)) *nwv1.OSVersionPolicy {
		p := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "whos-v350"},
			Spec: nwv1.OSVersionPolicySpec{Image: osImage, NodeOrder: []string{"whos-edge-1"}}}
		change(&p.Spec)
		return p
	}
	invalid(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.Image = "quay.io/kairos/ubuntu:24.04-standard" })),
		"spec.image: Invalid value: \"string\": must be pinned by digest")
	invalid(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.Image = "quay.io/kairos/ubuntu@sha256:" + strings.Repeat("a", 64) })),
		"spec.image: Invalid value: \"string\": must name the image's repository and tag before the digest")
	invalid(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.Soak = metav1.Duration{Duration: 5 * time.Second} })),
		"spec.soak: Invalid value: \"string\": must be between 10s and 24h")
	invalid(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.Soak = metav1.Duration{Duration: 48 * time.Hour} })),
		"spec.soak: Invalid value: \"string\": must be between 10s and 24h")
	invalid(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.RebootTimeout = metav1.Duration{Duration: 10 * time.Second} })),
		"spec.rebootTimeout: Invalid value: \"string\": must be between 30s and 2h")
	refused(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) { s.NodeOrder = []string{"whos-edge-1", "whos-ghost"} })),
		`spec.nodeOrder[1]: "whos-ghost" is not a Node of the cluster`)
	refused(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) {
		s.Hold = []nwv1.OSNodeHold{{Node: "whos-ghost", Reason: "a customer demo on Friday"}}
	})), `spec.hold[0].node: "whos-ghost" is not a Node of the cluster`)
	refused(t, alice.Create(ctx, policy(func(s *nwv1.OSVersionPolicySpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "site", Operator: "Near"}}}
	})), `spec.nodeSelector: "Near" is not a valid label selector operator`)

	good := policy(func(s *nwv1.OSVersionPolicySpec) { s.Soak = metav1.Duration{Duration: time.Minute} })
	if err := alice.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, good); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		noClusterWorkflows(t)
	})

	// The acknowledgement of a fallback is stamped with who set it; a forged stamp is replaced.
	annotate := func(user string, annotations map[string]any) {
		t.Helper()
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		if err := as(t, user).Patch(ctx, good.DeepCopy(), client.RawPatch(types.MergePatchType, data)); err != nil {
			t.Fatal(err)
		}
	}
	stamped := func(when, ack, by string) {
		t.Helper()
		got := &nwv1.OSVersionPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(good), got); err != nil {
			t.Fatal(err)
		}
		if a := got.Annotations; a[nwv1.AnnotationAcknowledgeFallback] != ack || a[nwv1.AnnotationAcknowledgedBy] != by {
			t.Fatalf("%s: acknowledge-fallback %q by %q; want %q by %q", when, a[nwv1.AnnotationAcknowledgeFallback], a[nwv1.AnnotationAcknowledgedBy], ack, by)
		}
	}
	annotate("bob", map[string]any{nwv1.AnnotationAcknowledgeFallback: "whos-edge-1", nwv1.AnnotationAcknowledgedBy: "mallory"})
	stamped("bob acknowledges, saying mallory did", "whos-edge-1", "bob")
	annotate("mallory", map[string]any{nwv1.AnnotationAcknowledgedBy: "alice"})
	stamped("mallory rewrites the stamp alone", "whos-edge-1", "bob")
	annotate("carol", map[string]any{nwv1.AnnotationAcknowledgeFallback: nil})
	stamped("carol withdraws it", "", "")
}

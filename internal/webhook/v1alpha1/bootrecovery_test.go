package v1alpha1_test

import (
	"context"
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestABootRecoveryPolicyAcknowledgementIsStamped: an acknowledgement of a fallback names the
// node and the boot (one without the boot would acknowledge nothing, silently: refused, naming
// the annotation and the entry), and is stamped with who set it; a forged stamp is replaced,
// and a stamp cannot be rewritten alone.
func TestABootRecoveryPolicyAcknowledgementIsStamped(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
	if err := as(t, "alice").Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	annotate := func(user string, annotations map[string]any) error {
		t.Helper()
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		return as(t, user).Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, data))
	}
	stamped := func(when, ack, by string) {
		t.Helper()
		got := &nwv1.BootRecoveryPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		if a := got.Annotations; a[nwv1.AnnotationAcknowledgeFallback] != ack || a[nwv1.AnnotationAcknowledgedBy] != by {
			t.Fatalf("%s: acknowledge-fallback %q by %q; want %q by %q", when, a[nwv1.AnnotationAcknowledgeFallback], a[nwv1.AnnotationAcknowledgedBy], ack, by)
		}
	}
	refused(t, annotate("bob", map[string]any{nwv1.AnnotationAcknowledgeFallback: "edge-2"}),
		`metadata.annotations[nodewright.spectrocloud.com/acknowledge-fallback]: entry 1, "edge-2", is not NODE@BOOTID`)
	refused(t, annotate("bob", map[string]any{nwv1.AnnotationAcknowledgeFallback: "edge-1@b1,$(reboot)@b2"}),
		`entry 2, "$(reboot)@b2", is not NODE@BOOTID`)
	if err := annotate("bob", map[string]any{nwv1.AnnotationAcknowledgeFallback: "edge-2@0f5d6c1e-3b2a-4c8e-9f10-2a3b4c5d6e7f", nwv1.AnnotationAcknowledgedBy: "mallory"}); err != nil {
		t.Fatal(err)
	}
	stamped("bob acknowledges, saying mallory did", "edge-2@0f5d6c1e-3b2a-4c8e-9f10-2a3b4c5d6e7f", "bob")
	if err := annotate("mallory", map[string]any{nwv1.AnnotationAcknowledgedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	stamped("mallory rewrites the stamp alone", "edge-2@0f5d6c1e-3b2a-4c8e-9f10-2a3b4c5d6e7f", "bob")

	other := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "second"}}
	if err := as(t, "alice").Create(ctx, other); err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Fatalf("a second BootRecoveryPolicy, %q: %v; want it refused", other.Name, err)
	}
}

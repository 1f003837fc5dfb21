package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
)

// TestBootRecoveryOperationsAreValidated: the boot-recovery NodeOperations are admitted with
// their member, and refused naming the field without it, with another's, with an entry a
// SelectBootEntry cannot select, or with an image not pinned by digest.
func TestBootRecoveryOperationsAreValidated(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	image := "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2@sha256:" + strings.Repeat("ab", 32)
	base := func(typ, member string, value any) error {
		obj := object(t, validOperation, ns)
		setField(t, obj, "spec.setBondMode", nil)
		setField(t, obj, "spec.type", typ)
		if member != "" {
			setField(t, obj, "spec."+member, value)
		}
		return env.Client.Create(ctx, obj)
	}
	for _, c := range []struct {
		typ, member string
		value       any
	}{
		{"BootAssessmentReset", "bootAssessmentReset", map[string]any{}},
		{"SelectBootEntry", "selectBootEntry", map[string]any{"entry": "Passive"}},
		{"SelectBootEntry", "selectBootEntry", map[string]any{"entry": "Active"}},
		{"SelectBootEntry", "selectBootEntry", map[string]any{"entry": "Recovery"}},
		{"RecoveryRestage", "recoveryRestage", map[string]any{"image": image}},
	} {
		if err := base(c.typ, c.member, c.value); err != nil {
			t.Errorf("%s with %s %v was refused: %v", c.typ, c.member, c.value, err)
		}
	}
	expectInvalid(t, base("BootAssessmentReset", "", nil), "spec.bootAssessmentReset", "bootAssessmentReset is set exactly when type is BootAssessmentReset")
	expectInvalid(t, base("SelectBootEntry", "bootAssessmentReset", map[string]any{}), "spec.selectBootEntry", "selectBootEntry is set exactly when type is SelectBootEntry")
	expectInvalid(t, base("RecoveryRestage", "osUpgradeStage", map[string]any{"image": image}), "spec.recoveryRestage", "recoveryRestage is set exactly when type is RecoveryRestage")
	expectInvalid(t, base("SelectBootEntry", "selectBootEntry", map[string]any{"entry": "AutoReset"}), "spec.selectBootEntry.entry", "must be Active, Passive or Recovery")
	expectInvalid(t, base("SelectBootEntry", "selectBootEntry", map[string]any{}), "spec.selectBootEntry.entry", "Required value")
	expectInvalid(t, base("RecoveryRestage", "recoveryRestage", map[string]any{"image": "quay.io/kairos/ubuntu:latest"}), "spec.recoveryRestage.image", "must be REPOSITORY:TAG@sha256:<64 hex digits>")
}

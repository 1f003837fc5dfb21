package kairossite

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// op is a NodeOperation of type typ for the node, named name, its member set by member.
func (k kairosNode) op(name string, typ nwv1.NodeOperationType, member func(*nwv1.NodeOperationSpec)) *nwv1.NodeOperation {
	o := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: typ, Deadline: metav1.NewTime(time.Now().Add(30 * time.Minute))}}
	member(&o.Spec)
	return o
}

func (k kairosNode) reboot(name string) *nwv1.NodeOperation {
	return k.op(name, nwv1.OperationReboot, func(s *nwv1.NodeOperationSpec) { s.Reboot = &nwv1.RebootOperation{Reason: "the site's test"} })
}

func (k kairosNode) restage(name, image string) *nwv1.NodeOperation {
	return k.op(name, nwv1.OperationRecoveryRestage, func(s *nwv1.NodeOperationSpec) { s.RecoveryRestage = &nwv1.OSImageOperation{Image: image} })
}

// ended requires op to have ended in phase, with reason when it failed.
func ended(t *testing.T, op *nwv1.NodeOperation, phase nwv1.NodeOperationPhase, reason string) {
	t.Helper()
	if op.Status.Phase != phase || (reason != "" && (op.Status.Error == nil || op.Status.Error.Reason != reason)) {
		t.Fatalf("%s %s ended %s; want %s %s", op.Spec.Type, op.Name, op.Outcome(), phase, reason)
	}
}

// reported waits until the agent's report of the node's Kairos boot satisfies ok (an empty
// string), saying what it is while it does not.
func reported(t *testing.T, ok func(o *nwv1.HostOSStatus) string) {
	t.Helper()
	status := &nwv1.NodewrightAgentStatus{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, status); err != nil {
			return err.Error()
		}
		o := status.Status.OS
		if o == nil || o.Kairos == nil {
			return fmt.Sprintf("the agent's report of the OS: %+v", o)
		}
		return ok(o)
	})
}

// TestBootAssessmentResetThenReboot: a RecoveryRestage on a node that never fell back is
// refused NoFallback. With the boot assessment armed (tentative=yes, enabled, as a boot never
// counted as good leaves it, kairos#4303), a Reboot is refused BootWouldFallBack; a
// BootAssessmentReset clears the flags, and the next Reboot is taken and boots the active
// image, not the fallback.
func TestBootAssessmentResetThenReboot(t *testing.T) {
	k := newKairosNode(t)
	ended(t, operate(t, k.restage("restage", k.v1)), nwv1.OperationFailed, "NoFallback")
	if ref, _, _ := k.host.Slot(kairosplay.Active); ref != k.v1 {
		t.Fatalf("the refused RecoveryRestage changed the active slot: %s", ref)
	}
	bin, err := kairosplay.GRUBEditenv()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, k.host.GRUBEnvFile(), "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes").CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv: %v: %s", err, out)
	}
	ended(t, operate(t, k.reboot("refused")), nwv1.OperationFailed, "BootWouldFallBack")

	reset := operate(t, k.op("reset", nwv1.OperationBootAssessmentReset, func(s *nwv1.NodeOperationSpec) {
		s.BootAssessmentReset = &nwv1.BootAssessmentResetOperation{}
	}))
	ended(t, reset, nwv1.OperationSucceeded, "")
	if r := reset.Status.Result; r == nil || !reflect.DeepEqual(r.ClearedAssessment, []string{"boot_assessment_tentative=yes", "enable_boot_assessment=yes"}) ||
		r.Boot == nil || r.Boot.BootID != k.before {
		t.Fatalf("the reset's result %+v: want both flags cleared, from boot %s", r, k.before)
	}
	if env, err := k.host.GRUBEnv(context.Background()); err != nil || env[kairosplay.EnableBootAssessment] != "" || env[kairosplay.BootAssessmentTentative] != "" {
		t.Fatalf("the block after the reset: %v, %v", env, err)
	}
	ended(t, operate(t, k.reboot("reboot")), nwv1.OperationSucceeded, "")
	if boots := k.sup.Boots(); len(boots) != 1 || boots[0].Entry != kairosplay.Active || boots[0].Fallback || boots[0].Image != k.v1 {
		t.Fatalf("played boots %+v: want one, of the active slot with %s", boots, k.v1)
	}
}

// TestSelectBootEntryPassiveOnce: a SelectBootEntry of Passive says the next boot only; the
// Reboot after boots the passive entry (no fallback, no upgrade_failure) and the agent reports
// it; the Reboot after that boots the active entry again. A UKI boot's counter, played in
// LoaderBootCountPath, is reported too.
func TestSelectBootEntryPassiveOnce(t *testing.T) {
	k := newKairosNode(t)
	sel := operate(t, k.op("select", nwv1.OperationSelectBootEntry, func(s *nwv1.NodeOperationSpec) {
		s.SelectBootEntry = &nwv1.SelectBootEntryOperation{Entry: nwv1.KairosBootPassive}
	}))
	ended(t, sel, nwv1.OperationSucceeded, "")
	if r := sel.Status.Result; r == nil || r.NextBootOnly != nwv1.KairosBootPassive || r.Boot == nil || r.Boot.BootID != k.before {
		t.Fatalf("the selection's result %+v: want nextBootOnly Passive, from boot %s", r, k.before)
	}
	ended(t, operate(t, k.reboot("reboot-1")), nwv1.OperationSucceeded, "")
	boots := k.sup.Boots()
	if len(boots) != 1 || boots[0].Entry != kairosplay.Passive || !boots[0].Selected || boots[0].Fallback {
		t.Fatalf("played boots %+v: want the passive entry, selected, not a fallback", boots)
	}
	reported(t, func(o *nwv1.HostOSStatus) string {
		if o.BootID != boots[0].BootID || o.Kairos.BootEntry != nwv1.KairosBootPassive || o.Kairos.UpgradeFailure {
			return fmt.Sprintf("boot %s, entry %s, upgradeFailure %t; want boot %s from Passive, no upgrade failure", o.BootID, o.Kairos.BootEntry, o.Kairos.UpgradeFailure, boots[0].BootID)
		}
		return ""
	})
	ended(t, operate(t, k.reboot("reboot-2")), nwv1.OperationSucceeded, "")
	if boots = k.sup.Boots(); len(boots) != 2 || boots[1].Entry != kairosplay.Active || boots[1].Selected {
		t.Fatalf("played boots %+v: want the second one of the active entry again", boots)
	}

	if err := k.host.SetLoaderBootCountPath(`\loader\entries\active+2-1.conf`); err != nil {
		t.Fatal(err)
	}
	reported(t, func(o *nwv1.HostOSStatus) string {
		if c := o.Kairos.BootCounting; c == nil || *c != (nwv1.KairosBootCounting{TriesLeft: 2, TriesDone: 1}) {
			return fmt.Sprintf("bootCounting %+v; want 2 tries left, 1 done", c)
		}
		return ""
	})
}

// TestRecoveryRestageAfterAFallback: v2 fails to boot and the node falls back to v1. A
// RecoveryRestage of v2 (not the image it booted) is refused NotLastGoodImage; one of v1
// stages it again: the active slot holds v1, the passive slot keeps v1 (kairos-agent run from
// the passive entry leaves it), and the next boot is the active entry with v1.
func TestRecoveryRestageAfterAFallback(t *testing.T) {
	k := newKairosNode(t, kairosplay.FaultFailBoot)
	k.stageAndReboot(t)
	boots := k.sup.Boots()
	if len(boots) != 1 || !boots[0].Fallback || boots[0].Image != k.v1 {
		t.Fatalf("played boots %+v: want the fallback to %s", boots, k.v1)
	}
	ended(t, operate(t, k.restage("restage-v2", k.v2)), nwv1.OperationFailed, "NotLastGoodImage")
	if ref, _, _ := k.host.Slot(kairosplay.Active); ref != k.v2 {
		t.Fatalf("the refused RecoveryRestage changed the active slot: %s", ref)
	}
	restage := operate(t, k.restage("restage-v1", k.v1))
	ended(t, restage, nwv1.OperationSucceeded, "")
	if r := restage.Status.Result; r == nil || r.Boot == nil || r.Boot.BootID != boots[0].BootID || r.Boot.Entry != nwv1.KairosBootPassive {
		t.Fatalf("the restage's result %+v: want the fallback boot %s", r, boots[0].BootID)
	}
	for slot, want := range map[string]string{kairosplay.Active: k.v1, kairosplay.Passive: k.v1} {
		if ref, _, _ := k.host.Slot(slot); ref != want {
			t.Fatalf("the %s slot holds %s after the restage, want %s", slot, ref, want)
		}
	}
	ended(t, operate(t, k.reboot("reboot-after")), nwv1.OperationSucceeded, "")
	if boots = k.sup.Boots(); len(boots) != 2 || boots[1].Entry != kairosplay.Active || boots[1].Fallback || boots[1].Image != k.v1 {
		t.Fatalf("played boots %+v: want the second one of the active entry with %s", boots, k.v1)
	}
	reported(t, func(o *nwv1.HostOSStatus) string {
		if o.BootID != boots[1].BootID || o.Kairos.BootEntry != nwv1.KairosBootActive || o.Kairos.UpgradeFailure || o.Kairos.Image != repo(k.v1) {
			return fmt.Sprintf("boot %s, entry %s, image %s; want boot %s from Active with %s", o.BootID, o.Kairos.BootEntry, o.Kairos.Image, boots[1].BootID, repo(k.v1))
		}
		return ""
	})
}

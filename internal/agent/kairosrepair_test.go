package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// hooked runs each command with inner, but before asks whether it runs at all (an error fails
// it unrun) and after sees it once it ran: the faults of a host.
type hooked struct {
	inner  drbd.Runner
	before func(argv []string) error
	after  func(argv []string)
}

func (h hooked) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	if h.before != nil {
		if err := h.before(argv); err != nil {
			return drbd.Result{ExitCode: 1}, &drbd.CommandError{Argv: argv, ExitCode: 1, Stderr: []byte(err.Error()), Err: errors.New("exit status 1")}
		}
	}
	res, err := h.inner.Run(ctx, argv)
	if h.after != nil {
		h.after(argv)
	}
	return res, err
}

// clearing: argv is the BootAssessmentReset's clearing edit (set NAME= ...).
func clearing(argv []string) bool {
	return len(argv) > 3 && argv[2] == "set" && strings.HasSuffix(argv[3], "=")
}

func repairOp(name string, typ nwv1.NodeOperationType) *nwv1.NodeOperation {
	op := kairosOp(name, typ, time.Now().Add(time.Hour))
	switch typ {
	case nwv1.OperationBootAssessmentReset:
		op.Spec.BootAssessmentReset = &nwv1.BootAssessmentResetOperation{}
	case nwv1.OperationSelectBootEntry:
		op.Spec.SelectBootEntry = &nwv1.SelectBootEntryOperation{Entry: nwv1.KairosBootPassive}
	case nwv1.OperationRecoveryRestage:
		op.Spec.RecoveryRestage = &nwv1.OSImageOperation{Image: running + "@sha256:" + strings.Repeat("ab", 32)}
	}
	return op
}

// assessment is the block's variables, as the agent reads them.
func (n *kairosNode) assessment(t *testing.T) map[string]string {
	t.Helper()
	boot, err := n.host.ReadKairosBoot()
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range boot.Assessment {
		vars[v.Name] = v.Value
	}
	return vars
}

func reason(err error) (string, bool) {
	var failed *agent.OperationError
	if !errors.As(err, &failed) {
		return "", false
	}
	return failed.Reason, failed.RolledBack
}

// TestKairosAssessmentResetClearsArmedFlags: a Reboot refused BootWouldFallBack (tentative=yes,
// the assessment enabled) is taken once a BootAssessmentReset cleared boot_assessment_tentative
// and enable_boot_assessment, with one grub-editenv edit, enable_boot_assessment_always (a
// person's) left as it was; the result names what it cleared and the boot before. Run again,
// it edits nothing; with nothing to clear it Succeeds, clearing nothing.
func TestKairosAssessmentResetClearsArmedFlags(t *testing.T) {
	n := newKairosNode(t)
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes", "enable_boot_assessment_always=yes")
	clk := clocktesting.NewFakeClock(time.Now())
	r := &rebooter{}
	k := n.kairos(clk, r.reboot)
	if _, err := k.Executors()[nwv1.OperationReboot].Run(context.Background(), kairosOp("armed", nwv1.OperationReboot, clk.Now().Add(time.Hour))); r.count() != 0 {
		t.Fatalf("the armed host's Reboot: %v, %d requests; want it refused", err, r.count())
	} else if why, _ := reason(err); why != agent.ReasonBootWouldFallBack {
		t.Fatalf("the armed host's Reboot: %v; want BootWouldFallBack", err)
	}
	n.calls.argv, n.calls.flags = nil, nil
	reset := k.Executors()[nwv1.OperationBootAssessmentReset]
	op := repairOp("reset", nwv1.OperationBootAssessmentReset)
	result, err := reset.Run(context.Background(), op)
	if err != nil {
		t.Fatalf("BootAssessmentReset: %v", err)
	}
	argv, _ := n.calls.all()
	if want := [][]string{{n.editenv, n.blockFile(), "set", "boot_assessment_tentative=", "enable_boot_assessment="}}; !reflect.DeepEqual(argv, want) {
		t.Fatalf("commands:\n %q\nwant\n %q", argv, want)
	}
	if got := n.assessment(t); got["boot_assessment_tentative"] != "" || got["enable_boot_assessment"] != "" || got["enable_boot_assessment_always"] != "yes" {
		t.Errorf("the block after: %v; want tentative and enable cleared, always kept", got)
	}
	if !reflect.DeepEqual(result.ClearedAssessment, []string{"boot_assessment_tentative=yes", "enable_boot_assessment=yes"}) || result.Boot == nil ||
		result.Boot.BootID != bootA || !slicesContain(result.Boot.GRUBEnv, "boot_assessment_tentative=yes") {
		t.Errorf("result: cleared %q, boot %+v; want both flags and the boot before", result.ClearedAssessment, result.Boot)
	}
	if _, err := k.Executors()[nwv1.OperationReboot].Run(context.Background(), kairosOp("after", nwv1.OperationReboot, clk.Now().Add(time.Hour))); r.count() != 1 {
		t.Fatalf("the Reboot after the reset: %v, %d requests; want it asked", err, r.count())
	}

	// Run again: the same result, no edit.
	n.calls.argv = nil
	again, err := reset.Run(context.Background(), op)
	if argv, _ := n.calls.all(); err != nil || len(argv) != 0 || !reflect.DeepEqual(again.ClearedAssessment, result.ClearedAssessment) {
		t.Errorf("run again: %+v, %v, commands %q; want the same result and no command", again, err, argv)
	}
	// Nothing to clear.
	result, err = reset.Run(context.Background(), repairOp("nothing", nwv1.OperationBootAssessmentReset))
	if argv, _ := n.calls.all(); err != nil || len(result.ClearedAssessment) != 0 || len(argv) != 0 || result.Boot == nil {
		t.Errorf("nothing to clear: %+v, %v, commands %q; want Succeeded, nothing cleared, no command", result, err, argv)
	}
	// The member missing.
	bad := repairOp("bad", nwv1.OperationBootAssessmentReset)
	bad.Spec.BootAssessmentReset = nil
	if _, err := reset.Run(context.Background(), bad); !isInvalid(err, "spec.type is BootAssessmentReset") {
		t.Errorf("no bootAssessmentReset: %v; want InvalidOperation", err)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func isInvalid(err error, says string) bool {
	var failed *agent.OperationError
	return errors.As(err, &failed) && failed.Reason == agent.ReasonInvalidOperation && strings.Contains(failed.Message, says)
}

// TestKairosAssessmentResetRollsBack: an edit that fails, or that does not hold (the flag set
// again behind it), is undone: the recorded values are written back and the operation ends
// RolledBack, CommandFailed or AssessmentNotCleared.
func TestKairosAssessmentResetRollsBack(t *testing.T) {
	for _, c := range []struct {
		name   string
		reason string
		hook   func(n *kairosNode) hooked
	}{
		{"the edit fails", agent.ReasonCommandFailed, func(n *kairosNode) hooked {
			return hooked{before: func(argv []string) error {
				if clearing(argv) {
					return errors.New("grub2-editenv: error: cannot rename the file: Read-only file system")
				}
				return nil
			}}
		}},
		{"the edit does not hold", agent.ReasonAssessmentNotCleared, func(n *kairosNode) hooked {
			return hooked{after: func(argv []string) {
				if clearing(argv) {
					n.edit(t, "set", "boot_assessment_tentative=yes")
				}
			}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newKairosNode(t)
			n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
			k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
			h := c.hook(n)
			h.inner = k.Runner
			k.Runner = h
			_, err := k.Executors()[nwv1.OperationBootAssessmentReset].Run(context.Background(), repairOp("reset", nwv1.OperationBootAssessmentReset))
			if why, rolledBack := reason(err); why != c.reason || !rolledBack || !strings.Contains(err.Error(), "previous values are written back") {
				t.Fatalf("%v: want RolledBack %s", err, c.reason)
			}
			if got := n.assessment(t); got["boot_assessment_tentative"] != "yes" || got["enable_boot_assessment"] != "yes" {
				t.Errorf("the block after the rollback: %v; want the previous values", got)
			}
			argv, _ := n.calls.all()
			if last := argv[len(argv)-1]; !reflect.DeepEqual(last[2:], []string{"set", "boot_assessment_tentative=yes", "enable_boot_assessment=yes"}) {
				t.Errorf("the last command %q: want the previous values written back", last)
			}
			// Run again, as after an agent that died before it reported the rollback: the same
			// rollback, not Succeeded, and no edit.
			_, again := k.Executors()[nwv1.OperationBootAssessmentReset].Run(context.Background(), repairOp("reset", nwv1.OperationBootAssessmentReset))
			if why, rolledBack := reason(again); why != c.reason || !rolledBack {
				t.Errorf("run again after the rollback: %v; want RolledBack %s", again, c.reason)
			}
			if after, _ := n.calls.all(); len(after) != len(argv) {
				t.Errorf("run again after the rollback ran %q", after[len(argv):])
			}
		})
	}
}

// TestKairosAssessmentResetResumesFromItsCheckpoint: the agent dies right after the edit
// (before it read the block back or reported). Its operation is Running in the API server; the
// next agent runs it again from its checkpoint: Succeeded, naming the flags the first one
// cleared, without editing the block a second time.
func TestKairosAssessmentResetResumesFromItsCheckpoint(t *testing.T) {
	n := newKairosNode(t)
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
	ns := env.Namespace(t)
	op := repairOp("reset", nwv1.OperationBootAssessmentReset)
	op.Namespace, op.UID = ns, ""
	create(t, op)
	op.Status.Phase, op.Status.StartTime = nwv1.OperationRunning, &metav1.Time{Time: time.Now()}
	if err := env.Client.Status().Update(context.Background(), op); err != nil {
		t.Fatal(err)
	}

	// The first agent: its process ends once the edit is done.
	first := n.kairos(nil, nil)
	first.Runner = hooked{inner: first.Runner, after: func(argv []string) {
		if clearing(argv) {
			runtime.Goexit()
		}
	}}
	died := make(chan struct{})
	go func() {
		defer close(died)
		_, _ = first.Executors()[nwv1.OperationBootAssessmentReset].Run(context.Background(), op)
	}()
	<-died
	if got := n.assessment(t); got["boot_assessment_tentative"] != "" {
		t.Fatalf("the first agent's edit did not happen: %v", got)
	}
	var rec map[string]any
	if raw, err := os.ReadFile(filepath.Join(n.state, "kairos-assessment-reset.json")); err != nil || json.Unmarshal(raw, &rec) != nil || rec["done"] != nil {
		t.Fatalf("the checkpoint: %s, %v; want one, not done", raw, err)
	}

	n.calls.argv = nil
	runOperations(t, &agent.Operations{Node: "edge-1", Namespace: ns, Executors: n.kairos(nil, nil).Executors()})
	done := phaseOf(t, op, nwv1.OperationSucceeded)
	if r := done.Status.Result; r == nil || !reflect.DeepEqual(r.ClearedAssessment, []string{"boot_assessment_tentative=yes", "enable_boot_assessment=yes"}) ||
		r.Boot == nil || r.Boot.BootID != bootA {
		t.Errorf("the resumed operation's result: %+v; want both flags cleared, the boot before", r)
	}
	for _, argv := range n.calls.argv {
		if len(argv) > 2 && argv[2] == "set" {
			t.Errorf("the resumed operation edited the block again: %q", argv)
		}
	}
}

// TestKairosSelectBootEntry: next_entry in the OEM grubenv is set to the entry's GRUB id with
// grub-editenv and read back; the result says the entry is for the next boot only, and the
// boot before. A bad entry is refused naming the field; a UKI node is Unsupported.
func TestKairosSelectBootEntry(t *testing.T) {
	n := newKairosNode(t)
	oem := filepath.Join(n.host.Root, "oem/grubenv")
	if err := os.MkdirAll(filepath.Dir(oem), 0o755); err != nil {
		t.Fatal(err)
	}
	k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
	sel := k.Executors()[nwv1.OperationSelectBootEntry]
	result, err := sel.Run(context.Background(), repairOp("select", nwv1.OperationSelectBootEntry))
	if err != nil {
		t.Fatalf("SelectBootEntry: %v", err)
	}
	argv, _ := n.calls.all()
	if want := [][]string{{n.editenv, oem, "set", "next_entry=fallback"}, {n.editenv, oem, "list"}}; !reflect.DeepEqual(argv, want) {
		t.Fatalf("commands:\n %q\nwant\n %q", argv, want)
	}
	if result.NextBootOnly != nwv1.KairosBootPassive || result.Boot == nil || result.Boot.BootID != bootA || result.Boot.Entry != nwv1.KairosBootActive {
		t.Errorf("result %+v: want nextBootOnly Passive and the boot before", result)
	}
	for entry, id := range map[nwv1.KairosBootEntry]string{nwv1.KairosBootActive: "cos", nwv1.KairosBootRecovery: "recovery"} {
		op := repairOp("select-"+strings.ToLower(string(entry)), nwv1.OperationSelectBootEntry)
		op.Spec.SelectBootEntry.Entry = entry
		if result, err := sel.Run(context.Background(), op); err != nil || result.NextBootOnly != entry {
			t.Errorf("%s: %+v, %v", entry, result, err)
		}
		if out, _ := runCmd(n.editenv, oem, "list"); !strings.Contains(out, "next_entry="+id+"\n") {
			t.Errorf("%s: the OEM grubenv lists %q; want next_entry=%s", entry, out, id)
		}
	}
	n.calls.argv = nil
	for _, e := range []nwv1.KairosBootEntry{nwv1.KairosBootAutoReset, "Active --debug", ""} {
		op := repairOp("bad", nwv1.OperationSelectBootEntry)
		op.Spec.SelectBootEntry.Entry = e
		if _, err := sel.Run(context.Background(), op); !isInvalid(err, "spec.selectBootEntry.entry") {
			t.Errorf("entry %q: %v; want InvalidOperation naming spec.selectBootEntry.entry", e, err)
		}
	}
	n.write(t, "proc/cmdline", "BOOT_IMAGE=/vmlinuz rd.immucore.uki console=tty1\n")
	if _, err := sel.Run(context.Background(), repairOp("uki", nwv1.OperationSelectBootEntry)); !hasReason(err, agent.ReasonUnsupported) {
		t.Errorf("a UKI node: %v; want Unsupported", err)
	}
	if argv, _ := n.calls.all(); len(argv) != 0 {
		t.Errorf("refused selections ran %q", argv)
	}
}

func hasReason(err error, want string) bool {
	why, _ := reason(err)
	return why == want
}

// TestKairosRecoveryRestage: refused NoFallback on a node that did not fall back, and
// NotLastGoodImage for an image other than the one booted, running nothing; on a fallback
// boot (passive, upgrade_failure), or a boot the last fallback record names, the booted image
// is staged again as OSUpgradeStage stages: the stale flag cleared, the stage record, then
// kairos-agent upgrade --source oci:<image>.
func TestKairosRecoveryRestage(t *testing.T) {
	n := newKairosNode(t)
	k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
	restage := k.Executors()[nwv1.OperationRecoveryRestage]
	op := repairOp("restage", nwv1.OperationRecoveryRestage)
	if _, err := restage.Run(context.Background(), op); !hasReason(err, agent.ReasonNoFallback) {
		t.Errorf("an active boot: %v; want NoFallback", err)
	}
	n.boot(t, bootC, "passive_mode", passiveLine)
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
	other := repairOp("other", nwv1.OperationRecoveryRestage)
	other.Spec.RecoveryRestage.Image = target
	if _, err := restage.Run(context.Background(), other); !hasReason(err, agent.ReasonNotLastGoodImage) || !strings.Contains(err.Error(), "spec.recoveryRestage.image") {
		t.Errorf("another image: %v; want NotLastGoodImage naming spec.recoveryRestage.image", err)
	}
	bad := repairOp("bad", nwv1.OperationRecoveryRestage)
	bad.Spec.RecoveryRestage.Image = running
	if _, err := restage.Run(context.Background(), bad); !isInvalid(err, "REPOSITORY:TAG@sha256") {
		t.Errorf("an image without a digest: %v; want InvalidOperation", err)
	}
	if argv, _ := n.calls.all(); len(argv) != 0 {
		t.Fatalf("refused restages ran %q", argv)
	}
	result, err := restage.Run(context.Background(), op)
	if err != nil {
		t.Fatalf("RecoveryRestage on the fallback boot: %v", err)
	}
	argv, _ := n.calls.all()
	want := [][]string{{n.editenv, n.blockFile(), "set", "boot_assessment_tentative="}, {n.agentBin, "upgrade", "--source", "oci:" + op.Spec.RecoveryRestage.Image}}
	if !reflect.DeepEqual(argv, want) {
		t.Fatalf("commands:\n %q\nwant\n %q", argv, want)
	}
	if result.Boot == nil || result.Boot.BootID != bootC || result.Boot.Entry != nwv1.KairosBootPassive || !reflect.DeepEqual(result.ClearedAssessment, []string{"boot_assessment_tentative=yes"}) {
		t.Errorf("result %+v: want the fallback boot and the flag cleared", result)
	}
	if raw, err := os.ReadFile(filepath.Join(n.state, "kairos-stage.json")); err != nil || !strings.Contains(string(raw), `"fromBootID": "`+bootC+`"`) {
		t.Errorf("the stage record: %s, %v", raw, err)
	}

	// A later boot of the passive entry without the sentinel, which the fallback record names.
	n.boot(t, bootB, "passive_mode", strings.TrimSuffix(passiveLine, " upgrade_failure"))
	if _, err := restage.Run(context.Background(), repairOp("unrecorded", nwv1.OperationRecoveryRestage)); !hasReason(err, agent.ReasonNoFallback) {
		t.Errorf("a passive boot without upgrade_failure, not recorded: %v; want NoFallback", err)
	}
	fb, _ := json.Marshal(nwv1.KairosFallback{FromImage: target, ToImage: running, BootID: bootB, SeenAt: metav1.Now()})
	if err := os.WriteFile(filepath.Join(n.state, "kairos-fallback.json"), fb, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := restage.Run(context.Background(), repairOp("recorded", nwv1.OperationRecoveryRestage)); err != nil {
		t.Errorf("a boot the fallback record names: %v; want it staged", err)
	}
}

// runCmd runs a command and returns its standard output.
func runCmd(argv ...string) (string, error) {
	res, err := (agent.TailRunner{}).Run(context.Background(), argv)
	return string(res.Stdout), err
}

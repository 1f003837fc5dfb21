package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The Kairos operations are tested on a temporary host folder: /etc/kairos-release, /run/cos,
// the kernel's command line and boot ID under a /proc of its own, and the boot-assessment block,
// written and edited with the real grub-editenv (Debian's grub-common). kairos-agent alone is a
// test double: a shell script that says what it was asked (and fails when told to), since the
// real one rewrites a disk's partitions.

const (
	bootA   = "0b6f1c1e-6f0a-4d0c-9b7e-2f4a3c5d6e70"
	bootB   = "1c7a2d2f-7a1b-4e1d-8c8f-3a5b4d6e7f81"
	bootC   = "2d8b3e3a-8b2c-4f2e-9d9a-4b6c5e7f8a92"
	running = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2"
	target  = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0@sha256:4f2b1c0d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c"

	activeLine  = "BOOT_IMAGE=(loop0)/boot/vmlinuz console=tty1 root=LABEL=COS_ACTIVE cos-img/filename=/cOS/active.img panic=5"
	passiveLine = "BOOT_IMAGE=(loop0)/boot/vmlinuz console=tty1 root=LABEL=COS_PASSIVE cos-img/filename=/cOS/passive.img panic=5 upgrade_failure"
)

// kairosNode is a Kairos host folder, its state folder and the tools that act on it.
type kairosNode struct {
	host     hostos.Host
	state    string
	editenv  string // the real grub-editenv
	agentBin string // the kairos-agent double
	calls    *callLog
}

func newKairosNode(t *testing.T) *kairosNode {
	t.Helper()
	editenv, err := exec.LookPath("grub-editenv")
	if err != nil {
		t.Skipf("grub-editenv (Debian package grub-common) is not installed, and the boot-assessment block is written only with it: %v", err)
	}
	n := &kairosNode{host: hostos.Host{Root: t.TempDir(), Proc: t.TempDir()}, state: t.TempDir(), editenv: editenv, calls: &callLog{}}
	n.write(t, "etc/os-release", "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\n")
	n.write(t, "etc/kairos-release", "KAIROS_VERSION=\"v3.4.2\"\nKAIROS_IMAGE_REPO=\""+running+"\"\n")
	n.boot(t, bootA, "active_mode", activeLine)
	if err := os.MkdirAll(filepath.Join(n.host.Root, "run/initramfs/cos-state"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.edit(t, "create")
	// The double: it logs its arguments, and fails, with a long complaint on stderr, when
	// the file "fail" is next to it.
	dir := t.TempDir()
	n.agentBin = filepath.Join(dir, "kairos-agent")
	script := `#!/bin/sh
echo "$@" >> "` + dir + `/argv"
echo "INFO Pulling the image"
if [ -e "` + dir + `/fail" ]; then
  i=0; while [ $i -lt 2000 ]; do echo "DEBUG line $i of a long log" >&2; i=$((i+1)); done
  echo "ERROR failed to pull oci:image: manifest unknown" >&2
  exit 1
fi
`
	if err := os.WriteFile(n.agentBin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *kairosNode) write(t *testing.T, rel, content string) {
	t.Helper()
	dir, p := n.host.Root, rel
	if r, ok := strings.CutPrefix(rel, "proc/"); ok {
		dir, p = n.host.Proc, r
	}
	path := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// boot makes the folder a boot: its boot ID, immucore's sentinel and the command line; /run is
// emptied, as at every boot, but for COS_STATE's mount.
func (n *kairosNode) boot(t *testing.T, id, sentinel, cmdline string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(n.host.Root, "run/cos")); err != nil {
		t.Fatal(err)
	}
	n.write(t, "proc/sys/kernel/random/boot_id", id+"\n")
	n.write(t, "proc/cmdline", cmdline+"\n")
	n.write(t, "run/cos/"+sentinel, "")
	if strings.Contains(cmdline, "upgrade_failure") {
		n.write(t, "run/cos/upgrade_failure", "")
	}
}

func (n *kairosNode) blockFile() string {
	return filepath.Join(n.host.Root, hostos.KairosAssessmentFile)
}

// edit runs the real grub-editenv on the block.
func (n *kairosNode) edit(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(n.editenv, append([]string{n.blockFile()}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv %v: %v: %s", args, err, out)
	}
}

// list is what grub-editenv says the block holds.
func (n *kairosNode) list(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(n.editenv, n.blockFile(), "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// kairos is the node's Kairos operations, on clk (nil: the real clock).
func (n *kairosNode) kairos(clk *clocktesting.FakeClock, reboot func(context.Context) error) *agent.Kairos {
	k := &agent.Kairos{Host: n.host, StateDir: n.state, Runner: &recording{log: n.calls, node: n, real: agent.TailRunner{}},
		KairosAgent: []string{n.agentBin}, GRUBEditenv: []string{n.editenv}, Reboot: reboot, Profiles: osImages{"quay.io/kairos/ubuntu"}}
	if clk != nil {
		k.Clock = clk
	}
	return k
}

// osImages is a verified EdgeProfile whose spec.osImages are these: what the agent checks an
// image against.
type osImages []string

func (o osImages) InForce(context.Context) (*nwv1.EdgeProfile, error) {
	return &nwv1.EdgeProfile{ObjectMeta: metav1.ObjectMeta{Name: "site"}, Spec: nwv1.EdgeProfileSpec{Version: "1.2.0", OSImages: o}}, nil
}

// callLog is every command the Kairos executors ran, and the boot-assessment flag
// boot_assessment_tentative as the block held it when each ran.
type callLog struct {
	mu    sync.Mutex
	argv  [][]string
	flags []string
}

func (c *callLog) all() ([][]string, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]string{}, c.argv...), append([]string{}, c.flags...)
}

// recording runs each command for real (grub-editenv, the kairos-agent double) with the agent's
// TailRunner, noting it first.
type recording struct {
	log  *callLog
	node *kairosNode
	real drbd.Runner
}

func (r *recording) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	boot, _ := r.node.host.ReadKairosBoot()
	flag, _ := boot.Assessment.Get(hostos.GRUBBootAssessmentTentative)
	r.log.mu.Lock()
	r.log.argv = append(r.log.argv, append([]string{}, argv...))
	r.log.flags = append(r.log.flags, flag)
	r.log.mu.Unlock()
	return r.real.Run(ctx, argv)
}

func kairosOp(name string, typ nwv1.NodeOperationType, deadline time.Time) *nwv1.NodeOperation {
	op := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: nwv1.NodeOperationSpec{NodeName: "edge-1", Type: typ, Deadline: metav1.NewTime(deadline)}}
	switch typ {
	case nwv1.OperationOSUpgradeStage:
		op.Spec.OSUpgradeStage = &nwv1.OSImageOperation{Image: target}
	case nwv1.OperationOSUpgradeRecovery:
		op.Spec.OSUpgradeRecovery = &nwv1.OSImageOperation{Image: target}
	case nwv1.OperationReboot:
		op.Spec.Reboot = &nwv1.RebootOperation{Reason: "OSVersionPolicy test"}
	}
	return op
}

// TestKairosStageClearsAStaleFlagFirst: a boot_assessment_tentative=yes left by an earlier boot
// is cleared, with grub-editenv, before kairos-agent upgrade runs, whose argv is exactly
// kairos-agent upgrade --source oci:<image>; the boot it ran and the flag it cleared are in the
// result, and the stage record names the boot.
func TestKairosStageClearsAStaleFlagFirst(t *testing.T) {
	n := newKairosNode(t)
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	k := n.kairos(clk, nil)
	stage := k.Executors()[nwv1.OperationOSUpgradeStage]
	result, err := stage.Run(context.Background(), kairosOp("stage", nwv1.OperationOSUpgradeStage, clk.Now().Add(time.Hour)))
	if err != nil {
		t.Fatalf("OSUpgradeStage: %v", err)
	}
	argv, flags := n.calls.all()
	want := [][]string{
		{n.editenv, n.blockFile(), "set", "boot_assessment_tentative="},
		{n.agentBin, "upgrade", "--source", "oci:" + target},
	}
	if !reflect.DeepEqual(argv, want) {
		t.Fatalf("commands run:\n %q\nwant\n %q", argv, want)
	}
	if flags[0] != "yes" || flags[1] != "" {
		t.Errorf("boot_assessment_tentative when each command ran: %q; want yes, then cleared before kairos-agent", flags)
	}
	if got, _ := os.ReadFile(filepath.Join(filepath.Dir(n.agentBin), "argv")); string(got) != "upgrade --source oci:"+target+"\n" {
		t.Errorf("kairos-agent was given %q", got)
	}
	wantBoot := &nwv1.BootObservation{BootID: bootA, Image: running, Entry: nwv1.KairosBootActive,
		GRUBEnv: []string{"enable_boot_assessment=yes", "boot_assessment_tentative=yes"}}
	if !reflect.DeepEqual(result.Boot, wantBoot) || !reflect.DeepEqual(result.ClearedAssessment, []string{"boot_assessment_tentative=yes"}) {
		t.Errorf("result: boot %+v, cleared %q; want %+v and the flag", result.Boot, result.ClearedAssessment, wantBoot)
	}
	if got := n.list(t); got != "enable_boot_assessment=yes\nboot_assessment_tentative=\n" {
		t.Errorf("the block after the stage, as grub-editenv lists it: %q", got)
	}
	record, err := os.ReadFile(filepath.Join(n.state, "kairos-stage.json"))
	if err != nil || !strings.Contains(string(record), `"fromBootID": "`+bootA+`"`) || !strings.Contains(string(record), `"image": "`+target+`"`) {
		t.Errorf("the stage record: %s, %v", record, err)
	}

	// Nothing stale: nothing cleared, kairos-agent alone; run again, it stages again.
	n.calls.argv, n.calls.flags = nil, nil
	result, err = stage.Run(context.Background(), kairosOp("stage", nwv1.OperationOSUpgradeStage, clk.Now().Add(time.Hour)))
	argv, _ = n.calls.all()
	if err != nil || len(argv) != 1 || argv[0][0] != n.agentBin || result.ClearedAssessment != nil {
		t.Errorf("a stage with no stale flag: %q, %+v, %v", argv, result, err)
	}
}

// TestKairosStageFailsWithKairosAgentsError: a kairos-agent that fails fails the operation,
// CommandFailed, quoting the end of its standard error (where it says why), not its start.
func TestKairosStageFailsWithKairosAgentsError(t *testing.T) {
	n := newKairosNode(t)
	if err := os.WriteFile(filepath.Join(filepath.Dir(n.agentBin), "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
	for _, typ := range []nwv1.NodeOperationType{nwv1.OperationOSUpgradeStage, nwv1.OperationOSUpgradeRecovery} {
		_, err := k.Executors()[typ].Run(context.Background(), kairosOp("op", typ, time.Now().Add(time.Hour)))
		var failed *agent.OperationError
		if !errors.As(err, &failed) || failed.Reason != agent.ReasonCommandFailed ||
			!strings.Contains(failed.Message, "ERROR failed to pull oci:image: manifest unknown") ||
			!strings.Contains(failed.Message, "exit status 1") || strings.Contains(failed.Message, "line 0 of") {
			t.Errorf("%s with a failing kairos-agent: %v; want CommandFailed quoting the end of its stderr", typ, err)
		}
	}
	argv, _ := n.calls.all()
	if len(argv) != 2 || !reflect.DeepEqual(argv[1], []string{n.agentBin, "upgrade", "--recovery", "--source", "oci:" + target}) {
		t.Errorf("commands: %q; want the stage's, then kairos-agent upgrade --recovery --source oci:<image>", argv)
	}
	// An image the API would have refused never reaches a command line.
	bad := kairosOp("bad", nwv1.OperationOSUpgradeStage, time.Now().Add(time.Hour))
	bad.Spec.OSUpgradeStage.Image = "quay.io/kairos/ubuntu:latest --debug"
	_, err := k.Executors()[nwv1.OperationOSUpgradeStage].Run(context.Background(), bad)
	var failed *agent.OperationError
	if !errors.As(err, &failed) || failed.Reason != agent.ReasonInvalidOperation {
		t.Errorf("an image without a digest: %v; want InvalidOperation", err)
	}
	if after, _ := n.calls.all(); len(after) != 2 {
		t.Errorf("a refused image ran %q", after[2:])
	}
}

// rebooter counts the host's reboot requests.
type rebooter struct {
	mu    sync.Mutex
	asked int
}

func (r *rebooter) reboot(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	return nil
}

func (r *rebooter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// TestKairosRebootAcrossABoot: through the operation runner and a real API server. The first
// agent records the boot and asks for the reboot, and the operation stays Running; the host
// "goes down" (the agent stops). An agent started again in the same boot asks again (the first
// request was lost); one started after the boot ID changed finds the operation Running, not
// started by itself, runs it again and reports it Succeeded with the new boot and the previous
// boot ID, asking for no other reboot.
func TestKairosRebootAcrossABoot(t *testing.T) {
	n := newKairosNode(t)
	ns := env.Namespace(t)
	start := func(r *rebooter) (stop func()) {
		k := n.kairos(nil, r.reboot)
		return runOperations(t, &agent.Operations{Node: "edge-1", Namespace: ns, Executors: k.Executors()})
	}
	op := kairosOp("reboot", nwv1.OperationReboot, time.Now().Add(time.Hour))
	op.Namespace, op.UID = ns, ""
	first := &rebooter{}
	stop := start(first)
	create(t, op)
	waitFor(t, "the first reboot request", func() bool { return first.count() >= 1 })
	phaseOf(t, op, nwv1.OperationRunning)
	stop()
	if first.count() != 1 {
		t.Errorf("the first agent asked for %d reboots; want one, the operation's changes notwithstanding", first.count())
	}

	// The request was lost: the same boot.
	again := &rebooter{}
	stop = start(again)
	waitFor(t, "the reboot asked again in the same boot", func() bool { return again.count() >= 1 })
	if got := phaseOf(t, op, nwv1.OperationRunning); got.Status.Error != nil || (got.Status.Result != nil && got.Status.Result.PreviousBootID != "") {
		t.Errorf("the same boot reported a previous boot: %+v, %+v", got.Status.Result, got.Status.Error)
	}
	stop()

	// The host rebooted.
	n.boot(t, bootB, "active_mode", activeLine)
	after := &rebooter{}
	start(after)
	done := phaseOf(t, op, nwv1.OperationSucceeded)
	if r := done.Status.Result; r == nil || r.Boot == nil || r.Boot.BootID != bootB || r.PreviousBootID != bootA ||
		r.Boot.Image != running || r.Boot.Entry != nwv1.KairosBootActive {
		t.Errorf("the Reboot's result: %+v; want boot %s after %s", r, bootB, bootA)
	}
	if after.count() != 0 {
		t.Errorf("the agent of the new boot asked for %d more reboots", after.count())
	}
}

// TestKairosRebootPastItsDeadline: a host that never rebooted fails the Reboot (NotRebooted)
// once its deadline passed, asking no more; one that rebooted is Succeeded even then.
func TestKairosRebootPastItsDeadline(t *testing.T) {
	n := newKairosNode(t)
	clk := clocktesting.NewFakeClock(time.Now())
	r := &rebooter{}
	reboot := n.kairos(clk, r.reboot).Executors()[nwv1.OperationReboot]
	op := kairosOp("reboot", nwv1.OperationReboot, clk.Now().Add(time.Minute))
	_, err := reboot.Run(context.Background(), op)
	var pending *agent.Pending
	if !errors.As(err, &pending) || r.count() != 1 {
		t.Fatalf("the first run: %v, %d requests; want Pending after one request", err, r.count())
	}
	if holder, ok := reboot.(agent.Holder); !ok || !holder.Holds(op) {
		t.Error("the Reboot does not hold its record: past its deadline it would fail without reading the boot")
	}
	clk.Step(2 * time.Minute)
	_, err = reboot.Run(context.Background(), op)
	var failed *agent.OperationError
	if !errors.As(err, &failed) || failed.Reason != agent.ReasonNotRebooted || !strings.Contains(failed.Message, bootA) || r.count() != 1 {
		t.Errorf("past the deadline in the same boot: %v, %d requests; want NotRebooted naming the boot, no new request", err, r.count())
	}
	n.boot(t, bootB, "active_mode", activeLine)
	result, err := reboot.Run(context.Background(), op)
	if err != nil || result.PreviousBootID != bootA || result.Boot.BootID != bootB {
		t.Errorf("past the deadline after the boot: %+v, %v", result, err)
	}
}

// TestKairosLastFallback: a stage in boot A, then a boot with upgrade_failure (GRUB fell back):
// the report's lastFallback names the staged image, the image booted instead and the boot, and
// a later boot, by a new agent, still reports it, seen at the same time. It is written to a
// real API server by the reporter.
func TestKairosLastFallback(t *testing.T) {
	n := newKairosNode(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	observer := func() *agent.HostObserver {
		return &agent.HostObserver{OS: hostos.Kairos{}, Host: n.host, Kairos: n.kairos(clk, nil)}
	}
	observe := func() *nwv1.HostOSStatus {
		t.Helper()
		obs := observer().Observe(context.Background())
		if obs.OS == nil || obs.OS.Kairos == nil {
			t.Fatalf("no Kairos facts: %+v", obs)
		}
		for _, c := range obs.Conditions {
			if c.Type == nwv1.ConditionHostObserved && c.Status != metav1.ConditionTrue {
				t.Errorf("HostObserved: %+v", c)
			}
		}
		return obs.OS
	}
	if st := observe(); st.BootID != bootA || st.Kairos.LastFallback != nil || st.Kairos.Image != running {
		t.Errorf("before any stage: %+v %+v", st, st.Kairos)
	}
	if _, err := n.kairos(clk, nil).Executors()[nwv1.OperationOSUpgradeStage].Run(context.Background(),
		kairosOp("stage", nwv1.OperationOSUpgradeStage, clk.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	// The staged boot never counted as good: GRUB set the flag, and it stayed.
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
	if st := observe(); st.Kairos.LastFallback != nil {
		t.Errorf("a fallback reported in the boot that staged: %+v", st.Kairos.LastFallback)
	}
	clk.Step(5 * time.Minute)
	n.boot(t, bootC, "passive_mode", passiveLine)
	seen := clk.Now()
	want := &nwv1.KairosFallback{FromImage: target, ToImage: running, BootID: bootC, SeenAt: metav1.NewTime(seen)}
	got := observe()
	if !sameFallback(got.Kairos.LastFallback, want) || !got.Kairos.UpgradeFailure || got.Kairos.BootEntry != nwv1.KairosBootPassive ||
		!reflect.DeepEqual(got.Kairos.BootAssessment, &nwv1.KairosBootAssessment{Enabled: true, Tentative: true}) {
		t.Errorf("the fallback boot: %+v, fallback %+v; want %+v", got.Kairos, got.Kairos.LastFallback, want)
	}
	// Written by the reporter, the API server admits it.
	node := fmt.Sprintf("kairos-%d", time.Now().UnixNano())
	r := &agent.Reporter{Client: env.LiteClient(t), Node: node, Observer: observer()}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	as, _ := report(t, r)
	if as.Status.OS == nil || as.Status.OS.BootID != bootC || as.Status.OS.Kairos == nil ||
		as.Status.OS.Kairos.LastFallback == nil || as.Status.OS.Kairos.LastFallback.FromImage != target || !as.Status.OS.Kairos.UpgradeFailure {
		t.Errorf("the NodewrightAgentStatus: %+v", as.Status.OS)
	}
	// A later boot, a new agent: still reported, as first seen.
	clk.Step(time.Hour)
	n.boot(t, bootB, "active_mode", activeLine)
	if st := observe(); !sameFallback(st.Kairos.LastFallback, want) || st.Kairos.UpgradeFailure {
		t.Errorf("a later boot: fallback %+v, upgradeFailure %v; want %+v kept", st.Kairos.LastFallback, st.Kairos.UpgradeFailure, want)
	}
}

// sameFallback: a and b say the same, their times the same instant.
func sameFallback(a, b *nwv1.KairosFallback) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.FromImage == b.FromImage && a.ToImage == b.ToImage && a.BootID == b.BootID && a.SeenAt.Equal(&b.SeenAt)
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		if cond() {
			return ""
		}
		return what + " has not happened"
	})
}

// TestKairosStagesOnlyAnImageTheProfileAllows: a compromised operator asks a node to stage, or
// to write to its recovery system, an image the signed EdgeProfile in force does not list
// (spec.osImages), nor its repository: the agent refuses it, NotAllowedByProfile, naming the
// field and what the profile allows, and runs nothing: no kairos-agent, no stage record, so no
// Reboot would boot it.
func TestKairosStagesOnlyAnImageTheProfileAllows(t *testing.T) {
	n := newKairosNode(t)
	k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
	k.Profiles = osImages{"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2@sha256:" + strings.Repeat("0", 64), "registry.local/kairos/ubuntu"}
	for typ, field := range map[nwv1.NodeOperationType]string{nwv1.OperationOSUpgradeStage: "spec.osUpgradeStage.image", nwv1.OperationOSUpgradeRecovery: "spec.osUpgradeRecovery.image"} {
		_, err := k.Executors()[typ].Run(context.Background(), kairosOp("op", typ, time.Now().Add(time.Hour)))
		var refused *agent.OperationError
		if !errors.As(err, &refused) || refused.Reason != agent.ReasonNotAllowed || !strings.HasPrefix(refused.Message, field+": the EdgeProfile site 1.2.0 in force allows only") ||
			!strings.Contains(refused.Message, "nor its repository quay.io/kairos/ubuntu") {
			t.Errorf("%s of an image the profile does not allow: %v; want NotAllowedByProfile naming %s", typ, err, field)
		}
	}
	if argv, _ := n.calls.all(); len(argv) != 0 {
		t.Errorf("a refused image ran %q", argv)
	}
	if _, err := os.Stat(filepath.Join(n.state, "kairos-stage.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused image left a stage record: %v", err)
	}
}

// TestKairosStageIsNotRunAgainAfterABoot: an OSUpgradeStage run again (its agent stopped while
// it ran) on a node that booted since it began is not staged again: kairos-agent would copy the
// running system over the passive one, the fallback. It fails RebootedSinceStaged, naming both
// boots, and runs nothing.
func TestKairosStageIsNotRunAgainAfterABoot(t *testing.T) {
	n := newKairosNode(t)
	k := n.kairos(clocktesting.NewFakeClock(time.Now()), nil)
	op := kairosOp("stage", nwv1.OperationOSUpgradeStage, time.Now().Add(time.Hour))
	if _, err := k.Executors()[nwv1.OperationOSUpgradeStage].Run(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	n.boot(t, bootB, "active_mode", activeLine)
	n.calls.argv = nil
	_, err := k.Executors()[nwv1.OperationOSUpgradeStage].Run(context.Background(), op)
	var refused *agent.OperationError
	if !errors.As(err, &refused) || refused.Reason != agent.ReasonRebootedSinceStaged || !strings.Contains(refused.Message, bootA) || !strings.Contains(refused.Message, bootB) {
		t.Fatalf("a stage run again after a boot: %v; want RebootedSinceStaged naming both boots", err)
	}
	if argv, _ := n.calls.all(); len(argv) != 0 {
		t.Errorf("it ran %q", argv)
	}
}

// TestKairosRebootRefusesABootThatWouldFallBack: with boot_assessment_tentative=yes and the
// assessment enabled, GRUB would boot the passive slot at the next boot; the Reboot fails
// BootWouldFallBack, naming the flags, and the host is not asked to reboot. Without the
// enabling flag, or once the flag is cleared, it reboots.
func TestKairosRebootRefusesABootThatWouldFallBack(t *testing.T) {
	n := newKairosNode(t)
	clk := clocktesting.NewFakeClock(time.Now())
	r := &rebooter{}
	reboot := n.kairos(clk, r.reboot).Executors()[nwv1.OperationReboot]
	n.edit(t, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes")
	result, err := reboot.Run(context.Background(), kairosOp("armed", nwv1.OperationReboot, clk.Now().Add(time.Hour)))
	var failed *agent.OperationError
	if !errors.As(err, &failed) || failed.Reason != agent.ReasonBootWouldFallBack || !strings.Contains(failed.Message, "boot_assessment_tentative=yes") || r.count() != 0 {
		t.Fatalf("an armed host: %v, %d reboot requests; want BootWouldFallBack naming the flag, none asked", err, r.count())
	}
	if result == nil || result.Boot == nil || result.Boot.BootID != bootA {
		t.Errorf("the refusal's result %+v: want the boot it read", result)
	}
	n.edit(t, "set", "enable_boot_assessment=", "enable_boot_assessment_always=")
	_, err = reboot.Run(context.Background(), kairosOp("tentative-alone", nwv1.OperationReboot, clk.Now().Add(time.Hour)))
	var pending *agent.Pending
	if !errors.As(err, &pending) || r.count() != 1 {
		t.Errorf("tentative without the assessment enabled: %v, %d requests; want the reboot asked", err, r.count())
	}
}

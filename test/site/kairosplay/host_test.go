package kairosplay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

// played is a host installed with v1 and a registry holding v1 and v2.
type played struct {
	host   *Host
	v1, v2 string
}

func newPlayed(t *testing.T) played {
	t.Helper()
	if _, err := GRUBEditenv(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	reg := Registry{Dir: filepath.Join(dir, "registry")}
	v1, err := reg.AddVersion("v3.4.2")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := reg.AddVersion("v3.5.0")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Root: filepath.Join(dir, "root"), Dir: filepath.Join(dir, "kairos"), Registry: reg}
	b, err := h.Install(context.Background(), v1)
	if err != nil {
		t.Fatal(err)
	}
	if b.Entry != Active || b.Image != v1 || b.Fallback {
		t.Fatalf("the installed host booted %+v, want the active slot with %s", b, v1)
	}
	return played{host: h, v1: v1, v2: v2}
}

// read is a file of the played host's root.
func read(t *testing.T, h *Host, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(h.Root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func exists(t *testing.T, h *Host, rel string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(h.Root, rel))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// repo is the reference without its digest: what KAIROS_IMAGE_REPO says of it.
func repo(ref string) string { r, _, _ := strings.Cut(ref, "@"); return r }

// upgrade runs the played kairos-agent through the Runner, as the agent does.
func upgrade(t *testing.T, h *Host, args ...string) {
	t.Helper()
	if _, err := (Runner{Host: h}).Run(context.Background(), append([]string{"kairos-agent", "upgrade"}, args...)); err != nil {
		t.Fatal(err)
	}
}

// bootEntry is the entry internal/hostos tells from the host's command line.
func bootEntry(t *testing.T, h *Host) nwv1.KairosBootEntry {
	t.Helper()
	entry, ok := hostos.KairosBootFromCmdline(read(t, h, "proc/cmdline"))
	if !ok {
		t.Fatalf("hostos cannot tell the entry from %q", read(t, h, "proc/cmdline"))
	}
	return entry
}

func TestUpgradeThenRebootBootsTheNewImage(t *testing.T) {
	p := newPlayed(t)
	ctx := context.Background()
	h := p.host
	before, err := h.BootID()
	if err != nil || before == "" {
		t.Fatalf("boot ID %q: %v", before, err)
	}
	upgrade(t, h, "--source", "oci:"+p.v2)
	// Staged: the slots moved, the running system did not.
	if ref, _, _ := h.Slot(Active); ref != p.v2 {
		t.Fatalf("active slot %s after the upgrade, want %s", ref, p.v2)
	}
	if ref, _, _ := h.Slot(Passive); ref != p.v1 {
		t.Fatalf("passive slot %s after the upgrade, want %s", ref, p.v1)
	}
	if got := ReleaseValue(read(t, h, "etc/kairos-release"), "KAIROS_IMAGE_REPO"); got != repo(p.v1) {
		t.Fatalf("before the reboot the host runs %s, want %s", got, repo(p.v1))
	}
	env, err := h.GRUBEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if env[EnableBootAssessment] != "yes" {
		t.Fatalf("grubenv after the upgrade %v: want enable_boot_assessment=yes", env)
	}
	if err := h.RequestReboot(); err != nil {
		t.Fatal(err)
	}
	b, err := h.Boot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := h.BootID()
	if after == before || after != b.BootID || len(after) != 36 {
		t.Fatalf("boot ID %q after the reboot (before %q, Boot said %q): want a new UUID", after, before, b.BootID)
	}
	if got := ReleaseValue(read(t, h, "etc/kairos-release"), "KAIROS_IMAGE_REPO"); got != repo(p.v2) {
		t.Fatalf("after the reboot the host runs %s, want %s", got, repo(p.v2))
	}
	if got := ReleaseValue(read(t, h, "etc/kairos-release"), "KAIROS_VERSION"); got != "v3.5.0" {
		t.Fatalf("KAIROS_VERSION %s, want v3.5.0", got)
	}
	if e := bootEntry(t, h); e != nwv1.KairosBootActive || !exists(t, h, "run/cos/active_mode") || exists(t, h, "run/cos/upgrade_failure") ||
		strings.Contains(read(t, h, "proc/cmdline"), "upgrade_failure") {
		t.Fatalf("booted %s, cmdline %q: want the active entry without upgrade_failure", e, read(t, h, "proc/cmdline"))
	}
	// What the agent reads of the host (internal/hostos) says the same.
	hh := hostos.Host{Root: h.Root, Proc: h.Proc()}
	provider, err := hostos.Detect(hh)
	if err != nil || provider.Kind() != nwv1.HostOSKairos {
		t.Fatalf("hostos.Detect: %v, %v: want Kairos", provider, err)
	}
	facts, err := provider.Facts(hh)
	if err != nil || facts.Kairos.Version != "v3.5.0" || facts.Kairos.BootEntry != nwv1.KairosBootActive {
		t.Fatalf("hostos facts %+v, %v: want v3.5.0 booted from the active entry", facts.Kairos, err)
	}
	env, err = h.GRUBEnv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if env[EnableBootAssessment] != "" || env[BootAssessmentTentative] != "" {
		t.Fatalf("grubenv after a good boot %v: want the assessment flags cleared", env)
	}
	if ok, _ := h.RebootRequested(); ok {
		t.Fatal("the reboot request outlived the boot")
	}
}

func TestFailedBootFallsBackToPassive(t *testing.T) {
	p := newPlayed(t)
	ctx := context.Background()
	h := p.host
	if err := h.SetFault(FaultFailBoot, true, p.v2); err != nil {
		t.Fatal(err)
	}
	upgrade(t, h, "--source=oci:"+p.v2)
	b, err := h.Boot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Entry != Passive || !b.Fallback || b.Image != p.v1 || len(b.Attempts) != 1 || b.Attempts[0] != Active {
		t.Fatalf("booted %+v: want the fallback (passive, %s) after one failed attempt of active", b, p.v1)
	}
	cmdline := read(t, h, "proc/cmdline")
	if e := bootEntry(t, h); e != nwv1.KairosBootPassive || !strings.Contains(" "+cmdline+" ", " upgrade_failure") {
		t.Fatalf("cmdline %q: want COS_PASSIVE with upgrade_failure", cmdline)
	}
	if !exists(t, h, "run/cos/passive_mode") || !exists(t, h, "run/cos/upgrade_failure") || exists(t, h, "run/cos/active_mode") {
		t.Fatal("want the sentinels passive_mode and upgrade_failure only")
	}
	if got := ReleaseValue(read(t, h, "etc/kairos-release"), "KAIROS_IMAGE_REPO"); got != repo(p.v1) {
		t.Fatalf("the fallback runs %s, want %s", got, repo(p.v1))
	}
	if facts, err := (hostos.Kairos{}).Facts(hostos.Host{Root: h.Root, Proc: h.Proc()}); err != nil || facts.Kairos.BootEntry != nwv1.KairosBootPassive {
		t.Fatalf("hostos facts %+v, %v: want the passive entry", facts.Kairos, err)
	}
	// The next boot, with no fault and no upgrade, is the active one again: /run's sentinels
	// of the fallback are gone.
	if err := h.SetFault(FaultFailBoot, false); err != nil {
		t.Fatal(err)
	}
	b, err = h.Boot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Entry != Active || b.Fallback || exists(t, h, "run/cos/upgrade_failure") || exists(t, h, "run/cos/passive_mode") {
		t.Fatalf("the boot after the fallback %+v: want active, no upgrade_failure", b)
	}
}

func TestStaleFlagsFallBackAtOnce(t *testing.T) {
	p := newPlayed(t)
	ctx := context.Background()
	h := p.host
	if err := h.LeaveStaleFlags(ctx); err != nil {
		t.Fatal(err)
	}
	upgrade(t, h, "--source", "oci:"+p.v2)
	b, err := h.Boot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The new image never got its try (kairos#4303).
	if b.Entry != Passive || !b.Fallback || len(b.Attempts) != 0 || !exists(t, h, "run/cos/upgrade_failure") {
		t.Fatalf("booted %+v: want the fallback at once, no attempt of the new image", b)
	}

	// The hook: a boot that leaves the flag set, then an upgrade.
	p = newPlayed(t)
	h = p.host
	if err := h.SetFault(FaultStaleFlags, true); err != nil {
		t.Fatal(err)
	}
	if err := h.setEnv(ctx, EnableBootAssessmentAlways+"=yes"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if env, _ := h.GRUBEnv(ctx); env[BootAssessmentTentative] != "yes" {
		t.Fatalf("grubenv %v: want boot_assessment_tentative=yes left by the boot", env)
	}
	if err := errors.Join(h.SetFault(FaultStaleFlags, false), h.setEnv(ctx, EnableBootAssessmentAlways+"=")); err != nil {
		t.Fatal(err)
	}
	upgrade(t, h, "--source", "oci:"+p.v2)
	if b, err := h.Boot(ctx); err != nil || !b.Fallback {
		t.Fatalf("booted %+v, %v: want the fallback at once", b, err)
	}
}

func TestRecoveryUpgrade(t *testing.T) {
	p := newPlayed(t)
	h := p.host
	upgrade(t, h, "--recovery", "--source", "oci:"+p.v2)
	for slot, want := range map[string]string{Recovery: p.v2, Active: p.v1, Passive: p.v1} {
		ref, release, err := h.Slot(slot)
		if err != nil {
			t.Fatal(err)
		}
		if ref != want || ReleaseValue(release, "KAIROS_IMAGE_REPO") != repo(want) {
			t.Errorf("slot %s holds %s (%s), want %s", slot, ref, ReleaseValue(release, "KAIROS_IMAGE_REPO"), want)
		}
	}
	if env, _ := h.GRUBEnv(context.Background()); env[EnableBootAssessment] != "" {
		t.Fatalf("grubenv %v: a recovery upgrade enables no assessment", env)
	}
}

func TestKairosAgentFailsAsKairosAgent(t *testing.T) {
	p := newPlayed(t)
	r := Runner{Host: p.host}
	unknown := strings.Replace(p.v2, "@sha256:", "@sha256:0", 1)[:len(p.v2)]
	for name, argv := range map[string][]string{
		"not in the registry": {"kairos-agent", "upgrade", "--source", "oci:" + unknown},
		"no digest":           {"kairos-agent", "upgrade", "--source", "oci:" + repo(p.v2)},
		"not oci":             {"kairos-agent", "upgrade", "--source", "dir:/tmp"},
		"unknown flag":        {"kairos-agent", "upgrade", "--force", "--source", "oci:" + p.v2},
		"not upgrade":         {"kairos-agent", "reset"},
	} {
		res, err := r.Run(context.Background(), argv)
		if err == nil || res.ExitCode != 1 || len(res.Stderr) == 0 {
			t.Errorf("%s: %v, exit %d, stderr %q: want exit 1 and a message", name, err, res.ExitCode, res.Stderr)
		}
	}
	if ref, _, _ := p.host.Slot(Active); ref != p.v1 {
		t.Fatalf("a failed upgrade changed the active slot to %s", ref)
	}
	if _, err := r.Run(context.Background(), []string{"sh", "-c", "true"}); err == nil {
		t.Fatal("the Runner ran sh")
	}
}

func TestNoReturn(t *testing.T) {
	p := newPlayed(t)
	h := p.host
	before, _ := h.BootID()
	if err := h.SetFault(FaultNoReturn, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Boot(context.Background()); !errors.Is(err, ErrNoReturn) {
		t.Fatalf("Boot: %v, want ErrNoReturn", err)
	}
	if after, _ := h.BootID(); after != before {
		t.Fatal("a node that did not come back has a new boot ID")
	}
	// A failing image with no assessment to fall back never comes up either.
	p = newPlayed(t)
	if err := p.host.SetFault(FaultFailBoot, true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.host.Boot(context.Background()); !errors.Is(err, ErrNoReturn) {
		t.Fatalf("Boot: %v, want ErrNoReturn", err)
	}
}

func TestNoDRBDAfterBoot(t *testing.T) {
	p := newPlayed(t)
	h := p.host
	h.DRBDDir = t.TempDir()
	nodes := []drbdplay.Node{{Name: "n1", Address: "10.0.0.1"}, {Name: "n2", Address: "10.0.0.2"}, {Name: "n3", Address: "10.0.0.3"}}
	if err := drbdplay.WriteConfig(h.DRBDDir, "n1", nodes); err != nil {
		t.Fatal(err)
	}
	standalone := filepath.Join(h.DRBDDir, drbdplay.StandAloneFile)
	if err := h.SetFault(FaultNoDRBD, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(standalone)
	if err != nil || strings.Join(strings.Fields(string(raw)), " ") != "n2 n3" {
		t.Fatalf("StandAlone peers %q, %v: want n2 n3", raw, err)
	}
	if err := h.SetFault(FaultNoDRBD, false); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(standalone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the StandAlone file after a boot without the fault: %v", err)
	}
}

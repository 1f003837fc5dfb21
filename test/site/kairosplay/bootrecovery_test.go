package kairosplay

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
)

// TestNextEntryBootsOnce: next_entry=fallback, set in the OEM grubenv with the real
// grub-editenv as kairos-agent bootentry --select sets it, makes the next boot the passive
// entry's, without upgrade_failure, and GRUB empties it: the boot after is the active one.
func TestNextEntryBootsOnce(t *testing.T) {
	p := newPlayed(t)
	ctx := context.Background()
	h := p.host
	bin, _ := GRUBEditenv()
	if out, err := exec.Command(bin, h.OEMEnvFile(), "set", "next_entry=fallback").CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv: %v: %s", err, out)
	}
	b, err := h.Boot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Entry != Passive || !b.Selected || b.Fallback || exists(t, h, "run/cos/upgrade_failure") || bootEntry(t, h) != nwv1.KairosBootPassive {
		t.Fatalf("the selected boot %+v: want the passive entry, selected, no upgrade_failure", b)
	}
	if env, err := h.OEMEnv(ctx); err != nil || env[NextEntry] != "" {
		t.Fatalf("the OEM grubenv after the selected boot: %v, %v; want next_entry emptied", env, err)
	}
	if b, err = h.Boot(ctx); err != nil || b.Entry != Active || b.Selected {
		t.Fatalf("the boot after: %+v, %v; want the active entry again", b, err)
	}
	// An id grub.cfg has not is GRUB's first entry, cos.
	if err := h.setOEMEnv(ctx, NextEntry+"=nonsense"); err != nil {
		t.Fatal(err)
	}
	if b, err = h.Boot(ctx); err != nil || b.Entry != Active {
		t.Fatalf("next_entry=nonsense: %+v, %v; want the active entry", b, err)
	}
}

// TestUpgradeFromPassiveLeavesPassive: after a fallback, kairos-agent upgrade run from the
// passive entry writes the active slot and leaves the passive one as it is (it does not copy
// the failed active over it); the next boot is the active one, with the image written.
func TestUpgradeFromPassiveLeavesPassive(t *testing.T) {
	p := newPlayed(t)
	ctx := context.Background()
	h := p.host
	if err := h.SetFault(FaultFailBoot, true, p.v2); err != nil {
		t.Fatal(err)
	}
	upgrade(t, h, "--source", "oci:"+p.v2)
	if b, err := h.Boot(ctx); err != nil || !b.Fallback {
		t.Fatalf("%+v, %v: want the fallback", b, err)
	}
	upgrade(t, h, "--source", "oci:"+p.v1)
	if ref, _, _ := h.Slot(Active); ref != p.v1 {
		t.Fatalf("the active slot holds %s after the upgrade from passive, want %s", ref, p.v1)
	}
	if ref, _, _ := h.Slot(Passive); ref != p.v1 {
		t.Fatalf("the passive slot holds %s after the upgrade from passive, want %s kept (not the failed %s)", ref, p.v1, p.v2)
	}
	b, err := h.Boot(ctx)
	if err != nil || b.Entry != Active || b.Fallback || b.Image != p.v1 {
		t.Fatalf("the boot after the upgrade from passive: %+v, %v; want the active entry with %s", b, err, p.v1)
	}
}

// TestLoaderBootCountPath: the played variable is the sample's bytes (testdata), internal/hostos
// reads its counter, and a boot (a GRUB one) takes it away, as a volatile variable goes.
func TestLoaderBootCountPath(t *testing.T) {
	sample, err := os.ReadFile(filepath.Join("testdata", filepath.Base(LoaderBootCountPathFile)))
	if err != nil {
		t.Fatal(err)
	}
	if got := EFIString(`\loader\entries\active+2-1.conf`); !bytes.Equal(got, sample) {
		t.Fatalf("EFIString: % x\nthe sample: % x", got, sample)
	}
	p := newPlayed(t)
	h := p.host
	if err := h.SetLoaderBootCountPath(`\loader\entries\active+2-1.conf`); err != nil {
		t.Fatal(err)
	}
	facts, err := (hostos.Kairos{}).Facts(hostos.Host{Root: h.Root, Proc: h.Proc()})
	if err != nil || !reflect.DeepEqual(facts.Kairos.BootCounting, &nwv1.KairosBootCounting{TriesLeft: 2, TriesDone: 1}) {
		t.Fatalf("hostos reads %+v, %v; want 2 left, 1 done", facts.Kairos.BootCounting, err)
	}
	if _, err := h.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(t, h, LoaderBootCountPathFile) {
		t.Fatal("LoaderBootCountPath outlived the boot")
	}
}

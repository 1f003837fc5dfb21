package hostos

import (
	"os"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Kairos command lines, built from the cOS/elemental GRUB entries Kairos inherits (see
// testdata/README.md).
const (
	activeCmdline = "BOOT_IMAGE=(loop0)/boot/vmlinuz console=tty1 console=ttyS0 root=LABEL=COS_ACTIVE cos-img/filename=/cOS/active.img " +
		"panic=5 rd.cos.oemlabel=COS_OEM rd.immucore.oemlabel=COS_OEM rd.immucore.oemtimeout=2 rd.immucore.debug rd.neednet=1 net.ifnames=1"
	passiveCmdline = "BOOT_IMAGE=(loop0)/boot/vmlinuz console=tty1 root=LABEL=COS_PASSIVE cos-img/filename=/cOS/passive.img panic=5 rd.cos.oemlabel=COS_OEM"
	// The recovery system boots a squashfs by its label, like a live medium, but the label is
	// the recovery partition's.
	recoveryCmdline = "BOOT_IMAGE=(loop0)/boot/vmlinuz console=tty1 root=live:CDLABEL=COS_RECOVERY rd.live.dir=/ rd.live.squashimg=recovery.squashfs panic=5"
	liveCmdline     = "BOOT_IMAGE=/boot/kernel console=tty1 root=live:CDLABEL=COS_LIVE rd.live.dir=/ rd.live.squashimg=rootfs.squashfs rd.cos.disable"
	ukiCmdline      = "console=ttyS0 console=tty1 net.ifnames=1 rd.immucore.oemlabel=COS_OEM rd.immucore.oemtimeout=2 rd.immucore.uki selinux=0 panic=5"
)

func TestKairosBootFromCmdline(t *testing.T) {
	machine, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cmdline string
		want          nwv1.KairosBootEntry
	}{
		{"active", activeCmdline, nwv1.KairosBootActive},
		{"passive", passiveCmdline, nwv1.KairosBootPassive},
		{"recovery", recoveryCmdline, nwv1.KairosBootRecovery},
		{"recovery from its system label", "root=LABEL=COS_SYSTEM panic=5", nwv1.KairosBootRecovery},
		{"recovery asked for", "root=LABEL=COS_STATE recovery-mode", nwv1.KairosBootRecovery},
		{"the installation medium", liveCmdline, nwv1.KairosBootLiveCD},
		{"a network boot", "initrd=initrd netboot rd.neednet=1", nwv1.KairosBootLiveCD},
		// kairos-sdk's order: an active boot that also names the recovery label is active.
		{"active naming the recovery label", activeCmdline + " rd.immucore.recoverylabel=COS_RECOVERY", nwv1.KairosBootActive},
		// Older cOS name the image alone.
		{"the image alone, active", "root=LABEL=COS_STATE cos-img/filename=/cOS/active.img", nwv1.KairosBootActive},
		{"the image alone, passive", "root=LABEL=COS_STATE cos-img/filename=/cOS/passive.img", nwv1.KairosBootPassive},
		{"the image alone, recovery", "root=LABEL=COS_STATE cos-img/filename=/cOS/recovery.img", nwv1.KairosBootRecovery},
		// A UKI's entry is in an EFI variable: the line does not say.
		{"a UKI", ukiCmdline, ""},
		// This machine's own line (not Kairos).
		{"this machine", string(machine), ""},
		{"empty", "", ""},
		// What follows "--" is init's, not the kernel's.
		{"after --", "console=ttyS0 -- root=LABEL=COS_ACTIVE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := KairosBootFromCmdline(tc.cmdline)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("KairosBootFromCmdline = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// FuzzKairosBootFromCmdline: no line makes it panic, and it says an entry exactly when ok,
// one the API admits.
func FuzzKairosBootFromCmdline(f *testing.F) {
	for _, seed := range []string{activeCmdline, passiveCmdline, recoveryCmdline, liveCmdline, ukiCmdline, "", "--", "cos-img/filename=", "\x00COS_ACTIVE"} {
		f.Add(seed)
	}
	valid := map[nwv1.KairosBootEntry]bool{nwv1.KairosBootActive: true, nwv1.KairosBootPassive: true,
		nwv1.KairosBootRecovery: true, nwv1.KairosBootAutoReset: true, nwv1.KairosBootLiveCD: true}
	f.Fuzz(func(t *testing.T, cmdline string) {
		entry, ok := KairosBootFromCmdline(cmdline)
		if ok != (entry != "") || (ok && !valid[entry]) {
			t.Fatalf("KairosBootFromCmdline(%q) = %q, %v", cmdline, entry, ok)
		}
		if !strings.Contains(cmdline, "COS_") && !strings.Contains(cmdline, "cos-img/filename=") &&
			!strings.Contains(cmdline, "recovery-mode") && !strings.Contains(cmdline, "live:") && !strings.Contains(cmdline, "netboot") && ok {
			t.Fatalf("KairosBootFromCmdline(%q) = %q from a line naming no Kairos boot", cmdline, entry)
		}
	})
}

package hostos

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// How a Kairos node says which boot entry it runs from. Both rules are Kairos's own:
//
//   - At boot, immucore (Kairos's initramfs) writes one sentinel file into /run/cos: active_mode,
//     passive_mode, recovery_mode, autoreset_mode or live_mode (WriteSentinelDagStep in
//     kairos-io/immucore pkg/state/steps_shared.go, commit 00962dcce86e0c5a4efec94047a0285d1fc1e8e2),
//     which Kairos's docs tell cloud-configs to test ("/run/cos/active_mode",
//     kairos-io/kairos-docs content/en/docs/Upgrade/boot_assessment.md). immucore decides it
//     from the command line, or, on a UKI (trusted boot) node, from the EFI variable
//     LoaderEntrySelected, which the agent does not read: the sentinel covers both.
//   - Without a sentinel, the kernel's command line: the GRUB entries boot with
//     root=LABEL=COS_ACTIVE or COS_PASSIVE (the cOS/elemental GRUB configuration Kairos
//     inherits, rancher/elemental-toolkit docs/content/en/docs/Customizing/configure_grub.md),
//     and kairos-sdk reads COS_ACTIVE, COS_PASSIVE, then COS_RECOVERY, COS_SYSTEM or
//     recovery-mode, then live:LABEL, live:CDLABEL or netboot, in that order
//     (getNonUKIBootState in kairos-io/kairos-sdk state/state.go, commit
//     04cadbc90c2b191c0e1a255092000f4d59e8f054). Older cOS boots name the image instead,
//     cos-img/filename=/cOS/active.img (its dracut module), read last.

// kairosSentinels are immucore's sentinel files and the entries they stand for.
var kairosSentinels = []struct {
	file  string
	entry nwv1.KairosBootEntry
}{
	{"active_mode", nwv1.KairosBootActive},
	{"passive_mode", nwv1.KairosBootPassive},
	{"recovery_mode", nwv1.KairosBootRecovery},
	{"autoreset_mode", nwv1.KairosBootAutoReset},
	{"live_mode", nwv1.KairosBootLiveCD},
}

// KairosBootFromCmdline tells the boot entry from a kernel command line, by kairos-sdk's rules
// (above); ok is false when the line does not say (a UKI boot, or not Kairos). Only the
// kernel's own parameters count: what follows "--" is init's.
func KairosBootFromCmdline(cmdline string) (entry nwv1.KairosBootEntry, ok bool) {
	params := strings.Fields(cmdline)
	for i, p := range params {
		if p == "--" {
			params = params[:i]
			break
		}
	}
	has := func(subs ...string) bool {
		for _, p := range params {
			for _, s := range subs {
				if strings.Contains(p, s) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("COS_ACTIVE"):
		return nwv1.KairosBootActive, true
	case has("COS_PASSIVE"):
		return nwv1.KairosBootPassive, true
	case has("COS_RECOVERY", "COS_SYSTEM", "recovery-mode"):
		return nwv1.KairosBootRecovery, true
	case has("live:LABEL", "live:CDLABEL", "netboot"):
		return nwv1.KairosBootLiveCD, true
	}
	for _, p := range params {
		image, found := strings.CutPrefix(p, "cos-img/filename=")
		if !found {
			continue
		}
		switch {
		case strings.Contains(image, "recovery"):
			return nwv1.KairosBootRecovery, true
		case strings.Contains(image, "active"):
			return nwv1.KairosBootActive, true
		case strings.Contains(image, "passive"):
			return nwv1.KairosBootPassive, true
		}
	}
	return "", false
}

// kairosBootEntry is the entry the host booted: immucore's sentinel, else the command line.
// "" with no error means the host does not say.
func (h Host) kairosBootEntry() (nwv1.KairosBootEntry, error) {
	var found []nwv1.KairosBootEntry
	for _, s := range kairosSentinels {
		ok, err := exists(h.Root, kairosSentinelDir+"/"+s.file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("the boot entry: /%s/%s: %w", kairosSentinelDir, s.file, err)
		}
		if ok {
			found = append(found, s.entry)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
	default:
		// /run is emptied at every boot and immucore writes one: several are not its doing.
		return "", fmt.Errorf("the boot entry: /%s holds the sentinels of %v at once", kairosSentinelDir, found)
	}
	cmdline, err := h.cmdline()
	if err != nil {
		return "", fmt.Errorf("the boot entry: %w", err)
	}
	entry, _ := KairosBootFromCmdline(cmdline)
	return entry, nil
}

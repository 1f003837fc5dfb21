// Package kairosplay plays a Kairos node's host for the local site: its root (the
// /etc/kairos-release of the image it booted, /proc/cmdline and the boot ID, immucore's /run/cos
// sentinels, and the boot assessment's GRUB environment block on COS_STATE, read and written
// with the real grub-editenv), its three slots (active, passive, recovery), a played registry of
// images, a played kairos-agent that stages an image (Runner), and a played reboot as GRUB and
// Kairos's boot assessment do it (Host.Boot), with fault hooks a test sets as files.
//
// What is played follows Kairos's own rules, cited where they are applied; docs/local-site.md
// says what is played and what is real.
package kairosplay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

// The slots a Kairos node boots from: the active system, the passive one (the fallback: the
// system that was active before the last upgrade) and the recovery system.
const (
	Active   = "active"
	Passive  = "passive"
	Recovery = "recovery"
)

// The fault hooks: files in the host's Dir, which a test writes (SetFault) and the played boot
// reads.
const (
	// FaultFailBoot: the images it lists, one reference a line, fail to boot (the kernel
	// panics, and panic=5 reboots the machine); empty, the image of the active slot fails,
	// whatever it is. GRUB's next attempt finds boot_assessment_tentative=yes and boots the
	// fallback with upgrade_failure.
	FaultFailBoot = "fault-fail-boot"
	// FaultNoReturn: the node never comes back after a reboot: Boot returns ErrNoReturn and the
	// site starts no agent again.
	FaultNoReturn = "fault-no-return"
	// FaultNoDRBD: the node boots, but DRBD does not reconnect: every peer of the node's played
	// DRBD is StandAlone (drbdplay.StandAloneFile in DRBDDir) from that boot on; only in a boot
	// of one of the images it lists, when it lists any (an image whose DRBD does not come up).
	FaultNoDRBD = "fault-no-drbd"
	// FaultStaleFlags: a boot leaves boot_assessment_tentative=yes set (Kairos's boot
	// assessment did not clear it, kairos#4303): the next assessed boot falls back at once.
	FaultStaleFlags = "fault-stale-flags"
)

// RebootFile is the reboot request in the host's Dir (RequestReboot): the machine is asked to
// restart.
const RebootFile = "reboot-requested"

// standAloneOwn marks, in Dir, that the played boot wrote the DRBD fault's StandAlone file, so
// that a boot without the fault removes it again (a reboot resets DRBD's connections).
const standAloneOwn = "fault-no-drbd.written"

// ErrNoReturn is Boot's error when the node does not come back: FaultNoReturn, or an image
// that fails to boot with no boot assessment to fall back.
var ErrNoReturn = errors.New("the node does not come back")

// Host is one node's played Kairos host.
type Host struct {
	// Root is the host's root file system (the agent's --host-root): etc/kairos-release,
	// proc/ (the agent's --host-proc), run/cos, run/initramfs/cos-state.
	Root string
	// Dir holds what is not in the root: the slots, the fault hooks, the reboot request.
	Dir string
	// Registry is where kairos-agent upgrade finds images.
	Registry Registry
	// DRBDDir, when set, is the node's played DRBD (netsite's Node.DRBDDir), for FaultNoDRBD.
	DRBDDir string
	// Runner runs grub-editenv; drbd.ExecRunner{} when nil.
	Runner drbd.Runner
}

// Proc is the host's /proc (the agent's --host-proc).
func (h *Host) Proc() string { return filepath.Join(h.Root, "proc") }

// GRUBEnvFile is the boot assessment's GRUB environment block, on the host's COS_STATE.
func (h *Host) GRUBEnvFile() string { return filepath.Join(h.Root, BootAssessmentFile) }

// OEMEnvFile is the OEM partition's grubenv (next_entry).
func (h *Host) OEMEnvFile() string { return filepath.Join(h.Root, OEMEnvFile) }

func (h *Host) runner() drbd.Runner {
	if h.Runner == nil {
		return drbd.ExecRunner{}
	}
	return h.Runner
}

// Install installs image (in the registry) into every slot, as a fresh installation of Kairos
// does, creates the boot assessment's block (grub-editenv create), saves the host (Save) and
// boots it.
func (h *Host) Install(ctx context.Context, image string) (Booted, error) {
	if err := h.Save(); err != nil {
		return Booted{}, err
	}
	for _, slot := range []string{Active, Passive, Recovery} {
		if err := h.write(slot, image); err != nil {
			return Booted{}, err
		}
	}
	if err := os.MkdirAll(filepath.Join(h.Root, CosStateDir), 0o755); err != nil {
		return Booted{}, err
	}
	if _, err := editenv(ctx, h.runner(), h.GRUBEnvFile(), "create"); err != nil {
		return Booted{}, err
	}
	// The OEM partition, mounted at /oem, and its grubenv.
	if err := os.MkdirAll(filepath.Dir(h.OEMEnvFile()), 0o755); err != nil {
		return Booted{}, err
	}
	if _, err := editenv(ctx, h.runner(), h.OEMEnvFile(), "create"); err != nil {
		return Booted{}, err
	}
	return h.Boot(ctx)
}

// write puts the registry's image ref into slot.
func (h *Host) write(slot, ref string) error {
	img, err := h.Registry.Image(ref)
	if err != nil {
		return err
	}
	release, err := os.ReadFile(filepath.Join(img, ReleaseFile))
	if err != nil {
		return err
	}
	return h.writeSlot(slot, ref, release)
}

func (h *Host) writeSlot(slot, ref string, release []byte) error {
	dir := filepath.Join(h.Dir, "slots", slot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, ReleaseFile), release, 0o644),
		os.WriteFile(filepath.Join(dir, RefFile), []byte(ref+"\n"), 0o644))
}

// Slot is the image in slot (its full reference) and its kairos-release.
func (h *Host) Slot(slot string) (ref, release string, err error) {
	dir := filepath.Join(h.Dir, "slots", slot)
	r, err := os.ReadFile(filepath.Join(dir, RefFile))
	if err != nil {
		return "", "", fmt.Errorf("slot %s: %w", slot, err)
	}
	rel, err := os.ReadFile(filepath.Join(dir, ReleaseFile))
	if err != nil {
		return "", "", fmt.Errorf("slot %s: %w", slot, err)
	}
	return strings.TrimSpace(string(r)), string(rel), nil
}

// copySlot copies slot from into slot to.
func (h *Host) copySlot(from, to string) error {
	ref, release, err := h.Slot(from)
	if err != nil {
		return err
	}
	return h.writeSlot(to, ref, []byte(release))
}

// GRUBEnv is the boot assessment block's variables, as grub-editenv lists them.
func (h *Host) GRUBEnv(ctx context.Context) (map[string]string, error) {
	return listEnv(ctx, h.runner(), h.GRUBEnvFile())
}

// setEnv sets (or, with an empty value, empties) variables of the block with grub-editenv.
func (h *Host) setEnv(ctx context.Context, kv ...string) error {
	_, err := editenv(ctx, h.runner(), h.GRUBEnvFile(), append([]string{"set"}, kv...)...)
	return err
}

// OEMEnv is the OEM grubenv's variables, as grub-editenv lists them; empty when the host has
// none (GRUB's search finds no /grubenv).
func (h *Host) OEMEnv(ctx context.Context) (map[string]string, error) {
	if _, err := os.Stat(h.OEMEnvFile()); errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	return listEnv(ctx, h.runner(), h.OEMEnvFile())
}

// setOEMEnv sets variables of the OEM grubenv with grub-editenv.
func (h *Host) setOEMEnv(ctx context.Context, kv ...string) error {
	if err := os.MkdirAll(filepath.Dir(h.OEMEnvFile()), 0o755); err != nil {
		return err
	}
	_, err := editenv(ctx, h.runner(), h.OEMEnvFile(), append([]string{"set"}, kv...)...)
	return err
}

// LeaveStaleFlags sets boot_assessment_tentative=yes now, as a boot whose assessment was never
// cleared leaves it (kairos#4303).
func (h *Host) LeaveStaleFlags(ctx context.Context) error {
	return h.setEnv(ctx, BootAssessmentTentative+"=yes")
}

// SetFault sets (on) or removes a fault hook; content is FaultFailBoot's list of images.
func (h *Host) SetFault(fault string, on bool, content ...string) error {
	p := filepath.Join(h.Dir, fault)
	if !on {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return err
	}
	var text string
	if len(content) > 0 {
		text = strings.Join(content, "\n") + "\n"
	}
	return os.WriteFile(p, []byte(text), 0o644)
}

// fault reads a fault hook: whether it is set, and its lines.
func (h *Host) fault(name string) (bool, []string, error) {
	raw, err := os.ReadFile(filepath.Join(h.Dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	return true, strings.Fields(string(raw)), nil
}

// RequestReboot records that the machine was asked to restart (the played reboot command): the
// site's supervisor (siteagent) boots the host once the agent's process is gone.
func (h *Host) RequestReboot() error {
	if err := os.MkdirAll(h.Dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, RebootFile), []byte(time.Now().UTC().Format(time.RFC3339Nano)+"\n"), 0o644)
}

// RebootRequested reports whether a reboot was asked for since the last boot.
func (h *Host) RebootRequested() (bool, error) {
	_, err := os.Stat(filepath.Join(h.Dir, RebootFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// BootID is the host's current boot ID (/proc/sys/kernel/random/boot_id).
func (h *Host) BootID() (string, error) {
	raw, err := os.ReadFile(filepath.Join(h.Proc(), "sys/kernel/random/boot_id"))
	return strings.TrimSpace(string(raw)), err
}

// Booted is what a played boot booted.
type Booted struct {
	// Entry is the slot booted: Active, Passive (also the fallback) or Recovery.
	Entry string
	// Image is the booted slot's image reference.
	Image string
	// BootID is the new boot ID.
	BootID string
	// Fallback is true when GRUB booted the fallback for a failed assessed boot
	// (upgrade_failure).
	Fallback bool
	// Attempts are the entries GRUB tried before, which failed to boot.
	Attempts []string
	// Selected is true when the boot's entry was next_entry's (kairos-agent bootentry
	// --select, the agent's SelectBootEntry): booted once, the boot assessment skipped.
	Selected bool
}

// The kernel command lines of Kairos's GRUB entries (not UKI). The parameters are those of
// the GRUB configuration Kairos inherits from cOS/elemental (root=LABEL=COS_ACTIVE|COS_PASSIVE,
// cos-img/filename=/cOS/active.img|passive.img: rancher/elemental-toolkit
// docs/content/en/docs/Customizing/configure_grub.md) and the panic and crash reboot options
// kairos-docs content/en/docs/Upgrade/boot_assessment.md says Kairos adds; the fallback
// entry adds extra_passive_cmdline, upgrade_failure after a failed assessed boot.
var cmdlines = map[string]string{
	Active:   "BOOT_IMAGE=/cOS/vmlinuz console=tty1 root=LABEL=COS_ACTIVE cos-img/filename=/cOS/active.img panic=5 rd.shell=0 systemd.crash_reboot=yes rd.neednet=0 rd.cos.oemlabel=COS_OEM rd.immucore.sysrootwait",
	Passive:  "BOOT_IMAGE=/cOS/vmlinuz console=tty1 root=LABEL=COS_PASSIVE cos-img/filename=/cOS/passive.img panic=5 rd.shell=0 systemd.crash_reboot=yes rd.neednet=0 rd.cos.oemlabel=COS_OEM rd.immucore.sysrootwait",
	Recovery: "BOOT_IMAGE=/cOS/vmlinuz console=tty1 root=LABEL=COS_RECOVERY cos-img/filename=/cOS/recovery.img panic=5 rd.shell=0 systemd.crash_reboot=yes rd.neednet=0 rd.cos.oemlabel=COS_OEM rd.immucore.sysrootwait",
}

// Boot plays a power cycle of the machine, as GRUB and Kairos's boot assessment do it:
//
//  1. GRUB reads the OEM grubenv: a next_entry (cos, fallback, recovery) is the entry of this
//     boot, selected_entry is set, and next_entry is saved empty (save_env): that boot only
//     (Kairos's grub.cfg, kairos-io/packages packages/static/grub-config/files/grub.cfg).
//     Then the boot assessment block. Kairos's GRUB logic (grub_boot_assessment on COS_STATE,
//     sourced by grubcustom at the end of grub.cfg; kairos-docs
//     content/en/docs/Upgrade/boot_assessment.md): if enable_boot_assessment=yes or
//     enable_boot_assessment_always=yes, and no selected_entry: if
//     boot_assessment_tentative=yes, the default becomes the fallback entry (passive) with
//     extra_passive_cmdline=upgrade_failure; else boot_assessment_tentative=yes is saved
//     (save_env) and the default entry, active, is booted.
//  2. An entry whose image fails to boot (FaultFailBoot) panics; panic=5 restarts the machine
//     and GRUB runs again (1). With no assessment to fall back, the machine never comes up:
//     ErrNoReturn.
//  3. The booted system: a new boot ID (a random UUID); /run emptied (a tmpfs) but for the
//     COS_STATE mount; immucore's sentinel of the entry in /run/cos (active_mode,
//     passive_mode, recovery_mode) and /run/cos/upgrade_failure on a fallback boot;
//     /proc/cmdline; /etc/kairos-release is the booted slot's.
//  4. Kairos's "Boot assessment" cloud-config, early in boot (before k3s, LINSTOR or the
//     network), clears enable_boot_assessment and boot_assessment_tentative, unless
//     FaultStaleFlags is set.
//  5. FaultNoDRBD (of the booted image, when it names images): the node's DRBD peers stay
//     StandAlone.
//
// The reboot request (RebootFile) is consumed.
func (h *Host) Boot(ctx context.Context) (Booted, error) {
	if err := os.Remove(filepath.Join(h.Dir, RebootFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Booted{}, err
	}
	if never, _, err := h.fault(FaultNoReturn); err != nil || never {
		return Booted{}, errors.Join(ErrNoReturn, err)
	}
	failing, failList, err := h.fault(FaultFailBoot)
	if err != nil {
		return Booted{}, err
	}
	var b Booted
	// GRUB's attempts: at most a selected entry (next_entry), the active entry, then the fallback.
	for attempt := 0; ; attempt++ {
		if attempt > 2 {
			return b, fmt.Errorf("%w: %v failed to boot, one after another", ErrNoReturn, b.Attempts)
		}
		env, err := h.GRUBEnv(ctx)
		if err != nil {
			return b, fmt.Errorf("GRUB reading %s: %w", BootAssessmentFile, err)
		}
		oem, err := h.OEMEnv(ctx)
		if err != nil {
			return b, fmt.Errorf("GRUB reading %s: %w", OEMEnvFile, err)
		}
		entry, fallback, selected := Active, false, false
		assessed := env[EnableBootAssessment] == "yes" || env[EnableBootAssessmentAlways] == "yes"
		switch sel := oem[NextEntry]; {
		case sel != "":
			// A default that names no entry boots the first one, cos.
			if entry = grubEntries[sel]; entry == "" {
				entry = Active
			}
			if err := h.setOEMEnv(ctx, NextEntry+"="); err != nil {
				return b, fmt.Errorf("GRUB's save_env of next_entry: %w", err)
			}
			selected = true
		case assessed && env[BootAssessmentTentative] == "yes":
			entry, fallback = Passive, true
		case assessed:
			if err := h.setEnv(ctx, BootAssessmentTentative+"=yes"); err != nil {
				return b, fmt.Errorf("GRUB's save_env: %w", err)
			}
		}
		ref, release, err := h.Slot(entry)
		if err != nil {
			return b, err
		}
		if failing && (slices.Contains(failList, ref) || len(failList) == 0 && entry == Active) {
			b.Attempts = append(b.Attempts, entry)
			if !assessed {
				return b, fmt.Errorf("%w: %s (%s) fails to boot and no boot assessment falls back", ErrNoReturn, entry, ref)
			}
			continue
		}
		b.Entry, b.Image, b.Fallback, b.Selected = entry, ref, fallback, selected
		if err := h.bootInto(entry, release, fallback); err != nil {
			return b, err
		}
		break
	}
	if stale, _, err := h.fault(FaultStaleFlags); err != nil {
		return b, err
	} else if !stale {
		if err := h.setEnv(ctx, EnableBootAssessment+"=", BootAssessmentTentative+"="); err != nil {
			return b, fmt.Errorf("the boot assessment's clearing: %w", err)
		}
	}
	if err := h.drbdFault(b.Image); err != nil {
		return b, err
	}
	id, err := h.BootID()
	b.BootID = id
	return b, err
}

// bootInto writes the root of a boot of entry, with release as its /etc/kairos-release.
func (h *Host) bootInto(entry, release string, fallback bool) error {
	run := filepath.Join(h.Root, "run")
	if err := emptyRun(run); err != nil {
		return err
	}
	cos := filepath.Join(run, "cos")
	if err := os.MkdirAll(cos, 0o755); err != nil {
		return err
	}
	sentinels := []string{entry + "_mode"}
	cmdline := cmdlines[entry]
	if fallback {
		sentinels = append(sentinels, "upgrade_failure")
		cmdline += " upgrade_failure"
	}
	for _, s := range sentinels {
		if err := os.WriteFile(filepath.Join(cos, s), nil, 0o644); err != nil {
			return err
		}
	}
	// LoaderBootCountPath is a volatile EFI variable, set anew by the boot loader at each
	// boot: a played GRUB boot has none.
	if err := os.Remove(filepath.Join(h.Root, LoaderBootCountPathFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	random := filepath.Join(h.Proc(), "sys/kernel/random")
	if err := errors.Join(os.MkdirAll(random, 0o755), os.MkdirAll(filepath.Join(h.Root, "etc"), 0o755)); err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(h.Proc(), "cmdline"), []byte(cmdline+"\n"), 0o644),
		os.WriteFile(filepath.Join(random, "boot_id"), []byte(newUUID()+"\n"), 0o644),
		os.WriteFile(filepath.Join(h.Root, "etc/kairos-release"), []byte(release), 0o644),
		os.WriteFile(filepath.Join(h.Root, "etc/os-release"), []byte(ubuntuOSRelease), 0o644))
}

// ubuntuOSRelease is the /etc/os-release of the played images, which are Kairos images on
// Ubuntu 24.04: the base distribution's own, in its shape (internal/hostos's testdata
// ubuntu-24.04).
const ubuntuOSRelease = `PRETTY_NAME="Ubuntu 24.04.1 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.1 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
UBUNTU_CODENAME=noble
`

// emptyRun empties the played /run, as a tmpfs is at boot, but for the COS_STATE partition
// mounted in it (run/initramfs/cos-state), which is the partition's own.
func emptyRun(run string) error {
	entries, err := os.ReadDir(run)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "initramfs" {
			inner, err := os.ReadDir(filepath.Join(run, "initramfs"))
			if err != nil {
				return err
			}
			for _, i := range inner {
				if i.Name() != "cos-state" {
					if err := os.RemoveAll(filepath.Join(run, "initramfs", i.Name())); err != nil {
						return err
					}
				}
			}
			continue
		}
		if err := os.RemoveAll(filepath.Join(run, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// drbdFault plays FaultNoDRBD after a boot of image: every peer of the node's played DRBD
// StandAlone while it is set (for image, when it lists images); a boot without it takes back
// the StandAlone file it wrote.
func (h *Host) drbdFault(image string) error {
	if h.DRBDDir == "" {
		return nil
	}
	on, images, err := h.fault(FaultNoDRBD)
	if err != nil {
		return err
	}
	if len(images) > 0 && !slices.Contains(images, image) {
		on = false
	}
	file, own := filepath.Join(h.DRBDDir, drbdplay.StandAloneFile), filepath.Join(h.Dir, standAloneOwn)
	if !on {
		if _, err := os.Stat(own); err == nil {
			return errors.Join(os.Remove(file), os.Remove(own))
		}
		return nil
	}
	play, err := drbdplay.ReadPlay(h.DRBDDir)
	if err != nil {
		return fmt.Errorf("the DRBD fault: %w", err)
	}
	var peers []string
	for p := range play.Peers {
		peers = append(peers, p)
	}
	slices.Sort(peers)
	return errors.Join(os.WriteFile(file, []byte(strings.Join(peers, "\n")+"\n"), 0o644),
		os.WriteFile(own, nil, 0o644))
}

// newUUID is a random (version 4) UUID, as the kernel's boot_id is.
func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// LoaderBootCountPathFile is systemd-boot's LoaderBootCountPath as efivarfs shows it, relative
// to the host's root (internal/hostos's LoaderBootCountPathFile says where this is from).
const LoaderBootCountPathFile = "sys/firmware/efi/efivars/LoaderBootCountPath-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"

// SetLoaderBootCountPath plays a UKI boot's LoaderBootCountPath: path, the boot entry's file as
// systemd-boot names it (`\loader\entries\active+2-1.conf`), encoded as efivarfs shows a
// variable systemd-boot set (EFIString). An empty path removes it (the boot has no counter).
func (h *Host) SetLoaderBootCountPath(path string) error {
	file := filepath.Join(h.Root, LoaderBootCountPathFile)
	if path == "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, EFIString(path), 0o644)
}

// EFIString is s as efivarfs shows a string variable systemd-boot set with efivar_set and no
// flags (systemd/systemd src/boot/boot.c, boot_entry_bump_counters): its attributes,
// BOOTSERVICE_ACCESS|RUNTIME_ACCESS (0x00000006, little-endian), then s in UTF-16LE ending in a
// NUL (testdata/LoaderBootCountPath-... is a sample, see testdata/README.md).
func EFIString(s string) []byte {
	b := []byte{0x06, 0, 0, 0}
	for _, u := range utf16.Encode([]rune(s + "\x00")) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

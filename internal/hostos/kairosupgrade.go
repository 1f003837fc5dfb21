package hostos

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// What a Kairos node says of an upgrade and of the boot that followed it. The rules are
// Kairos's own:
//
//   - The boot assessment is a GRUB environment block, boot_assessment, on the COS_STATE
//     partition, which Kairos mounts read-only at /run/initramfs/cos-state (kairos-io/kairos-docs
//     content/en/docs/Upgrade/boot_assessment.md, whose "Maintenance" section remounts it
//     read-write to clear the flags with grub2-editenv). Kairos's GRUB configuration loads it and,
//     when enable_boot_assessment=yes (set by an upgrade) or enable_boot_assessment_always=yes,
//     and no entry was chosen by hand: if boot_assessment_tentative=yes is already set, the
//     last assessed boot never counted as good, and GRUB boots the fallback entry with
//     upgrade_failure on its command line (extra_passive_cmdline); otherwise it sets
//     boot_assessment_tentative=yes (save_env) and boots the new system. Kairos's "Boot
//     assessment" cloud-config clears both flags once a boot counts as good, early in boot.
//   - A fallback boot has upgrade_failure on the kernel's command line, and the sentinel
//     /run/cos/upgrade_failure, which the same cloud-config writes.
//   - The image a node booted is KAIROS_IMAGE_REPO in /etc/kairos-release (REPOSITORY:TAG), as
//     kairos-init writes it and kairos-operator's node-labeler reads it.
//   - The kernel's boot ID, /proc/sys/kernel/random/boot_id, is a random UUID drawn at every
//     boot (random(4)): the same in every namespace, new after any reboot.

// The files of a Kairos upgrade, relative to Host.Root (and Host.Proc for the boot ID).
const (
	// KairosAssessmentFile is the boot-assessment block, as a path on the host.
	KairosAssessmentFile = "/run/initramfs/cos-state/boot_assessment"
	// KairosStateMount is where COS_STATE is mounted (read-only) on a running Kairos node.
	KairosStateMount = "/run/initramfs/cos-state"

	kairosAssessmentPath     = "run/initramfs/cos-state/boot_assessment"
	kairosUpgradeFailurePath = "run/cos/upgrade_failure"
	bootIDPath               = "sys/kernel/random/boot_id"
)

// The boot-assessment variables of Kairos's GRUB configuration.
const (
	GRUBEnableBootAssessment       = "enable_boot_assessment"
	GRUBEnableBootAssessmentAlways = "enable_boot_assessment_always"
	GRUBBootAssessmentTentative    = "boot_assessment_tentative"
)

// kairosUpgradeFailureParam is what GRUB adds to a fallback boot's command line.
const kairosUpgradeFailureParam = "upgrade_failure"

// bootIDPattern is the kernel's boot ID: a UUID in lower-case hexadecimal.
var bootIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// BootID reads the kernel's boot ID. "" with no error when the kernel does not have the file
// (not Linux); a file that does not hold a UUID is an error.
func (h Host) BootID() (string, error) {
	data, err := readFile(h.proc(), bootIDPath, 128)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("the boot ID: %w", err)
	}
	id := strings.TrimSuffix(string(data), "\n")
	if !bootIDPattern.MatchString(id) {
		return "", fmt.Errorf("the boot ID: /proc/%s holds %q, not a UUID", bootIDPath, shorten(id))
	}
	return id, nil
}

func (h Host) proc() string {
	if h.Proc == "" {
		return "/proc"
	}
	return h.Proc
}

// KairosBoot is what a Kairos host says of the boot it runs.
type KairosBoot struct {
	BootID string
	// Image is KAIROS_IMAGE_REPO; "" when kairos-release does not say.
	Image string
	Entry nwv1.KairosBootEntry
	// UpgradeFailure: this boot is the fallback after a failed boot of an upgrade.
	UpgradeFailure bool
	// Assessment is the boot-assessment block; nil when the host has none.
	Assessment GRUBEnv
	// HasAssessment: the host has the block (it may hold no variable).
	HasAssessment bool
}

// ReadKairosBoot reads the boot a Kairos host runs. What it could read is returned with the
// error that kept it from the rest.
func (h Host) ReadKairosBoot() (KairosBoot, error) {
	var b KairosBoot
	var errs []error
	var err error
	if b.BootID, err = h.BootID(); err != nil {
		errs = append(errs, err)
	}
	release, err := releaseFile(h.Root, kairosReleasePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		errs = append(errs, err)
	default:
		b.Image = clip(release["KAIROS_IMAGE_REPO"], maxImageLength)
	}
	if b.Entry, err = h.kairosBootEntry(); err != nil {
		errs = append(errs, err)
	}
	if b.UpgradeFailure, err = h.kairosUpgradeFailure(); err != nil {
		errs = append(errs, err)
	}
	if b.Assessment, b.HasAssessment, err = h.kairosAssessment(); err != nil {
		errs = append(errs, err)
	}
	return b, errors.Join(errs...)
}

// maxImageLength is the API's bound on an image reference.
const maxImageLength = 512

// kairosUpgradeFailure: the sentinel /run/cos/upgrade_failure is there, or the kernel's command
// line carries upgrade_failure.
func (h Host) kairosUpgradeFailure() (bool, error) {
	ok, err := exists(h.Root, kairosUpgradeFailurePath)
	if err != nil {
		return false, fmt.Errorf("the upgrade failure: /%s: %w", kairosUpgradeFailurePath, err)
	}
	if ok {
		return true, nil
	}
	cmdline, err := h.cmdline()
	if err != nil {
		return false, fmt.Errorf("the upgrade failure: %w", err)
	}
	return KairosUpgradeFailureInCmdline(cmdline), nil
}

// KairosUpgradeFailureInCmdline reports whether the kernel's own parameters (before "--") include
// upgrade_failure, which Kairos's GRUB configuration adds to a fallback boot.
func KairosUpgradeFailureInCmdline(cmdline string) bool {
	for _, p := range strings.Fields(cmdline) {
		switch p {
		case "--":
			return false
		case kairosUpgradeFailureParam:
			return true
		}
	}
	return false
}

// kairosAssessment reads the boot-assessment block; ok is false when the host has none.
func (h Host) kairosAssessment() (env GRUBEnv, ok bool, err error) {
	data, err := readFile(h.Root, kairosAssessmentPath, MaxGRUBEnvBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("the boot assessment: %w", err)
	}
	env, err = ParseGRUBEnv(data)
	if err != nil {
		return nil, false, fmt.Errorf("the boot assessment /%s: %w", kairosAssessmentPath, err)
	}
	return env, true, nil
}

// AssessmentStatus is the boot assessment as the API reports it; nil without a block.
func (b KairosBoot) AssessmentStatus() *nwv1.KairosBootAssessment {
	if !b.HasAssessment {
		return nil
	}
	yes := func(name string) bool {
		v, _ := b.Assessment.Get(name)
		return v == "yes"
	}
	return &nwv1.KairosBootAssessment{Enabled: yes(GRUBEnableBootAssessment), Always: yes(GRUBEnableBootAssessmentAlways),
		Tentative: yes(GRUBBootAssessmentTentative)}
}

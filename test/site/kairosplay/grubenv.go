package kairosplay

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// The boot assessment's GRUB environment block and its keys, as Kairos names them
// (kairos-io/kairos-docs content/en/docs/Upgrade/boot_assessment.md, and the GRUB configuration
// Kairos installs into COS_STATE's grub_boot_assessment).
const (
	// BootAssessmentFile is the block, relative to the host's root: the COS_STATE partition,
	// mounted at /run/initramfs/cos-state.
	BootAssessmentFile = "run/initramfs/cos-state/boot_assessment"
	// CosStateDir is where COS_STATE is mounted: kept across a boot when /run is emptied.
	CosStateDir = "run/initramfs/cos-state"

	EnableBootAssessment       = "enable_boot_assessment"
	EnableBootAssessmentAlways = "enable_boot_assessment_always"
	BootAssessmentTentative    = "boot_assessment_tentative"
)

// The OEM partition's grubenv, where kairos-agent's bootentry --select writes next_entry, which Kairos's grub.cfg boots once: "/oem/grubenv"
// (selectBootEntryGrub, kairos-io/kairos-agent pkg/action/bootentries.go, commit
// 96f93a04a554e30ad034ec9ee8bbf7b9ac242c5d; grub.cfg in kairos-io/packages
// packages/static/grub-config/files/grub.cfg, commit d11c1d3b60a808fa8de963751044a77f9754c144).
const (
	// OEMEnvFile is the block, relative to the host's root.
	OEMEnvFile = "oem/grubenv"
	// NextEntry is the entry of the next boot, that boot only: a menuentry --id of grub.cfg.
	NextEntry = "next_entry"
)

// The menu entries' ids of Kairos's grub.cfg (menuentry --id), and the slots they boot.
var grubEntries = map[string]string{"cos": Active, "fallback": Passive, "recovery": Recovery}

// GRUBEditenv is Debian's grub-editenv (grub-common: hack/grub-common.sh installs it), the
// tool Kairos ships as grub2-editenv: every read and write of the played grubenv goes through
// it, never through a parser of this package.
func GRUBEditenv() (string, error) {
	for _, name := range []string{"grub-editenv", "grub2-editenv"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	const deb = "/usr/bin/grub-editenv"
	if p, err := exec.LookPath(deb); err == nil {
		return p, nil
	}
	return "", errors.New("grub-editenv not found: install Debian's grub-common (hack/grub-common.sh)")
}

// editenv runs grub-editenv on file with args, through run.
func editenv(ctx context.Context, run drbd.Runner, file string, args ...string) (string, error) {
	bin, err := GRUBEditenv()
	if err != nil {
		return "", err
	}
	res, err := run.Run(ctx, append([]string{bin, file}, args...))
	if err != nil {
		return "", err
	}
	return string(res.Stdout), nil
}

// listEnv reads the variables of file with grub-editenv list.
func listEnv(ctx context.Context, run drbd.Runner, file string) (map[string]string, error) {
	out, err := editenv(ctx, run, file, "list")
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("grub-editenv %s list: a line without '=': %q", file, line)
		}
		vars[k] = v
	}
	return vars, nil
}

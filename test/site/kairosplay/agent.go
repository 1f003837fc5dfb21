package kairosplay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// Runner is the agent's drbd.Runner on a played Kairos host: it plays kairos-agent
// (argv[0] "kairos-agent") in the process, on Host, and runs grub-editenv for real (argv[0]
// grub-editenv or grub2-editenv, Kairos's name for it, run as Debian's grub-editenv), and plays
// systemctl show on the host's played units (systemctl.go). It refuses any other command.
type Runner struct {
	Host *Host
	// Real runs grub-editenv; drbd.ExecRunner{} when nil.
	Real drbd.Runner
}

// Run runs argv as above. A failure is a *drbd.CommandError with the command's stderr, as
// drbd.ExecRunner gives it.
func (r Runner) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	if len(argv) == 0 {
		return drbd.Result{ExitCode: -1}, fmt.Errorf("run: empty argv")
	}
	switch filepath.Base(argv[0]) {
	case "kairos-agent":
		return r.kairosAgent(ctx, argv)
	case "systemctl":
		return r.systemctl(argv)
	case "grub-editenv", "grub2-editenv":
		bin, err := GRUBEditenv()
		if err != nil {
			return drbd.Result{ExitCode: -1}, err
		}
		real := r.Real
		if real == nil {
			real = drbd.ExecRunner{}
		}
		return real.Run(ctx, append([]string{bin}, argv[1:]...))
	}
	return drbd.Result{ExitCode: -1}, fmt.Errorf("run %s: not a command of the played Kairos host (kairos-agent, grub-editenv, systemctl)", argv[0])
}

// failed is kairos-agent's exit with status 1 and msg on stderr.
func failed(argv []string, msg string) (drbd.Result, error) {
	res := drbd.Result{Stderr: []byte(msg + "\n"), ExitCode: 1}
	return res, &drbd.CommandError{Argv: argv, ExitCode: 1, Stderr: res.Stderr, Err: fmt.Errorf("exit status 1")}
}

// kairosAgent plays `kairos-agent upgrade [--recovery] --source oci:<ref>`: the image, found by
// digest in the played registry, becomes the active system and, booted from any entry but the
// passive one, the running active one the passive (the fallback); booted from the passive
// entry, the passive slot stays as it is ("Booted from passive: Upgrade active, leave passive
// as is": UpgradeAction.Run, kairos-io/kairos-agent pkg/action/upgrade.go, commit
// 96f93a04a554e30ad034ec9ee8bbf7b9ac242c5d, which tells the boot from /proc/cmdline,
// COS_ACTIVE before COS_PASSIVE: kairos-sdk state.DetectBootWithVFS). Then
// enable_boot_assessment=yes is set with grub-editenv, as kairos-agent's upgrade does
// (kairos-docs content/en/docs/Upgrade/boot_assessment.md: "After an upgrade, sets a GRUB env
// sentinel variable"). The played images are Kairos v3.4 and v3.5, whose kairos-agent ends
// there: kairos-agent v2.31.0 and later also set next_entry=cos in the OEM grubenv at the end
// of a system upgrade (SelectBootEntry(cfg, "cos") in the same function; commit
// 222a1415e394d458c01c4208d1ca3691a35dee0c), so that their first boot of the new image is a
// selected one, without the assessment; that is not played. With --recovery, the image becomes the recovery system, and the others stay. Anything else fails
// as kairos-agent would: exit status 1 and a message on stderr.
func (r Runner) kairosAgent(ctx context.Context, argv []string) (drbd.Result, error) {
	args := argv[1:]
	if len(args) == 0 || args[0] != "upgrade" {
		return failed(argv, fmt.Sprintf("Error: the played kairos-agent knows only upgrade, not %q", strings.Join(args, " ")))
	}
	var source string
	recovery := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--recovery":
			recovery = true
		case a == "--source" && i+1 < len(args):
			source = args[i+1]
			i++
		case strings.HasPrefix(a, "--source="):
			source = strings.TrimPrefix(a, "--source=")
		default:
			return failed(argv, fmt.Sprintf("Incorrect Usage: flag provided but not defined: %s", a))
		}
	}
	ref, ok := strings.CutPrefix(source, "oci:")
	if !ok {
		return failed(argv, fmt.Sprintf("Error: --source %q: the played kairos-agent upgrades only from oci:<image>", source))
	}
	if _, err := r.Host.Registry.Image(ref); err != nil {
		return failed(argv, fmt.Sprintf("Error: upgrade failed: pulling %s: %v", ref, err))
	}
	if recovery {
		if err := r.Host.write(Recovery, ref); err != nil {
			return failed(argv, fmt.Sprintf("Error: recovery upgrade failed: %v", err))
		}
		return drbd.Result{Stdout: []byte("Upgrade completed\n")}, nil
	}
	cmdline, err := os.ReadFile(filepath.Join(r.Host.Proc(), "cmdline"))
	if err != nil {
		return failed(argv, fmt.Sprintf("Error: upgrade failed: detecting the boot: %v", err))
	}
	fromPassive := !strings.Contains(string(cmdline), "COS_ACTIVE") && strings.Contains(string(cmdline), "COS_PASSIVE")
	if !fromPassive {
		if err := r.Host.copySlot(Active, Passive); err != nil {
			return failed(argv, fmt.Sprintf("Error: upgrade failed: keeping the active system as passive: %v", err))
		}
	}
	if err := r.Host.write(Active, ref); err != nil {
		return failed(argv, fmt.Sprintf("Error: upgrade failed: %v", err))
	}
	host := *r.Host
	if r.Real != nil {
		host.Runner = r.Real
	}
	if err := host.setEnv(ctx, EnableBootAssessment+"=yes"); err != nil {
		return failed(argv, fmt.Sprintf("Error: upgrade failed: enabling the boot assessment: %v", err))
	}
	return drbd.Result{Stdout: []byte("Upgrade completed\n")}, nil
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// TailRunner runs a long command whose output is a log, kairos-agent upgrade's: it keeps the
// last MaxTail bytes of standard output and of standard error, where a failing program says
// why, and never fails a command for writing more. At the context's end the command's whole
// process group is killed, as drbd.ExecRunner does.
type TailRunner struct {
	// Env is the commands' environment; nil means the agent's own.
	Env []string
	// MaxTail is how much of each stream is kept; 64 KiB when zero.
	MaxTail int
	// Chroot, when set, is the root the commands run in (chroot(2), then "/" their working
	// folder): the host's own root, for its own programs.
	Chroot string
}

// Run runs argv and waits for it, or kills it when ctx ends.
func (r TailRunner) Run(ctx context.Context, argv []string) (drbd.Result, error) {
	if len(argv) == 0 {
		return drbd.Result{ExitCode: -1}, errors.New("run: empty argv")
	}
	if r.Chroot != "" && !filepath.IsAbs(argv[0]) {
		// exec looks a bare name up on the agent's own PATH, before the chroot.
		return drbd.Result{ExitCode: -1}, fmt.Errorf("run %s in %s: a program run in a chroot must be named by its absolute path there", argv[0], r.Chroot)
	}
	limit := r.MaxTail
	if limit <= 0 {
		limit = 64 << 10
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.Env
	cmd.WaitDelay = 10 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Chroot: r.Chroot}
	if r.Chroot != "" {
		cmd.Dir = "/"
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout, stderr := &tailBuffer{limit: limit}, &tailBuffer{limit: limit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	runErr := cmd.Run()
	result := drbd.Result{Stdout: stdout.data, Stderr: stderr.data, ExitCode: -1}
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		result.ExitCode = cmd.ProcessState.ExitCode()
	}
	if runErr != nil {
		if ctx.Err() != nil && !errors.Is(runErr, ctx.Err()) {
			runErr = fmt.Errorf("%w: %w", ctx.Err(), runErr)
		}
		tail := result.Stderr
		if len(tail) == 0 {
			tail = result.Stdout
		}
		return result, &drbd.CommandError{Argv: argv, ExitCode: result.ExitCode, Stderr: tail, Err: runErr}
	}
	return result, nil
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	data  []byte
	limit int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.limit {
		b.data = append(b.data[:0], p[len(p)-b.limit:]...)
		return n, nil
	}
	if over := len(b.data) + len(p) - b.limit; over > 0 {
		b.data = append(b.data[:0], b.data[over:]...)
	}
	b.data = append(b.data, p...)
	return n, nil
}

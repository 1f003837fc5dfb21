package drbd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Result is what a command left behind.
type Result struct {
	Stdout []byte
	Stderr []byte
	// ExitCode is the command's exit status, or -1 when it did not start or did not exit by
	// itself (killed at the context's end).
	ExitCode int
}

// Runner runs one command given as argv, without a shell: argv[0] is the program, found on
// PATH when it has no slash, and every other element reaches it as one argument. A command
// that exits with a status other than 0 gives its Result and a *CommandError.
type Runner interface {
	Run(ctx context.Context, argv []string) (Result, error)
}

// The bounds of what ExecRunner keeps of a command's output. Stdout holds a whole status
// answer; stderr only ever feeds an error message.
const (
	MaxStdoutBytes = MaxStatusBytes
	MaxStderrBytes = 64 << 10
	// MaxErrorStderrBytes is how much of stderr a CommandError's message quotes.
	MaxErrorStderrBytes = 1 << 10
)

// waitDelay is how long ExecRunner waits for the output pipes after the command ended or was
// killed: a child drbdadm started may still hold them.
const waitDelay = 10 * time.Second

// ExecRunner runs commands with os/exec.
type ExecRunner struct {
	// Env is the commands' environment; nil means the agent's own.
	Env []string
}

// Run runs argv and waits for it, or kills it when ctx ends.
func (r ExecRunner) Run(ctx context.Context, argv []string) (Result, error) {
	if len(argv) == 0 {
		return Result{ExitCode: -1}, errors.New("run: empty argv")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.Env
	cmd.WaitDelay = waitDelay
	// drbdadm runs drbdsetup and drbdmeta as its children: at the context's end the whole
	// process group goes, so that nothing goes on changing DRBD after Run returned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdout := &boundedBuffer{limit: MaxStdoutBytes}
	stderr := &boundedBuffer{limit: MaxStderrBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	runErr := cmd.Run()
	result := Result{Stdout: stdout.data, Stderr: stderr.data, ExitCode: -1}
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		result.ExitCode = cmd.ProcessState.ExitCode()
	}
	switch {
	case runErr != nil:
		if ctx.Err() != nil && !errors.Is(runErr, ctx.Err()) {
			runErr = fmt.Errorf("%w: %w", ctx.Err(), runErr)
		}
		return result, &CommandError{Argv: argv, ExitCode: result.ExitCode, Stderr: result.Stderr, Err: runErr}
	case stdout.overflowed:
		return result, &CommandError{Argv: argv, ExitCode: result.ExitCode, Stderr: result.Stderr,
			Err: fmt.Errorf("more than %d bytes on stdout", MaxStdoutBytes)}
	}
	return result, nil
}

// CommandError is a command that failed: it did not start, exited with a status other than 0,
// was killed, or wrote more than ExecRunner keeps.
type CommandError struct {
	Argv     []string
	ExitCode int
	Stderr   []byte
	Err      error
}

func (e *CommandError) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Argv, " "), e.Err)
	if quoted := quoteStderr(e.Stderr); quoted != "" {
		msg += ": " + quoted
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// quoteStderr makes stderr one line of at most MaxErrorStderrBytes, saying how much it left out.
func quoteStderr(stderr []byte) string {
	text := strings.ToValidUTF8(strings.TrimSpace(string(stderr)), "?")
	text = strings.Join(strings.Fields(strings.ReplaceAll(text, "\n", " ; ")), " ")
	if len(text) <= MaxErrorStderrBytes {
		return text
	}
	cut := MaxErrorStderrBytes
	for cut > 0 && !isRuneStart(text[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes)", text[:cut], len(text)-cut)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// boundedBuffer keeps the first limit bytes written to it and notes whether more came.
type boundedBuffer struct {
	data       []byte
	limit      int
	overflowed bool
}

// Write keeps what fits and reports the whole of p written, so that the command is never
// stopped by a short write.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	written := len(p)
	if room := b.limit - len(b.data); len(p) > room {
		b.overflowed = true
		p = p[:room]
	}
	b.data = append(b.data, p...)
	return written, nil
}

// Streamer starts a command that goes on printing until it is stopped (drbdsetup events2) and
// gives its standard output as it comes. Reading returns io.EOF once the command exited with
// status 0, or a *CommandError when it failed; Close stops the command, and so does the end of
// ctx. The real agent streams with ExecRunner; the played site (test/site/drbdplay) plays the
// kernel's stream.
type Streamer interface {
	Stream(ctx context.Context, argv []string) (io.ReadCloser, error)
}

// Stream starts argv and gives its standard output. Its stderr is kept, bounded, for the error
// that says why it ended.
func (r ExecRunner) Stream(ctx context.Context, argv []string) (io.ReadCloser, error) {
	if len(argv) == 0 {
		return nil, errors.New("stream: empty argv")
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = r.Env
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stderr := &lockedBuffer{b: boundedBuffer{limit: MaxStderrBytes}}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, &CommandError{Argv: argv, ExitCode: -1, Err: err}
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, &CommandError{Argv: argv, ExitCode: -1, Err: err}
	}
	return &execStream{argv: argv, cmd: cmd, stdout: stdout, stderr: stderr, cancel: cancel}, nil
}

// execStream is a running command's standard output.
type execStream struct {
	argv   []string
	cmd    *exec.Cmd
	stdout io.Reader
	stderr *lockedBuffer
	cancel context.CancelFunc

	mu     sync.Mutex
	waited bool
	err    error
}

func (s *execStream) Read(p []byte) (int, error) {
	n, err := s.stdout.Read(p)
	if errors.Is(err, io.EOF) {
		if werr := s.wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// wait waits for the command once, after its output ended or it was stopped.
func (s *execStream) wait() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waited {
		return s.err
	}
	s.waited = true
	runErr := s.cmd.Wait()
	exit := -1
	if s.cmd.ProcessState != nil && s.cmd.ProcessState.Exited() {
		exit = s.cmd.ProcessState.ExitCode()
	}
	if runErr != nil {
		s.err = &CommandError{Argv: s.argv, ExitCode: exit, Stderr: s.stderr.bytes(), Err: runErr}
	}
	return s.err
}

// Close stops the command (its whole process group) and waits for it.
func (s *execStream) Close() error {
	s.cancel()
	_ = s.wait()
	return nil
}

// lockedBuffer is a boundedBuffer written by the command's stderr copier while another
// goroutine may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  boundedBuffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.data...)
}

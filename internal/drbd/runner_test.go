package drbd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the command ExecRunner runs: with this variable set, TestMain
// plays the part it names instead of running the tests.
const helperEnv = "NODEWRIGHT_DRBD_RUNNER_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "echo-args":
		// One argument a line, quoted, to show each arrived whole.
		for _, arg := range os.Args[1:] {
			fmt.Printf("%q\n", arg)
		}
		os.Exit(0)
	case "fail-loudly":
		fmt.Print("half an answer")
		for i := range 200 {
			fmt.Fprintf(os.Stderr, "line %d of a long complaint\n", i)
		}
		os.Exit(3)
	case "flood-stdout":
		chunk := strings.Repeat("x", 1<<16)
		for written := 0; written <= MaxStdoutBytes; written += len(chunk) {
			fmt.Print(chunk)
		}
		os.Exit(0)
	case "hang":
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	case "hang-with-child":
		// As drbdadm does with drbdsetup: a child of its own, here one that hangs.
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), helperEnv+"=hang")
		if err := child.Start(); err != nil {
			os.Exit(4)
		}
		fmt.Println(child.Process.Pid)
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}
	os.Exit(2)
}

func helperRunner(part string) ExecRunner {
	return ExecRunner{Env: append(os.Environ(), helperEnv+"="+part)}
}

func TestExecRunnerPassesEachArgumentWholeWithoutAShell(t *testing.T) {
	args := []string{"pvc-1:node-b", "two words", "$(touch /tmp/nodewright-pwned)", "; rm -rf /", "'\"", "*"}
	result, err := helperRunner("echo-args").Run(context.Background(), append([]string{os.Args[0]}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, arg := range args {
		fmt.Fprintf(&want, "%q\n", arg)
	}
	if string(result.Stdout) != want.String() || result.ExitCode != 0 {
		t.Fatalf("stdout %q exit %d, want %q exit 0", result.Stdout, result.ExitCode, want.String())
	}
}

func TestExecRunnerNamesAFailedCommandAndQuotesItsStderr(t *testing.T) {
	argv := []string{os.Args[0], "verify", "pvc-1"}
	result, err := helperRunner("fail-loudly").Run(context.Background(), argv)
	var commandErr *CommandError
	if !errors.As(err, &commandErr) {
		t.Fatalf("err = %v, want a *CommandError", err)
	}
	if result.ExitCode != 3 || commandErr.ExitCode != 3 || string(result.Stdout) != "half an answer" {
		t.Fatalf("exit %d (error says %d), stdout %q", result.ExitCode, commandErr.ExitCode, result.Stdout)
	}
	if !reflect.DeepEqual(commandErr.Argv, argv) {
		t.Errorf("the error names %q, want %q", commandErr.Argv, argv)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, strings.Join(argv, " ")+": exit status 3: line 0 of a long complaint ; line 1 of") {
		t.Errorf("message %q does not start with the command, its status and its stderr", msg)
	}
	if strings.Contains(msg, "\n") || len(msg) > len(strings.Join(argv, " "))+MaxErrorStderrBytes+64 {
		t.Errorf("message is not one line of a bounded length: %d bytes", len(msg))
	}
	if !strings.HasSuffix(msg, "more bytes)") {
		t.Errorf("message %q does not say it left stderr out", msg[len(msg)-40:])
	}
}

func TestExecRunnerRefusesMoreStdoutThanAStatusAnswer(t *testing.T) {
	result, err := helperRunner("flood-stdout").Run(context.Background(), []string{os.Args[0]})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d bytes on stdout", MaxStdoutBytes)) {
		t.Fatalf("err = %v, want the stdout bound named", err)
	}
	if len(result.Stdout) != MaxStdoutBytes {
		t.Fatalf("kept %d bytes of stdout, want %d", len(result.Stdout), MaxStdoutBytes)
	}
}

// This test is about the context's deadline, so the deadline is short: the command would run
// for ten minutes.
func TestExecRunnerKillsTheCommandWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	started := time.Now()
	result, err := helperRunner("hang").Run(ctx, []string{os.Args[0]})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if result.ExitCode != -1 {
		t.Errorf("exit code %d, want -1 for a killed command", result.ExitCode)
	}
	if elapsed := time.Since(started); elapsed > 2*time.Minute {
		t.Errorf("Run returned after %s", elapsed)
	}
}

func TestExecRunnerNamesACommandThatDidNotStart(t *testing.T) {
	argv := []string{"/nonexistent/drbdadm", "adjust", "pvc-1"}
	result, err := ExecRunner{}.Run(context.Background(), argv)
	if err == nil || !strings.HasPrefix(err.Error(), "/nonexistent/drbdadm adjust pvc-1: ") || result.ExitCode != -1 {
		t.Fatalf("err = %v, exit %d; want the command named and exit -1", err, result.ExitCode)
	}
	if _, err := (ExecRunner{}).Run(context.Background(), nil); err == nil {
		t.Fatal("an empty argv ran")
	}
}

// TestExecRunnerKillsTheCommandsChildrenToo: drbdadm's own children (drbdsetup, drbdmeta) go
// with it at the context's end, so that nothing changes DRBD after Run returned.
func TestExecRunnerKillsTheCommandsChildrenToo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	result, err := helperRunner("hang-with-child").Run(ctx, []string{os.Args[0]})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(result.Stdout)))
	if perr != nil {
		t.Fatalf("the command did not say its child's pid: %q", result.Stdout)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " Z ") {
			return // gone, or dead and not yet reaped
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command's child %d still runs after Run returned", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stream gives a command's output as it comes, then its failure with its stderr.
func TestExecRunnerStreamsAndReportsTheEnd(t *testing.T) {
	s, err := ExecRunner{}.Stream(context.Background(), []string{"sh", "-c", "echo exists -; echo oops >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	out, err := io.ReadAll(s)
	var cmdErr *CommandError
	if string(out) != "exists -\n" || !errors.As(err, &cmdErr) || cmdErr.ExitCode != 3 || !strings.Contains(cmdErr.Error(), "oops") {
		t.Fatalf("read %q, %v; want the line, then exit status 3 quoting stderr", out, err)
	}
	// A command that exits 0 ends the stream with io.EOF.
	s, err = ExecRunner{}.Stream(context.Background(), []string{"sh", "-c", "echo exists -"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := io.ReadAll(s); err != nil || string(out) != "exists -\n" {
		t.Fatalf("read %q, %v", out, err)
	}
	_ = s.Close()
}

// Close stops a command that goes on, and its children.
func TestExecRunnerStreamCloseStopsTheCommand(t *testing.T) {
	s, err := ExecRunner{}.Stream(context.Background(), []string{"sh", "-c", "echo started; sleep 600 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(s, line); err != nil || string(line) != "started\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	done := make(chan struct{})
	go func() { _ = s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not stop the command")
	}
	if _, err := s.Read(line); err == nil {
		t.Fatal("the stream reads on after Close")
	}
}

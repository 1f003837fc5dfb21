package agent_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// TestTailRunnerChroot: a command run with Chroot runs in that root, from "/", the program named
// by its path there; a bare name, which exec would look up in the agent's own root first, is
// refused before anything runs. This is how the agent reaches the host's own nsenter
// (cmd/agent: /proc/1/root), here with a root of the test's own.
func TestTailRunnerChroot(t *testing.T) {
	root := t.TempDir()
	if err := exec.Command("chroot", root, "/none").Run(); err != nil {
		var exit *exec.ExitError
		// chroot(1) exits 127 when the chroot worked and the program is missing, 125 when the
		// chroot itself was refused.
		if !errors.As(err, &exit) || exit.ExitCode() != 127 {
			t.Skipf("this machine does not let the test chroot (needs root and CAP_SYS_CHROOT): %v", err)
		}
	}
	src := t.TempDir()
	prog := `package main

import (
	"fmt"
	"os"
)

func main() {
	wd, _ := os.Getwd()
	_, err := os.Stat("/only-in-the-chroot")
	fmt.Printf("wd=%s marker=%v", wd, err == nil)
	fmt.Fprintln(os.Stderr, "the end of its complaint")
	os.Exit(3)
}
`
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "probe"), "main.go")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, "only-in-the-chroot"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := agent.TailRunner{Chroot: root}
	out, err := r.Run(context.Background(), []string{"/bin/probe"})
	var cmdErr *drbd.CommandError
	if !errors.As(err, &cmdErr) || cmdErr.ExitCode != 3 || string(out.Stdout) != "wd=/ marker=true" ||
		!strings.Contains(string(cmdErr.Stderr), "the end of its complaint") {
		t.Errorf("Run in the chroot: %q, %v; want it run inside, from /, its exit and stderr kept", out.Stdout, err)
	}
	if _, err := r.Run(context.Background(), []string{"probe"}); err == nil || !strings.Contains(err.Error(), "must be named by its absolute path") {
		t.Errorf("a bare name in a chroot: %v; want it refused", err)
	}
}

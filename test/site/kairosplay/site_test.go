package kairosplay

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestPlayedRebootKillsTheProcess runs ForAgent's Reboot in a process of its own (this test
// binary again): it records the request and the process dies of SIGKILL, with no cleanup run.
func TestPlayedRebootKillsTheProcess(t *testing.T) {
	if dir := os.Getenv("KAIROSPLAY_REBOOT_DIR"); dir != "" {
		parts, err := ForAgent(dir, os.Getenv("KAIROSPLAY_REBOOT_ROOT"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.WriteFile(filepath.Join(dir, "graceful"), nil, 0o644) }()
		err = parts.Reboot(context.Background())
		t.Fatalf("Reboot returned: %v", err)
	}
	p := newPlayed(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPlayedRebootKillsTheProcess$")
	cmd.Env = append(os.Environ(), "KAIROSPLAY_REBOOT_DIR="+p.host.Dir, "KAIROSPLAY_REBOOT_ROOT="+p.host.Root)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL:\n%s", err, out)
	}
	if ok, err := p.host.RebootRequested(); !ok || err != nil {
		t.Fatalf("no reboot request recorded (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(p.host.Dir, "graceful")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the process ran its deferred cleanup: not a power cycle")
	}
}

func TestOpenRefusesABrokenHostFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, "/"); err == nil {
		t.Fatal("Open without host.json")
	}
	for _, bad := range []string{"{", `{"registry":""}`} {
		if err := os.WriteFile(filepath.Join(dir, HostFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, "/"); err == nil {
			t.Errorf("Open accepted %s", bad)
		}
	}
}

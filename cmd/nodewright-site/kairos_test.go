package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// kairosAgentHelper stands for the agent under kairos-node: this test binary again, with
// KAIROS_NODE_HELPER set to a folder. It reads the --host-proc and --site-kairos-dir kairos-node
// gave it, appends its boot ID to "seen" in the folder, and on its first start stages the image
// in "stage" with the played kairos-agent and asks for the played reboot (which SIGKILLs it);
// later, it runs until it is killed.
func kairosAgentHelper(dir string) int {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	proc := fs.String("host-proc", "", "")
	hostDir := fs.String("site-kairos-dir", "", "")
	root := fs.String("host-root", "", "")
	if err := fs.Parse(os.Args[1:]); err != nil || *proc == "" || *hostDir == "" {
		fmt.Fprintf(os.Stderr, "helper: %v: want --host-proc and --site-kairos-dir in %q\n", err, os.Args)
		return 1
	}
	id, err := os.ReadFile(filepath.Join(*proc, "sys/kernel/random/boot_id"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := os.OpenFile(filepath.Join(dir, "seen"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _ = f.Write(id)
	_ = f.Close()
	image, err := os.ReadFile(filepath.Join(dir, "stage"))
	if err != nil {
		for {
			time.Sleep(time.Hour) // runs until it is killed
		}
	}
	_ = os.Remove(filepath.Join(dir, "stage"))
	parts, err := kairosplay.ForAgent(*hostDir, *root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := parts.Runner.Run(context.Background(), []string{"kairos-agent", "upgrade", "--source", "oci:" + strings.TrimSpace(string(image))}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, parts.Reboot(context.Background()))
	return 1
}

func TestKairosNodeRefusesBadInput(t *testing.T) {
	reg := t.TempDir()
	var out bytes.Buffer
	if err := runKairosImage([]string{"--registry", reg, "v3.4.2", "v3.5.0"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	refs := strings.Fields(out.String())
	if len(refs) != 2 || !strings.HasPrefix(refs[1], kairosplay.DefaultRepository+":24.04-standard-amd64-generic-v3.5.0@sha256:") {
		t.Fatalf("kairos-image printed %q: want the two references, in order", out.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--registry", reg}, "at least one Kairos version"},
		{[]string{"--registry", reg, "3.5"}, `version "3.5": not vX.Y.Z`},
		{[]string{"v3.5.0"}, "--registry is required"},
	} {
		if err := runKairosImage(c.args, &out, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kairos-image %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	base := []string{"--host-root", t.TempDir(), "--dir", t.TempDir(), "--registry", reg}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(base, "--", "agent"), "--image is required"},
		{append(base, "--image", "quay.io/kairos/ubuntu:v3.5.0", "--", "agent"), "--image: image \"quay.io/kairos/ubuntu:v3.5.0\": not REPOSITORY:TAG@sha256"},
		{append(base, "--image", refs[0]), "name the agent's command"},
		{append(base, "--image", refs[0], "--", "agent", "--host-proc=/proc"), "--host-proc=/proc is kairos-node's to give"},
		{append(base, "--image", refs[0], "--", "agent", "--site-kairos-dir", "x"), "--site-kairos-dir is kairos-node's to give"},
		{[]string{"--dir", "d", "--registry", reg, "--image", refs[0], "--", "agent"}, "--host-root is required"},
	} {
		if err := runKairosNode(context.Background(), c.args, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kairos-node %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	// An image the registry lacks cannot be installed.
	other := strings.Replace(refs[0], "@sha256:", "@sha256:0", 1)[:len(refs[0])]
	if err := runKairosNode(context.Background(), append(base, "--image", other, "--", "agent"), &out); err == nil || !strings.Contains(err.Error(), "not in the registry") {
		t.Errorf("kairos-node installing an image the registry lacks: %v, want an error saying it is not in the registry", err)
	}
}

// syncWriter is a log both kairos-node and the helper write to.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// kairos-node installs the host once, gives the agent the host's /proc and folder, boots the
// host when the agent asks for the played reboot and starts the agent again on the new boot,
// ends with SIGTERM (its context), and, started again, keeps what the host booted.
func TestKairosNodeInstallsSupervisesAndKeepsTheHost(t *testing.T) {
	base := t.TempDir()
	reg := filepath.Join(base, "registry")
	var out bytes.Buffer
	if err := runKairosImage([]string{"--registry", reg, "v3.4.2", "v3.5.0"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	refs := strings.Fields(out.String())
	helper := filepath.Join(base, "helper")
	if err := os.MkdirAll(helper, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(helper, "stage"), []byte(refs[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KAIROS_NODE_HELPER", helper)
	root, dir := filepath.Join(base, "root"), filepath.Join(base, "kairos")
	args := []string{"--host-root", root, "--dir", dir, "--registry", reg, "--image", refs[0], "--", os.Args[0], "--host-root", root}
	seen := func() []string {
		raw, _ := os.ReadFile(filepath.Join(helper, "seen"))
		return strings.Fields(string(raw))
	}
	release := func() string {
		raw, _ := os.ReadFile(filepath.Join(root, "etc/kairos-release"))
		return kairosplay.ReleaseValue(string(raw), "KAIROS_IMAGE_REPO")
	}
	run := func() (stop func() error, log *syncWriter) {
		ctx, cancel := context.WithCancel(context.Background())
		log = &syncWriter{}
		done := make(chan error, 1)
		go func() { done <- runKairosNode(ctx, args, log) }()
		return func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(2 * time.Minute):
				return fmt.Errorf("kairos-node did not end within 2 minutes of SIGTERM")
			}
		}, log
	}
	stop, log := run()
	testenv.Eventually(t, 3*time.Minute, func() string {
		if ids := seen(); len(ids) != 2 {
			return fmt.Sprintf("the agent started on boots %v; want two starts, the second after the reboot; log:\n%s", ids, log)
		}
		return ""
	})
	if ids := seen(); ids[0] == ids[1] {
		t.Fatalf("the agent's two starts saw the same boot %s: the reboot was not played", ids[0])
	}
	if got, want := release(), strings.Split(refs[1], "@")[0]; got != want {
		t.Fatalf("after the reboot /etc/kairos-release names %q, want %q", got, want)
	}
	if err := stop(); err != nil {
		t.Fatalf("kairos-node at SIGTERM: %v; log:\n%s", err, log)
	}
	if !strings.Contains(log.String(), "--- installed "+refs[0]) || !strings.Contains(log.String(), "booted active ("+refs[1]+")") {
		t.Fatalf("the log says neither the installation nor the boot of the staged image:\n%s", log)
	}
	// Started again, the host keeps what it booted: no second installation.
	stop, log = run()
	testenv.Eventually(t, 3*time.Minute, func() string {
		if ids := seen(); len(ids) != 3 {
			return fmt.Sprintf("the agent started on boots %v; want a third start; log:\n%s", ids, log)
		}
		return ""
	})
	if err := stop(); err != nil {
		t.Fatalf("kairos-node at SIGTERM: %v; log:\n%s", err, log)
	}
	if got, want := release(), strings.Split(refs[1], "@")[0]; got != want || strings.Contains(log.String(), "installed") {
		t.Fatalf("started again, the host runs %q (want %q), log:\n%s", got, want, log)
	}
}

package siteagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
)

// The helper process of the supervision tests stands for the agent: this test binary again,
// with KAIROS_HELPER_DIR set. At each start it appends the host's boot ID to the file "seen"
// in that folder; while the file "reboots" there holds a count above 0, it counts one down
// and asks for the played reboot (kairosplay.ForAgent's Reboot, which SIGKILLs it); else it
// runs until it is killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("KAIROS_HELPER_DIR"); dir != "" {
		os.Exit(helper(dir, os.Getenv("KAIROS_HELPER_HOST"), os.Getenv("KAIROS_HELPER_ROOT")))
	}
	code := m.Run()
	Remove()
	os.Exit(code)
}

func helper(dir, hostDir, root string) int {
	parts, err := kairosplay.ForAgent(hostDir, root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	id, err := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
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
	raw, _ := os.ReadFile(filepath.Join(dir, "reboots"))
	if n, _ := strconv.Atoi(strings.TrimSpace(string(raw))); n > 0 {
		_ = os.WriteFile(filepath.Join(dir, "reboots"), []byte(strconv.Itoa(n-1)), 0o644)
		err := parts.Reboot(context.Background())
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

// supervised installs a played host with v1, stages v2 on it, and supervises the helper,
// which asks for reboots reboots.
func supervised(t *testing.T, reboots int) (host *kairosplay.Host, dir, v1, v2 string, cmd *exec.Cmd) {
	t.Helper()
	base := t.TempDir()
	reg := kairosplay.Registry{Dir: filepath.Join(base, "registry")}
	var err error
	if v1, err = reg.AddVersion("v3.4.2"); err != nil {
		t.Fatal(err)
	}
	if v2, err = reg.AddVersion("v3.5.0"); err != nil {
		t.Fatal(err)
	}
	host = &kairosplay.Host{Root: filepath.Join(base, "root"), Dir: filepath.Join(base, "kairos"), Registry: reg}
	if _, err := host.Install(context.Background(), v1); err != nil {
		t.Fatal(err)
	}
	if _, err := (kairosplay.Runner{Host: host}).Run(context.Background(), []string{"kairos-agent", "upgrade", "--source", "oci:" + v2}); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(base, "helper")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reboots"), []byte(strconv.Itoa(reboots)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = Supervise(t, "n1", host, func() *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "KAIROS_HELPER_DIR="+dir, "KAIROS_HELPER_HOST="+host.Dir, "KAIROS_HELPER_ROOT="+host.Root)
		return c
	})
	return host, dir, v1, v2, cmd
}

func seen(t *testing.T, dir string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "seen"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(raw))
}

func TestSuperviseRestartsAfterAPlayedReboot(t *testing.T) {
	host, dir, _, v2, cmd := supervised(t, 1)
	s := Supervised(cmd)
	if s == nil {
		t.Fatal("no Supervisor for the process Supervise returned")
	}
	testenv.Eventually(t, 3*time.Minute, func() string {
		if ids := seen(t, dir); len(ids) != 2 {
			return fmt.Sprintf("the agent started with boot IDs %v, want two starts", ids)
		}
		return ""
	})
	ids := seen(t, dir)
	boots := s.Boots()
	if ids[0] == ids[1] || len(boots) != 1 || boots[0].BootID != ids[1] {
		t.Fatalf("boot IDs seen %v, boots %+v: want the second start on the new boot", ids, boots)
	}
	if boots[0].Entry != kairosplay.Active || boots[0].Image != v2 || boots[0].Fallback {
		t.Fatalf("booted %+v, want %s on the active slot", boots[0], v2)
	}
	raw, err := os.ReadFile(filepath.Join(host.Root, "etc/kairos-release"))
	if err != nil || kairosplay.ReleaseValue(string(raw), "KAIROS_IMAGE_REPO") != strings.Split(v2, "@")[0] {
		t.Fatalf("kairos-release after the reboot %q (%v), want %s", raw, err, v2)
	}
	// A test's kill is not a reboot: the agent is not started again.
	Kill(cmd)
	select {
	case <-s.Done():
	default:
		t.Fatal("Kill returned with the supervision going on")
	}
	if n := len(seen(t, dir)); n != 2 || len(s.Boots()) != 1 || s.Err() != nil || s.Exited() != nil {
		t.Fatalf("after Kill: %d starts, %d boots, err %v, exited %v: want no restart", n, len(s.Boots()), s.Err(), s.Exited())
	}
}

func TestSuperviseFallbackBoot(t *testing.T) {
	host, dir, v1, v2, cmd := supervised(t, 0)
	if err := host.SetFault(kairosplay.FaultFailBoot, true, v2); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reboots"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() string {
		if len(seen(t, dir)) != 1 {
			return "the agent has not started"
		}
		return ""
	})
	// The running helper was told no reboot: ask for one as the agent would, from outside.
	if err := host.RequestReboot(); err != nil {
		t.Fatal(err)
	}
	s := Supervised(cmd)
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	_ = cur.Process.Kill() // the power goes, after the request
	testenv.Eventually(t, 3*time.Minute, func() string {
		if len(seen(t, dir)) != 2 {
			return fmt.Sprintf("starts %v, want two", seen(t, dir))
		}
		return ""
	})
	b := s.Boots()
	if len(b) != 1 || b[0].Entry != kairosplay.Passive || !b[0].Fallback || b[0].Image != v1 {
		t.Fatalf("boots %+v: want the fallback to %s", b, v1)
	}
	if _, err := os.Stat(filepath.Join(host.Root, "run/cos/upgrade_failure")); err != nil {
		t.Fatalf("no /run/cos/upgrade_failure after the fallback: %v", err)
	}
}

func TestSuperviseNodeNeverComesBack(t *testing.T) {
	host, dir, _, _, cmd := supervised(t, 1)
	if err := host.SetFault(kairosplay.FaultNoReturn, true); err != nil {
		t.Fatal(err)
	}
	s := Supervised(cmd)
	select {
	case <-s.Done():
	case <-time.After(3 * time.Minute):
		t.Fatal("the supervision goes on after a reboot into a node that never comes back")
	}
	if !s.Down() || len(s.Boots()) != 0 || len(seen(t, dir)) != 1 || s.Err() != nil {
		t.Fatalf("down %v, boots %v, starts %v, err %v: want the node down and the agent not started again", s.Down(), s.Boots(), seen(t, dir), s.Err())
	}
}

// Run is the supervision of a process of its own (nodewright-site kairos-node, a benchmark):
// no test ends it, its lines and the agent's output go to the log given, and Stop ends it for
// good.
func TestRunSupervisesWithoutATestAndStops(t *testing.T) {
	base := t.TempDir()
	reg := kairosplay.Registry{Dir: filepath.Join(base, "registry")}
	v1, err := reg.AddVersion("v3.4.2")
	if err != nil {
		t.Fatal(err)
	}
	host := &kairosplay.Host{Root: filepath.Join(base, "root"), Dir: filepath.Join(base, "kairos"), Registry: reg}
	// Not installed: nothing has booted, and Run says so rather than starting an agent.
	if _, _, err := Run("n1", host, func() *exec.Cmd { return exec.Command("true") }, os.Stderr); err == nil || !strings.Contains(err.Error(), "has not booted") {
		t.Fatalf("Run on a host never installed: %v, want an error saying it has not booted", err)
	}
	if _, err := host.Install(context.Background(), v1); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "helper")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reboots"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(base, "agent.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }()
	s, first, err := Run("n1", host, func() *exec.Cmd {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "KAIROS_HELPER_DIR="+dir, "KAIROS_HELPER_HOST="+host.Dir, "KAIROS_HELPER_ROOT="+host.Root)
		return c
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	if Supervised(first) != nil {
		t.Fatal("Run's supervision is listed as a test's (Supervised)")
	}
	testenv.Eventually(t, 3*time.Minute, func() string {
		if ids := seen(t, dir); len(ids) != 2 {
			return fmt.Sprintf("the agent started with boot IDs %v, want two starts", ids)
		}
		return ""
	})
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned with the supervision going on")
	}
	if n := len(seen(t, dir)); n != 2 || len(s.Boots()) != 1 || s.Exited() != nil {
		t.Fatalf("after Stop: %d starts, %d boots, exited %v: want no restart", n, len(s.Boots()), s.Exited())
	}
	raw, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(raw), "--- n1 booted active") {
		t.Fatalf("the log %q (%v): want the supervision's line of the boot", raw, err)
	}
}

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestFleetDemo brings the fleet demo up (hack/demo-fleet.sh, make demo-fleet) in a folder
// of its own, checks that `kubectl nodewright fleet` against its hub shows the three members,
// reachable and MultiNode, with site-c's checkpoint mismatching (NotWitnessed: its trail was
// lost after its witness countersigned it) and the others' ok, then brings it down and checks
// that no process is left behind.
func TestFleetDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet hub and three member API servers")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := testenv.PinnedVersion(root, "KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "k8s", version, "kube-apiserver")); err != nil {
		t.Fatalf("the control plane is not built: run 'make test', which builds it")
	}
	for _, c := range []string{"operator", "legacy-sim", "nodewright-audit", "nodewright-profile", "nodewright-fleet", "kubectl-nodewright"} {
		build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", c), "./cmd/"+c)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", c, err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	// The demo takes 46 ports from its base: start from a free one, well below the top.
	base := 0
	for range 50 {
		p, _ := strconv.Atoi(port(testenv.FreeAddr(t)))
		if p >= 1000 && p <= 65489 {
			base = p
			break
		}
	}
	if base == 0 {
		t.Fatal("no free port to start the demo's ports from")
	}
	env := append(os.Environ(), "NODEWRIGHT_FLEET_DEMO_DIR="+dir, "NODEWRIGHT_FLEET_DEMO_PORT="+strconv.Itoa(base))
	run := func(verb string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "hack", "demo-fleet.sh"), verb)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hack/demo-fleet.sh %s: %v\n%s", verb, err, out)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				if len(data) > 8000 {
					data = data[len(data)-8000:]
				}
				t.Logf("%s (end):\n%s", l, data)
			}
		}
		run("down")
		expectNothingLeftIn(t, dir)
	})
	run("up")

	fleet := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "bin", "kubectl-nodewright"),
			append([]string{"fleet", "--kubeconfig", filepath.Join(dir, "kubeconfig"), "--context", "hub"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl nodewright fleet %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	table := fleet()
	rows := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "kubeconfig.site-") && len(f) >= 8 {
			rows[f[0]] = f
		}
	}
	for _, m := range []string{"site-a", "site-b", "site-c"} {
		f := rows["kubeconfig."+m]
		want := "ok"
		if m == "site-c" {
			want = "mismatch"
		}
		// NAME REACHABLE PHASE NODES MANAGEMENT WORKFLOW PROFILE CHECKPOINT AGE
		if f == nil || f[1] != "True" || f[2] != "MultiNode" || f[3] != "3/3" || f[4] != "Observe" ||
			f[6] != "three-node-linstor-kairos@1.0.0" || f[7] != want {
			t.Errorf("member %s: row %q, want reachable, MultiNode 3/3, Observe, the demo's profile and checkpoint %s; the table:\n%s", m, f, want, table)
		}
	}
	// The mismatch is the witness's: site-c's new trail is never countersigned.
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Conditions []struct{ Type, Status, Reason string }
			}
		}
	}
	if err := json.Unmarshal([]byte(fleet("-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, s := range list.Items {
		for _, c := range s.Status.Conditions {
			if c.Type == "CheckpointConsistent" {
				reasons[s.Metadata.Name] = c.Status + "/" + c.Reason
			}
		}
	}
	if reasons["kubeconfig.site-c"] != "False/NotWitnessed" || reasons["kubeconfig.site-a"] != "True/Consistent" {
		t.Errorf("CheckpointConsistent by member: %v, want site-c False/NotWitnessed and site-a True/Consistent", reasons)
	}
	// The hub reads as its own ServiceAccount on the hub, and each member as the hub-reader
	// ServiceAccount the member chart binds.
	hubConfig, err := os.ReadFile(filepath.Join(dir, "hub", "hub.kubeconfig"))
	if err != nil || !strings.Contains(string(hubConfig), "name: nodewright-fleet\n") {
		t.Errorf("the hub's kubeconfig: %v\n%s", err, hubConfig)
	}
	hubLog, _ := os.ReadFile(filepath.Join(dir, "hub", "hub.log"))
	if strings.Contains(strings.ToLower(string(hubLog)), "forbidden") {
		t.Errorf("the hub, as its ServiceAccount and the members' hub readers, was refused something:\n%s", hubLog)
	}
}

// expectNothingLeftIn fails when a process started from dir still runs, or dir is left.
func expectNothingLeftIn(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the demo's folder %s is still there after down", dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if cmdline := strings.ReplaceAll(string(data), "\x00", " "); strings.Contains(cmdline, dir+"/") {
			t.Errorf("process %s is still running after down: %s", filepath.Base(filepath.Dir(p)), cmdline)
		}
	}
}

package e2e

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestFleetDemo brings the fleet demo up (hack/demo-fleet.sh, make demo-fleet) in a folder
// of its own, checks that `kubectl nodewright fleet` against its hub shows the three members,
// reachable and MultiNode, with site-c's checkpoint mismatching (NotWitnessed: its trail was
// lost after its witness countersigned it) and the others' ok, and each member registered with
// the token of its chart's hub-reader Secret; as root, site-b Managed with the flip to-lacp
// running, waiting for the approval of Node1, on the member and on the hub. Then it brings the
// demo down and checks that no process is left behind, nor site-b's network namespaces.
// Without root site-b has no flip, and that part is skipped unless NODEWRIGHT_REQUIRE_NETNS is
// set.
func TestFleetDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet hub and three member API servers")
	}
	_, noIP := exec.LookPath("ip")
	withFlip := os.Geteuid() == 0 && noIP == nil
	if !withFlip && os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
		t.Fatal("site-b's flip needs root and iproute2: its storage network creates network namespaces")
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
	builds := [][]string{}
	for _, c := range []string{"operator", "legacy-sim", "nodewright-audit", "nodewright-profile", "nodewright-fleet", "kubectl-nodewright", "nodewright-site"} {
		builds = append(builds, []string{"-o", filepath.Join(root, "bin", c), "./cmd/" + c})
	}
	builds = append(builds, []string{"-tags", "nodewright_site", "-o", filepath.Join(root, "bin", "agent-site"), "./cmd/agent"})
	for _, b := range builds {
		build := exec.Command("go", append([]string{"build"}, b...)...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(b, " "), err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "fleet")
	base := demoPortBase(t)
	env := append(os.Environ(), "NODEWRIGHT_FLEET_DEMO_DIR="+dir, "NODEWRIGHT_FLEET_DEMO_PORT="+strconv.Itoa(base))
	if !withFlip {
		env = append(env, "NODEWRIGHT_DEMO_NETWORK=off")
	}
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
		// site-b's network namespaces, which down must remove (SIGTERM to the network).
		namespaces, _ := filepath.Glob(filepath.Join(dir, "site-b", "net", "*", "netns"))
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
			agentLogs, _ := filepath.Glob(filepath.Join(dir, "*", "agents", "*", "*.log"))
			logs = append(logs, agentLogs...)
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				if len(data) > 8000 {
					data = data[len(data)-8000:]
				}
				t.Logf("%s (end):\n%s", l, data)
			}
		}
		var names []string
		for _, f := range namespaces {
			if data, err := os.ReadFile(f); err == nil {
				names = append(names, strings.TrimSpace(string(data)))
			}
		}
		run("down")
		expectNothingLeftIn(t, dir)
		if len(names) > 0 {
			out, err := exec.Command("ip", "netns", "list").CombinedOutput()
			if err != nil {
				t.Errorf("ip netns list: %v\n%s", err, out)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) > 0 && slices.Contains(names, f[0]) {
					t.Errorf("site-b's network namespace %s is still there after down", f[0])
				}
			}
		}
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
		checkpoint, management, workflow := "ok", "Observe", "-"
		if m == "site-c" {
			checkpoint = "mismatch"
		}
		if m == "site-b" && withFlip {
			// The step is the latest one that started: Node1 waits, so it has not.
			management, workflow = "Managed", "BondModeFlipPlan/to-lacp Node1 (waiting) 0/3"
		}
		// NAME REACHABLE PHASE NODES MANAGEMENT WORKFLOW (words) PROFILE CHECKPOINT AGE
		if len(f) < 9 || f[1] != "True" || f[2] != "MultiNode" || f[3] != "3/3" || f[4] != management ||
			strings.Join(f[5:len(f)-3], " ") != workflow || f[len(f)-3] != "edge-demo@1.0.0" || f[len(f)-2] != checkpoint {
			t.Errorf("member %s: row %q, want reachable, MultiNode 3/3, %s, workflow %q, the demo's profile and checkpoint %s; the table:\n%s",
				m, f, management, workflow, checkpoint, table)
		}
	}
	// The mismatch is the witness's: site-c's new trail is never countersigned.
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct {
				Management string
				Workflows  []struct{ Kind, Name, Phase string }
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
	if withFlip {
		// The running flip, as the hub holds it and as the member itself says.
		var flips []string
		for _, s := range list.Items {
			for _, w := range s.Status.Workflows {
				flips = append(flips, s.Metadata.Name+" "+s.Status.Management+" "+w.Kind+"/"+w.Name+" "+w.Phase)
			}
		}
		if want := []string{"kubeconfig.site-b Managed BondModeFlipPlan/to-lacp Running"}; !slices.Equal(flips, want) {
			t.Errorf("the members' workflows on the hub: %q, want %q", flips, want)
		}
		out := fleetKubectl(t, root, version, dir, "site-b", "get", "bmfp", "to-lacp", "-o",
			`jsonpath={.status.phase} {.status.steps[?(@.name=="Preflight")].state} {.status.steps[?(@.name=="Node1")].state} {.status.conditions[?(@.type=="Held")].reason}`)
		if out != "Running Succeeded Waiting AwaitingApproval" {
			t.Errorf("site-b's flip to-lacp: %q, want Running, Preflight Succeeded, Node1 Waiting, held AwaitingApproval", out)
		}
	}
	// Each member is registered as docs/fleet.md says: its kubeconfig Secret on the hub holds
	// the token the member's API server wrote into the chart's hub-reader Secret.
	for _, m := range []string{"site-a", "site-b", "site-c"} {
		token := fleetKubectl(t, root, version, dir, m, "get", "secret", "-n", "nodewright-system", "nodewright-fleet-hub-token",
			"-o", "go-template={{.data.token | base64decode}}")
		registered := fleetKubectl(t, root, version, dir, "hub", "get", "secret", "-n", "nodewright-fleet", m,
			"-o", "go-template={{index .data \"kubeconfig\" | base64decode}}")
		if token == "" || !strings.Contains(registered+"\n", "token: "+token+"\n") {
			t.Errorf("%s's kubeconfig Secret on the hub does not hold the token of its nodewright-fleet-hub-token Secret:\n%s", m, registered)
		}
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

// demoPortBase is a base for the demo's 46 ports, all free now, below the kernel's ephemeral
// range (ip_local_port_range), which the demo's many clients draw their own ports from: a base
// in that range once found a member's metrics port taken when the operator started.
func demoPortBase(t *testing.T) int {
	t.Helper()
	low := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low < 10000+46 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for the demo's 46 ports", low)
	}
	for range 100 {
		base := 10000 + rand.IntN(low-10000-46)
		free := true
		for p := base; p < base+46 && free; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				continue
			}
			_ = ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no 46 free ports in a row below the ephemeral range for the demo")
	return 0
}

// fleetKubectl runs the control plane's kubectl against a context of the demo's kubeconfig and
// returns what it printed.
func fleetKubectl(t *testing.T, root, version, dir, context string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "bin", "k8s", version, "kubectl"),
		append([]string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--context", context}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl --context %s %s: %v\n%s%s", context, strings.Join(args, " "), err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
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

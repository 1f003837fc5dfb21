// Package e2e tests Nodewright end to end on the local site that `make demo` starts: a
// simulated three-node cluster (kwokctl) with the CRDs installed and the operator running.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// patience bounds every wait on the site: long enough for a busy two-core machine, and no cost
// when the state holds sooner.
const patience = 5 * time.Minute

// site is a local site started by hack/demo.sh in a folder of the test's own, so that it
// never touches a developer's running demo.
type site struct {
	root, dir, kubectl, kubeconfig string
	env                            []string
}

// TestLocalSite brings the site up, checks what the README promises (three Ready nodes, the
// six CRDs, the operator ready, an agent per node renewing its Lease, user-facing docs in
// kubectl explain, nothing listening beyond loopback), then brings it down and checks that no
// process is left behind.
func TestLocalSite(t *testing.T) {
	s := startSite(t)
	s.expectLoopbackOnly(t)
	s.expectAgentsRenew(t)
	s.expectBootsFollowed(t)

	nodes := s.kubectlOut(t, "get", "nodes", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if got := strings.Fields(nodes); len(got) != 3 || strings.Count(nodes, "=True") != 3 {
		t.Errorf("want three Ready nodes, got:\n%s", nodes)
	}

	crds := s.kubectlOut(t, "get", "crd", "-o", "name")
	kinds := []string{"nodewrightclusters", "nodewrightagentstatuses", "vmvolumemigrations",
		"bondmodeflipplans", "replicationupgrades", "edgeprofiles"}
	for _, plural := range kinds {
		if !strings.Contains(crds, plural+".nodewright.spectrocloud.com") {
			t.Errorf("CRD %s is not installed; have:\n%s", plural, crds)
		}
	}

	// The category lists every Nodewright object; the demo applied two samples.
	all := s.kubectlOut(t, "get", "nodewright", "-A", "-o", "name")
	for _, want := range []string{"nodewrightcluster.nodewright.spectrocloud.com/nodewright",
		"edgeprofile.nodewright.spectrocloud.com/edge-demo"} {
		if !strings.Contains(all, want) {
			t.Errorf("kubectl get nodewright does not list %s:\n%s", want, all)
		}
	}

	// kubectl explain shows the docs written on the Go types, for every kind and its fields.
	explained := map[string]string{
		"nodewrightcluster":                  "cluster-level health rollup",
		"nodewrightcluster.spec.legacy":      "ConfigMap, DaemonSet and Event component",
		"nodewrightagentstatus.status":       "node's state as observed",
		"vmvolumemigration.spec.mode":        "Cold (stop, copy, verify, restart)",
		"bondmodeflipplan.spec.vmProtection": "what happens to a node's VMs",
		"replicationupgrade.spec.peerNodes":  "nodes that join the single storage node",
		"edgeprofile.signature":              "detached signature over the canonical encoding",
	}
	for path, want := range explained {
		out := s.kubectlOut(t, "explain", path)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("kubectl explain %s does not say %q:\n%s", path, want, out)
		}
	}

	// Admission, as the demo's hints say: the profile it signed verified, and what cannot be
	// done is refused with the webhook's own words.
	s.waitOutput(t, patience, "the signed sample profile to verify", func(out string) bool { return out == "True" },
		"get", "edgeprofile", "edge-demo", "-o", `jsonpath={.status.conditions[?(@.type=="SignatureVerified")].status}`)
	for file, want := range map[string]string{
		"nodewright_v1alpha1_edgeprofile.yaml":        "signature: the profile is not signed",
		"nodewright_v1alpha1_vmvolumemigration.yaml":  `spec.vmName: VirtualMachine "database" not found in namespace default`,
		"nodewright_v1alpha1_replicationupgrade.yaml": `spec.peerNodes[0]: "node-b" is not a Node of the cluster`,
	} {
		out := s.kubectlFails(t, "apply", "-f", filepath.Join(s.root, "config", "samples", file))
		if !strings.Contains(out, "denied the request: "+want) {
			t.Errorf("kubectl apply -f %s: %s; want the webhook's refusal %q", file, out, want)
		}
	}

	// The demo VM's volume moves onto ReadWriteMany storage as the demo's hint says: real
	// bytes copied and verified on the site's files, the VM restarted on the target.
	s.kubectlOut(t, "apply", "-n", "demo", "-f", filepath.Join(s.root, "config", "samples", "nodewright_v1alpha1_vmvolumemigration.yaml"))
	s.waitOutput(t, patience, "the migration to succeed", func(out string) bool { return out == "Succeeded" },
		"get", "vmvm", "-n", "demo", "database-rootdisk", "-o", "jsonpath={.status.phase}")
	sums := strings.Fields(s.kubectlOut(t, "get", "vmvm", "-n", "demo", "database-rootdisk", "-o",
		"jsonpath={.status.checksum.source} {.status.checksum.target} {.status.progress.percent}"))
	if len(sums) != 3 || !strings.HasPrefix(sums[0], "blake3:") || sums[0] != sums[1] || sums[2] != "100" {
		t.Errorf("checksum and progress of the migration: %v, want two equal BLAKE3 digests and 100", sums)
	}
	s.waitOutput(t, patience, "the VM to run on the target", func(out string) bool { return out == "Running database-rootdisk-target" },
		"get", "vmi", "-n", "demo", "database", "-o", "jsonpath={.status.phase} {.spec.volumes[0].persistentVolumeClaim.claimName}")
	s.checkAuditTrail(t)
	table := s.kubectlOut(t, "get", "vmvm", "-n", "demo")
	for _, want := range []string{"database", "rootdisk", "Cold", "Succeeded", "100"} {
		if !strings.Contains(table, want) {
			t.Errorf("kubectl get vmvm does not show %q:\n%s", want, table)
		}
	}

	// A component that died is named, with its log, when the site is brought up again.
	s.killComponent(t, "kube-scheduler")
	cmd := exec.Command(filepath.Join(s.root, "hack", "demo.sh"), "up")
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "demo: FAILED: kube-scheduler is not running") ||
		!strings.Contains(string(out), "logs/kube-scheduler.log") {
		t.Errorf("up with a dead kube-scheduler: err %v, output:\n%s", err, out)
	}
}

// agentNS is the agent's namespace on the site: the chart's default.
const agentNS = "nodewright-agent"

// expectAgentsRenew checks the node agents the site runs: one process per node, whose Lease
// (named after the node, in the agent's namespace) is held by that node and renewed, twice
// (every 10 s), as the chart's agent ServiceAccount with a token naming the node; an agent
// writing another node's Lease is refused by the chart's policy. The chart's DaemonSet has its
// pods on edge-2 and edge-3 only (kwok plays them; the site's kubelet runs no agent).
func (s *site) expectAgentsRenew(t *testing.T) {
	t.Helper()
	nodes := []string{"edge-1", "edge-2", "edge-3"}
	renewals := func() map[string]string {
		out := s.kubectlOut(t, "get", "lease", "-n", agentNS, "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.spec.holderIdentity}@{.spec.renewTime}{"\n"}{end}`)
		got := map[string]string{}
		for _, line := range strings.Fields(out) {
			name, rest, _ := strings.Cut(line, "=")
			holder, renew, _ := strings.Cut(rest, "@")
			if holder == name {
				got[name] = renew
			}
		}
		return got
	}
	first := renewals()
	for _, n := range nodes {
		if first[n] == "" {
			t.Fatalf("no Lease %s/%s held by %s after make demo: %v", agentNS, n, n, first)
		}
	}
	// Each Lease renewed twice more: the agents keep it, not just once at start. A renewal is
	// every 10 s; the limit is for a stuck agent only.
	seen := map[string]map[string]bool{}
	for _, n := range nodes {
		seen[n] = map[string]bool{first[n]: true}
	}
	for deadline := time.Now().Add(patience); ; time.Sleep(time.Second) {
		now := renewals()
		done := true
		for _, n := range nodes {
			if now[n] != "" {
				seen[n][now[n]] = true
			}
			if len(seen[n]) < 3 {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for every agent to renew its Lease twice; renewals seen: %v", patience, seen)
		}
	}
	for _, n := range nodes {
		pid, err := os.ReadFile(filepath.Join(s.dir, "agents", n, "agent.pid"))
		if err != nil {
			t.Fatalf("the agent of %s: %v", n, err)
		}
		p, err := strconv.Atoi(strings.TrimSpace(string(pid)))
		if err != nil || !alive(p) {
			t.Errorf("the agent of %s (pid %q) is not running", n, pid)
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "agents", n, "agent.log"))
		if strings.Contains(strings.ToLower(string(log)), "forbidden") {
			t.Errorf("the agent of %s, running as the chart's agent ServiceAccount, was refused something:\n%s", n, log)
		}
	}
	// The token names the node: another node's Lease is refused, by the chart's policy.
	argv := []string{s.kubectl, "--kubeconfig", filepath.Join(s.dir, "agents", "edge-1", "kubeconfig"),
		"annotate", "lease", "-n", agentNS, "edge-2", "nodewright.spectrocloud.com/test=x"}
	// On the storage network the agent's kubeconfig reaches the API server through the
	// network's forwarder, which serves the nodes alone: ask from edge-1's namespace.
	if netns, err := os.ReadFile(filepath.Join(s.dir, "net", "edge-1", "netns")); err == nil {
		argv = append([]string{"ip", "netns", "exec", strings.TrimSpace(string(netns))}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "the agent of node edge-1 may write only its own node's Lease, not the Lease edge-2") {
		t.Errorf("edge-1's agent annotating edge-2's Lease: %v\n%s\nwant the policy's refusal", err, out)
	}
	pods := s.kubectlOut(t, "get", "pods", "-n", agentNS, "-l", "app.kubernetes.io/component=agent", "-o",
		`jsonpath={range .items[*]}{.spec.nodeName}={.status.phase}{"\n"}{end}`)
	if got := strings.Fields(pods); len(got) != 2 || !strings.Contains(pods, "edge-2=Running") || !strings.Contains(pods, "edge-3=Running") {
		t.Errorf("the agent DaemonSet's pods: %q, want one Running on each of edge-2 and edge-3", got)
	}
}

// demoImage is the image make demo installs its played Kairos hosts with (the first of
// hack/demo.sh's kairos_versions), as kairos-release names it.
const demoImage = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2"

// expectBootsFollowed checks the BootRecoveryPolicy nodewright that make demo creates for its
// played Kairos hosts: it records each node's boot as the host has it (the active slot of the
// demo's image, the boot ID in the host's own files), with nothing fallen back, in recovery
// or unhealthy, and kubectl get nwbr and the plugin's boot status show it.
func (s *site) expectBootsFollowed(t *testing.T) {
	t.Helper()
	// make demo waits for the three records before it says the site is up.
	out := s.kubectlOut(t, "get", "bootrecoverypolicy", "nodewright", "-o",
		`jsonpath={range .status.nodes[*]}{.name}|{.bootEntry}|{.image}|{.bootID}{"\n"}{end}`)
	records := map[string][]string{}
	for _, line := range strings.Fields(out) {
		f := strings.Split(line, "|")
		records[f[0]] = f[1:]
	}
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		bootID := strings.TrimSpace(string(s.hostFile(t, n, "proc/sys/kernel/random/boot_id")))
		if got, want := records[n], []string{"Active", demoImage, bootID}; bootID == "" || !reflect.DeepEqual(got, want) {
			t.Errorf("the BootRecoveryPolicy's record of %s: %q, want %q (boot entry, image, the host's boot ID)", n, got, want)
		}
	}
	if len(records) != 3 {
		t.Errorf("the BootRecoveryPolicy records %d nodes, want the three:\n%s", len(records), out)
	}
	table := s.kubectlOut(t, "get", "nwbr")
	if fields := strings.Fields(table); len(fields) < 6 || fields[len(fields)-2] != "nodewright" {
		t.Errorf("kubectl get nwbr: want the policy nodewright with no node fallen back, in recovery or unhealthy:\n%s", table)
	}
	status, err := exec.Command(filepath.Join(s.root, "bin", "kubectl-nodewright"), "--kubeconfig", s.kubeconfig, "boot", "status").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl nodewright boot status: %v\n%s", err, status)
	}
	for _, n := range []string{"edge-1", "edge-2", "edge-3"} {
		if !regexp.MustCompile(`(?m)^` + n + ` +Active +` + regexp.QuoteMeta(demoImage) + ` `).Match(status) {
			t.Errorf("kubectl nodewright boot status shows no line of %s booted Active from %s:\n%s", n, demoImage, status)
		}
	}
}

// hostFile reads a file of node's played host, under its root: on the storage network the
// node's root there, else the agent's host folder.
func (s *site) hostFile(t *testing.T, node, name string) []byte {
	t.Helper()
	for _, root := range []string{filepath.Join(s.dir, "net", node, "root"), filepath.Join(s.dir, "agents", node, "host")} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err == nil {
			return data
		}
		if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s: no %s in its played host's root", node, name)
	return nil
}

// alive reports whether pid runs; a zombie nobody has reaped yet does not.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	return !bytes.HasPrefix(bytes.TrimSpace(rest), []byte("Z"))
}

// killComponent ends one of the site's control-plane processes, as a crash would.
func (s *site) killComponent(t *testing.T, name string) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(s.dir, "kwok", "clusters", "*", "pids", name+".pid"))
	if len(matches) != 1 {
		t.Fatalf("no pid file for %s", name)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %s: %v", matches[0], err)
	}
	proc, _ := os.FindProcess(pid)
	if err := proc.Kill(); err != nil {
		t.Fatalf("killing %s: %v", name, err)
	}
	// SIGKILL is immediate; the limit only names a process the kernel cannot reap.
	for deadline := time.Now().Add(time.Minute); alive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) did not die", name, pid)
		}
	}
}

// startSite brings a site up for the test and down again when it ends, with the logs shown
// if it failed.
func startSite(t *testing.T) *site {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a whole local cluster")
	}
	s := newSite(t)
	// Down even when up fails part way: what it started would run on.
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs(t)
		}
		s.run(t, "down")
	})
	s.run(t, "up")
	return s
}

func newSite(t *testing.T) *site {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	version, err := testenv.PinnedVersion(root, "KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	k8s := filepath.Join(root, "bin", "k8s", version)
	if _, err := os.Stat(filepath.Join(k8s, "kwokctl")); err != nil {
		t.Fatalf("the control plane is not built in %s: run 'make test', which builds it", k8s)
	}
	// Every binary the site runs: the operator, the simulator, the site, nodewright-copy and
	// nodewright-audit, as make demo builds them.
	for _, args := range [][]string{{"-o", filepath.Join(root, "bin") + "/", "./cmd/..."},
		// The agents' build (make build): with the site's played bond.
		{"-tags", "nodewright_site", "-o", filepath.Join(root, "bin", "agent-site"), "./cmd/agent"}} {
		build := exec.Command("go", append([]string{"build"}, args...)...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building the binaries (go build %s): %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "site")
	s := &site{root: root, dir: dir, kubectl: filepath.Join(k8s, "kubectl"), kubeconfig: filepath.Join(dir, "kubeconfig")}
	s.env = append(os.Environ(),
		"NODEWRIGHT_DEMO_DIR="+dir,
		"NODEWRIGHT_DEMO_STEP_INTERVAL=300ms",
		fmt.Sprintf("NODEWRIGHT_DEMO_NAME=nodewright-e2e-%d", os.Getpid()),
		"NODEWRIGHT_DEMO_PROBE_ADDR="+testenv.FreeAddr(t),
		"NODEWRIGHT_DEMO_METRICS_ADDR="+testenv.FreeAddr(t),
		"NODEWRIGHT_DEMO_WEBHOOK_PORT="+port(testenv.FreeAddr(t)),
		"NODEWRIGHT_DEMO_GATE_ADDR="+testenv.FreeAddr(t),
		"NODEWRIGHT_DEMO_GATE_PROBE_ADDR="+testenv.FreeAddr(t))
	return s
}

func (s *site) run(t *testing.T, verb string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.root, "hack", "demo.sh"), verb)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/demo.sh %s: %v\n%s", verb, err, out)
	}
	if verb == "down" {
		s.expectNothingLeft(t)
	}
}

// expectNothingLeft fails when a process started for the site is still running.
func (s *site) expectNothingLeft(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("the site's folder %s is still there after down", s.dir)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmdline, s.dir+"/") {
			t.Errorf("process %s is still running after down: %s", filepath.Base(filepath.Dir(p)), cmdline)
		}
	}
}

func (s *site) kubectlOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// port is the port of a host:port address.
func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// kubectlFails runs kubectl, which must fail, and returns what it printed.
func (s *site) kubectlFails(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kubectl %s succeeded; want it refused:\n%s", strings.Join(args, " "), out)
	}
	return string(out)
}

// checkAuditTrail verifies the operator's audit trail against the newest checkpoint it
// published in its ConfigMap: the migration's transitions and the legacy DaemonSet's observed
// transitions are in it, by the operator's own identity.
func (s *site) checkAuditTrail(t *testing.T) {
	t.Helper()
	// The migration's last records are signed within the checkpoint interval (5s).
	var checkpoint string
	s.waitOutput(t, patience, "a checkpoint that covers the migration", func(out string) bool {
		checkpoint = out
		trusted := filepath.Join(t.TempDir(), "checkpoint.jsonl")
		if os.WriteFile(trusted, []byte(out+"\n"), 0o600) != nil {
			return false
		}
		verify := exec.Command(filepath.Join(s.root, "bin", "nodewright-audit"), "verify", "--json",
			"--public-key", filepath.Join(s.dir, "audit-key.pub"), "--trusted-checkpoint", trusted, filepath.Join(s.dir, "audit"))
		report, err := verify.CombinedOutput()
		if err != nil {
			t.Fatalf("nodewright-audit verify: %v\n%s", err, report)
		}
		// The checkpoint covers the migration once its size passes the seq of its last record.
		var cp struct {
			Checkpoint struct{ Size uint64 } `json:"checkpoint"`
		}
		if json.Unmarshal([]byte(out), &cp) != nil {
			return false
		}
		for _, line := range strings.Split(s.auditText(t), "\n") {
			if strings.Contains(line, `"name":"database-rootdisk"`) && strings.Contains(line, `"to":"Succeeded"`) {
				var e struct{ Seq uint64 }
				return json.Unmarshal([]byte(line), &e) == nil && e.Seq < cp.Checkpoint.Size
			}
		}
		return false
	}, "get", "configmap", "-n", "nodewright-system", "nodewright-audit-checkpoint", "-o", `jsonpath={.data.checkpoint\.jsonl}`)
	trail := s.auditText(t)
	// The operator runs with the site's kubeconfig: its records name that identity.
	who := strings.TrimSpace(s.kubectlOut(t, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"))
	for _, want := range []string{`"action":"MigrationTransition"`, `"action":"LegacyTransitionObserved"`, `"actor":"` + who + `"`} {
		if !strings.Contains(trail, want) {
			t.Errorf("the audit trail has no %s (newest checkpoint %s)", want, checkpoint)
		}
	}
}

// auditText is the whole audit trail.
func (s *site) auditText(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.dir, "audit", "audit-*.jsonl"))
	var all []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	return string(all)
}

// waitOutput polls kubectl until what says its output is what the test waits for.
func (s *site) waitOutput(t *testing.T, timeout time.Duration, what string, ok func(string) bool, args ...string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
		raw, err := cmd.CombinedOutput()
		out = strings.TrimSpace(string(raw))
		if err == nil && ok(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; kubectl %s says: %s", timeout, what, strings.Join(args, " "), out)
		}
	}
}

func (s *site) dumpLogs(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		t.Logf("%s:\n%s", l, data)
	}
}

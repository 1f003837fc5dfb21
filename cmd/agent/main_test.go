package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) {
	code := env.Run(m)
	for _, b := range []*agentBuild{plainAgent, siteAgent} {
		if b.path != "" {
			_ = os.RemoveAll(filepath.Dir(b.path))
		}
	}
	os.Exit(code)
}

// patience bounds every wait: only a stuck test reaches it.
const patience = 2 * time.Minute

// agentBuild is the agent built once for the package's tests, with build tags.
type agentBuild struct {
	once sync.Once
	tags string
	path string
	err  error
}

var (
	plainAgent = &agentBuild{}
	// siteAgent is the agent built for the local site: --network-backend site.
	siteAgent = &agentBuild{tags: "nodewright_site"}
)

func (b *agentBuild) binary(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodewright-agent-test-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "agent")
		if out, err := exec.Command("go", "build", "-tags", b.tags, "-o", b.path, ".").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building the agent (tags %q): %w\n%s", b.tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// buildAgent builds the agent once for the package's tests.
func buildAgent(t *testing.T) string { return plainAgent.binary(t) }

// startAgent starts cmd, an agent, with its output kept; at the test's end it is stopped with
// stop and waited for, and its output logged under name when the test failed.
func startAgent(t *testing.T, name string, cmd *exec.Cmd, stop os.Signal) *exec.Cmd {
	t.Helper()
	log := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(stop)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s:\n%s", name, log)
		}
	})
	return cmd
}

// TestEachAgentKeepsItsNodesHeartbeat runs two agents, real processes of the built binary,
// against a real API server: each keeps its own node's Lease, owned by the Node, renewed again
// and again; an agent killed and started again goes on with the same Lease.
func TestEachAgentKeepsItsNodesHeartbeat(t *testing.T) {
	ctx := context.Background()
	binary := buildAgent(t)
	kubeconfig := env.Kubeconfig(t)
	ns := env.Namespace(t)
	edge1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "agent-edge-1"}}
	if err := env.Client.Create(ctx, edge1); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), edge1) })
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(edge1), edge1); err != nil {
		t.Fatal(err)
	}

	start := func(node string) *exec.Cmd {
		return startAgent(t, "agent "+node, exec.Command(binary, "--kubeconfig", kubeconfig, "--node-name", node, "--namespace", ns,
			"--heartbeat-interval", "1s", "--state-dir", t.TempDir()), os.Kill)
	}
	// renewed waits until node's Lease is held by the node and renewed after since.
	renewed := func(node string, since time.Time) *coordinationv1.Lease {
		t.Helper()
		l := &coordinationv1.Lease{}
		testenv.Eventually(t, patience, func() string {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: node}, l); err != nil {
				return err.Error()
			}
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != node {
				return fmt.Sprintf("the Lease of %s is held by %q", node, h)
			}
			if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
				return fmt.Sprintf("the Lease of %s was last renewed at %v, not after %s", node, l.Spec.RenewTime, since)
			}
			return ""
		})
		return l
	}

	a1, _ := start("agent-edge-1"), start("agent-edge-2")
	first := renewed("agent-edge-1", time.Time{})
	renewed("agent-edge-2", time.Time{})
	if d := ptr.Deref(first.Spec.LeaseDurationSeconds, 0); d < 2 {
		t.Errorf("the Lease's duration is %ds; want at least twice the renewal interval", d)
	}
	if refs := first.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != edge1.UID {
		t.Errorf("the Lease of agent-edge-1 is owned by %+v; want its Node", refs)
	}
	again := renewed("agent-edge-1", first.Spec.RenewTime.Time)
	if again.UID != first.UID {
		t.Errorf("the Lease was replaced, not renewed")
	}

	// Killed and started again: the same Lease goes on being renewed.
	if err := a1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a1.Wait()
	killedAt := time.Now()
	start("agent-edge-1")
	after := renewed("agent-edge-1", killedAt)
	if after.UID != first.UID {
		t.Errorf("the restarted agent made a new Lease")
	}
}

// TestRefusesMissingNode: an agent that does not know its node refuses to start, saying so.
func TestRefusesMissingNode(t *testing.T) {
	binary := buildAgent(t)
	cmd := exec.Command(binary, "--kubeconfig", env.Kubeconfig(t), "--namespace", "x")
	cmd.Env = append(os.Environ(), "NODE_NAME=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--node-name (or $NODE_NAME)") {
		t.Fatalf("exit %v, output %q; want exit 2 naming --node-name", err, out)
	}
}

// TestTheAgentRunsItsNodesOperations: the binary takes its own node's operations and leaves
// the other node's alone. Here a DRBD verify, whose first step, reading the resource's state,
// drbdsetup refuses on this machine (no DRBD module), is reported Failed, CommandFailed,
// quoting drbdsetup.
func TestTheAgentRunsItsNodesOperations(t *testing.T) {
	ctx := context.Background()
	binary := buildAgent(t)
	ns := env.Namespace(t)
	startAgent(t, "agent", exec.Command(binary, "--kubeconfig", env.Kubeconfig(t), "--node-name", "ops-edge-1", "--namespace", ns,
		"--state-dir", t.TempDir()), syscall.SIGTERM)
	op := func(name, node string) *nwv1.NodeOperation {
		o := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationDRBDVerify,
				Deadline:   metav1.NewTime(time.Now().Add(time.Hour)),
				DRBDVerify: &nwv1.DRBDResourceOperation{Resource: "pvc-1"}}}
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	mine, theirs := op("mine", "ops-edge-1"), op("theirs", "ops-edge-2")
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
			return err.Error()
		}
		if mine.Status.Phase != nwv1.OperationFailed || mine.Status.Error == nil || mine.Status.Error.Reason != "CommandFailed" || !strings.Contains(mine.Status.Error.Message, "drbdsetup status pvc-1") {
			return fmt.Sprintf("its own operation: %s, error %+v", mine.Status.Phase, ptr.Deref(mine.Status.Error, nwv1.OperationError{}))
		}
		return ""
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil {
		t.Fatal(err)
	}
	if theirs.Status.Phase != "" {
		t.Errorf("the agent of ops-edge-1 touched ops-edge-2's operation: %+v", theirs.Status)
	}
	// Its writes are the agent's in managedFields: nodewright-agent, its User-Agent.
	var writers []string
	for _, m := range mine.ManagedFields {
		if m.Subresource == "status" {
			writers = append(writers, m.Manager+"/"+string(m.Operation))
		}
	}
	if len(writers) != 1 || writers[0] != "nodewright-agent/Update" {
		t.Errorf("the operation's status was written by %v; want nodewright-agent/Update", writers)
	}
}

// TestTheAgentReportsItsNode runs the binary with --host-root on a Kairos node's files: its
// node's NodewrightAgentStatus appears, reported by the agent, with the OS, the image and the
// boot entry those files say, and what this machine's kernel says of DRBD (no module: Unknown).
// Run again with nothing changed, the agent writes nothing.
func TestTheAgentReportsItsNode(t *testing.T) {
	ctx := context.Background()
	binary := buildAgent(t)
	kubeconfig := env.Kubeconfig(t)
	ns := env.Namespace(t)
	const node = "report-edge-1"
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	root := t.TempDir()
	for name, content := range map[string]string{
		"usr/lib/os-release":  "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\nID_LIKE=debian\n",
		"etc/kairos-release":  "KAIROS_VERSION=\"v3.4.2\"\nKAIROS_FLAVOR=\"ubuntu\"\nKAIROS_FLAVOR_RELEASE=\"24.04\"\nKAIROS_VARIANT=\"standard\"\nKAIROS_MODEL=\"generic\"\nKAIROS_SOFTWARE_VERSION=\"v1.32.4+k3s1\"\n",
		"run/cos/active_mode": "1",
	} {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../usr/lib/os-release", filepath.Join(root, "etc", "os-release")); err != nil {
		t.Fatal(err)
	}
	// The kernel's files, in a /proc of the test's own (--host-proc).
	const bootID = "5e9c4f4b-9c3d-4a3f-8e0b-5c7d6f8a9b03"
	proc := t.TempDir()
	for name, content := range map[string]string{"cmdline": "BOOT_IMAGE=(loop0)/boot/vmlinuz root=LABEL=COS_ACTIVE panic=5\n", "sys/kernel/random/boot_id": bootID + "\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proc, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	run := func() *exec.Cmd {
		// --host-os empty: the OS is told from the files under --host-root.
		return startAgent(t, "agent", exec.Command(binary, "--kubeconfig", kubeconfig, "--node-name", node, "--namespace", ns, "--state-dir", stateDir,
			"--host-root", root, "--host-proc", proc, "--host-os", "", "--report-interval", "1s", "--heartbeat-interval", "1s"), os.Kill)
	}
	first := run()
	as := &nwv1.NodewrightAgentStatus{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		st := as.Status
		if st.Reporter != nwv1.ReporterAgent || st.OS == nil {
			return fmt.Sprintf("not reported yet: %+v", st)
		}
		return ""
	})
	want := &nwv1.HostOSStatus{Kind: nwv1.HostOSKairos, Name: "Ubuntu", Version: "24.04", PrettyName: "Ubuntu 24.04.1 LTS",
		Kairos: &nwv1.KairosStatus{BootEntry: nwv1.KairosBootActive, Version: "v3.4.2", Flavor: "ubuntu", FlavorRelease: "24.04",
			Variant: "standard", Model: "generic", SoftwareVersion: "v1.32.4+k3s1"}}
	if got := as.Status.OS; got.BootID != bootID {
		t.Errorf("os.bootID %q; want %q, read from --host-proc", got.BootID, bootID)
	}
	if got := as.Status.OS; got.Kind != want.Kind || got.Name != want.Name || got.Version != want.Version || got.PrettyName != want.PrettyName ||
		got.Kairos == nil || *got.Kairos != *want.Kairos {
		t.Errorf("os %+v %+v; want %+v %+v", got, got.Kairos, want, want.Kairos)
	}
	storage := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy)
	if _, err := os.Stat("/proc/drbd"); err != nil && (storage == nil || storage.Status != metav1.ConditionUnknown || storage.Reason != nwv1.ReasonDRBDNotLoaded) {
		t.Errorf("StorageHealthy on a kernel without DRBD: %+v; want Unknown, DRBDNotLoaded", storage)
	}
	if observed := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionHostObserved); observed == nil || observed.Status != metav1.ConditionTrue {
		t.Errorf("HostObserved: %+v", observed)
	}
	// `kubectl get nodewrightagentstatus` shows who reports the node: the table the API
	// server serves kubectl.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis", nwv1.GroupVersion.Group, nwv1.GroupVersion.Version, "nodewrightagentstatuses", node).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("the table of %s: %v\n%s", node, err, raw)
	}
	shown := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		shown[col.Name] = table.Rows[0].Cells[i]
	}
	if shown["Reporter"] != "Agent" || shown["OS"] != "Ubuntu 24.04.1 LTS" || shown["Boot"] != "Active" {
		t.Errorf("kubectl get shows %v; want Reporter Agent, OS Ubuntu 24.04.1 LTS and Boot Active", shown)
	}

	var owners []string
	for _, m := range as.ManagedFields {
		if m.Subresource == "status" {
			owners = append(owners, m.Manager+"/"+string(m.Operation))
		}
	}
	if len(owners) != 1 || owners[0] != "nodewright-agent/Apply" {
		t.Errorf("the status is managed by %v; want nodewright-agent/Apply", owners)
	}

	// Killed and started again, with nothing changed on the host: the agent reads it again and
	// again, and writes nothing.
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	run()
	lease := &coordinationv1.Lease{}
	var renewed *metav1.MicroTime
	testenv.Eventually(t, patience, func() string {
		// The Lease, renewed every second, renewed more than 3 s after it was first seen
		// here: the restarted agent has read the host several times (at start, then every
		// second).
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: node}, lease); err != nil {
			return err.Error()
		}
		if renewed == nil {
			renewed = lease.Spec.RenewTime
			return "waiting for the restarted agent's renewals"
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.After(renewed.Add(3*time.Second)) {
			return "waiting for the restarted agent's renewals"
		}
		return ""
	})
	again := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != as.ResourceVersion {
		t.Errorf("the restarted agent wrote its unchanged report: %+v", again.Status)
	}
}

// TestRefusesBadHostFlags: an OS it does not know, a host root that is not a folder, or a
// trusted keys' ConfigMap without its namespace, stops it at once, naming the flag.
func TestRefusesBadHostFlags(t *testing.T) {
	binary := buildAgent(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--host-os", "Ubuntu"}, `--host-os Ubuntu: unknown host OS kind "Ubuntu"`},
		{[]string{"--host-root", filepath.Join(t.TempDir(), "missing")}, "missing: not a folder"},
		// Told to tell the OS from a host with no os-release.
		{[]string{"--host-root", t.TempDir(), "--host-os", ""}, "--host-os : telling the host's OS: neither /etc/os-release nor /usr/lib/os-release"},
		{[]string{"--host-proc", filepath.Join(t.TempDir(), "missing")}, "missing: not a folder"},
		{[]string{"--report-interval", "100ms"}, "--report-interval 100ms: must be at least 1s"},
		{[]string{"--profile-keys-configmap", "nodewright-profile-keys"}, `--profile-keys-configmap "nodewright-profile-keys": must be namespace/name`},
	} {
		cmd := exec.Command(binary, append([]string{"--kubeconfig", env.Kubeconfig(t), "--node-name", "n", "--namespace", "x"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: exit %v, output %q; want exit 2 saying %q", tc.args, err, out, tc.want)
		}
	}
}

// TestKairosOSOperationsOff: an agent on a Kairos host told --kairos-os-operations=false (the
// chart's default, agent.kairosOSOperations) refuses an OSUpgradeStage and a Reboot, Failed
// Unsupported, before anything runs on the host: the operator asking (compromised, say) does not
// make the node stage an image or reboot. On an agent that performs them, the stage would run
// (and, on this machine, fail CommandFailed: the chroot into /proc/1/root is refused here).
func TestKairosOSOperationsOff(t *testing.T) {
	ctx := context.Background()
	binary := buildAgent(t)
	ns := env.Namespace(t)
	root := t.TempDir()
	for name, content := range map[string]string{
		"etc/os-release":     "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\n",
		"etc/kairos-release": "KAIROS_VERSION=\"v3.4.2\"\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const node = "kairos-off-1"
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	stateDir := t.TempDir()
	startAgent(t, "agent", exec.Command(binary, "--kubeconfig", env.Kubeconfig(t), "--node-name", node, "--namespace", ns,
		"--state-dir", stateDir, "--host-root", root, "--host-os", "Kairos", "--kairos-os-operations=false"), syscall.SIGTERM)
	image := "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0@sha256:" + strings.Repeat("ab", 32)
	stage := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stage"},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationOSUpgradeStage, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			OSUpgradeStage: &nwv1.OSImageOperation{Image: image}}}
	reboot := &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reboot"},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationReboot, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			Reboot: &nwv1.RebootOperation{}}}
	for _, op := range []*nwv1.NodeOperation{stage, reboot} {
		if err := env.Client.Create(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range []*nwv1.NodeOperation{stage, reboot} {
		testenv.Eventually(t, patience, func() string {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), op); err != nil {
				return err.Error()
			}
			if op.Status.Phase != nwv1.OperationFailed || op.Status.Error == nil || op.Status.Error.Reason != "Unsupported" {
				return fmt.Sprintf("%s: %+v %+v", op.Name, op.Status, op.Status.Error)
			}
			return ""
		})
	}
	for _, record := range []string{"kairos-stage.json", "kairos-reboot.json"} {
		if _, err := os.Stat(filepath.Join(stateDir, record)); err == nil {
			t.Errorf("the agent wrote %s: it began the operation", record)
		}
	}
}

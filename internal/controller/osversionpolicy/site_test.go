package osversionpolicy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit/audittest"
	"github.com/spectrocloud/nodewright/internal/controller/osversionpolicy"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// The policy's tests run the controller against a real API server and the nodes' agents as
// real processes (the agent built for the local site), each in its own network namespace on
// the played storage network of test/site/netsite, on a played Kairos host
// (test/site/kairosplay): kairos-agent's upgrade and GRUB's boot assessment are played, the
// boot assessment's block is written by the real grub-editenv, and a reboot ends the agent's
// process and starts it again on the booted slot with a new boot ID. What a node booted is read
// from its played host's files, not from the policy's status.

var env = testenv.New()

func TestMain(m *testing.M) {
	code := env.Run(m)
	siteagent.Remove()
	os.Exit(code)
}

// patience bounds every wait: only a stuck test reaches it.
const patience = 3 * time.Minute

// The images of the played registry.
const (
	oldVersion = "v3.4.2"
	newVersion = "v3.5.0"
)

// drbdResources are the DRBD resources every played node replicates.
var drbdResources = []string{"pvc-os-one", "pvc-os-two"}

// site is a played cluster of Kairos nodes: their storage network, their hosts, their agents,
// the operator's OSVersionPolicy controller, and the NodewrightCluster a policy reads.
type site struct {
	t          *testing.T
	net        *netsite.Network
	ns         string
	kubeconfig string
	nodes      []string
	hosts      map[string]*kairosplay.Host
	agents     map[string]*exec.Cmd
	lockNS     string
	trail      *audittest.Memory
	// images are the played registry's images, by version.
	images map[string]string
}

func (s *site) cacheOptions() cache.Options {
	return operator.CacheOptions(operator.Scope{Agent: s.ns, Workflows: s.lockNS})
}

func (s *site) reconciler(mgr manager.Manager, c client.Client, r client.Reader) *osversionpolicy.Reconciler {
	return &osversionpolicy.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("osversion-test"), LockNamespace: s.lockNS,
		Audit: s.trail, Actor: "nodewright-operator"}, Client: c, APIReader: r, AgentNamespace: s.ns}
}

// startOperator runs the policy's controller until the test ends or stop is called, under the
// chart's admission policies for the operator (its cordons pass them).
func (s *site) startOperator() (stop func()) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	return env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		return s.reconciler(mgr, mgr.GetClient(), nil).SetupWithManager(mgr)
	})
}

// plant plays Kairos nodes with roles ("edge-1=primary"), each installed with the old image
// and replicating drbdResources, their Nodes Ready, the cluster Managed; the controller runs
// when operate.
func plant(t *testing.T, operate bool, nodes ...string) *site {
	t.Helper()
	return plantWith(t, operate, nil, nodes...)
}

// plantWith is plant, with profile changing the signed EdgeProfile's spec before it is signed
// (given the played registry's images, by version).
func plantWith(t *testing.T, operate bool, profile func(p *nwv1.EdgeProfileSpec, images map[string]string), nodes ...string) *site {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	roles := map[string]nwv1.NodeRole{}
	var names []string
	for _, n := range nodes {
		name, role, _ := strings.Cut(n, "=")
		names = append(names, name)
		roles[name] = nwv1.NodeRole(role)
	}
	n := netsite.New(t, nwv1.BondModeActiveBackup, names...)
	if err := n.PlayDRBD(drbdResources...); err != nil {
		t.Fatal(err)
	}
	go n.Run(ctx)
	registry := kairosplay.Registry{Dir: t.TempDir()}
	s := &site{t: t, net: n, ns: env.Namespace(t), nodes: names, hosts: map[string]*kairosplay.Host{}, agents: map[string]*exec.Cmd{},
		trail: &audittest.Memory{}, images: map[string]string{}}
	for _, v := range []string{oldVersion, newVersion} {
		ref, err := registry.AddVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		s.images[v] = ref
	}
	s.kubeconfig = n.APIServer(t, env.Kubeconfig(t))
	for _, name := range names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if err := env.Client.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), node)
			_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		host := &kairosplay.Host{Root: n.Node(name).Root, Dir: t.TempDir(), Registry: registry, DRBDDir: n.Node(name).DRBDDir}
		if _, err := host.Install(ctx, s.images[oldVersion]); err != nil {
			t.Fatal(err)
		}
		s.hosts[name] = host
		s.agents[name] = siteagent.Start(t, n, name, siteagent.Options{Kubeconfig: s.kubeconfig, Namespace: s.ns, StateDir: t.TempDir(), Kairos: host})
	}
	for _, name := range names {
		s.reported(name, oldVersion)
		if err := clusterplay.SetRole(ctx, env.Client, name, roles[name]); err != nil {
			t.Fatal(err)
		}
	}
	// The signed profile names the played bond, and allows the images of the played
	// registry's repository.
	cleanup, err := clusterplay.ManagedWith(ctx, env.Client, func(p *nwv1.EdgeProfileSpec) {
		p.OS = nwv1.HostOSKairos
		p.Network = nwv1.ProfileNetwork{BondInterface: netsite.Bond, BondMode: nwv1.BondModeActiveBackup}
		p.OSImages = []string{kairosplay.DefaultRepository}
		if profile != nil {
			profile(p, s.images)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	s.lockNS = env.Namespace(t)
	if operate {
		s.startOperator()
	}
	return s
}

// reported waits until node's agent reports its Kairos host running version from its active
// slot, and its DRBD resources connected and UpToDate.
func (s *site) reported(node, version string) {
	s.t.Helper()
	want := repository(s.images[version])
	testenv.Eventually(s.t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		if as.Status.OS == nil || as.Status.OS.Kairos == nil || as.Status.OS.Kairos.Image != want || as.Status.OS.Kairos.BootEntry != nwv1.KairosBootActive {
			return fmt.Sprintf("%s reports %+v; want Kairos %s from its active slot", node, as.Status.OS, want)
		}
		if d := as.Status.Storage; d == nil || d.Resources != int32(len(drbdResources)) || d.Connected != d.Resources || d.UpToDate != d.Resources {
			return fmt.Sprintf("%s reports DRBD %+v; want %d resources connected and UpToDate", node, d, len(drbdResources))
		}
		return ""
	})
}

func repository(ref string) string {
	r, _, _ := strings.Cut(ref, "@")
	return r
}

// policy creates a policy to version over order with soak and rebootTimeout, deleted at the
// test's end.
func (s *site) policy(name, version string, soak, rebootTimeout time.Duration, order ...string) *nwv1.OSVersionPolicy {
	s.t.Helper()
	return s.policyWith(name, version, soak, rebootTimeout, nil, order...)
}

// policyWith is policy, with change made to the policy before it is created.
func (s *site) policyWith(name, version string, soak, rebootTimeout time.Duration, change func(*nwv1.OSVersionPolicy), order ...string) *nwv1.OSVersionPolicy {
	s.t.Helper()
	p := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.OSVersionPolicySpec{
		Image: s.images[version], NodeOrder: order, NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: s.nodes}}},
		Soak: metav1.Duration{Duration: soak}, RebootTimeout: metav1.Duration{Duration: rebootTimeout}}}
	if change != nil {
		change(p)
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), p)
		testenv.Eventually(s.t, patience, func() string {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &nwv1.OSVersionPolicy{}); !apierrors.IsNotFound(err) {
				return "the policy is still there"
			}
			return ""
		})
	})
	return p
}

// ended waits until the policy has ended in phase, and returns it.
func (s *site) ended(p *nwv1.OSVersionPolicy, phase nwv1.WorkflowPhase) *nwv1.OSVersionPolicy {
	s.t.Helper()
	testenv.Eventually(s.t, patience*time.Duration(max(1, len(s.nodes))), func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err.Error()
		}
		if !p.Status.Phase.Finished() {
			return fmt.Sprintf("phase %s; steps %s", p.Status.Phase, steps(p))
		}
		return ""
	})
	if p.Status.Phase != phase {
		s.t.Fatalf("the policy ended %s, want %s; steps %s; nodes %s", p.Status.Phase, phase, steps(p), nodes(p))
	}
	return p
}

func steps(p *nwv1.OSVersionPolicy) string {
	var out []string
	for _, st := range p.Status.Steps {
		out = append(out, fmt.Sprintf("%s=%s(%s)", st.Name, st.State, st.Message))
	}
	return strings.Join(out, "\n  ")
}

func nodes(p *nwv1.OSVersionPolicy) string {
	var out []string
	for _, n := range p.Status.Nodes {
		out = append(out, fmt.Sprintf("%s=%s(%s)", n.Name, n.Phase, n.Evidence))
	}
	return strings.Join(out, "\n  ")
}

// booted is what node's played host runs, from its files: the image its /etc/kairos-release
// names, the slot of its command line, whether the boot is a fallback, and its boot ID.
type booted struct {
	image, entry, bootID string
	upgradeFailure       bool
}

func (s *site) booted(node string) booted {
	s.t.Helper()
	h := s.hosts[node]
	release, err := os.ReadFile(h.Root + "/etc/kairos-release")
	if err != nil {
		s.t.Fatal(err)
	}
	cmdline, err := os.ReadFile(h.Proc() + "/cmdline")
	if err != nil {
		s.t.Fatal(err)
	}
	id, err := h.BootID()
	if err != nil {
		s.t.Fatal(err)
	}
	b := booted{image: kairosplay.ReleaseValue(string(release), "KAIROS_IMAGE_REPO"), bootID: id,
		upgradeFailure: strings.Contains(string(cmdline), "upgrade_failure")}
	switch {
	case strings.Contains(string(cmdline), "COS_ACTIVE"):
		b.entry = "active"
	case strings.Contains(string(cmdline), "COS_PASSIVE"):
		b.entry = "passive"
	case strings.Contains(string(cmdline), "COS_RECOVERY"):
		b.entry = "recovery"
	}
	return b
}

// unschedulable reports whether node is cordoned, and by whom its annotation says.
func unschedulable(t *testing.T, node string) (bool, string) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n); err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable, n.Annotations["nodewright.spectrocloud.com/cordoned-by"]
}

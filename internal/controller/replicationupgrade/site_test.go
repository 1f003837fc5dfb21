package replicationupgrade_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
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
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/controller/replicationupgrade"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate/linstorgatetest"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// The upgrade's tests run the controller against a real API server, LINSTOR's stand-in
// (test/site/linstorsim, every request and answer checked against LINSTOR's OpenAPI
// document, over TLS with a client certificate) behind the LINSTOR gate (a real HTTPS server,
// internal/linstorgate/linstorgatetest), which alone reads LINSTOR's client Secret and checks
// the operator's token, bound to its pod, with a TokenReview on the API server; and the
// nodes' agents as real processes (the agent built for the local site),
// each in its own network namespace on the played storage network. The agents' DRBD is played
// (test/site/drbdplay) from the resource files written wherever the stand-in holds a resource
// (linstorsim.FollowResources), as LINSTOR's satellites write them: the original node's agent
// verifies a volume against its new replicas over the network.

var env = testenv.New()

func TestMain(m *testing.M) {
	code := env.Run(m)
	siteagent.Remove()
	os.Exit(code)
}

// patience bounds every wait: only a stuck test reaches it.
var patience = 3 * time.Minute

func init() {
	if d, err := time.ParseDuration(os.Getenv("UPGRADE_PATIENCE")); err == nil {
		patience = d
	}
}

// notReady is the not-ready taint the played profile names.
const notReady = "storage.nodewright.spectrocloud.com/not-ready"

// site is a played single-node storage cluster with peers that joined: the nodes' agents,
// LINSTOR's stand-in holding every volume on the first node, and the NodewrightCluster
// (Managed, SingleNode) and EdgeProfile an upgrade reads.
type site struct {
	t       *testing.T
	net     *netsite.Network
	sim     *linstorsim.Server
	gate    *linstorgatetest.Gate
	ns      string
	lockNS  string
	nodes   []string
	volumes []string
	trail   *audittest.Memory
	// agents are the nodes' agents' processes, by node.
	agents map[string]*exec.Cmd
	// start is what LINSTOR held before any upgrade.
	start linstorsim.State
	// transport wraps the operator's LINSTOR transport (a crash, a count); nil: none.
	transport func(http.RoundTripper) http.RoundTripper
}

type siteOptions struct {
	volumes int
	sim     linstorsim.Options
	// mismatch makes the original node's next online verify of the first volume find 4 KiB
	// out of sync.
	mismatch bool
	// unregistered: the last node's satellite runs but LINSTOR does not know it yet, nor its
	// pool.
	unregistered bool
	// linstor is the profile's storage.linstor.
	linstor *nwv1.ProfileLINSTOR
}

// newSite plays nodes (the first holds every volume) and starts no operator.
func newSite(t *testing.T, o siteOptions, nodes ...string) *site {
	t.Helper()
	if o.volumes == 0 {
		o.volumes = 6
	}
	if o.sim.SyncTime == 0 {
		o.sim.SyncTime = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &site{t: t, nodes: nodes, ns: env.Namespace(t), lockNS: env.Namespace(t), trail: &audittest.Memory{}, agents: map[string]*exec.Cmd{}}
	s.net = netsite.New(t, nwv1.BondModeActiveBackup, nodes...)
	if err := s.net.PlayDRBD(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		s.net.Expect(n, nwv1.BondModeActiveBackup)
	}
	go s.net.Run(ctx)

	o.sim.TLS = true
	s.sim = linstorsim.Start(t, o.sim)
	s.gate = linstorgatetest.Start(t, env, linstorgatetest.Options{URL: s.sim.URL, ClientSecret: s.sim.ClientSecret(),
		RegisterNodes: o.linstor != nil && o.linstor.Satellites == nwv1.SatellitesNodewright})
	for i, n := range nodes {
		if o.unregistered && i == len(nodes)-1 {
			s.sim.AddSatellite(n, s.net.Node(n).Address)
			continue
		}
		s.register(n)
	}
	must(t, s.sim.AddResourceGroup(linstorsim.Group{Name: "vm-disks", PlaceCount: 1, StoragePool: "lvm-thin"}))
	s.sim.SetControllerProp(linstor.PropBalanceResourcesEnabled, "true")
	for i := range o.volumes {
		name := fmt.Sprintf("pvc-%s-%02d", nodes[0], i)
		s.volumes = append(s.volumes, name)
		must(t, s.sim.AddResourceDefinition(linstorsim.Definition{Name: name, Group: "vm-disks", SizesKiB: []int64{1 << 20}}))
		must(t, s.sim.AddResource(linstorsim.Resource{Definition: name, Node: nodes[0], Pool: "lvm-thin"}))
	}
	s.start = s.sim.State()
	// LINSTOR's satellites: each node's played DRBD has the resource files of what it holds.
	go s.sim.FollowResources(ctx, 100*time.Millisecond, func(def string, diskful, diskless []string) error {
		return s.net.PlaceDRBDDiskless(def, diskful, diskless)
	})

	kubeconfig := s.net.APIServer(t, env.Kubeconfig(t))
	for i, name := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if i > 0 {
			node.Spec.Taints = []corev1.Taint{{Key: notReady, Effect: corev1.TaintEffectNoSchedule}}
		}
		must(t, env.Client.Create(ctx, node))
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: s.net.Node(name).Address}}
		must(t, env.Client.Status().Update(ctx, node))
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), node)
			_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		if o.mismatch && i == 0 {
			must(t, os.WriteFile(filepath.Join(s.net.Node(name).DRBDDir, drbdplay.MismatchFile), []byte(s.volumes[0]+" 4\n"), 0o644))
		}
		s.agents[name] = siteagent.Start(t, s.net, name, siteagent.Options{Kubeconfig: kubeconfig, Namespace: s.ns})
	}
	for _, name := range nodes {
		s.reports(name, name == nodes[0])
	}
	s.cluster(o.linstor)
	return s
}

// register registers node's satellite and its pool with LINSTOR, as Piraeus does.
func (s *site) register(node string) {
	s.t.Helper()
	must(s.t, s.sim.AddNode(linstorsim.Node{Name: node, Address: s.net.Node(node).Address}))
	s.addPool(node)
}

func (s *site) addPool(node string) {
	s.t.Helper()
	must(s.t, s.sim.AddStoragePool(linstorsim.Pool{Node: node, Name: "lvm-thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// reports waits until node's agent reports, with DRBD data on the node exactly when data, as the
// NodewrightCluster's Managed rollup counts it (its own tests prove the phase it gives).
func (s *site) reports(node string, data bool) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		if as.Status.Reporter != nwv1.ReporterAgent {
			return node + " does not report yet"
		}
		if got := nodewrightcluster.HoldsData(as); got != data {
			return fmt.Sprintf("%s reports DRBD data: %t, want %t (%+v; conditions %+v)", node, got, data, as.Status.Storage, as.Status.Conditions)
		}
		return ""
	})
}

// cluster writes the NodewrightCluster as its controller would for a Managed cluster whose
// storage lives on one node (SingleNode), and an EdgeProfile in force naming the not-ready
// taint, with l as its storage.linstor.
func (s *site) cluster(l *nwv1.ProfileLINSTOR) {
	s.t.Helper()
	ctx := context.Background()
	cleanup, err := clusterplay.Managed(ctx, env.Client, netsite.Bond, nwv1.BondModeActiveBackup)
	must(s.t, err)
	s.t.Cleanup(cleanup)
	p := &nwv1.EdgeProfile{}
	must(s.t, env.Client.Get(ctx, client.ObjectKey{Name: clusterplay.ProfileName}, p))
	p.Spec.Version = "1.0.1"
	p.Spec.Storage.NotReadyTaints = []string{notReady}
	p.Spec.Storage.LINSTOR = l
	must(s.t, env.Client.Update(ctx, p))
	s.setPhase(nwv1.ClusterSingleNode)
}

// setPhase writes the cluster's phase, as the NodewrightCluster's controller would.
func (s *site) setPhase(phase nwv1.ClusterPhase) {
	s.t.Helper()
	nwc := &nwv1.NodewrightCluster{}
	must(s.t, env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.NodewrightClusterName}, nwc))
	nwc.Status.Phase = phase
	must(s.t, env.Client.Status().Update(context.Background(), nwc))
}

func (s *site) cacheOptions() cache.Options {
	return operator.CacheOptions(operator.Scope{Agent: s.ns, Workflows: s.lockNS})
}

func (s *site) reconciler(mgr manager.Manager, c client.Client, r client.Reader) *replicationupgrade.Reconciler {
	return &replicationupgrade.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("upgrade-test"), LockNamespace: s.lockNS, Audit: s.trail, Actor: "nodewright-operator"}, Client: c, APIReader: r, AgentNamespace: s.ns, LINSTOR: s.linstorConfig(), BatchSize: 4, Concurrency: 2, Poll: 200 * time.Millisecond}
}

// linstorConfig is the operator's: the LINSTOR gate's URL, CA and token file.
func (s *site) linstorConfig() linstor.Config {
	cfg := s.gate.Config()
	cfg.RequestTimeout, cfg.Transport = 10*time.Second, s.transport
	return cfg
}

// startOperator runs the upgrade controller until the test ends or stop is called, under the
// chart's admission policies for the operator (templates/operator-*limits.yaml): its Node
// patches (the not-ready taints taken off and put back) pass them.
func (s *site) startOperator() (stop func()) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	return env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		return s.reconciler(mgr, mgr.GetClient(), nil).SetupWithManager(mgr)
	})
}

// upgrade creates an upgrade of spec, deleted at the test's end.
func (s *site) upgrade(name string, spec nwv1.ReplicationUpgradeSpec) *nwv1.ReplicationUpgrade {
	s.t.Helper()
	u := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	must(s.t, env.Client.Create(context.Background(), u))
	s.t.Cleanup(func() { s.deleted(u) })
	return u
}

// deleted deletes u and waits until it is gone.
func (s *site) deleted(u *nwv1.ReplicationUpgrade) {
	_ = env.Client.Delete(context.Background(), u)
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(u), &nwv1.ReplicationUpgrade{}); !apierrors.IsNotFound(err) {
			return "the upgrade is still there"
		}
		return ""
	})
}

// ended waits until u has ended in phase, and returns it.
func (s *site) ended(u *nwv1.ReplicationUpgrade, phase nwv1.WorkflowPhase) *nwv1.ReplicationUpgrade {
	s.t.Helper()
	s.until(u, func(u *nwv1.ReplicationUpgrade) string {
		if !u.Status.Phase.Finished() {
			return fmt.Sprintf("phase %s; steps %s", u.Status.Phase, steps(u))
		}
		return ""
	})
	if u.Status.Phase != phase {
		s.t.Fatalf("the upgrade ended %s, want %s; steps %s", u.Status.Phase, phase, steps(u))
	}
	return u
}

// until waits until check says nothing of u as the API server has it.
func (s *site) until(u *nwv1.ReplicationUpgrade, check func(*nwv1.ReplicationUpgrade) string) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(u), u); err != nil {
			return err.Error()
		}
		return check(u)
	})
}

// steps lists the upgrade's steps with their states and messages.
func steps(u *nwv1.ReplicationUpgrade) string {
	var out []string
	for _, st := range u.Status.Steps {
		out = append(out, fmt.Sprintf("%s=%s (%s)", st.Name, st.State, st.Message))
	}
	return strings.Join(out, "; ")
}

// stepNames lists the upgrade's steps that ran, in order.
func stepNames(u *nwv1.ReplicationUpgrade) []string {
	var out []string
	for _, st := range u.Status.Steps {
		if st.State != nwv1.StepPending {
			out = append(out, st.Name)
		}
	}
	return out
}

// sameAsStart fails the test unless LINSTOR holds what it held before any upgrade, after
// waiting for it a while (a deletion the rollback saw ended may show a moment later).
func (s *site) sameAsStart() {
	s.t.Helper()
	var diff string
	deadline := time.Now().Add(patience)
	for {
		diff = stateDiff(s.start, s.sim.State())
		if diff == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if diff != "" {
		s.t.Errorf("LINSTOR does not hold what it held at the start:\n%s", diff)
	}
}

// stateDiff says how two states differ, empty when they do not.
func stateDiff(a, b linstorsim.State) string {
	var out []string
	diffMap(&out, "node", a.Nodes, b.Nodes)
	diffMap(&out, "pool", a.Pools, b.Pools)
	diffMap(&out, "resource group", a.Groups, b.Groups)
	diffMap(&out, "resource definition", a.Definitions, b.Definitions)
	diffMap(&out, "resource", a.Resources, b.Resources)
	if !reflect.DeepEqual(a.ControllerProps, b.ControllerProps) {
		out = append(out, fmt.Sprintf("controller properties: %v, now %v", a.ControllerProps, b.ControllerProps))
	}
	return strings.Join(out, "\n")
}

func diffMap[V any](out *[]string, what string, a, b map[string]V) {
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		x, inA := a[k]
		y, inB := b[k]
		switch {
		case !inA:
			*out = append(*out, fmt.Sprintf("%s %s: added %+v", what, k, y))
		case !inB:
			*out = append(*out, fmt.Sprintf("%s %s: gone, was %+v", what, k, x))
		case !reflect.DeepEqual(x, y):
			*out = append(*out, fmt.Sprintf("%s %s: %+v, now %+v", what, k, x, y))
		}
	}
}

// taints are node's taint keys.
func taints(t *testing.T, node string) []string {
	t.Helper()
	n := &corev1.Node{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Name: node}, n))
	var out []string
	for _, x := range n.Spec.Taints {
		out = append(out, x.Key)
	}
	return out
}

// killSwitch is a LINSTOR transport that, once armed, lets after more resource creates
// through and then fails every request: the operator died in the middle of a batch.
type killSwitch struct {
	after   int32
	creates atomic.Int32
	dead    atomic.Bool
}

func (k *killSwitch) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if k.dead.Load() {
			return nil, fmt.Errorf("the operator was killed")
		}
		if req.Method == http.MethodPost && strings.Contains(req.URL.Path, "/resources/") {
			if k.creates.Add(1) > k.after {
				k.dead.Store(true)
				return nil, fmt.Errorf("the operator was killed")
			}
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

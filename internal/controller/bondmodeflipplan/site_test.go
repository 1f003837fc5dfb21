package bondmodeflipplan_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/audit/audittest"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// The flip's tests run the controller against a real API server and the nodes' agents as real
// processes (the agent built for the local site), each in its own network namespace on the
// played storage network of test/site/netsite: their bonds change for real on veths, the
// switch's ports carry only the modes they are told to, and every probe is a real packet.

var env = testenv.New()

func TestMain(m *testing.M) {
	code := env.Run(m)
	siteagent.Remove()
	os.Exit(code)
}

// patience bounds every wait: only a stuck test reaches it.
const patience = 3 * time.Minute

// site is a played cluster: its storage network, its nodes' agents, the operator's flip
// controller, and the NodewrightCluster and EdgeProfile a flip reads.
type site struct {
	t          *testing.T
	net        *netsite.Network
	ns         string
	kubeconfig string
	nodes      []string
	stateDirs  map[string]string
	agents     map[string]*exec.Cmd
	lockNS     string
	trail      *audittest.Memory
	// drbd is how many played DRBD resources each node holds.
	drbd map[string]int
	// defaults: the agents run at their default heartbeat and report intervals, as
	// installed; otherwise a heartbeat every 2 s and a report every second.
	defaults bool
}

// startOperator runs the flip controller until the test ends or stop is called, with hook
// called before each of its creates, under the chart's admission policies for the operator
// (templates/operator-*limits.yaml): its VM patches (vmProtection Stop) pass them.
func (s *site) startOperator(hook beforeCreate) (stop func()) {
	asOperator := env.AsOperatorUnderPolicies(s.t, "nodewright-system")
	return env.StartManagerAsWithCache(s.t, asOperator, s.cacheOptions(), func(_ context.Context, mgr manager.Manager) error {
		c := mgr.GetClient()
		if hook != nil {
			c = interceptor.NewClient(noWatch{c}, interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					hook(obj)
					return c.Create(ctx, obj, opts...)
				}})
		}
		return s.reconciler(mgr, c, nil).SetupWithManager(mgr)
	})
}

func (s *site) cacheOptions() cache.Options {
	return operator.CacheOptions(operator.Scope{Agent: s.ns, Workflows: s.lockNS})
}

func (s *site) reconciler(mgr manager.Manager, c client.Client, r client.Reader) *bondmodeflipplan.Reconciler {
	return &bondmodeflipplan.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("bondflip-test"), LockNamespace: s.lockNS, Audit: s.trail, Actor: "nodewright-operator"}, Client: c, APIReader: r, AgentNamespace: s.ns}
}

// newSite plays nodes with roles ("edge-1=primary"), every bond in active-backup, every
// switch port carrying active-backup and 802.3ad, and the flip controller running.
func newSite(t *testing.T, nodes ...string) *site {
	t.Helper()
	return newSiteWith(t, nil, nodes...)
}

// beforeCreate is called with each object the controller creates, before it is sent.
type beforeCreate func(obj client.Object)

// newSiteWith is newSite with hook called before each create of the controller's.
func newSiteWith(t *testing.T, hook beforeCreate, nodes ...string) *site {
	t.Helper()
	return plantSite(t, true, hook, nodes...)
}

// plantSite is newSiteWith, with the flip controller running only when operate.
func plantSite(t *testing.T, operate bool, hook beforeCreate, nodes ...string) *site {
	t.Helper()
	return plantSiteWith(t, operate, hook, everywhere, nodes...)
}

// everywhere plays two DRBD resources replicated on every node, their connections on the
// network.
func everywhere(n *netsite.Network, names []string) (map[string]int, error) {
	held := map[string]int{}
	for _, name := range names {
		held[name] = len(drbdResources)
	}
	return held, n.PlayDRBD(drbdResources...)
}

// placement plays the DRBD resources of a site's nodes and says how many each holds.
type placement func(n *netsite.Network, names []string) (map[string]int, error)

// plantSiteWith is plantSite with the DRBD resources place plays.
func plantSiteWith(t *testing.T, operate bool, hook beforeCreate, place placement, nodes ...string) *site {
	t.Helper()
	return plant(t, siteSettings{operate: operate, hook: hook, place: place}, nodes...)
}

// siteSettings are how a played site runs.
type siteSettings struct {
	operate bool
	hook    beforeCreate
	place   placement
	// defaults: the agents at their default intervals (site.defaults).
	defaults bool
}

// plant plays a site of nodes as set says.
func plant(t *testing.T, set siteSettings, nodes ...string) *site {
	t.Helper()
	operate, hook, place := set.operate, set.hook, set.place
	roles := map[string]nwv1.NodeRole{}
	var names []string
	for _, n := range nodes {
		name, role, _ := strings.Cut(n, "=")
		names = append(names, name)
		roles[name] = nwv1.NodeRole(role)
	}
	n := netsite.New(t, nwv1.BondModeActiveBackup, names...)
	held, err := place(n, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		n.Expect(name, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go n.Run(ctx)
	s := &site{t: t, net: n, ns: env.Namespace(t), nodes: names, stateDirs: map[string]string{}, agents: map[string]*exec.Cmd{}, trail: &audittest.Memory{}, drbd: held, defaults: set.defaults}
	s.kubeconfig = n.APIServer(t, env.Kubeconfig(t))
	for _, name := range names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), node)
			_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
		s.stateDirs[name] = t.TempDir()
		s.start(name)
	}
	for _, name := range names {
		s.reported(name, nwv1.BondModeActiveBackup)
		s.setRole(name, roles[name])
	}
	s.cluster()
	s.lockNS = env.Namespace(t)
	if operate {
		s.startOperator(hook)
	}
	return s
}

// noWatch is a manager's client as the interceptor takes it; the controller never watches
// through it.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, fmt.Errorf("the controller's client does not watch")
}

// start runs node's agent in node's namespace; it is killed at the test's end.
func (s *site) start(node string) {
	s.t.Helper()
	s.agents[node] = siteagent.Start(s.t, s.net, node, siteagent.Options{Kubeconfig: s.kubeconfig, Namespace: s.ns, StateDir: s.stateDirs[node], Defaults: s.defaults})
}

// drbdResources are the DRBD resources every played node replicates.
var drbdResources = []string{"pvc-flip-one", "pvc-flip-two"}

// reported waits until node's agent reports its bond in mode, with its address, and its DRBD
// resources connected and UpToDate.
func (s *site) reported(node string, mode nwv1.BondMode) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		b := as.Status.Network.Bond
		if as.Status.Reporter != nwv1.ReporterAgent || b == nil || b.Mode != mode || len(b.Addresses) == 0 {
			return fmt.Sprintf("%s reports %s / %+v; want %s %s with its address", node, as.Status.Reporter, b, netsite.Bond, mode)
		}
		if d := as.Status.Storage; d == nil || d.Resources != int32(s.drbd[node]) || d.Connected != d.Resources || d.UpToDate != d.Resources {
			return fmt.Sprintf("%s reports DRBD %+v; want %d resources connected and UpToDate", node, d, s.drbd[node])
		}
		return ""
	})
}

// setRole writes node's role, as the operator's bridge does.
func (s *site) setRole(node string, role nwv1.NodeRole) {
	s.t.Helper()
	if err := clusterplay.SetRole(context.Background(), env.Client, node, role); err != nil {
		s.t.Fatal(err)
	}
}

// cluster writes the NodewrightCluster as its controller would for a healthy MultiNode
// cluster handed over to Nodewright, with an EdgeProfile in force whose switch carries
// active-backup and 802.3ad.
func (s *site) cluster() {
	cleanup, err := clusterplay.Managed(context.Background(), env.Client, netsite.Bond, nwv1.BondModeActiveBackup, nwv1.BondMode8023AD)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(cleanup)
}

// flip creates a flip to 802.3ad with protection and order, deleted at the test's end.
func (s *site) flip(name string, protection nwv1.VMProtection, order ...string) *nwv1.BondModeFlipPlan {
	s.t.Helper()
	return s.flipTo(name, nwv1.BondMode8023AD, protection, order...)
}

// flipTo creates a flip to mode.
func (s *site) flipTo(name string, mode nwv1.BondMode, protection nwv1.VMProtection, order ...string) *nwv1.BondModeFlipPlan {
	s.t.Helper()
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nwv1.BondModeFlipPlanSpec{
		TargetMode: mode, VMProtection: protection, NodeOrder: order,
		ConnectivityTimeout: metav1.Duration{Duration: 10 * time.Second}}}
	if err := env.Client.Create(context.Background(), f); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), f)
		testenv.Eventually(s.t, patience, func() string {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), &nwv1.BondModeFlipPlan{}); !apierrors.IsNotFound(err) {
				return "the flip is still there"
			}
			return ""
		})
	})
	return f
}

// ended waits until the flip has ended in phase, and returns it.
func (s *site) ended(f *nwv1.BondModeFlipPlan, phase nwv1.WorkflowPhase) *nwv1.BondModeFlipPlan {
	s.t.Helper()
	// A flip's time grows with its nodes (each changed, and maybe each brought back): the limit
	// is patience per three nodes, so that sixteen on a busy machine are not cut short.
	limit := patience * time.Duration(max(1, (len(f.Spec.NodeOrder)+2)/3))
	testenv.Eventually(s.t, limit, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); err != nil {
			return err.Error()
		}
		if !f.Status.Phase.Finished() {
			return fmt.Sprintf("phase %s; steps %s", f.Status.Phase, steps(f))
		}
		return ""
	})
	if f.Status.Phase != phase {
		s.t.Fatalf("the flip ended %s, want %s; steps %s; conditions %+v", f.Status.Phase, phase, steps(f), f.Status.Conditions)
	}
	return f
}

func steps(f *nwv1.BondModeFlipPlan) string {
	var out []string
	for _, st := range f.Status.Steps {
		out = append(out, fmt.Sprintf("%s=%s(%s)", st.Name, st.State, st.Message))
	}
	return strings.Join(out, "\n  ")
}

// mode is node's played bond's mode, from its file.
func (s *site) mode(node string) nwv1.BondMode {
	raw, err := os.ReadFile(s.net.Node(node).Bond.ModeFile(netsite.Bond))
	if err != nil {
		s.t.Fatal(err)
	}
	return nwv1.BondMode(strings.TrimSpace(string(raw)))
}

// nodesAre checks status.nodes: each node in order, its state and modes: "edge-1" is in
// state and runs current, "edge-1=Done:802.3ad" says its own.
func (s *site) nodesAre(f *nwv1.BondModeFlipPlan, state nwv1.NodeFlipState, current nwv1.BondMode, order ...string) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); err != nil {
			return err.Error()
		}
		var got, want []string
		for i, n := range order {
			name, rest, _ := strings.Cut(n, "=")
			st, cur, _ := strings.Cut(rest, ":")
			if st == "" {
				st = string(state)
			}
			if cur == "" {
				cur = string(current)
			}
			want = append(want, fmt.Sprintf("%d %s %s %s->%s", i+1, name, st, nwv1.BondModeActiveBackup, cur))
		}
		for _, n := range f.Status.Nodes {
			got = append(got, fmt.Sprintf("%d %s %s %s->%s", n.Position, n.Name, n.State, n.PreviousMode, n.CurrentMode))
		}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			return fmt.Sprintf("status.nodes %s; want %s; phase %s; steps %s", strings.Join(got, "; "), strings.Join(want, "; "), f.Status.Phase, steps(f))
		}
		return ""
	})
}

// TestThreeNodesFlipOneAtATimeThePrimaryLast flips three nodes at the shortest
// connectivityTimeout, 10s, with the agents at their default intervals (a report every 10 s): each changed under its checkpoint, confirmed from its peers' reports
// read after the change (asked for, and answered) and committed before the checkpoint
// expired, in the default order (the primary last); every played bond ends in 802.3ad, and
// each node's view says so.
func TestThreeNodesFlipOneAtATimeThePrimaryLast(t *testing.T) {
	s := plant(t, siteSettings{operate: true, place: everywhere, defaults: true}, "flip3-a=primary", "flip3-b=secondary", "flip3-c=secondary")
	f := s.ended(s.flip("flip-three", nwv1.VMProtectionNone), nwv1.WorkflowSucceeded)
	if f.Spec.ConnectivityTimeout.Duration != 10*time.Second {
		t.Fatalf("connectivityTimeout %s, want the shortest, 10s", f.Spec.ConnectivityTimeout.Duration)
	}
	// The last node's Confirm asked its peers for a report, and they answered it.
	last := &nwv1.NodeOperation{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "flip-three-n3-setmode"}, last); err != nil {
		t.Fatal(err)
	}
	for _, peer := range []string{"flip3-b", "flip3-c"} {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: peer}, as); err != nil {
			t.Fatal(err)
		}
		if as.Annotations[nwv1.AnnotationReportRequest] != string(last.UID) || as.Status.ReportRequest != string(last.UID) {
			t.Errorf("%s: report request %q answered %q; want both %s (flip3-a's change)", peer, as.Annotations[nwv1.AnnotationReportRequest], as.Status.ReportRequest, last.UID)
		}
	}
	s.nodesAre(f, nwv1.NodeFlipDone, nwv1.BondMode8023AD, "flip3-b", "flip3-c", "flip3-a")
	// kubectl get tells the story: the table the API server serves kubectl.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis", nwv1.GroupVersion.Group, nwv1.GroupVersion.Version, "bondmodeflipplans", f.Name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Param("includeObject", "None").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("the table of %s: %v\n%s", f.Name, err, raw)
	}
	shown := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		shown[col.Name] = table.Rows[0].Cells[i]
	}
	if shown["Phase"] != "Succeeded" || shown["Done"] != "3/3" || shown["Node"] != nil || shown["Target Mode"] != "802.3ad" {
		t.Errorf("kubectl get shows %v", shown)
	}
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondMode8023AD {
			t.Errorf("%s's bond runs %s, want 802.3ad", n, got)
		}
	}
	// Each node's peers paused their resync towards it for both resources, and resumed it.
	for k, node := range []string{"flip3-b", "flip3-c", "flip3-a"} {
		pause, resume := partMessage(f, k+1, "PauseResync"), partMessage(f, k+1, "ResumeResync")
		if pause != "resynchronisation towards "+node+" paused on its peers (4 resources)" ||
			resume != "resynchronisation towards "+node+" resumed (4 resources); its DRBD is UpToDate" {
			t.Errorf("node %d: %q, %q", k+1, pause, resume)
		}
	}
	// Each node's change was committed.
	for k := 1; k <= 3; k++ {
		for _, suffix := range []string{"setmode", "commit"} {
			op := &nwv1.NodeOperation{}
			key := client.ObjectKey{Namespace: s.ns, Name: fmt.Sprintf("flip-three-n%d-%s", k, suffix)}
			if err := env.Client.Get(context.Background(), key, op); err != nil {
				t.Fatal(err)
			}
			if op.Status.Phase != nwv1.OperationSucceeded {
				t.Errorf("%s: %s, want Succeeded", key.Name, failure(op))
			}
		}
	}
}

// TestAPortThatNeverCarriesTheModeRollsEveryNodeBack: the last node's port never carries
// 802.3ad, so its agent's probes fail and it restores itself; the two nodes flipped before it
// are flipped back, the last first, each under its own checkpoint; every bond ends in
// active-backup and the flip says which node and step failed.
func TestAPortThatNeverCarriesTheModeRollsEveryNodeBack(t *testing.T) {
	s := newSite(t, "flipbad-a=primary", "flipbad-b=secondary", "flipbad-c=secondary")
	s.net.NeverCarry("flipbad-a", nwv1.BondMode8023AD)
	f := s.ended(s.flip("flip-bad-port", nwv1.VMProtectionNone), nwv1.WorkflowRolledBack)
	s.nodesAre(f, nwv1.NodeFlipRolledBack, nwv1.BondModeActiveBackup, "flipbad-b", "flipbad-c", "flipbad-a")
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s's bond runs %s, want active-backup", n, got)
		}
	}
	failed := ""
	for _, st := range f.Status.Steps {
		if st.State == nwv1.StepFailed {
			failed = st.Name + ": " + st.Message
		}
	}
	if !strings.HasPrefix(failed, "Node3: SetBondMode: flipbad-a (node 3)") || !strings.Contains(failed, "ProbeFailed") {
		t.Errorf("the failed step says %q; want Node3's SetBondMode naming flipbad-a and ProbeFailed", failed)
	}
	// The earlier nodes were flipped back under checkpoints of their own, committed.
	for k := 1; k <= 2; k++ {
		op := &nwv1.NodeOperation{}
		key := client.ObjectKey{Namespace: s.ns, Name: fmt.Sprintf("flip-bad-port-n%d-rb-setmode", k)}
		if err := env.Client.Get(context.Background(), key, op); err != nil {
			t.Fatal(err)
		}
		if op.Status.Phase != nwv1.OperationSucceeded || op.Spec.SetBondMode.Mode != nwv1.BondModeActiveBackup {
			t.Errorf("%s: %s to %s, want Succeeded to active-backup", key.Name, failure(op), op.Spec.SetBondMode.Mode)
		}
	}
}

func failure(op *nwv1.NodeOperation) string {
	msg := string(op.Status.Phase)
	if op.Status.Error != nil {
		msg += " " + op.Status.Error.Reason + ": " + op.Status.Error.Message
	}
	return msg
}

// changes counts the changes node's played bond has seen.
func (s *site) changes(node string) int {
	raw, err := os.ReadFile(s.net.Node(node).Bond.ChangesFile(netsite.Bond))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.Count(string(raw), "\n")
}

// commitOf reports whether obj is the flip's commit of the change of the node at position k.
func commitOf(obj client.Object, flip string, k int) bool {
	op, ok := obj.(*nwv1.NodeOperation)
	return ok && op.Name == fmt.Sprintf("%s-n%d-commit", flip, k)
}

// TestANodeCutOffTheAPIServerRollsItselfBack: the second node loses the API server once its
// change is made and probed, just before the operator commits it. Its agent restores
// active-backup by itself when the checkpoint expires, with no API server; once it reaches the
// API server again it says so, and the flip brings the first node back: every node ends as
// it was.
func TestANodeCutOffTheAPIServerRollsItselfBack(t *testing.T) {
	var s *site
	const flip = "flip-api-cut"
	cut := make(chan struct{})
	var once sync.Once
	s = newSiteWith(t, func(obj client.Object) {
		if commitOf(obj, flip, 2) {
			once.Do(func() {
				s.net.CutAPIServer("flipcut-b", true)
				close(cut)
			})
		}
	}, "flipcut-a=primary", "flipcut-b=secondary", "flipcut-c=secondary")
	f := s.flip(flip, nwv1.VMProtectionNone, "flipcut-c", "flipcut-b", "flipcut-a")
	select {
	case <-cut:
	case <-time.After(patience):
		t.Fatalf("the operator never committed flipcut-b's change; steps %s", steps(f))
	}
	// Cut off, the node restores its bond by itself at its checkpoint's expiry.
	testenv.Eventually(t, patience, func() string {
		if m := s.mode("flipcut-b"); m != nwv1.BondModeActiveBackup {
			return "flipcut-b's bond runs " + string(m)
		}
		return ""
	})
	s.net.CutAPIServer("flipcut-b", false)
	f = s.ended(f, nwv1.WorkflowRolledBack)
	s.nodesAre(f, nwv1.NodeFlipRolledBack, nwv1.BondModeActiveBackup, "flipcut-c", "flipcut-b", "flipcut-a=Pending:active-backup")
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s's bond runs %s, want active-backup", n, got)
		}
	}
	op := &nwv1.NodeOperation{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: flip + "-n2-setmode"}, op); err != nil {
		t.Fatal(err)
	}
	if op.Status.Phase != nwv1.OperationRolledBack || op.Status.Error == nil || op.Status.Error.Reason != "NotCommitted" {
		t.Errorf("flipcut-b's change: %s; want RolledBack, NotCommitted", failure(op))
	}
}

// TestAnAgentKilledBeforeItsCommitKeepsItsChange: the second node's agent is killed once its
// change is made and probed, and started again while the operator's commit waits: it takes the
// commit after its restart, without changing the bond again, and the flip succeeds.
func TestAnAgentKilledBeforeItsCommitKeepsItsChange(t *testing.T) {
	var s *site
	const flip = "flip-agent-killed"
	var once sync.Once
	killed := make(chan struct{})
	s = newSiteWith(t, func(obj client.Object) {
		if commitOf(obj, flip, 2) {
			once.Do(func() {
				cmd := s.agents["flipkill-b"]
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				close(killed)
			})
		}
	}, "flipkill-a=primary", "flipkill-b=secondary")
	f := s.flip(flip, nwv1.VMProtectionNone, "flipkill-a", "flipkill-b")
	select {
	case <-killed:
	case <-time.After(patience):
		t.Fatalf("the operator never committed flipkill-b's change; steps %s", steps(f))
	}
	s.start("flipkill-b")
	f = s.ended(f, nwv1.WorkflowSucceeded)
	s.nodesAre(f, nwv1.NodeFlipDone, nwv1.BondMode8023AD, "flipkill-a", "flipkill-b")
	if got, n := s.mode("flipkill-b"), s.changes("flipkill-b"); got != nwv1.BondMode8023AD || n != 1 {
		t.Errorf("flipkill-b's bond runs %s after %d changes; want 802.3ad after one", got, n)
	}
}

// held waits until the flip's step waits, held by reason.
func (s *site) held(f *nwv1.BondModeFlipPlan, step string, reason string) {
	s.t.Helper()
	testenv.Eventually(s.t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); err != nil {
			return err.Error()
		}
		waiting := ""
		for _, st := range f.Status.Steps {
			if st.State == nwv1.StepWaiting {
				waiting = st.Name
			}
		}
		c := meta.FindStatusCondition(f.Status.Conditions, nwv1.ConditionHeld)
		if waiting != step || c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
			return fmt.Sprintf("waiting at %q, held %+v; want %s held by %s", waiting, c, step, reason)
		}
		return ""
	})
}

// approve approves step as alice (the admission webhook would stamp who).
func approve(t *testing.T, f *nwv1.BondModeFlipPlan, step string) {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); err != nil {
		t.Fatal(err)
	}
	base := f.DeepCopy()
	if f.Annotations == nil {
		f.Annotations = map[string]string{}
	}
	f.Annotations[nwv1.AnnotationApprove] = step
	f.Annotations[nwv1.AnnotationApprovedBy] = "alice"
	if err := env.Client.Patch(context.Background(), f, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// TestApprovalAndAWindowThatClosesMidFlip: a Manual flip waits for a person before each node,
// changing nothing; the first node approved inside the window is changed; the window closes,
// and the second node, approved, waits for the next window, the Held condition saying so and
// each node's view saying which mode it runs; the flip deleted then brings the first node
// back, a rollback waiting for no window.
func TestApprovalAndAWindowThatClosesMidFlip(t *testing.T) {
	s := newSite(t, "flipgate-a=primary", "flipgate-b=secondary")
	now := time.Now().UTC()
	if now.Second() > 40 { // leave the first node the rest of the minute
		time.Sleep(time.Until(now.Truncate(time.Minute).Add(time.Minute + time.Second)))
		now = time.Now().UTC()
	}
	open := now.Truncate(time.Minute)
	f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "flip-gates", Annotations: map[string]string{nwv1.AnnotationRequestedBy: "bob"}}, Spec: nwv1.BondModeFlipPlanSpec{
		TargetMode: nwv1.BondMode8023AD, VMProtection: nwv1.VMProtectionNone, Approval: nwv1.ApprovalManual,
		ConnectivityTimeout: metav1.Duration{Duration: 10 * time.Second},
		MaintenanceWindow:   &nwv1.MaintenanceWindow{Start: open.Format("15:04"), End: open.Add(time.Minute).Format("15:04"), TimeZone: "UTC"}}}
	if err := env.Client.Create(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), f) })

	s.held(f, "Node1", nwv1.ReasonAwaitingApproval)
	var ops nwv1.NodeOperationList
	if err := env.Client.List(context.Background(), &ops, client.InNamespace(s.ns)); err != nil || len(ops.Items) > 0 {
		t.Fatalf("awaiting approval, the flip asked for %d operations (%v)", len(ops.Items), err)
	}
	approve(t, f, "Node1")
	s.held(f, "Node2", nwv1.ReasonAwaitingApproval)
	if got := s.mode("flipgate-b"); got != nwv1.BondMode8023AD {
		t.Fatalf("flipgate-b, approved, runs %s", got)
	}
	// The audit trail names who asked and who approved the node's change.
	eventually(t, func() string {
		start, node := s.trail.Find("flip-gates", "Running/Preflight"), s.trail.Find("flip-gates", "Running/Node2")
		switch {
		case start == nil || !slices.Contains(start.Details, audit.Detail{Name: "requestedBy", Value: "bob"}):
			return fmt.Sprintf("the start's record %+v does not name bob", start)
		case node == nil || !slices.Contains(node.Details, audit.Detail{Name: "approvedBy", Value: "alice"}):
			return fmt.Sprintf("node 1's record %+v does not name alice", node)
		}
		return ""
	})

	time.Sleep(time.Until(open.Add(time.Minute + time.Second)))
	approve(t, f, "Node2")
	s.held(f, "Node2", nwv1.ReasonOutsideWindow)
	s.nodesAre(f, "", "", "flipgate-b=Done:802.3ad", "flipgate-a=Pending:active-backup")
	if f.Status.CurrentNode != "flipgate-a" || f.Status.Progress != "1/2" {
		t.Errorf("currentNode %q, progress %q; want flipgate-a, 1/2", f.Status.CurrentNode, f.Status.Progress)
	}
	if f.Status.NextWindowStart == nil || !f.Status.NextWindowStart.After(time.Now()) {
		t.Errorf("nextWindowStart %v; want the next window", f.Status.NextWindowStart)
	}
	if got := s.mode("flipgate-a"); got != nwv1.BondModeActiveBackup {
		t.Errorf("flipgate-a, outside the window, runs %s", got)
	}

	if err := env.Client.Delete(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), f); !apierrors.IsNotFound(err) {
			return fmt.Sprintf("the flip is still there (%s, steps %s)", f.Status.Phase, steps(f))
		}
		return ""
	})
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("after the cancellation %s runs %s, want active-backup", n, got)
		}
	}
}

// TestTwoNodesAndATiebreaker flips two nodes and a diskless tiebreaker: the tiebreaker first,
// then the secondary, the primary last.
func TestTwoNodesAndATiebreaker(t *testing.T) {
	s := newSite(t, "flipt-a=primary", "flipt-b=secondary", "flipt-t=tiebreaker")
	f := s.ended(s.flip("flip-tiebreaker", nwv1.VMProtectionNone), nwv1.WorkflowSucceeded)
	s.nodesAre(f, nwv1.NodeFlipDone, nwv1.BondMode8023AD, "flipt-t", "flipt-b", "flipt-a")
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondMode8023AD {
			t.Errorf("%s's bond runs %s, want 802.3ad", n, got)
		}
	}
}

// TestThePreflightRefusesWhatItCannotFlip: a node left out of the order, a mode the site's
// switch does not carry, and a bond a node does not have are each refused before anything
// changes, the Preflight saying which field and why.
func TestThePreflightRefusesWhatItCannotFlip(t *testing.T) {
	s := newSite(t, "flippre-a=primary", "flippre-b=secondary")
	for _, c := range []struct {
		name string
		spec nwv1.BondModeFlipPlanSpec
		want string
	}{
		{"flip-left-out", nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, NodeOrder: []string{"flippre-a"}},
			"spec.nodeOrder leaves out flippre-b"},
		{"flip-not-carried", nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondModeBalanceRR},
			"spec.targetMode: EdgeProfile played-site (version 1.0.0) says the switch carries active-backup, 802.3ad, not balance-rr"},
		{"flip-no-bond", nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, BondInterface: "bond9"},
			"its agent reports no bond bond9"},
	} {
		f := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: c.spec}
		f.Spec.VMProtection = nwv1.VMProtectionNone
		if err := env.Client.Create(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), f) })
		f = s.ended(f, nwv1.WorkflowRolledBack)
		if msg := f.Status.Steps[0].Message; f.Status.Steps[0].State != nwv1.StepFailed || !strings.Contains(msg, c.want) {
			t.Errorf("%s: the Preflight %s: %q; want it Failed saying %q", c.name, f.Status.Steps[0].State, msg, c.want)
		}
		if err := env.Client.Delete(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	var ops nwv1.NodeOperationList
	if err := env.Client.List(context.Background(), &ops, client.InNamespace(s.ns)); err != nil || len(ops.Items) > 0 {
		t.Errorf("refused flips asked for %d operations (%v)", len(ops.Items), err)
	}
	for _, n := range s.nodes {
		if got := s.mode(n); got != nwv1.BondModeActiveBackup {
			t.Errorf("%s's bond runs %s, want active-backup", n, got)
		}
	}
}

func eventually(t *testing.T, check func() string) {
	t.Helper()
	testenv.Eventually(t, patience, check)
}

// TestANodeThatCannotBeBroughtBackFailsTheFlip: the second node's port never carries the new
// mode, and the first node's agent dies for good just as it is asked to change back. The second
// node restores itself; the first cannot be flipped back: the flip ends Failed, saying what the
// first node last reported, and each node's view says which mode it runs.
func TestANodeThatCannotBeBroughtBackFailsTheFlip(t *testing.T) {
	var s *site
	const flip = "flip-dead"
	var once sync.Once
	s = newSiteWith(t, func(obj client.Object) {
		if op, ok := obj.(*nwv1.NodeOperation); ok && op.Name == flip+"-n1-rb-setmode" {
			once.Do(func() {
				cmd := s.agents["flipdead-a"]
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
		}
	}, "flipdead-a=secondary", "flipdead-b=primary")
	s.net.NeverCarry("flipdead-b", nwv1.BondMode8023AD)
	f := s.ended(s.flip(flip, nwv1.VMProtectionNone, "flipdead-a", "flipdead-b"), nwv1.WorkflowFailed)
	s.nodesAre(f, "", "", "flipdead-a=Failed:802.3ad", "flipdead-b=RolledBack:active-backup")
	failed := ""
	for _, st := range f.Status.Steps {
		if st.State == nwv1.StepFailed && st.Name == "RollbackNode1" {
			failed = st.Message
		}
	}
	if want := "flipdead-a (node 1) cannot be brought back to active-backup"; !strings.Contains(failed, want) || !strings.Contains(failed, "it reports 802.3ad") {
		t.Errorf("RollbackNode1 says %q; want %q and what the node reports", failed, want)
	}
	if got := s.mode("flipdead-a"); got != nwv1.BondMode8023AD {
		t.Errorf("flipdead-a, its agent dead, runs %s", got)
	}
	if got := s.mode("flipdead-b"); got != nwv1.BondModeActiveBackup {
		t.Errorf("flipdead-b runs %s, want active-backup", got)
	}
}

// TestDRBDThatDoesNotReconnectRollsTheNodeBack: a connection StandAlone (the played fault) when
// the flip is created holds its Preflight, waiting and saying so, until it is back. Then, once
// the first node's bond is changed, its peer sees their DRBD connections StandAlone again,
// though the network carries everything: the operator does not commit, the node's agent
// restores it at its checkpoint's expiry, and once a person has the connections back the flip
// ends RolledBack, DRBD whole.
func TestDRBDThatDoesNotReconnectRollsTheNodeBack(t *testing.T) {
	var s *site
	const flip = "flip-standalone"
	fault := func() string { return filepath.Join(s.net.Node("flipdrbd-a").DRBDDir, drbdplay.StandAloneFile) }
	s = newSiteWith(t, func(obj client.Object) {
		if op, ok := obj.(*nwv1.NodeOperation); ok && op.Name == flip+"-n1-setmode" {
			if err := os.WriteFile(fault(), []byte("flipdrbd-b\n"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}, "flipdrbd-a=primary", "flipdrbd-b=secondary")
	if err := os.WriteFile(fault(), []byte("flipdrbd-b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "flipdrbd-a"}, as); err != nil {
			return err.Error()
		}
		if d := as.Status.Storage; d == nil || d.Connected != 0 {
			return fmt.Sprintf("flipdrbd-a reports DRBD %+v; want its connection lost", d)
		}
		return ""
	})
	f := s.flip(flip, nwv1.VMProtectionNone)
	// The Preflight waits for the connection, saying so, and goes on once it is back.
	want := fmt.Sprintf("waiting for DRBD: flipdrbd-a: 0 of %d DRBD resources connected", s.drbd["flipdrbd-a"])
	eventually(t, func() string {
		got := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), got); err != nil {
			return err.Error()
		}
		if msg := stepMessage(got, "Preflight"); !strings.Contains(msg, want) || got.Status.Phase != nwv1.WorkflowRunning {
			return fmt.Sprintf("the flip is %s, its Preflight says %q; want it Running, saying %q", got.Status.Phase, msg, want)
		}
		return ""
	})
	if err := os.Remove(fault()); err != nil {
		t.Fatal(err)
	}
	// The Confirm waits, saying why.
	want = "flipdrbd-a sees flipdrbd-b's connection of pvc-flip-one StandAlone"
	eventually(t, func() string {
		got := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), got); err != nil {
			return err.Error()
		}
		if msg := partMessage(got, 1, "Confirm"); !strings.Contains(msg, want) {
			return fmt.Sprintf("Node1's Confirm says %q; want %q", msg, want)
		}
		return ""
	})
	op := &nwv1.NodeOperation{}
	eventually(t, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: flip + "-n1-setmode"}, op); err != nil {
			return err.Error()
		}
		if op.Status.Phase != nwv1.OperationRolledBack {
			return "flipdrbd-b's change is " + string(op.Status.Phase)
		}
		return ""
	})
	if op.Status.Error == nil || op.Status.Error.Reason != "NotCommitted" {
		t.Errorf("flipdrbd-b's change ended %s; want RolledBack, NotCommitted", failure(op))
	}
	if err := os.Remove(fault()); err != nil {
		t.Fatal(err)
	}
	f = s.ended(f, nwv1.WorkflowRolledBack)
	if msg := partMessage(f, 1, "Confirm"); !strings.Contains(msg, "NotCommitted") {
		t.Errorf("Node1's Confirm says %q; want the agent's NotCommitted", msg)
	}
	s.nodesAre(f, "", "", "flipdrbd-b=RolledBack:active-backup", "flipdrbd-a=Pending:active-backup")
	for _, n := range s.nodes {
		s.reported(n, nwv1.BondModeActiveBackup)
	}
}

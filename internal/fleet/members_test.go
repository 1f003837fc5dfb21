package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/fleetsim"
)

// apiServer is one kube-apiserver of the test, on the shared etcd under its own prefix. It
// keeps its certificates and port across a restart, as a real member does. A member may be
// played by the member simulator instead (simulatedMembers).
type apiServer struct {
	server *envtest.APIServer
	// sim is the simulated member, when it plays this one.
	sim *fleetsim.Member
	// Admin is a system:masters client certificate, or the simulated member's administrator.
	Admin  *rest.Config
	Client client.Client
	// hubReader is set once the chart's read-only roles for the hub are installed.
	hubReader bool
}

// realMembersOnly skips a test of what the member's API server does itself (its RBAC, its
// client certificates), which the simulator does not play.
func realMembersOnly(t *testing.T, why string) {
	t.Helper()
	if simulatedMembers() {
		t.Skip(why + ", which the member simulator does not play: this test runs against real members only")
	}
}

// simulations are the simulators running (simulatedMembers): a test measuring its process's
// heap leaves out what their members hold (liveHeap).
var simulations struct {
	mu   sync.Mutex
	sims map[*fleetsim.Sim]bool
}

// simulate starts a simulator until the test ends.
func simulate(t *testing.T, o fleetsim.Options) *fleetsim.Sim {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sim, err := fleetsim.Start(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	simulations.mu.Lock()
	if simulations.sims == nil {
		simulations.sims = map[*fleetsim.Sim]bool{}
	}
	simulations.sims[sim] = true
	simulations.mu.Unlock()
	t.Cleanup(func() {
		cancel()
		sim.Close()
		simulations.mu.Lock()
		delete(simulations.sims, sim)
		simulations.mu.Unlock()
	})
	return sim
}

// simulatedHeld is the size of what the running simulators' members hold, in bytes.
func simulatedHeld() int64 {
	simulations.mu.Lock()
	defer simulations.mu.Unlock()
	var n int64
	for sim := range simulations.sims {
		for _, m := range sim.Members() {
			n += m.Held()
		}
	}
	return n
}

// simulatedMembers says the members are played by the member simulator
// (test/site/fleetsim), not real kube-apiservers: NODEWRIGHT_FLEET_MEMBERS=simulator. The
// suite runs both ways (make test), which shows the simulator faithful to what the hub
// needs of a member. The hub's own API server is a real one either way.
func simulatedMembers() bool { return os.Getenv("NODEWRIGHT_FLEET_MEMBERS") == "simulator" }

// startMembers starts n members: real kube-apiservers on the shared etcd with the Nodewright
// CRDs, or simulated members (simulatedMembers) holding nothing but the CRDs, as objects.
func startMembers(t *testing.T, root, bin string, etcd *envtest.Etcd, n int) []*apiServer {
	t.Helper()
	crds := filepath.Join(root, "config", "crd", "bases")
	var ms []*apiServer
	if !simulatedMembers() {
		for i := range n {
			ms = append(ms, startAPIServer(t, bin, etcd, fmt.Sprintf("/m%d", i+1), crds))
		}
		return ms
	}
	if n == 0 {
		return nil
	}
	read := &envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}
	if err := envtest.ReadCRDFiles(read); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, crd := range read.CRDs {
		objs = append(objs, crd)
	}
	sim := simulate(t, fleetsim.Options{Members: n, Namespace: memberNS, Empty: true, Objects: objs})
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range sim.Members() {
		admin := m.Admin()
		c, err := client.New(admin, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, &apiServer{sim: m, Admin: admin, Client: c})
	}
	return ms
}

func startEtcd(t *testing.T, assets string) *envtest.Etcd {
	t.Helper()
	// Fresh ports on each try (testenv.StartWithFreshPorts): a port envtest picks can be
	// taken before etcd binds it.
	var etcd *envtest.Etcd
	if err := testenv.StartWithFreshPorts(func() error {
		etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd"), DataDir: t.TempDir()}
		return etcd.Start()
	}); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := etcd.Stop(); err != nil {
			t.Error(err)
		}
	})
	return etcd
}

func startAPIServer(t *testing.T, assets string, etcd *envtest.Etcd, prefix string, crds ...string) *apiServer {
	t.Helper()
	var s *envtest.APIServer
	if err := testenv.StartWithFreshPorts(func() error {
		s = &envtest.APIServer{Path: filepath.Join(assets, "kube-apiserver"), EtcdURL: etcd.URL, CertDir: t.TempDir(),
			StartTimeout: 2 * time.Minute, StopTimeout: 2 * time.Minute}
		s.Configure().Set("etcd-prefix", prefix)
		return s.Start()
	}); err != nil {
		t.Fatalf("starting kube-apiserver %s: %v", prefix, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	base := &rest.Config{Host: s.SecureServing.URL("https", "").String(), TLSClientConfig: rest.TLSClientConfig{CAData: s.CA}}
	admin, err := s.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, base)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) > 0 {
		if _, err := envtest.InstallCRDs(admin, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
			t.Fatalf("installing CRDs on %s: %v", prefix, err)
		}
	}
	c, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{server: s, Admin: admin, Client: c}
}

// stop stops the API server; start starts it again on the same port and certificates.
func (a *apiServer) stop(t *testing.T) {
	t.Helper()
	if a.sim != nil {
		a.sim.Stop()
		return
	}
	if err := a.server.Stop(); err != nil {
		t.Fatal(err)
	}
}

func (a *apiServer) start(t *testing.T) {
	t.Helper()
	if a.sim != nil {
		if err := a.sim.Resume(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := a.server.Start(); err != nil {
		t.Fatal(err)
	}
}

// The hub's identity on the members: the user of its client certificates and the
// ServiceAccount of its tokens, both in the Nodewright namespace the hub reads.
const (
	memberNS = "nodewright-system"
	hubUser  = "nodewright-fleet-hub"
	hubSA    = "nodewright-fleet-hub"
)

// hubReader renders the member chart's read-only roles for the hub (fleet.hubReader, as
// the chart's user would install it) bound to hubUser and the ServiceAccount hubSA.
func hubReader(t *testing.T) []testenv.ChartObject {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs := testenv.RenderChart(t, root, memberNS, "--show-only", "templates/fleet-hub-reader.yaml",
		"--set", "fleet.hubReader.enabled=true", "--set", "fleet.hubReader.user="+hubUser, "--set", "fleet.hubReader.serviceAccount.name="+hubSA)
	if len(objs) != 4 {
		t.Fatalf("the chart's fleet.hubReader renders %d objects, want a ClusterRole, a Role and their bindings", len(objs))
	}
	return objs
}

// installHubReader creates the Nodewright namespace, the hub's ServiceAccount and the member
// chart's read-only roles for the hub, once.
func (a *apiServer) installHubReader(t *testing.T) {
	t.Helper()
	if a.sim != nil {
		return // the simulator lets the hub's tokens read all it serves, in any namespace
	}
	if a.hubReader {
		return
	}
	ctx := context.Background()
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memberNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: hubSA}}}
	for _, o := range hubReader(t) {
		objs = append(objs, o.Unstructured)
	}
	for _, o := range objs {
		if err := a.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	a.hubReader = true
}

// hubToken returns a token of the hub's ServiceAccount, bound to a Secret named boundTo that
// it creates: deleting the Secret revokes the token.
func (a *apiServer) hubToken(t *testing.T, boundTo string) string {
	t.Helper()
	if a.sim != nil {
		return a.sim.IssueToken(boundTo)
	}
	a.installHubReader(t)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: boundTo}}
	if err := a.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(memberNS).CreateToken(ctx, hubSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: boundTo, UID: secret.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// hubCertificate returns a client certificate of hubUser, signed by the API server's client CA.
func (a *apiServer) hubCertificate(t *testing.T) *rest.Config {
	t.Helper()
	a.installHubReader(t)
	user, err := a.server.AddUser(envtest.User{Name: hubUser}, &rest.Config{Host: a.Admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: a.Admin.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// revokeToken deletes the Secret the token is bound to, and waits until the API server
// refuses the token.
func (a *apiServer) revokeToken(t *testing.T, boundTo, token string) {
	t.Helper()
	ctx := context.Background()
	if a.sim != nil {
		a.sim.RevokeToken(boundTo)
	} else if err := a.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: boundTo}}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: a.Admin.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: a.Admin.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, patience, func() string {
		err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if !apierrors.IsUnauthorized(err) {
			return fmt.Sprintf("the revoked token still gets %v", err)
		}
		return ""
	})
}

// kubeconfig is a kubeconfig reaching the API server with the credentials of cfg (a token or
// a client certificate).
func (a *apiServer) kubeconfig(t *testing.T, cfg *rest.Config) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["m"] = &clientcmdapi.Cluster{Server: a.Admin.Host, CertificateAuthorityData: a.Admin.CAData}
	kc.AuthInfos["m"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["m"] = &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}
	kc.CurrentContext = "m"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// clusterProfileCRDs is the folder of the ClusterProfile CRD in the pinned
// cluster-inventory-api module.
func clusterProfileCRDs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/cluster-inventory-api").Output()
	if err != nil {
		t.Fatalf("finding sigs.k8s.io/cluster-inventory-api: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "multicluster.x-k8s.io_clusterprofiles.yaml")
}

func assets(t *testing.T) (root, dir string) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if dir, err = testenv.BinaryAssets(root); err != nil {
		t.Fatal(err)
	}
	return root, dir
}

package fleet

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// apiServer is one kube-apiserver of the test, on the shared etcd under its own prefix. It
// keeps its certificates and port across a restart, as a real member does.
type apiServer struct {
	server *envtest.APIServer
	// Admin is a system:masters client certificate.
	Admin  *rest.Config
	Client client.Client
}

func startEtcd(t *testing.T, assets string) *envtest.Etcd {
	t.Helper()
	etcd := &envtest.Etcd{Path: filepath.Join(assets, "etcd"), DataDir: t.TempDir()}
	if err := etcd.Start(); err != nil {
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
	s := &envtest.APIServer{Path: filepath.Join(assets, "kube-apiserver"), EtcdURL: etcd.URL, CertDir: t.TempDir(),
		StartTimeout: 2 * time.Minute, StopTimeout: 2 * time.Minute}
	s.Configure().Set("etcd-prefix", prefix)
	if err := s.Start(); err != nil {
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
	if err := a.server.Stop(); err != nil {
		t.Fatal(err)
	}
}

func (a *apiServer) start(t *testing.T) {
	t.Helper()
	if err := a.server.Start(); err != nil {
		t.Fatal(err)
	}
}

// hubReaderRules are what the member chart grants the hub (fleet.hubReader).
var hubReaderRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"nodewright.spectrocloud.com"}, Resources: []string{"nodewrightclusters", "bondmodeflipplans", "replicationupgrades"}, Verbs: []string{"get", "list", "watch"}},
}

var hubReaderNamespaceRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
}

// hubToken makes a ServiceAccount sa in nodewright-system bound to the hub's read-only
// roles and returns a token for it.
func (a *apiServer) hubToken(t *testing.T, sa string) string {
	t.Helper()
	ctx := context.Background()
	ns := "nodewright-system"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodewright-fleet-hub-reader"}, Rules: hubReaderRules},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nodewright-fleet-hub-reader"}, Rules: hubReaderNamespaceRules},
	} {
		if err := a.Client.Create(ctx, o); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: sa}}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fleet-" + sa}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodewright-fleet-hub-reader"}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-" + sa}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "nodewright-fleet-hub-reader"}},
	} {
		if err := a.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// kubeconfig is a kubeconfig reaching the API server with token.
func (a *apiServer) kubeconfig(t *testing.T, token string) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["m"] = &clientcmdapi.Cluster{Server: a.Admin.Host, CertificateAuthorityData: a.Admin.CAData}
	cfg.AuthInfos["m"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["m"] = &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}
	cfg.CurrentContext = "m"
	data, err := clientcmd.Write(*cfg)
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
	version, err := testenv.PinnedVersion(root, "KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, "bin", "k8s", version)
}

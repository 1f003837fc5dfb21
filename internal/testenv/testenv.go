// Package testenv runs tests against a real kube-apiserver and etcd (envtest) with the
// Nodewright CRDs installed, and gives each test a namespace of its own.
//
// A package's tests use it in a few lines:
//
//	var env = testenv.New()
//
//	func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		ns := env.Namespace(t)
//		... env.Client.Create(ctx, obj) ...
//	}
//
// The control-plane binaries come from $KUBEBUILDER_ASSETS, or else from the cache that
// hack/control-plane.sh fills (bin/k8s/<version>/); `make test` builds that cache first.
package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	virtv1 "kubevirt.io/api/core/v1"
	vmsnapshotv1 "kubevirt.io/api/snapshot/v1beta1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Env is one control plane shared by the tests of a package.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (uncached) client with the types of Scheme.
	Client client.Client
	// Scheme has the core, Nodewright, fleet hub, KubeVirt (kubevirt.io/v1), CSI snapshot and
	// CustomResourceDefinition types registered.
	Scheme *runtime.Scheme
	// RepoRoot is the repository's top folder.
	RepoRoot string
	// Webhooks, when the Env was made WithWebhooks, is where the API server calls the
	// admission webhooks of config/webhook: https://Host:Port, the paths unchanged.
	Webhooks *envtest.WebhookInstallOptions

	control         *envtest.Environment
	withWebhooks    bool
	withoutThirdPty bool
	beforeStop      []func()

	// policies are the configs of AsOperatorUnderPolicies, by release namespace.
	policiesMu sync.Mutex
	policies   map[string]*rest.Config
}

// BeforeStop registers fn to run after the package's tests and before the control plane
// stops: to stop a manager shared by the tests, say, which would otherwise hold the API
// server's connections open.
func (e *Env) BeforeStop(fn func()) { e.beforeStop = append(e.beforeStop, fn) }

// New returns an Env that is not started yet; Run starts it.
func New() *Env { return &Env{} }

// WithWebhooks makes Start install the webhook configurations of config/webhook, rewritten
// to call a local server (Webhooks says where) instead of the in-cluster Service. Whoever
// serves them must present a certificate the configurations' CA bundle trusts: envtest's
// own (in Webhooks.LocalServingCertDir), or one whose CA the server writes into them.
func (e *Env) WithWebhooks() *Env {
	e.withWebhooks = true
	return e
}

// WithoutThirdPartyCRDs makes Start install only Nodewright's CRDs, as on a cluster without
// KubeVirt and the CSI snapshot API; InstallCRDs(ThirdPartyCRDPaths(...)) adds them later.
func (e *Env) WithoutThirdPartyCRDs() *Env {
	e.withoutThirdPty = true
	return e
}

// Run starts the control plane, runs the package's tests and stops it again. It returns
// the exit code for os.Exit.
//
// The controllers' logs are discarded unless NODEWRIGHT_TEST_LOG is set, which sends them to
// standard error.
func (e *Env) Run(m *testing.M) int {
	setLogger()
	if err := e.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	code := m.Run()
	if err := e.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// StartForTest starts a control plane of the test's own, which the test's cleanup stops:
// for a test that needs the API server in a state the package's shared one is not in (one
// without the third-party CRDs, say).
func (e *Env) StartForTest(t testing.TB) {
	t.Helper()
	setLogger()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Error(err)
		}
	})
}

// stop runs the BeforeStop functions and stops the control plane.
func (e *Env) stop() error {
	for _, fn := range e.beforeStop {
		fn()
	}
	if err := e.Stop(); err != nil {
		return fmt.Errorf("stopping the control plane: %w", err)
	}
	return nil
}

var loggerOnce sync.Once

// setLogger sends the controllers' logs to standard error when NODEWRIGHT_TEST_LOG is set,
// and discards them otherwise.
func setLogger() {
	loggerOnce.Do(func() {
		logger := logr.Discard()
		if os.Getenv("NODEWRIGHT_TEST_LOG") != "" {
			logger = zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true))
		}
		ctrllog.SetLogger(logger)
	})
}

// CRDPaths lists the folders of CRDs every test installs: Nodewright's own, and the third-party
// APIs its controllers use (ThirdPartyCRDPaths).
func CRDPaths(root string) []string {
	return append([]string{filepath.Join(root, "config", "crd", "bases")}, ThirdPartyCRDPaths(root)...)
}

// ThirdPartyCRDPaths lists the folders of the third-party CRDs Nodewright's controllers use:
// KubeVirt's VirtualMachine, VirtualMachineInstance and VirtualMachineInstanceMigration, and the
// CSI snapshot API, which hack/thirdparty-crds.sh derives from the pinned Go modules.
func ThirdPartyCRDPaths(root string) []string {
	return []string{
		filepath.Join(root, "config", "thirdparty", "kubevirt"),
		filepath.Join(root, "config", "thirdparty", "snapshot"),
	}
}

// FleetCRDPaths lists the folder of the fleet hub's CRD (NodewrightClusterSummary), which only a
// hub serves: Start does not install it; a test that plays the hub adds it with InstallCRDs.
func FleetCRDPaths(root string) []string {
	return []string{filepath.Join(root, "config", "crd", "fleet")}
}

// InstallCRDs installs the CRDs of the files or folders paths and waits until the API server
// serves them.
func (e *Env) InstallCRDs(paths ...string) error {
	_, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true, Scheme: e.Scheme})
	return err
}

// Start starts kube-apiserver and etcd and installs the CRDs from CRDPaths.
func (e *Env) Start() error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	assets, err := BinaryAssets(root)
	if err != nil {
		return err
	}
	e.RepoRoot = root
	e.Scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(e.Scheme); err != nil {
		return err
	}
	for _, add := range []func(*runtime.Scheme) error{nodewrightv1alpha1.AddToScheme, fleetv1alpha1.AddToScheme, virtv1.AddToScheme, vmsnapshotv1.AddToScheme, snapshotv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(e.Scheme); err != nil {
			return err
		}
	}
	crds := CRDPaths(root)
	if e.withoutThirdPty {
		crds = []string{filepath.Join(root, "config", "crd", "bases")}
	}
	newEnv := func() *envtest.Environment {
		env := &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDDirectoryPaths:     crds,
			ErrorIfCRDPathMissing: true,
			Scheme:                e.Scheme,
			// envtest waits 20 seconds for each process to be ready, and tries five times: on a
			// busy machine (two shared cores running other packages' tests and builds)
			// kube-apiserver takes longer than that to start. The wait returns as soon as it is
			// ready.
			ControlPlaneStartTimeout: 3 * time.Minute,
		}
		if e.withWebhooks {
			env.WebhookInstallOptions = envtest.WebhookInstallOptions{
				Paths: []string{filepath.Join(root, "config", "webhook")}, IgnoreErrorIfPathMissing: false,
				LocalServingHost: "127.0.0.1",
			}
		}
		// Clusters that enforce owner-reference permissions (OpenShift among them) refuse a
		// controller reference from a client that cannot update the owner's finalizers:
		// enforce it here too, so that a test running under the generated role catches a
		// missing rule.
		env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
		return env
	}
	e.control, e.Config, err = StartEnvironment(newEnv)
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	if e.withWebhooks {
		e.Webhooks = &e.control.WebhookInstallOptions
	}
	e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return errors.Join(err, e.control.Stop())
	}
	return nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if e.control == nil {
		return nil
	}
	return e.control.Stop()
}

// Namespace creates a namespace for the test and deletes it when the test ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating the test namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Client.Delete(context.Background(), ns); err != nil {
			t.Errorf("deleting test namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// namespacePrefix turns a test name into a valid generateName prefix, so that a namespace
// found in the API server tells which test made it.
func namespacePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	prefix := strings.Trim(b.String(), "-")
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-")
	}
	if prefix == "" {
		prefix = "test"
	}
	return prefix + "-"
}

// RepoRoot finds the repository's top folder: the nearest parent of the working directory
// that holds go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run the tests from inside the repository")
		}
		dir = parent
	}
}

// BinaryAssets is the folder with kube-apiserver and etcd: $KUBEBUILDER_ASSETS when set,
// otherwise the control-plane cache for the pinned Kubernetes version.
func BinaryAssets(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		version, err := PinnedVersion(root, "KUBE_VERSION")
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "k8s", version)
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s not found in %s: build the control plane with 'make control-plane' (or run 'make test')", name, dir)
		}
	}
	return dir, nil
}

// PinnedVersion reads one version from hack/versions.env, the single place versions are
// pinned.
func PinnedVersion(root, key string) (string, error) {
	path := filepath.Join(root, "hack", "versions.env")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(scanner.Text()), "=")
		if ok && name == key {
			return value, nil
		}
	}
	if err := scanner.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return "", fmt.Errorf("%s: no %s", path, key)
}

// User returns a rest.Config that authenticates as a user with no groups and so no rights
// until the test grants them with RBAC.
func (e *Env) User(t testing.TB, name string) *rest.Config {
	t.Helper()
	user, err := e.control.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatalf("adding user %s: %v", name, err)
	}
	return user.Config()
}

// Kubeconfig writes a kubeconfig for a cluster administrator into the test's temporary
// folder and returns its path, for tests that run a binary against the API server.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteKubeconfig writes a kubeconfig for a cluster administrator to path.
func (e *Env) WriteKubeconfig(path string) error {
	user, err := e.control.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return os.WriteFile(path, data, 0o600)
}

// StartManager runs a controller manager against the test's API server with the controllers
// that setup registers (no leader election, no metrics or probe listeners). It returns a
// function that stops the manager and waits for it; the test's cleanup calls it too.
func (e *Env) StartManager(t testing.TB, setup func(context.Context, manager.Manager) error) (stop func()) {
	t.Helper()
	return e.StartManagerAs(t, e.Config, setup)
}

// StartManagerAs is StartManager with the identity of cfg (see User).
func (e *Env) StartManagerAs(t testing.TB, cfg *rest.Config, setup func(context.Context, manager.Manager) error) (stop func()) {
	t.Helper()
	return e.startManager(t, cfg, cache.Options{}, setup)
}

// StartManagerAsWithCache is StartManagerAs with the cache configured as the operator
// configures it: a restricted identity may not be able to watch every namespace.
func (e *Env) StartManagerAsWithCache(t testing.TB, cfg *rest.Config, cacheOpts cache.Options, setup func(context.Context, manager.Manager) error) (stop func()) {
	t.Helper()
	return e.startManager(t, cfg, cacheOpts, setup)
}

// StartManagerWithCache is StartManager with the cache configured as the operator configures
// it, so that a test sees what a filtered cache hides.
func (e *Env) StartManagerWithCache(t testing.TB, cacheOpts cache.Options, setup func(context.Context, manager.Manager) error) (stop func()) {
	t.Helper()
	return e.startManager(t, e.Config, cacheOpts, setup)
}

func (e *Env) startManager(t testing.TB, cfg *rest.Config, cacheOpts cache.Options, setup func(context.Context, manager.Manager) error) (stop func()) {
	t.Helper()
	skip := true
	mgr, err := manager.New(cfg, manager.Options{
		Cache:                  cacheOpts,
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatalf("creating a manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := setup(ctx, mgr); err != nil {
		cancel()
		t.Fatalf("setting up the controllers: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the manager stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// FreeAddr returns a loopback address with a port that was free a moment ago, for a process
// the test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// CosignBinary is the cosign the signature compatibility tests run: $NODEWRIGHT_COSIGN (which
// `make test` sets after building it), or else bin/tools/cosign-<COSIGN_VERSION>, which
// hack/cosign.sh builds. Its absence is an error, never a reason to skip: a compatibility
// claim that is not checked is worse than none.
func CosignBinary() (string, error) {
	if path := os.Getenv("NODEWRIGHT_COSIGN"); path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("NODEWRIGHT_COSIGN=%s: %w; run 'make test' or hack/cosign.sh to build cosign", path, err)
		}
		return path, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	version, err := PinnedVersion(root, "COSIGN_VERSION")
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", "tools", "cosign-"+version)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("cosign %s not found at %s (and NODEWRIGHT_COSIGN is not set): run 'make test', which builds it, or hack/cosign.sh", version, path)
	}
	return path, nil
}

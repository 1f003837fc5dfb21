package site

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	snapv1 "kubevirt.io/api/snapshot/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DefaultNodeName is the Node a site registers when Options.NodeName is empty.
const DefaultNodeName = "site-0"

// Options configure a Site. The fault hooks are called from the site's controllers, possibly
// at the same time, and must be safe for concurrent use; a nil hook injects nothing.
type Options struct {
	// Dir holds the volumes' backing files, the snapshots' files and the pods' logs. Required.
	// It is one node's disk: a site started on the Dir of an earlier one takes over its files.
	Dir string
	// Drivers are the CSI driver names the site serves: the provisioner of its StorageClasses
	// and the driver of its VolumeSnapshotClasses. Claims of other classes are left alone.
	Drivers []string
	// CopyBinary is the nodewright-copy executable the kubelet runs (see BuildCopy). Required.
	CopyBinary string
	// NodeName is the Node the site registers and binds pods to, its kubelet's; when empty,
	// Nodes[0], or DefaultNodeName without Nodes. Sites that run at the same time need
	// different names.
	NodeName string
	// Nodes are the nodes VirtualMachineInstances run on and migrate between, in the order the
	// site prefers them; NodeName must be one of them. Empty means NodeName alone. The others
	// have no kubelet: no pod runs there. The site registers a Node for each one that has none
	// (Ready, labelled kubernetes.io/hostname with its name) and deletes the Nodes it
	// registered when it stops; a Node that exists already (a kwok node, say) is used as it is.
	Nodes []string
	// Namespaces limits the site to these namespaces, and the cluster-scoped volumes and
	// snapshot contents to those bound to them; empty means every namespace.
	Namespaces []string
	// Logger receives the site's logs; the zero Logger discards them.
	Logger logr.Logger

	// FailCopy, when it returns true for a Job, gives the Job's nodewright-copy a target file
	// one block long instead of the --dst volume, so the real binary refuses it (exit 2, its
	// JSON result in the termination message) and nothing is written to the volume.
	FailCopy func(job *batchv1.Job) bool
	// CorruptClone, when it returns true for a claim provisioned from a snapshot or cloned
	// from a claim, flips one byte in the middle of the new backing file after the copy.
	CorruptClone func(pvc *corev1.PersistentVolumeClaim) bool
	// FailStart, when it returns true for a VirtualMachine, makes its new VMI fail instead of
	// running (phase Failed); the VM then shows CrashLoopBackOff until it is stopped.
	FailStart func(vm *virtv1.VirtualMachine) bool
	// HoldCopy, when it returns a channel for a Job, keeps the Job's pod Running, before
	// nodewright-copy starts, until the channel is closed or the pod is deleted.
	HoldCopy func(job *batchv1.Job) <-chan struct{}

	// FailMigration, when it returns true for a VMI whose live migration runs (its
	// status.migrationState names the source and target nodes), fails the migration as the
	// source node's virt-handler reports a failed one: the VMI stays where it runs, its
	// migrationState says failed, and the VirtualMachineInstanceMigration goes Failed. It may
	// be called more than once for one migration.
	FailMigration func(vmi *virtv1.VirtualMachineInstance) bool
	// HoldMigration, when it returns a channel for a VMI whose live migration runs, keeps the
	// migration Running until the channel is closed or the VirtualMachineInstanceMigration is
	// deleted, which aborts it. It is called once per migration.
	HoldMigration func(vmi *virtv1.VirtualMachineInstance) <-chan struct{}
	// GuestAgent, when it returns true for a running VMI, plays a guest agent in it: the VMI
	// has the condition AgentConnected, and KubeVirt's snapshots freeze and thaw its file
	// systems (status.fsFreezeStatus "frozen" between the two). Without it no agent runs.
	GuestAgent func(vmi *virtv1.VirtualMachineInstance) bool
	// FailFreeze, when it returns true for a VMI whose guest agent is asked to freeze the
	// guest for a snapshot, fails the freeze call as virt-handler reports a timed-out one,
	// while the guest did freeze (fsFreezeStatus "frozen"). KubeVirt records the failure
	// (the indication QuiesceFailed); its retry finds the guest frozen and goes on, so the
	// snapshot succeeds, marked QuiesceFailed, and the guest is thawed.
	FailFreeze func(vmi *virtv1.VirtualMachineInstance) bool
	// FailThaw, when it returns true for a VMI, fails every thaw of its guest: the guest stays
	// frozen (kubevirt#9998). KubeVirt retries the thaw before it records the snapshot's
	// creation, so the snapshot stays InProgress and fails at its failure deadline, its
	// content deleted, the guest still frozen.
	FailThaw func(vmi *virtv1.VirtualMachineInstance) bool
	// HoldSnapshot, when it returns true for a VirtualMachineSnapshot, keeps it InProgress:
	// KubeVirt makes its content but never takes its volumes' snapshots, so it never becomes
	// ready and fails at its failure deadline.
	HoldSnapshot func(snapshot *snapv1.VirtualMachineSnapshot) bool

	// MigrationUnschedulableTimeout is how long a live migration that finds no target node
	// stays in phase Scheduling before it fails, as KubeVirt fails one whose target pod stays
	// unschedulable (its default is 5 minutes). The migration's annotation
	// kubevirt.io/migrationUnschedulablePodTimeoutSeconds overrides it, as in KubeVirt. Zero
	// means DefaultMigrationUnschedulableTimeout.
	MigrationUnschedulableTimeout time.Duration
}

// DefaultMigrationUnschedulableTimeout is the site's MigrationUnschedulableTimeout when
// Options leave it zero: short, so that a test sees a migration without a target fail soon.
const DefaultMigrationUnschedulableTimeout = 5 * time.Second

// Site plays kubelet, the volume, snapshot, Job and garbage-collection controllers, and
// KubeVirt against an API server. Create it with New and run it with Start.
type Site struct {
	opts     Options
	mgr      manager.Manager
	client   client.Client
	files    layout
	drivers  map[string]bool
	scope    map[string]bool // namespaces; empty means all
	kubelet  *kubelet
	recorder record.EventRecorder
	// registered are the Nodes of Options.Nodes the site created, which it deletes when it stops.
	registered []string
	// migrations plays the migrations' hold hook.
	migrations *migrationHolds
	started    chan struct{}
	startErr   error
	once       sync.Once
}

// Scheme returns a scheme with the types the site reads and writes: the core Kubernetes
// types, KubeVirt's kubevirt.io/v1 and snapshot.kubevirt.io/v1beta1, and
// snapshot.storage.k8s.io/v1.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, virtv1.AddToScheme, snapshotv1.AddToScheme, snapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// New prepares a site that acts through cfg; nothing runs until Start.
func New(cfg *rest.Config, opts Options) (*Site, error) {
	if opts.Dir == "" {
		return nil, errors.New("site: Options.Dir is required")
	}
	if opts.CopyBinary == "" {
		return nil, errors.New("site: Options.CopyBinary is required")
	}
	if err := completeNodes(&opts); err != nil {
		return nil, err
	}
	if opts.MigrationUnschedulableTimeout == 0 {
		opts.MigrationUnschedulableTimeout = DefaultMigrationUnschedulableTimeout
	}
	if opts.Logger.GetSink() == nil {
		// A Logger with no sink would make the manager use controller-runtime's global one,
		// which warns, with a stack, when nobody has set it.
		opts.Logger = logr.New(discardSink{})
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	files := layout{root: dir}
	if err := files.create(); err != nil {
		return nil, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{}
	if len(opts.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Logger:                 opts.Logger,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("site: creating the manager: %w", err)
	}
	s := &Site{
		opts:    opts,
		mgr:     mgr,
		client:  mgr.GetClient(),
		files:   files,
		drivers: map[string]bool{},
		scope:   map[string]bool{},
		started: make(chan struct{}),
	}
	for _, d := range opts.Drivers {
		s.drivers[d] = true
	}
	for _, ns := range opts.Namespaces {
		s.scope[ns] = true
	}
	s.kubelet = newKubelet(s)
	s.recorder = mgr.GetEventRecorderFor(eventSource)
	s.migrations = newMigrationHolds()
	if err := s.setupControllers(); err != nil {
		return nil, err
	}
	return s, nil
}

// NodeName is the Node of the site's kubelet.
func (s *Site) NodeName() string { return s.opts.NodeName }

// Nodes are the nodes VirtualMachineInstances run on, NodeName among them.
func (s *Site) Nodes() []string { return slices.Clone(s.opts.Nodes) }

// completeNodes fills in NodeName and Nodes from each other and checks them.
func completeNodes(opts *Options) error {
	switch {
	case opts.NodeName == "" && len(opts.Nodes) > 0:
		opts.NodeName = opts.Nodes[0]
	case opts.NodeName == "":
		opts.NodeName = DefaultNodeName
	}
	if len(opts.Nodes) == 0 {
		opts.Nodes = []string{opts.NodeName}
	}
	opts.Nodes = slices.Clone(opts.Nodes)
	seen := map[string]bool{}
	for _, n := range opts.Nodes {
		if n == "" || seen[n] {
			return fmt.Errorf("site: Options.Nodes %q: each node needs a name of its own", opts.Nodes)
		}
		seen[n] = true
	}
	if !seen[opts.NodeName] {
		return fmt.Errorf("site: Options.Nodes %q does not name NodeName %q", opts.Nodes, opts.NodeName)
	}
	return nil
}

// Dir is the folder that holds the site's files.
func (s *Site) Dir() string { return s.files.root }

// Start registers the site's Nodes, serves the kubelet's logs and runs the controllers until
// ctx ends. It then stops every process it started, waits for them, and deletes the Nodes it
// registered.
// A Site starts once; a new one on the same Dir takes over.
func (s *Site) Start(ctx context.Context) error {
	server, err := s.kubelet.serve()
	if err != nil {
		s.markStarted(err)
		return err
	}
	defer server.close()
	// The Nodes registered so far go again even when registering the others fails.
	defer s.unregisterNodes()
	if err := s.registerNodes(ctx, server.port); err != nil {
		s.markStarted(err)
		return err
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.migrations.done = runCtx.Done()
	done := make(chan error, 1)
	go func() { done <- s.mgr.Start(runCtx) }()
	go s.heartbeat(runCtx)
	go func() {
		if s.mgr.GetCache().WaitForCacheSync(runCtx) {
			s.markStarted(s.kubelet.sweep(runCtx))
		}
	}()
	err = <-done
	s.markStarted(errors.Join(errors.New("site: stopped before its caches synced"), err))
	s.kubelet.stopAll()
	return err
}

// Started is closed once the site's caches are synced and its controllers run; Err then
// says whether starting failed.
func (s *Site) Started() <-chan struct{} { return s.started }

// Err waits until Started is closed and returns the reason the site failed to start, or nil
// if it runs.
func (s *Site) Err() error {
	<-s.started
	return s.startErr
}

func (s *Site) markStarted(err error) {
	s.once.Do(func() {
		s.startErr = err
		close(s.started)
	})
}

// inScope says whether the site acts in namespace ns.
func (s *Site) inScope(ns string) bool { return len(s.scope) == 0 || s.scope[ns] }

// serves says whether the site is the CSI driver called driver.
func (s *Site) serves(driver string) bool { return s.drivers[driver] }

func (s *Site) setupControllers() error {
	setups := []func() error{
		s.setupProvisioner, s.setupReclaimer,
		s.setupSnapshots, s.setupSnapshotContents,
		s.setupKubeVirt, s.setupMigrations,
		s.setupVMSnapshots, s.setupVMRestores,
		s.setupJobs, s.kubelet.setup,
	}
	for _, setup := range setups {
		if err := setup(); err != nil {
			return fmt.Errorf("site: %w", err)
		}
	}
	return nil
}

// discardSink is a log sink that drops everything.
type discardSink struct{}

func (discardSink) Init(logr.RuntimeInfo)            {}
func (discardSink) Enabled(int) bool                 { return false }
func (discardSink) Info(int, string, ...any)         {}
func (discardSink) Error(error, string, ...any)      {}
func (d discardSink) WithValues(...any) logr.LogSink { return d }
func (d discardSink) WithName(string) logr.LogSink   { return d }

// removeAll removes a folder the site made, ignoring one that is already gone.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

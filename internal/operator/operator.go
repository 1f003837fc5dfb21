// Package operator builds the Nodewright controller manager: one leader-election lease,
// health and readiness probes, metrics, and the controllers, one per CRD.
package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	virtv1 "kubevirt.io/api/core/v1"
	vmsnapshotv1 "kubevirt.io/api/snapshot/v1beta1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/controller/agentstatus"
	"github.com/spectrocloud/nodewright/internal/controller/bootrecoverypolicy"
	"github.com/spectrocloud/nodewright/internal/controller/clusterspec"
	"github.com/spectrocloud/nodewright/internal/controller/edgeprofile"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/controller/vmoperationrequest"
	"github.com/spectrocloud/nodewright/internal/controller/vmsnapshotpolicy"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/profiletrust"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	webhookv1alpha1 "github.com/spectrocloud/nodewright/internal/webhook/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/internal/workflows"
)

// The operator coordinates its replicas through one Lease in its own namespace, and its
// cluster-wide workflows through another there, the claim (create cannot be limited to a
// name); it reports through core/v1 Events (controller-runtime's recorder writes no
// events.k8s.io Events).
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=nodewright-system,resources=leases,verbs=get;update,resourceNames=nodewright-operator;nodewright-workflow
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// DefaultLeaderElectionID is the name of the Lease the operator's replicas contend for.
const DefaultLeaderElectionID = "nodewright-operator"

// Options are the manager's settings, bound to command-line flags by BindFlags.
type Options struct {
	// WithoutFlips leaves BondModeFlipPlans and ReplicationUpgrades to no controller: for
	// tests of the admission webhooks that write a workflow's status themselves, as its
	// controller would.
	WithoutFlips bool
	// WithoutVMOperations leaves VMOperationRequests to no controller: for tests that run
	// their own, to stop and start it again.
	WithoutVMOperations bool

	MetricsAddr             string
	ProbeAddr               string
	PprofAddr               string
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	ShutdownTimeout         time.Duration
	// CopyImage is the image with nodewright-copy that VMVolumeMigration's data Jobs run.
	CopyImage string
	// Audit configures the audit trail.
	Audit AuditOptions
	// Webhooks configure the admission webhooks.
	Webhooks WebhookOptions
	// ProfileKeys, namespace/name, is the ConfigMap of public keys EdgeProfiles are
	// verified with.
	ProfileKeys string
	// LegacyNamespace, when set, is the only namespace in which the operator reads the legacy
	// DaemonSet's ConfigMap, DaemonSet and Warning Events, so that it needs read access to that
	// namespace alone. Empty: every namespace.
	LegacyNamespace string
	// Version is the operator's version (the chart's app version), written to the
	// NodewrightCluster's status.operatorVersion. Empty: that field is cleared.
	Version string
	// ClusterSpec, namespace/name, is a ConfigMap whose spec.yaml the operator applies to the
	// NodewrightCluster singleton (the chart writes it from its values). Empty: none.
	ClusterSpec string
	// AgentNamespace is the node agents' namespace, where each keeps its node's heartbeat
	// Lease. Empty: no agents are installed, and the switch to Managed is refused.
	AgentNamespace string
	// LINSTORGateURL is the LINSTOR gate (nodewright-linstor-gate) the ReplicationUpgrades
	// talk to LINSTOR through; the operator holds no LINSTOR credential of its own.
	// LINSTORGateCAFile is the PEM of the CA of the gate's serving certificate, and
	// LINSTORGateTokenFile the operator's ServiceAccount token for the gate's audience, which
	// the kubelet projects into its pod.
	LINSTORGateURL, LINSTORGateCAFile, LINSTORGateTokenFile string
	// LINSTORURL and LINSTORClientSecret are the flags of an operator that talked to LINSTOR
	// itself; Validate refuses them, saying what took their place.
	LINSTORURL          string
	LINSTORClientSecret string
}

// BindFlags registers the options as flags, with their defaults and documentation.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080",
		"Address the Prometheus metrics endpoint (/metrics) listens on; \"0\" disables it.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "",
		"Address Go's profiles (/debug/pprof/) are served on, for measuring the operator (make bench does); empty or \"0\" disables them. Keep it on a loopback address.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081",
		"Address the liveness (/healthz) and readiness (/readyz) probes listen on.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true,
		"Run the controllers only while holding the leader-election Lease, so that at most one replica acts at a time.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", DefaultLeaderElectionID,
		"Name of the leader-election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader-election Lease; defaults to the operator's own namespace in a cluster, and to the kubeconfig context's namespace (\"default\" when it names none) out of one.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second,
		"How long a standby replica waits before taking over a Lease that was not renewed.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its Lease before it gives up leadership.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second,
		"How often replicas try to acquire or renew the Lease.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 30*time.Second,
		"How long to wait for running reconciles to finish after SIGTERM before exiting.")
	fs.StringVar(&o.CopyImage, "copy-image", vmvolumemigration.DefaultCopyImage,
		"Image with nodewright-copy that the Jobs of a VMVolumeMigration run to copy and verify volumes.")
	fs.StringVar(&o.Audit.Dir, "audit-dir", "",
		"Folder of the audit trail (keep it on a PersistentVolume); empty: no trail, records go only to the log.")
	fs.StringVar(&o.Audit.KeyFile, "audit-key-file", "",
		"ed25519 private key (PKCS #8 PEM, e.g. a mounted Secret) that signs the trail's checkpoints; required with --audit-dir.")
	fs.StringVar(&o.Audit.Actor, "audit-actor", "",
		"Who the operator's records say acted; empty: the operator's identity as the API server reports it.")
	fs.StringVar(&o.Audit.CheckpointConfigMap, "audit-checkpoint-configmap", "nodewright-system/nodewright-audit-checkpoint",
		"namespace/name of the ConfigMap that receives the newest signed checkpoint, kept outside the trail.")
	fs.DurationVar(&o.Audit.CheckpointInterval, "audit-checkpoint-interval", time.Minute,
		"Longest time records stay unsigned before a checkpoint is written.")
	fs.BoolVar(&o.Audit.Stdout, "audit-stdout", false,
		"Also write every line of the trail to standard output (the logs go to standard error), for a log collector; needs --audit-dir.")
	fs.StringVar(&o.Audit.ShipURL, "audit-ship-url", "",
		"HTTP(S) endpoint the trail is shipped to (see docs/audit.md); empty: not shipped.")
	fs.StringVar(&o.Audit.ShipCAFile, "audit-ship-ca-file", "", "PEM bundle of the CAs trusted for --audit-ship-url.")
	fs.StringVar(&o.Audit.ShipTokenFile, "audit-ship-token-file", "", "File with the bearer token for --audit-ship-url.")
	fs.StringVar(&o.ProfileKeys, "profile-keys-configmap", profiletrust.DefaultTrustConfigMap.String(),
		"namespace/name of the ConfigMap whose values are the PEM public keys EdgeProfile signatures are verified with.")
	fs.StringVar(&o.LegacyNamespace, "legacy-namespace", "",
		"Namespace of the legacy DaemonSet, its state ConfigMap and its Warning Events; the operator then watches ConfigMaps, DaemonSets and Events only there (Events also in \"default\", where Events about Nodes are kept) and needs no cluster-wide read access to them. Empty: every namespace, which the generated role (config/rbac/role.yaml, the chart's) does not allow.")
	fs.StringVar(&o.AgentNamespace, "agent-namespace", "",
		"Namespace of the node agents (the chart's agent.namespace, set with agent.enabled), where each renews its node's heartbeat Lease; the operator then watches Leases only there. Empty: no agents are installed, and NodewrightCluster spec.management Managed is refused.")
	fs.StringVar(&o.Version, "operator-version", "",
		"The operator's version (the chart sets its app version, as in the Deployment's app.kubernetes.io/version label), written to the NodewrightCluster's status.operatorVersion, where a fleet hub reads it; empty: that field is cleared, and a hub reads the Deployment's label instead. At most 64 bytes.")
	fs.StringVar(&o.ClusterSpec, "cluster-spec-configmap", "",
		"namespace/name of a ConfigMap whose key spec.yaml is the NodewrightCluster spec the operator applies to the singleton, as the Helm chart writes it from its values; empty: the NodewrightCluster is managed by hand.")
	fs.StringVar(&o.LINSTORGateURL, "linstor-gate-url", "",
		"Base URL of the LINSTOR gate (nodewright-linstor-gate, https://nodewright-linstor-gate.<namespace>.svc:8443 in the chart), through which ReplicationUpgrades talk to LINSTOR; empty: no LINSTOR, and an upgrade's Preflight fails saying so.")
	fs.StringVar(&o.LINSTORGateCAFile, "linstor-gate-ca-file", "",
		"PEM file of the CA of the LINSTOR gate's serving certificate (the chart mounts the ConfigMap nodewright-linstor-gate-ca).")
	fs.StringVar(&o.LINSTORGateTokenFile, "linstor-gate-token-file", "",
		"File holding the operator's ServiceAccount token for the LINSTOR gate's audience, read at every request (the chart projects it into the pod).")
	fs.StringVar(&o.LINSTORURL, "linstor-url", "",
		"Refused: the operator no longer talks to LINSTOR itself; the chart's linstor.url is the LINSTOR gate's --linstor-url, and the operator gets --linstor-gate-url.")
	fs.StringVar(&o.LINSTORClientSecret, "linstor-client-secret", "",
		"Refused: LINSTOR's client Secret is the LINSTOR gate's alone (its --linstor-client-secret).")
	o.Webhooks.bindFlags(fs)
}

// linstorConfig is the configuration of the client of the LINSTOR gate the flags give; the
// zero Config without --linstor-gate-url. The CA and the token are read from their files when
// used: the kubelet updates both in place.
func (o Options) linstorConfig() (linstor.Config, error) {
	if o.LINSTORGateURL == "" {
		return linstor.Config{}, nil
	}
	cfg := linstor.Config{URL: o.LINSTORGateURL, CAFile: o.LINSTORGateCAFile, TokenFile: o.LINSTORGateTokenFile}
	if err := cfg.Validate(); err != nil {
		return linstor.Config{}, fmt.Errorf("--linstor-gate-url, --linstor-gate-ca-file, --linstor-gate-token-file: %w", err)
	}
	return cfg, nil
}

// maxVersionLen is the longest --operator-version: the NodewrightCluster's
// status.operatorVersion allows no more, and a longer one would fail every status write.
const maxVersionLen = 64

// Validate reports settings that cannot work together.
func (o *Options) Validate() error {
	var errs []error
	if o.LeaderElect && o.LeaderElectionID == "" {
		errs = append(errs, errors.New("--leader-election-id must not be empty when --leader-elect is on"))
	}
	if n := len(o.Version); n > maxVersionLen {
		errs = append(errs, fmt.Errorf("--operator-version is %d bytes long; status.operatorVersion takes at most %d", n, maxVersionLen))
	}
	if o.LeaderElect && o.RenewDeadline >= o.LeaseDuration {
		errs = append(errs, fmt.Errorf("--leader-election-renew-deadline (%s) must be shorter than --leader-election-lease-duration (%s)",
			o.RenewDeadline, o.LeaseDuration))
	}
	if o.LeaderElect && o.RetryPeriod >= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("--leader-election-retry-period (%s) must be shorter than --leader-election-renew-deadline (%s)",
			o.RetryPeriod, o.RenewDeadline))
	}
	errs = append(errs, o.Audit.validate(), o.Webhooks.validate())
	if _, err := splitName(o.ProfileKeys); err != nil {
		errs = append(errs, fmt.Errorf("--profile-keys-configmap: %w", err))
	}
	if o.ClusterSpec != "" {
		if _, err := splitName(o.ClusterSpec); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-spec-configmap: %w", err))
		}
	}
	if msgs := validation.IsDNS1123Label(o.LegacyNamespace); o.LegacyNamespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--legacy-namespace %q: %s", o.LegacyNamespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(o.AgentNamespace); o.AgentNamespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--agent-namespace %q: %s", o.AgentNamespace, strings.Join(msgs, "; ")))
	}
	if o.LINSTORURL != "" || o.LINSTORClientSecret != "" {
		errs = append(errs, errors.New("--linstor-url, --linstor-client-secret: the operator holds no LINSTOR credential; the LINSTOR gate (nodewright-linstor-gate) takes them, and the operator --linstor-gate-url, --linstor-gate-ca-file and --linstor-gate-token-file (docs/linstor.md)"))
	}
	if o.LINSTORGateURL != "" {
		switch {
		case o.LINSTORGateCAFile == "":
			errs = append(errs, errors.New("--linstor-gate-url needs --linstor-gate-ca-file: the gate serves HTTPS with a certificate of its own CA"))
		case o.LINSTORGateTokenFile == "":
			errs = append(errs, errors.New("--linstor-gate-url needs --linstor-gate-token-file: the gate serves only the operator's token"))
		default:
			if _, err := o.linstorConfig(); err != nil {
				errs = append(errs, err)
			}
		}
	} else if o.LINSTORGateCAFile != "" || o.LINSTORGateTokenFile != "" {
		errs = append(errs, errors.New("--linstor-gate-ca-file, --linstor-gate-token-file need --linstor-gate-url"))
	}
	return errors.Join(errs...)
}

// NewScheme returns a scheme with the core Kubernetes and Nodewright types.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	for _, add := range []func(*runtime.Scheme) error{nodewrightv1alpha1.AddToScheme, virtv1.AddToScheme, vmsnapshotv1.AddToScheme, snapshotv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// EventSource is the component name on the Events the operator records.
const EventSource = "nodewright-operator"

// SetupControllers registers the controllers, one per CRD, with the default options.
func SetupControllers(ctx context.Context, mgr ctrl.Manager) error {
	return setupControllers(ctx, mgr, Options{ProfileKeys: profiletrust.DefaultTrustConfigMap.String()})
}

// SetupControllersReading is SetupControllers for an operator that reads the legacy objects
// only in namespace legacy (--legacy-namespace).
func SetupControllersReading(legacy string) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error {
		return setupControllers(ctx, mgr, Options{ProfileKeys: profiletrust.DefaultTrustConfigMap.String(), LegacyNamespace: legacy})
	}
}

// SetupControllersWithAgents is SetupControllers for an operator whose node agents keep their
// heartbeat Leases in namespace agents (--agent-namespace).
func SetupControllersWithAgents(agents string) func(context.Context, ctrl.Manager) error {
	return func(ctx context.Context, mgr ctrl.Manager) error {
		return setupControllers(ctx, mgr, Options{ProfileKeys: profiletrust.DefaultTrustConfigMap.String(), AgentNamespace: agents})
	}
}

func setupControllers(ctx context.Context, mgr ctrl.Manager, o Options) error {
	recorder := mgr.GetEventRecorderFor(EventSource)
	var trail audit.Appender
	var trailReady func() bool
	var actor string
	keys, err := splitName(o.ProfileKeys)
	if err != nil {
		return fmt.Errorf("--profile-keys-configmap: %w", err)
	}
	trust := profiletrust.Trust{Reader: mgr.GetClient(), ConfigMap: keys}
	if o.Audit.Dir != "" {
		t, err := newAuditTrail(mgr.GetConfig(), mgr.GetClient(), o.Audit)
		if err != nil {
			return err
		}
		if err := mgr.Add(t); err != nil {
			return err
		}
		shipper, err := t.shipper()
		if err != nil {
			return err
		}
		if shipper != nil {
			if err := mgr.Add(leaderOnly{shipper}); err != nil {
				return err
			}
		}
		trail, trailReady, actor = t, t.Ready, t.actor
		if o.Webhooks.Enabled {
			if err := mgr.AddReadyzCheck("audit-trail", t.Holding); err != nil {
				return err
			}
		}
	}
	if err := (&edgeprofile.Reconciler{Client: mgr.GetClient(), Trust: trust}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EdgeProfile controller: %w", err)
	}
	if err := (&nodewrightcluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Audit: trail, Actor: actor, Trust: trust,
		LegacyNamespace: o.LegacyNamespace, AgentNamespace: o.AgentNamespace, Version: o.Version}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the NodewrightCluster controller: %w", err)
	}
	if err := (&agentstatus.Reconciler{Client: mgr.GetClient(), Recorder: recorder, LegacyNamespace: o.LegacyNamespace,
		AgentNamespace: o.AgentNamespace}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the NodewrightAgentStatus controller: %w", err)
	}
	gate, err := o.linstorConfig()
	if err != nil {
		return err
	}
	// The boots come from the node agents' reports: without agents (an older chart, which
	// installs no BootRecoveryPolicy CRD either, and which the cache would refuse to watch)
	// the policy has no controller.
	if o.AgentNamespace != "" {
		if err := (&bootrecoverypolicy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Audit: trail, Actor: actor,
			AgentNamespace: o.AgentNamespace, LINSTOR: gate}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the BootRecoveryPolicy controller: %w", err)
		}
	}
	if o.ClusterSpec != "" {
		cm, _ := splitName(o.ClusterSpec)
		if err := (&clusterspec.Reconciler{Client: mgr.GetClient(), Recorder: recorder, ConfigMap: cm}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the cluster spec controller: %w", err)
		}
	}
	// A kind with APIs a cluster may lack (VMVolumeMigration: KubeVirt's, the CSI snapshot
	// API) runs on every cluster: where one is missing, its workflows wait, saying why, and
	// admission refuses new migrations, until the APIs are installed.
	apis, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("building the discovery client: %w", err)
	}
	if err := (&vmsnapshotpolicy.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Discovery: apis,
		LockNamespace: o.workflowNamespace()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the VMSnapshotPolicy controller: %w", err)
	}
	// A request's requester and approver are stamped by the admission webhooks: without them
	// both could be forged, and no request runs.
	if !o.WithoutVMOperations && o.Webhooks.Enabled {
		if err := (&vmoperationrequest.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Audit: trail, Actor: actor,
			LockNamespace: o.workflowNamespace()}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the VMOperationRequest controller: %w", err)
		}
	}
	if o.Webhooks.Enabled {
		err := webhookv1alpha1.Setup(mgr, webhookv1alpha1.Options{
			Decisions:       &webhookv1alpha1.Decisions{Trail: trail, Ready: trailReady},
			Trust:           trust,
			MigrationAPIs:   func() (servedapis.Kinds, error) { return workflows.VMVolumeMigration.APIs.Missing(apis) },
			LegacyNamespace: o.LegacyNamespace,
			AgentNamespace:  o.AgentNamespace,
		})
		if err != nil {
			return fmt.Errorf("setting up the admission webhooks: %w", err)
		}
	}
	// The workflow kinds (internal/workflows). Those that change nodes through their agents
	// have no controller without them (no --agent-namespace, an older chart's role), and
	// admission refuses them (the cluster cannot be Managed).
	wo := workflows.Options{Deps: engine.Deps{Recorder: recorder, Audit: trail, Actor: actor, LockNamespace: o.workflowNamespace(), Discovery: apis},
		AgentNamespace: o.AgentNamespace, CopyImage: o.CopyImage, LINSTOR: gate}
	for _, k := range workflows.All() {
		if k.NeedsAgents && (o.WithoutFlips || o.AgentNamespace == "") {
			continue
		}
		if err := k.Setup(mgr, wo); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", k.Name, err)
		}
	}
	return nil
}

// workflowNamespace is where the cluster-wide workflows keep their claim (a Lease): the
// operator's own namespace, the leader election's, else the trusted keys' ConfigMap's (the
// chart's release namespace either way); "default" when neither names one.
func (o Options) workflowNamespace() string {
	if o.LeaderElectionNamespace != "" {
		return o.LeaderElectionNamespace
	}
	if n, err := splitName(o.ProfileKeys); err == nil && n.Namespace != "" {
		return n.Namespace
	}
	return metav1.NamespaceDefault
}

// leaderOnly runs a runnable only on the leader.
type leaderOnly struct{ manager.Runnable }

func (leaderOnly) NeedLeaderElection() bool { return true }

// NewManager builds the controller manager with its probes, metrics and controllers.
func NewManager(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	server, rotator := o.Webhooks.webhookServer()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		WebhookServer:                 server,
		Cache:                         CacheOptions(o.scope()),
		NewCache:                      NewCache,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaseDuration,
		RenewDeadline:                 &o.RenewDeadline,
		RetryPeriod:                   &o.RetryPeriod,
		GracefulShutdownTimeout:       &o.ShutdownTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := setupControllers(ctx, mgr, o); err != nil {
		return nil, err
	}
	if o.Webhooks.Enabled {
		if rotator != nil {
			if err := startRotator(ctx, mgr, rotator); err != nil {
				return nil, err
			}
			if err := mgr.AddReadyzCheck("webhook-ca-bundle", rotator.Injected); err != nil {
				return nil, err
			}
		}
		if err := mgr.AddReadyzCheck("webhooks", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	apiReady, err := apiServerReachable(cfg)
	if err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("api-server", apiReady); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Scope says where the operator reads namespaced objects it does not own. The zero Scope
// reads them in every namespace.
type Scope struct {
	// Legacy is the namespace of the legacy DaemonSet's objects; empty: every namespace.
	Legacy string
	// Own are the operator's own namespaces: where its trusted profile keys and the profile
	// version floor live (ConfigMaps).
	Own []string
	// Agent is the node agents' namespace, the only one where Leases are watched (their
	// heartbeats); empty: none is.
	Agent string
	// Workflows is where the cluster-wide workflows keep their claim, a Lease watched there.
	Workflows string
}

// scope is where the options say the operator reads.
func (o Options) scope() Scope {
	s := Scope{Legacy: o.LegacyNamespace, Agent: o.AgentNamespace, Workflows: o.workflowNamespace()}
	for _, name := range []string{o.ProfileKeys, o.ClusterSpec} {
		if n, err := splitName(name); err == nil {
			s.Own = append(s.Own, n.Namespace)
		}
	}
	return s
}

// NodeEventNamespace is where the API server keeps Events about cluster-scoped objects such
// as Nodes; the legacy DaemonSet's Warnings about Nodes are there.
const NodeEventNamespace = metav1.NamespaceDefault

// namespaces is the cache's per-namespace configuration for names; nil (every namespace)
// when the scope has no legacy namespace.
func (s Scope) namespaces(names ...string) map[string]cache.Config {
	if s.Legacy == "" {
		return nil
	}
	m := map[string]cache.Config{}
	for _, n := range append([]string{s.Legacy}, names...) {
		if n != "" {
			m[n] = cache.Config{}
		}
	}
	return m
}

// CacheOptions keep the informer caches lean: no managed fields, only Warning Events, and
// ConfigMaps read from the cache without a deep copy. The bridge reads the legacy ConfigMap
// on every heartbeat and never modifies it; a controller that modifies ConfigMaps it read
// must copy them first. With a legacy namespace in scope, ConfigMaps, DaemonSets and Events
// are watched only where the operator needs them, so that its role grants no cluster-wide
// read on them.
func CacheOptions(scope Scope) cache.Options {
	ours := labels.SelectorFromSet(labels.Set{children.LabelManagedBy: children.ManagedBy})
	// Leases are watched only where the agents renew their heartbeats and where the
	// cluster-wide workflows keep their claim.
	leases := cache.ByObject{Namespaces: map[string]cache.Config{}}
	for _, ns := range []string{scope.Agent, scope.Workflows} {
		if ns != "" {
			leases.Namespaces[ns] = cache.Config{}
		}
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {UnsafeDisableDeepCopy: ptr.To(true), Namespaces: scope.namespaces(scope.Own...)},
			&appsv1.DaemonSet{}: {Namespaces: scope.namespaces()},
			// Only the legacy DaemonSet's Warning Events are rolled up; Normal ones are most
			// of a cluster's Events and need not be held in memory.
			&corev1.Event{}: {Field: fields.OneTermEqualSelector("type", corev1.EventTypeWarning),
				Namespaces: scope.namespaces(NodeEventNamespace)},
			&coordinationv1.Lease{}: leases,
			// Read only while a migration waits for an API (servedapis.Explain); without
			// their schemas, which run to megabytes for KubeVirt's.
			&apiextensionsv1.CustomResourceDefinition{}: {Transform: servedapis.Lean},
		},
	}
	// Of the kinds the workflows make (their descriptors' Children), only the workflows' own
	// are held, unless a workflow reads others' too; a kind made in the agents' namespace is
	// watched only there, and only with agents: an older chart installs no NodeOperation CRD,
	// and the cache refuses a kind the API server does not serve.
	seen := map[reflect.Type]bool{}
	for _, k := range workflows.All() {
		for _, child := range k.Children {
			t := reflect.TypeOf(child.Object)
			if seen[t] {
				continue
			}
			seen[t] = true
			switch {
			case child.AlsoOthers:
			case child.InAgentNamespace && scope.Agent != "":
				opts.ByObject[child.Object] = cache.ByObject{Label: ours, Namespaces: map[string]cache.Config{scope.Agent: {}}}
			case !child.InAgentNamespace:
				opts.ByObject[child.Object] = cache.ByObject{Label: ours}
			}
		}
	}
	return opts
}

// apiServerReachable is ready while the API server answers its own readiness endpoint, so
// that a replica cut off from the API server is taken out of service.
func apiServerReachable(cfg *rest.Config) (healthz.Checker, error) {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the readiness client: %w", err)
	}
	api := clientset.Discovery().RESTClient()
	return func(req *http.Request) error {
		if err := api.Get().AbsPath("/readyz").Do(req.Context()).Error(); err != nil {
			return fmt.Errorf("API server not ready: %w", err)
		}
		return nil
	}, nil
}

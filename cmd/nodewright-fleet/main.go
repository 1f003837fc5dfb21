// Command nodewright-fleet runs the fleet hub: one NodewrightClusterSummary per member
// cluster, read-only on the members (docs/fleet.md).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/fleet"
)

func main() {
	opts := fleet.Options{Health: fleet.DefaultHealthOptions}
	var providerFile, metricsAddr, probeAddr, pprofAddr string
	var leaderElect bool
	var qps float64
	var burst int
	flag.StringVar(&opts.Namespace, "namespace", "nodewright-fleet", "The hub's namespace: its kubeconfig Secrets (label sigs.k8s.io/multicluster-runtime-kubeconfig=true, key kubeconfig) and the Secret Reader's token Secrets.")
	flag.StringVar(&opts.ClusterProfileNamespace, "clusterprofile-namespace", "", "The namespace of the ClusterProfiles to engage (the cluster inventory); required. The Secret Reader's Secret of the ClusterProfile <namespace>/<name> is <--namespace>/<namespace>.<name>.")
	flag.BoolVar(&opts.Access.AllowInsecure, strings.TrimPrefix(fleet.InsecureFlag, "--"), false, "Accept insecure-skip-tls-verify in kubeconfig Secrets and ClusterProfiles: a member's credential then goes to whoever answers at its server's address.")
	flag.StringVar(&providerFile, "clusterprofile-provider-file", "", "The cluster-inventory-api credential provider file (exec plugins per access provider name); the Secret Reader (\"secretreader\") needs none.")
	flag.StringVar(&opts.MemberNamespace, "member-namespace", "nodewright-system", "The Nodewright namespace on the members.")
	flag.DurationVar(&opts.Health.Interval, "health-interval", opts.Health.Interval, "How often each member's API server is checked.")
	flag.DurationVar(&opts.Health.Timeout, "health-timeout", opts.Health.Timeout, "How long one check waits.")
	flag.IntVar(&opts.Health.FailureThreshold, "health-failure-threshold", opts.Health.FailureThreshold, "Failed checks in a row before Reachable turns False.")
	flag.DurationVar(&opts.Health.ReadyInterval, "health-ready-interval", opts.Health.ReadyInterval, "How often a member whose connection stands (its kernel answers the hub's TCP keepalives) is asked /readyz all the same; a poll it answered (--health-poll-interval) counts.")
	flag.DurationVar(&opts.Health.PollInterval, "health-poll-interval", opts.Health.PollInterval, "How often each member's nodes' boots, and the operator Deployment's version of a member whose NodewrightCluster does not say it, are read (they are not watched).")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "The metrics endpoint's address; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The health probes' address.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect one active hub through a Lease.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "The address of Go's profiles (net/http/pprof), such as localhost:6060; 0 disables them.")
	// A summary is written twice when the hub first sees its member (created, then its
	// status): thousands of members at start-up need more than client-go's 5 a second.
	flag.Float64Var(&qps, "kube-api-qps", 500, "Requests a second the hub sends its own API server, at most (summaries, Events, its Lease).")
	flag.IntVar(&burst, "kube-api-burst", 1000, "Requests the hub may send its own API server in a burst above --kube-api-qps.")
	flag.Func("audit-witness-public-key", "A witness's public key (PEM, from nodewright-audit keygen; the receiver's serve --witness-key): the hub then records only audit checkpoints a witness countersigned. Repeat for each receiver.", func(path string) error {
		keys, err := audit.ReadPublicKeys([]string{path})
		opts.Witness.Keys = append(opts.Witness.Keys, keys...)
		return err
	})
	flag.DurationVar(&opts.Witness.Grace, "audit-witness-grace", fleet.DefaultWitnessGrace, "How long a member's audit checkpoint may stay later than the witnessed one before CheckpointConsistent turns False (NotWitnessed).")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\nRuns the Nodewright fleet hub.\n\nFlags:\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if providerFile != "" {
		creds, err := credentials.NewFromFile(providerFile)
		if err != nil {
			log.Error(err, "Cannot read the credential provider file")
			os.Exit(1)
		}
		opts.Credentials = creds
	}
	opts.Manager = manager.Options{
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "nodewright-fleet",
		LeaderElectionNamespace: opts.Namespace,
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Cannot reach the hub: no usable kubeconfig")
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	ctx := ctrl.SetupSignalHandler()
	mgr, err := fleet.New(ctx, cfg, opts)
	if err != nil {
		log.Error(err, "Cannot set the hub up")
		os.Exit(1)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The hub stopped")
		os.Exit(1)
	}
}

// Command operator runs the Nodewright controller manager.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/spectrocloud/nodewright/internal/operator"
)

func main() {
	var opts operator.Options
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s [flags]

Runs the Nodewright controller manager: the controllers for the Nodewright custom resources,
with leader election on one Lease, health probes and Prometheus metrics. It reads its
kubeconfig from --kubeconfig, $KUBECONFIG, the in-cluster service account, or ~/.kube/config,
in that order. SIGTERM or SIGINT stops it cleanly and releases the Lease.

Flags:
`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Cannot reach a cluster: no usable kubeconfig")
		os.Exit(1)
	}
	ns, err := opts.DefaultLeaderElectionNamespace(flag.Lookup(config.KubeconfigFlagName).Value.String())
	if err != nil {
		log.Error(err, "Cannot choose the leader-election namespace")
		os.Exit(1)
	}
	if ns != "" {
		log.Info("With a kubeconfig, the leader-election Lease goes in the kubeconfig context's namespace; --leader-election-namespace sets another",
			"namespace", ns)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := operator.NewManager(ctx, cfg, opts)
	if err != nil {
		log.Error(err, "Cannot build the manager")
		os.Exit(1)
	}
	log.Info("Starting the manager", "leaderElection", opts.LeaderElect, "lease", opts.LeaderElectionID)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
	log.Info("Stopped cleanly")
}

// Command nodewright-linstor-gate holds LINSTOR's client certificate in the operator's place
// and forwards to LINSTOR only what a ReplicationUpgrade asks of it, for the operator's
// ServiceAccount alone (docs/linstor.md, internal/linstorgate).
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/spectrocloud/nodewright/internal/linstorgate"
)

func main() {
	var opts linstorgate.Options
	opts.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s [flags]

Runs the LINSTOR gate: the one holder of LINSTOR's client certificate. It serves the operator
(its ServiceAccount token for --audience, checked with a TokenReview) over HTTPS, forwards to
--linstor-url only the requests of its allowlist (a ReplicationUpgrade's), and refuses every
other with 403, recording it in its audit trail. It reads its kubeconfig from --kubeconfig,
$KUBECONFIG, the in-cluster service account, or ~/.kube/config, in that order.

Flags:
`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("linstor-gate")
	if err := opts.Validate(); err != nil {
		log.Error(err, "Cannot set the gate up")
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Cannot reach a cluster: no usable kubeconfig")
		os.Exit(1)
	}
	gate, trail, err := linstorgate.New(cfg, opts, log)
	if err != nil {
		log.Error(err, "Cannot set the gate up")
		os.Exit(2)
	}
	ln, probes, err := opts.Listeners()
	if err != nil {
		log.Error(err, "Cannot listen")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	serveErr := linstorgate.Serve(ctx, gate, opts, ln, probes)
	if err := trail.Close(); err != nil {
		log.Error(err, "Closing the audit trail failed")
	}
	if serveErr != nil {
		log.Error(serveErr, "The gate stopped")
		os.Exit(1)
	}
	log.Info("Stopped cleanly")
}

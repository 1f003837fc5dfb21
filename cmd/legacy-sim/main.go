// Command legacy-sim plays the legacy node-init DaemonSet against a cluster, for the demo,
// end-to-end tests and benchmarks; see docs/legacy-sim.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/legacysim"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitBadInput = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program minus process setup, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "legacy-sim: %v\n", err)
		return exitBadInput
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	sim, err := newSimulator(opts, log)
	if err != nil {
		fmt.Fprintf(stderr, "legacy-sim: %v\n", err)
		return exitFailed
	}
	if err := opts.command.do(ctx, sim, opts, log); err != nil {
		fmt.Fprintf(stderr, "legacy-sim %s: %v\n", opts.command.name, err)
		if apierrors.IsNotFound(err) {
			fmt.Fprintf(stderr, "legacy-sim: is the site set up? 'legacy-sim run' creates it\n")
		}
		return exitFailed
	}
	return exitOK
}

func newSimulator(opts options, log *slog.Logger) (*legacysim.Simulator, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	// client-go's default of 5 requests a second would pace a scenario run with short
	// intervals (tests, benchmarks) by the client instead of by its flags; the API server's
	// own flow control still protects it.
	cfg.QPS, cfg.Burst = 100, 200
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("building a client: %w", err)
	}
	return legacysim.New(legacysim.Config{
		Client:    c,
		ConfigMap: opts.configMap(),
		DaemonSet: opts.daemonSet(),
		Component: opts.component,
		Nodes:     opts.nodes,
		Log:       log,
	})
}

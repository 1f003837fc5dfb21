// Command agent is the Nodewright node agent, one per node (a DaemonSet): it keeps its node's
// heartbeat Lease and runs its node's NodeOperations, for its own node only: today DRBD's
// pause-sync, resume-sync and adjust (docs/agent.md). An operation of a type it cannot perform
// yet is reported Failed, reason Unsupported; reporting the node in its NodewrightAgentStatus
// comes next.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
)

func main() {
	var node, namespace string
	var interval time.Duration
	flag.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "The node this agent runs on and acts for (in a DaemonSet, from the downward API: spec.nodeName). Default: $NODE_NAME.")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The agent's namespace, where its heartbeat Lease and its node's NodeOperations are. Default: $POD_NAMESPACE.")
	flag.DurationVar(&interval, "heartbeat-interval", agent.RenewInterval, "How often the heartbeat Lease is renewed.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s [flags]

Runs the Nodewright node agent for one node: it renews the node's heartbeat Lease (named after
the node, in the agent's namespace) every --heartbeat-interval, as the kubelet renews its node
Lease, and runs the node's NodeOperations (in the agent's namespace, spec.nodeName the node),
reporting each one's outcome in its status. It reads its kubeconfig from --kubeconfig, $KUBECONFIG, the in-cluster service account,
or ~/.kube/config, in that order. SIGTERM or SIGINT stops it.

Flags:
`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("agent")
	if node == "" || namespace == "" {
		fmt.Fprintln(os.Stderr, "--node-name (or $NODE_NAME) and --namespace (or $POD_NAMESPACE) are required")
		os.Exit(2)
	}
	if interval < time.Second {
		fmt.Fprintf(os.Stderr, "--heartbeat-interval %s: must be at least 1s\n", interval)
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Cannot reach a cluster: no usable kubeconfig")
		os.Exit(1)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error(err, "Building the client")
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), nwv1.AddToScheme(scheme)); err != nil {
		log.Error(err, "Building the scheme")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// The agent's cache holds its own node's operations only.
		Cache:                  agent.CacheOptions(node, namespace),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		log.Error(err, "Building the manager")
		os.Exit(1)
	}
	h := &agent.Heartbeat{Client: clientset, Node: node, Namespace: namespace, Interval: interval}
	ops := &agent.Operations{Client: mgr.GetClient(), Node: node, Executors: agent.Executors()}
	if err := errors.Join(mgr.Add(manager.RunnableFunc(h.Run)), ops.SetupWithManager(mgr)); err != nil {
		log.Error(err, "Setting up")
		os.Exit(1)
	}
	log.Info("Agent starting", "node", node, "namespace", namespace, "heartbeatInterval", interval)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Agent stopped")
		os.Exit(1)
	}
	log.Info("Agent stopped")
}

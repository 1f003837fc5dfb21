// Command agent is the Nodewright node agent, one per node (a DaemonSet): today it keeps its
// node's heartbeat Lease; it will report its node and perform the typed operations
// (NodeOperation) the operator delegates to it, for its own node only.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
Lease. It reads its kubeconfig from --kubeconfig, $KUBECONFIG, the in-cluster service account,
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
	ctx := ctrl.LoggerInto(ctrl.SetupSignalHandler(), log)
	log.Info("Agent starting", "node", node, "namespace", namespace, "heartbeatInterval", interval)
	h := &agent.Heartbeat{Client: clientset, Node: node, Namespace: namespace, Interval: interval}
	if err := h.Run(ctx); err != nil {
		log.Error(err, "Heartbeat")
		os.Exit(1)
	}
	log.Info("Agent stopped")
}

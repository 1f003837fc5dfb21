package operator

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
)

// inClusterNamespaceFile is where a pod finds its namespace; controller-runtime's leader
// election reads it when no namespace is given.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// DefaultLeaderElectionNamespace fills in the Lease's namespace for an operator run out of a
// cluster (on a laptop, against a kubeconfig), where it has no pod namespace to default to:
// the kubeconfig context's namespace, "default" when the context names none, as kubectl
// does. kubeconfig is the --kubeconfig flag; empty, $KUBECONFIG or ~/.kube/config is read.
// It returns the namespace it chose, or "" when there was nothing to choose: the flag was
// given, leader election is off, or the operator runs in a pod.
func (o *Options) DefaultLeaderElectionNamespace(kubeconfig string) (string, error) {
	if !o.LeaderElect || o.LeaderElectionNamespace != "" {
		return "", nil
	}
	if _, err := os.Stat(inClusterNamespaceFile); err == nil {
		return "", nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err == nil && ns == "" {
		err = errors.New("the kubeconfig context names no namespace")
	}
	if err != nil {
		return "", fmt.Errorf("out of a cluster, the leader-election Lease needs a namespace: pass --leader-election-namespace (reading the kubeconfig context's: %w)", err)
	}
	o.LeaderElectionNamespace = ns
	return ns, nil
}

package operator

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultLeaderElectionNamespace fills in the Lease's namespace for an operator that reads a
// kubeconfig (on a laptop, say), where controller-runtime has no pod namespace to default to:
// the kubeconfig context's namespace, "default" when the context names none, as kubectl
// does. It decides as ctrl.GetConfig does which configuration the operator runs with:
// kubeconfig (the --kubeconfig flag), else $KUBECONFIG, else the pod's service account when
// there is one, else ~/.kube/config. It returns the namespace it chose, or "" when there was
// nothing to choose: the flag was given, leader election is off, or the operator runs with
// its pod's service account (controller-runtime then takes the pod's namespace).
func (o *Options) DefaultLeaderElectionNamespace(kubeconfig string) (string, error) {
	if !o.LeaderElect || o.LeaderElectionNamespace != "" {
		return "", nil
	}
	if kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if _, err := rest.InClusterConfig(); err == nil {
			return "", nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil {
		return "", fmt.Errorf("the leader-election Lease needs a namespace: pass --leader-election-namespace (reading the kubeconfig context's: %w)", err)
	}
	o.LeaderElectionNamespace = ns
	return ns, nil
}

package main_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestOutOfAClusterTheLeaseGoesInTheContextsNamespace runs the operator from a kubeconfig
// without --leader-election-namespace, as a developer would: it takes the context's
// namespace, says so, and holds its Lease there.
func TestOutOfAClusterTheLeaseGoesInTheContextsNamespace(t *testing.T) {
	ns := env.Namespace(t)
	path := env.Kubeconfig(t)
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	log := &testenv.SyncBuffer{}
	cmd := exec.Command(buildOperator(t), "--kubeconfig", path, "--webhooks=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("operator log:\n%s", log)
		}
	})
	waitForHolder(t, ns, func(holder string) bool { return holder != "" })
	if want := `"namespace":"` + ns + `"`; !strings.Contains(log.String(), "the leader-election Lease goes in the kubeconfig context's namespace") || !strings.Contains(log.String(), want) {
		t.Errorf("the log does not say where the Lease goes (%s):\n%s", want, log)
	}
}

// TestTheWebhooksNameAMissingNamespace: with its webhooks on, the operator keeps their
// certificate in a Secret; when the Secret's namespace does not exist, it says which and how
// to create it, and exits.
func TestTheWebhooksNameAMissingNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildOperator(t), "--kubeconfig", env.Kubeconfig(t), "--leader-election-namespace", metav1.NamespaceDefault,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--webhook-secret", "no-such-ns/nodewright-webhook-cert", "--webhook-service", "no-such-ns/nodewright-webhook")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the operator ran without a namespace for its webhook certificate:\n%s", out)
	}
	for _, want := range []string{"the namespace no-such-ns of the webhook certificate Secret no-such-ns/nodewright-webhook-cert does not exist",
		"kubectl create namespace no-such-ns", "--webhooks=false"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
}

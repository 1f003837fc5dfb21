package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
)

// noCluster deletes the NodewrightCluster, if there is one, and waits until it is gone.
func noCluster(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Name: nwv1.NodewrightClusterName}
	if err := env.Client.Delete(ctx, &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, "the NodewrightCluster to be gone", func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, key, &nwv1.NodewrightCluster{}))
	})
}

// managedCluster makes a new NodewrightCluster Managed for the test: an agent heartbeat runs
// for every Node, and the legacy DaemonSet it names does not exist. The cluster is deleted when
// the test ends, before the agents stop.
func managedCluster(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	noCluster(t)
	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	names := []string{"kn-edge-1"}
	for _, n := range nodes.Items {
		if n.Name != names[0] {
			names = append(names, n.Name)
		}
	}
	bt.StartAgents(t, env, operatortest.AgentNamespace, time.Second, names...)
	c := &nwv1.NodewrightCluster{ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{Management: nwv1.ManagementManaged, Legacy: nwv1.LegacySource{
			ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "kn-nowhere", Name: "node-init-state"},
			DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "kn-nowhere", Name: "node-init"},
			EventComponent: "node-init",
		}}}
	if err := env.Client.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	waitFor(t, "the Managed mode in effect", func() bool {
		got := &nwv1.NodewrightCluster{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(c), got) != nil {
			return false
		}
		applied := meta.FindStatusCondition(got.Status.Conditions, nwv1.ConditionManagementApplied)
		return got.Status.Management == nwv1.ManagementManaged && applied != nil && applied.Status == metav1.ConditionTrue &&
			applied.ObservedGeneration == got.Generation
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", patience, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deleteFlip deletes the flip name when the test ends.
func deleteFlip(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(func() {
		err := env.Client.Delete(context.Background(), &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: name}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// flip is refused by the admission webhook, in its own words naming the field, while the
// cluster is not Managed and for a node that does not exist; admitted on a Managed cluster,
// with the API server's defaults said; and a second flip is refused while the first has not
// finished.
func TestFlipRefusedAndAdmitted(t *testing.T) {
	startOperator(t)
	kubeconfig := env.Kubeconfig(t)
	noCluster(t)
	deleteFlip(t, "to-lacp")
	deleteFlip(t, "again")

	stdout, stderr, code := plugin(t, kubeconfig, "flip", "--to", "802.3ad", "--name", "to-lacp")
	if want := "Error: bondmodeflipplan/to-lacp: spec.management: there is no NodewrightCluster nodewright, so the legacy DaemonSet decides about the nodes; " +
		"a BondModeFlipPlan changes nodes and is admitted only in the Managed mode\n"; code != 1 || stderr != want || stdout != "" {
		t.Errorf("not Managed: exit code %d (want 1)\nstdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
	_, stderr, code = plugin(t, kubeconfig, "flip", "--to", "802.3ad", "--name", "to-lacp", "--order", "kn-no-such-node")
	if code != 1 || !strings.HasPrefix(stderr, "Error: bondmodeflipplan/to-lacp: spec.nodeOrder") || !strings.Contains(stderr, "kn-no-such-node") {
		t.Errorf("a node that does not exist: exit code %d, stderr %q", code, stderr)
	}

	managedCluster(t)
	stdout, stderr, code = plugin(t, kubeconfig, "flip", "--to", "802.3ad", "--name", "to-lacp", "--order", "kn-edge-1", "--approval", "Manual")
	if want := "bondmodeflipplan/to-lacp created: to 802.3ad on the profile's bond, nodes kn-edge-1 in that order, VM protection LiveMigrate, " +
		"connectivity timeout 1m00s, approval Manual\n"; code != 0 || stdout != want {
		t.Fatalf("on a Managed cluster: exit code %d\nstdout %q\nwant   %q\nstderr %q", code, stdout, want, stderr)
	}
	got := &nwv1.BondModeFlipPlan{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "to-lacp"}, got); err != nil {
		t.Fatal(err)
	}
	if by := got.Annotations[nwv1.AnnotationRequestedBy]; by == "" {
		t.Errorf("the webhook did not stamp who asked: %v", got.Annotations)
	}

	// Failed, the flip holds the cluster until a person deletes it: whatever its controller
	// does meanwhile, a finished phase does not change again.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		f := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "to-lacp"}, f); err != nil {
			return err
		}
		now := metav1.Now()
		f.Status.Phase, f.Status.StartTime, f.Status.CompletionTime = nwv1.WorkflowFailed, &now, &now
		f.Status.Steps = []nwv1.WorkflowStep{{Name: "Preflight", State: nwv1.StepFailed, StartedAt: &now, FinishedAt: &now, Message: "written by the test"}}
		return env.Client.Status().Update(context.Background(), f)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, code = plugin(t, kubeconfig, "flip", "--to", "active-backup", "--name", "again")
	if want := "Error: bondmodeflipplan/again: metadata.name: BondModeFlipPlan to-lacp has not finished (Failed); one cluster-wide workflow at a time\n"; code != 1 || stderr != want {
		t.Errorf("a second flip: exit code %d\nstderr %q\nwant   %q", code, stderr, want)
	}

	// flip list shows it.
	stdout, _, code = plugin(t, kubeconfig, "flip", "list")
	if code != 0 || !regexp.MustCompile(`(?m)^to-lacp +802\.3ad +Failed +- +- +- +\d+s$`).MatchString(stdout) {
		t.Errorf("flip list: exit code %d\n%s", code, stdout)
	}
}

package example_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	"github.com/spectrocloud/nodewright/internal/workflow/example"
	examplev1 "github.com/spectrocloud/nodewright/internal/workflow/example/api/v1alpha1"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const waitLimit = 3 * time.Minute

var installed sync.Once

// install adds the example's kind to the test's scheme and its CRD to the API server, once.
func install(t *testing.T) {
	t.Helper()
	installed.Do(func() {
		if err := examplev1.AddToScheme(env.Scheme); err != nil {
			t.Fatal(err)
		}
		if err := env.InstallCRDs(filepath.Join("testdata", "crd")); err != nil {
			t.Fatal(err)
		}
	})
}

// swap creates a ConfigMap holding key=before and a swap of it to after, in a namespace of
// the test's.
func swap(t *testing.T, name string) *examplev1.ConfigSwap {
	t.Helper()
	install(t)
	ns := env.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"mode": "before"}}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	s := &examplev1.ConfigSwap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: examplev1.ConfigSwapSpec{ConfigMapName: "settings", Key: "mode", Value: "after"}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// veto makes the swap's Verify fail.
func veto(t *testing.T, s *examplev1.ConfigSwap) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: "settings"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{example.AnnotationVeto: "true"}
	if err := env.Client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// ended waits until s has ended in phase, its key holding value and its backup gone.
func ended(t *testing.T, s *examplev1.ConfigSwap, phase nwv1.WorkflowPhase, value string) {
	t.Helper()
	testenv.Eventually(t, waitLimit, func() string {
		ctx := context.Background()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
			return err.Error()
		}
		cm, backup := &corev1.ConfigMap{}, &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: "settings"}, cm); err != nil {
			return err.Error()
		}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name + "-backup"}, backup)
		switch {
		case s.Status.Phase != phase:
			return fmt.Sprintf("%s is %s (steps %+v), want %s", s.Name, s.Status.Phase, s.Status.Steps, phase)
		case cm.Data["mode"] != value:
			return fmt.Sprintf("mode is %q, want %q", cm.Data["mode"], value)
		case !apierrors.IsNotFound(err):
			return fmt.Sprintf("the backup is still there (%v)", err)
		}
		return ""
	})
}

// only is a cache of namespace ns alone: the tests run at once, each with its own
// controllers, which must not act on another test's swaps.
func only(ns string) cache.Options {
	return cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}
}

// run starts the example's controller for namespace ns until the test ends.
func run(t *testing.T, ns string) {
	t.Helper()
	env.StartManagerWithCache(t, only(ns), func(_ context.Context, mgr manager.Manager) error {
		return (&example.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("example")}}).SetupWithManager(mgr)
	})
}

func TestASwapSetsTheKeyAndAVetoPutsItBack(t *testing.T) {
	t.Parallel()
	ok := swap(t, "swap-ok")
	run(t, ok.Namespace)
	ended(t, ok, nwv1.WorkflowSucceeded, "after")
	vetoed := swap(t, "swap-vetoed")
	veto(t, vetoed)
	run(t, vetoed.Namespace)
	ended(t, vetoed, nwv1.WorkflowRolledBack, "before")
}

// TestCrashAtEveryStepBoundary kills the operator right after it recorded the start of each
// step, forward and rollback, and starts a new one: each swap still ends as if nothing had
// happened, Succeeded with the new value or RolledBack with the old one, its backup gone.
func TestCrashAtEveryStepBoundary(t *testing.T) {
	type crash struct {
		step   workflow.Step
		vetoed bool
	}
	var cases []crash
	for _, step := range (example.Plan{}).Forward() {
		cases = append(cases, crash{step: step})
	}
	cases = append(cases, crash{step: example.Verify, vetoed: true}, crash{step: example.Restore, vetoed: true})
	for _, c := range cases {
		name := strings.ToLower(fmt.Sprintf("%s-vetoed-%v", c.step, c.vetoed))
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := swap(t, name)
			if c.vetoed {
				veto(t, s)
			}
			k := testenv.NewCrash(func(w testenv.Write) bool {
				o, ok := w.Object.(*examplev1.ConfigSwap)
				return ok && w.SubResource == "status" && o.Name == s.Name && o.Namespace == s.Namespace && running(o) == c.step
			})
			env.RunUntilCrash(t, k, only(s.Namespace), func(_ context.Context, mgr manager.Manager, c client.Client, r client.Reader) error {
				return (&example.Reconciler{Deps: engine.Deps{Recorder: mgr.GetEventRecorderFor("crashing")}, Client: c, APIReader: r}).SetupWithManager(mgr)
			})
			run(t, s.Namespace)
			if c.vetoed {
				ended(t, s, nwv1.WorkflowRolledBack, "before")
			} else {
				ended(t, s, nwv1.WorkflowSucceeded, "after")
			}
		})
	}
}

// running is the step now running.
func running(s *examplev1.ConfigSwap) workflow.Step {
	for _, step := range s.Status.Steps {
		if step.State == nwv1.StepRunning {
			return workflow.Step(step.Name)
		}
	}
	return ""
}

package example

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
	examplev1 "github.com/spectrocloud/nodewright/internal/workflow/example/api/v1alpha1"
)

// AnnotationVeto on the ConfigMap fails Verify: someone says the new value is wrong.
const AnnotationVeto = "example.nodewright.spectrocloud.com/veto"

// The backup's keys: the value before, and whether the key was there at all.
const (
	backupValue = "value"
	backupHad   = "had"
)

// Reconciler runs ConfigSwaps.
type Reconciler struct {
	engine.Deps
	Client    client.Client
	APIReader client.Reader

	engine *engine.Engine[*examplev1.ConfigSwap]
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	e, err := engine.Start(mgr, Descriptor, r, &r.Deps, &r.Client, &r.APIReader)
	r.engine = e
	return err
}

// Reconcile advances one swap by at most one action.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.engine.Reconcile(ctx, req)
}

// scope is what every step reads: the swap and its ConfigMap (nil when there is none).
type scope struct {
	*engine.Run[*examplev1.ConfigSwap]
	cm *corev1.ConfigMap
}

func (r *Reconciler) newScope(ctx context.Context, run *engine.Run[*examplev1.ConfigSwap]) (*scope, error) {
	s := &scope{Run: run, cm: &corev1.ConfigMap{}}
	key := client.ObjectKey{Namespace: run.Object.Namespace, Name: run.Object.Spec.ConfigMapName}
	if err := r.APIReader.Get(ctx, key, s.cm); apierrors.IsNotFound(err) {
		s.cm = nil
	} else if err != nil {
		return nil, err
	}
	return s, nil
}

// Actions are the steps' actions: every step of the plan has one (the conformance test
// checks).
func (r *Reconciler) Actions() engine.Actions[*examplev1.ConfigSwap] {
	return engine.Scoped(r.newScope, map[workflow.Step]func(context.Context, *scope) (engine.Outcome, error){
		Validate: r.validate, Backup: r.backup, Apply: r.apply, Verify: r.verify, Restore: r.restore,
	})
}

func (r *Reconciler) validate(_ context.Context, s *scope) (engine.Outcome, error) {
	if s.cm == nil {
		return engine.Failed("ConfigMap %s does not exist", s.Object.Spec.ConfigMapName), nil
	}
	return engine.Succeeded("ConfigMap %s exists", s.cm.Name), nil
}

// backupName is the backup's name: deterministic, so that a re-run finds it.
func backupName(c *examplev1.ConfigSwap) string { return children.Name(c.Name, "backup") }

// backup keeps the key's value before. Created once: a re-run after Apply must not take the
// new value for the old one, so an existing backup is left as it is.
func (r *Reconciler) backup(ctx context.Context, s *scope) (engine.Outcome, error) {
	if s.cm == nil {
		return engine.Failed("ConfigMap %s is gone", s.Object.Spec.ConfigMapName), nil
	}
	before, had := s.cm.Data[s.Object.Spec.Key]
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Object.Namespace, Name: backupName(s.Object)},
		Data: map[string]string{backupValue: before, backupHad: fmt.Sprint(had)}}
	if err := children.Ensure(ctx, r.Client, r.APIReader, Descriptor.Owner(s.Object), "ConfigMap", b); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Succeeded("the value before is kept in ConfigMap %s", b.Name), nil
}

// set makes the key hold value, or removes it (value nil), with a merge patch.
func (r *Reconciler) set(ctx context.Context, s *scope, value *string) error {
	base := s.cm.DeepCopy()
	if s.cm.Data == nil {
		s.cm.Data = map[string]string{}
	}
	if value == nil {
		delete(s.cm.Data, s.Object.Spec.Key)
	} else {
		s.cm.Data[s.Object.Spec.Key] = *value
	}
	return r.Client.Patch(ctx, s.cm, client.MergeFrom(base))
}

func (r *Reconciler) apply(ctx context.Context, s *scope) (engine.Outcome, error) {
	if s.cm == nil {
		return engine.Failed("ConfigMap %s is gone", s.Object.Spec.ConfigMapName), nil
	}
	if err := r.set(ctx, s, &s.Object.Spec.Value); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Succeeded("%s holds the new value", s.Object.Spec.Key), nil
}

func (r *Reconciler) verify(_ context.Context, s *scope) (engine.Outcome, error) {
	switch {
	case s.cm == nil:
		return engine.Failed("ConfigMap %s is gone", s.Object.Spec.ConfigMapName), nil
	case s.cm.Annotations[AnnotationVeto] == "true":
		return engine.Failed("ConfigMap %s vetoes the new value (%s)", s.cm.Name, AnnotationVeto), nil
	case s.cm.Data[s.Object.Spec.Key] != s.Object.Spec.Value:
		return engine.Failed("%s reads back %q, not the new value", s.Object.Spec.Key, s.cm.Data[s.Object.Spec.Key]), nil
	}
	return engine.Succeeded("%s reads back the new value", s.Object.Spec.Key), nil
}

// restore puts the value before back. An undo step finds out what is left to undo: with no
// backup (the swap failed before it made one) or no ConfigMap there is nothing.
func (r *Reconciler) restore(ctx context.Context, s *scope) (engine.Outcome, error) {
	b := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Object.Namespace, Name: backupName(s.Object)}, b)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !Descriptor.Owner(s.Object).Owns(b)):
		return engine.Skipped("no backup: the key was never changed"), nil
	case err != nil:
		return engine.Outcome{}, err
	case s.cm == nil:
		return engine.Skipped("ConfigMap %s is gone", s.Object.Spec.ConfigMapName), nil
	}
	var value *string
	if b.Data[backupHad] == "true" {
		value = new(string)
		*value = b.Data[backupValue]
	}
	if err := r.set(ctx, s, value); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Succeeded("%s is as it was", s.Object.Spec.Key), nil
}

// Finish deletes the backup once the swap has ended, whatever the end.
func (r *Reconciler) Finish(ctx context.Context, run *engine.Run[*examplev1.ConfigSwap]) (engine.Finished, error) {
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: run.Object.Namespace, Name: backupName(run.Object)}}
	gone, err := children.DeleteIfOurs(ctx, r.Client, Descriptor.Owner(run.Object), b)
	if err != nil || !gone {
		return engine.Tidying(0, "deleting the backup ConfigMap %s", b.Name), err
	}
	return engine.Tidied("the backup ConfigMap %s is gone", b.Name), nil
}

package testenv_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// A Crash's client passes every call to the API server until the write at the crash point
// was taken, and fails every call after it, reads included.
func TestACrashedClientFailsEveryCallAfterTheCrashPoint(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	crash := testenv.NewCrash(func(w testenv.Write) bool {
		cm, ok := w.Object.(*corev1.ConfigMap)
		return ok && !w.Deleted && cm.Name == "second" && cm.ResourceVersion != ""
	})
	c := crash.Client(env.Client)
	for _, name := range []string{"first", "second"} {
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatalf("creating %s before the crash: %v", name, err)
		}
		if crash.Guard() != nil && name == "first" {
			t.Fatal("the client crashed before its crash point")
		}
	}
	select {
	case <-crash.Crashed():
	default:
		t.Fatal("the crash point was passed without a crash")
	}
	// The write at the crash point was taken: the API server has it.
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the write at the crash point is not on the API server: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first"}}
	for what, call := range map[string]func() error{
		"get":  func() error { return c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}) },
		"list": func() error { return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)) },
		"create": func() error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "third"}})
		},
		"delete": func() error { return c.Delete(ctx, cm) },
		"patch": func() error {
			return c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(`{"data":{"a":"b"}}`)))
		},
		"status": func() error { return c.Status().Update(ctx, cm) },
	} {
		if err := call(); !errors.Is(err, testenv.ErrKilled) {
			t.Errorf("%s after the crash: %v, want %v", what, err, testenv.ErrKilled)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "third"}, &corev1.ConfigMap{}); err == nil {
		t.Error("a create after the crash reached the API server")
	}
}

package testenv

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// ErrKilled is what every call of a crashed client returns.
var ErrKilled = errors.New("the operator was killed")

// Write is a write a controller made through a Crash's client that the API server took: the
// object as the server returned it (as given, for a deletion), the subresource written (""
// for the object itself, "status" for its status), and whether it was a deletion.
type Write struct {
	Object      client.Object
	SubResource string
	Deleted     bool
}

// Crash plays an operator killed at a chosen point: its client passes every call to the API
// server until a write for which the crash point says true has been taken, and from then on
// fails every call with ErrKilled, as if the process were gone between that write and
// whatever it would have done next. A workflow's "crash at every step boundary" table is a
// crash point per step (for example: the status shows the step Running) and, after the
// crash, a second operator that must finish the job.
//
// What goes through Client and Reader dies; what a controller does otherwise (a clientset's
// call, an Event) does not. A write through Apply is refused after the crash but cannot be
// its point. A write already in flight when another one reaches the crash point may still
// land, as it could from a process killed at that moment.
type Crash struct {
	at      func(Write) bool
	killed  atomic.Bool
	once    sync.Once
	crashed chan struct{}
}

// NewCrash is a crash at the first write for which at says true.
func NewCrash(at func(Write) bool) *Crash {
	return &Crash{at: at, crashed: make(chan struct{})}
}

// Guard is ErrKilled once the crash happened, nil before: for what else dies with the
// operator (its audit log, say).
func (k *Crash) Guard() error {
	if k.killed.Load() {
		return ErrKilled
	}
	return nil
}

// Crashed is closed when the crash has happened.
func (k *Crash) Crashed() <-chan struct{} { return k.crashed }

func (k *Crash) after(w Write, err error) error {
	if err == nil && k.at(w) {
		k.killed.Store(true)
		k.once.Do(func() { close(k.crashed) })
	}
	return err
}

// Client is c, dying on cue. It cannot watch (a controller watches through its cache).
func (k *Crash) Client(c client.Client) client.Client {
	return interceptor.NewClient(withWatch{c}, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj}, c.Create(ctx, obj, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj, Deleted: true}, c.Delete(ctx, obj, opts...))
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj, Deleted: true}, c.DeleteAllOf(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj}, c.Update(ctx, obj, opts...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj}, c.Patch(ctx, obj, patch, opts...))
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceGet: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceGetOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return c.SubResource(sub).Get(ctx, obj, subObj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj, SubResource: sub}, c.SubResource(sub).Create(ctx, obj, subObj, opts...))
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj, SubResource: sub}, c.SubResource(sub).Update(ctx, obj, opts...))
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := k.Guard(); err != nil {
				return err
			}
			return k.after(Write{Object: obj, SubResource: sub}, c.SubResource(sub).Patch(ctx, obj, patch, opts...))
		},
	})
}

// Reader is r, dying with the client: for a controller's reads past its cache.
func (k *Crash) Reader(r client.Reader) client.Reader { return crashReader{r, k} }

type crashReader struct {
	client.Reader
	k *Crash
}

func (r crashReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.k.Guard(); err != nil {
		return err
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r crashReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.k.Guard(); err != nil {
		return err
	}
	return r.Reader.List(ctx, list, opts...)
}

// withWatch lets a manager's client pass where the interceptor wants a client.WithWatch.
type withWatch struct{ client.Client }

func (withWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch is not supported: a controller watches through its cache")
}

// RunUntilCrash runs a manager whose controllers setup registers with the crashing client c
// and API reader r (k.Client and k.Reader of the manager's), with the cache configured as
// cacheOpts, until the crash has happened, and then stops it, as the process would have
// died. It fails the test when the crash point is not reached within the patience of a busy
// machine.
func (e *Env) RunUntilCrash(t testing.TB, k *Crash, cacheOpts cache.Options, setup func(ctx context.Context, mgr manager.Manager, c client.Client, r client.Reader) error) {
	t.Helper()
	stop := e.StartManagerWithCache(t, cacheOpts, func(ctx context.Context, mgr manager.Manager) error {
		return setup(ctx, mgr, k.Client(mgr.GetClient()), k.Reader(mgr.GetAPIReader()))
	})
	const patience = 5 * time.Minute
	select {
	case <-k.Crashed():
	case <-time.After(patience):
		t.Fatalf("the operator never reached the crash point within %s", patience)
	}
	stop()
}

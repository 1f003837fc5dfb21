package bridgetest

import (
	"context"
	"errors"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConflictingStatus is a client whose next status patches fail with a Conflict, as they do
// when the controller read a stale object from its cache. Everything else goes to the real
// client it wraps.
type ConflictingStatus struct {
	client.Client
	pending atomic.Int32
}

// FailNextStatusPatches makes the next n status patches fail with a Conflict.
func (c *ConflictingStatus) FailNextStatusPatches(n int32) { c.pending.Store(n) }

// Status is the real status writer, with the armed failures in front of Patch.
func (c *ConflictingStatus) Status() client.SubResourceWriter {
	return conflictingWriter{SubResourceWriter: c.Client.Status(), owner: c}
}

type conflictingWriter struct {
	client.SubResourceWriter
	owner *ConflictingStatus
}

func (w conflictingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	for {
		n := w.owner.pending.Load()
		if n <= 0 {
			return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
		}
		if w.owner.pending.CompareAndSwap(n, n-1) {
			gvk := obj.GetObjectKind().GroupVersionKind()
			return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(),
				errors.New("the object has been modified (injected by the test)"))
		}
	}
}

package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// One cluster-wide workflow at a time: the workflow that changes nodes holds a claim, the
// Lease LockName in the operator's namespace, whose holderIdentity names it (kind, name,
// UID). A workflow claims it at its first gated step and keeps it until it ends: released
// when it Succeeded or RolledBack, or when it is deleted (a Failed one holds the cluster
// until a person has looked at it and deleted it, as admission does).
//
// The claim is an update with the Lease's resourceVersion (or its creation), so of two
// workflows that claim it at once, from one operator or two, exactly one succeeds; the other
// reads the Lease again and waits. Nothing is held in memory: a restarted operator finds the
// claim where it was. A holder that no longer exists (deleted with its finalizer removed by
// hand) cannot release it, so a claimer checks that the holder named still exists, by UID,
// and takes the claim over when it does not. The Lease is not renewed: its holder is decided
// by the workflows' objects, not by time.

// LockName is the name of the claim's Lease.
const LockName = "nodewright-workflow"

// holder is the identity a workflow claims the Lease with: its API kind (from the scheme,
// so that holderExists can find it), name and UID.
func holder(c client.Client, o client.Object) (string, error) {
	gvk, err := apiutil.GVKForObject(o, c.Scheme())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%s/%s", gvk.Kind, o.GetName(), o.GetUID()), nil
}

// parseHolder splits a holder identity into kind, name and UID.
func parseHolder(id string) (kind, name string, uid types.UID, ok bool) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], types.UID(parts[2]), true
}

// checkLock claims the Lease for o, or says which workflow holds it.
func checkLock(ctx context.Context, e gateEnv, o GatedObject, _ workflow.Step, now time.Time) (Verdict, error) {
	if e.config.LockNamespace == "" {
		return Verdict{}, fmt.Errorf("no namespace configured for the Lease %s", LockName)
	}
	me, err := holder(e.client, o)
	if err != nil {
		return Verdict{}, err
	}
	key := client.ObjectKey{Namespace: e.config.LockNamespace, Name: LockName}
	for range 5 {
		var lease coordinationv1.Lease
		err := e.apiReader.Get(ctx, key, &lease)
		if apierrors.IsNotFound(err) {
			lease = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me)}}
			err = e.client.Create(ctx, &lease)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return Verdict{}, err
			}
			return Verdict{Open: true}, nil
		}
		if err != nil {
			return Verdict{}, err
		}
		current := ptr.Deref(lease.Spec.HolderIdentity, "")
		if current == me {
			return Verdict{Open: true}, nil
		}
		if current != "" {
			alive, err := e.holderExists(ctx, current)
			if err != nil {
				return Verdict{}, err
			}
			if alive {
				kind, name, _, _ := parseHolder(current)
				return Verdict{Reason: nwv1.ReasonAnotherWorkflowRunning, Message: fmt.Sprintf(
					"%s %s holds the cluster (Lease %s/%s); one cluster-wide workflow at a time", kind, name, key.Namespace, key.Name)}, nil
			}
		}
		lease.Spec.HolderIdentity = ptr.To(me)
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		err = e.client.Update(ctx, &lease) // carries the resourceVersion read: an optimistic lock
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return Verdict{}, err
		}
		return Verdict{Open: true}, nil
	}
	return Verdict{}, fmt.Errorf("the Lease %s/%s kept changing while it was claimed", key.Namespace, key.Name)
}

// holderExists reports whether the workflow a holder identity names still exists, by UID.
// An identity that does not parse names nothing; one whose kind the API server does not
// serve is taken to exist (the claim fails closed: a person must look).
func (e gateEnv) holderExists(ctx context.Context, id string) (bool, error) {
	kind, name, uid, ok := parseHolder(id)
	if !ok {
		return false, nil
	}
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(nwv1.GroupVersion.WithKind(kind))
	err := e.apiReader.Get(ctx, client.ObjectKey{Name: name}, o)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case meta.IsNoMatchError(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return o.UID == uid, nil
}

// releaseLock gives the claim up if o holds it.
func (e *Engine[O]) releaseLock(ctx context.Context, o O) error {
	if e.Gates.LockNamespace == "" {
		return nil
	}
	key := client.ObjectKey{Namespace: e.Gates.LockNamespace, Name: LockName}
	var lease coordinationv1.Lease
	if err := e.APIReader.Get(ctx, key, &lease); err != nil {
		return client.IgnoreNotFound(err)
	}
	me, err := holder(e.Client, o)
	if err != nil {
		return err
	}
	if ptr.Deref(lease.Spec.HolderIdentity, "") != me {
		return nil
	}
	lease.Spec.HolderIdentity = nil
	lease.Spec.AcquireTime = nil
	err = e.Client.Update(ctx, &lease)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

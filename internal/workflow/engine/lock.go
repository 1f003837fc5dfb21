package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

// checkLock reads the claim: open when it is free, o's, or held by a workflow that no
// longer exists; otherwise it says which workflow holds it. It writes nothing: the engine
// claims it (claim) once every gate of the step is open.
func checkLock(ctx context.Context, e GateEnv, o GatedObject, _ workflow.Step, _ time.Time) (Verdict, error) {
	_, v, err := readLock(ctx, e, o)
	return v, err
}

// readLock reads the Lease (nil when there is none) and says whether o may take it.
func readLock(ctx context.Context, e GateEnv, o GatedObject) (*coordinationv1.Lease, Verdict, error) {
	if e.Config.LockNamespace == "" {
		return nil, Verdict{}, fmt.Errorf("no namespace configured for the Lease %s", LockName)
	}
	me, err := holder(e.Client, o)
	if err != nil {
		return nil, Verdict{}, err
	}
	key := client.ObjectKey{Namespace: e.Config.LockNamespace, Name: LockName}
	var lease coordinationv1.Lease
	if err := e.APIReader.Get(ctx, key, &lease); apierrors.IsNotFound(err) {
		return nil, Verdict{Open: true}, nil
	} else if err != nil {
		return nil, Verdict{}, err
	}
	current := ptr.Deref(lease.Spec.HolderIdentity, "")
	if current == "" || current == me {
		return &lease, Verdict{Open: true}, nil
	}
	alive, err := e.holderExists(ctx, current)
	if err != nil {
		return nil, Verdict{}, err
	}
	if alive {
		kind, name, _, _ := parseHolder(current)
		return nil, Verdict{Reason: nwv1.ReasonAnotherWorkflowRunning, Message: fmt.Sprintf(
			"%s %s holds the cluster (Lease %s/%s); one cluster-wide workflow at a time", kind, name, key.Namespace, key.Name)}, nil
	}
	return &lease, Verdict{Open: true}, nil
}

// claim takes the Lease for o, or says which workflow holds it: a creation, or an update with
// the resourceVersion read (an optimistic lock), so that of two workflows that claim it at
// once exactly one succeeds.
func claim(ctx context.Context, e GateEnv, o GatedObject, now time.Time) (Verdict, error) {
	me, err := holder(e.Client, o)
	if err != nil {
		return Verdict{}, err
	}
	for range 5 {
		lease, v, err := readLock(ctx, e, o)
		if err != nil || !v.Open {
			return v, err
		}
		if lease == nil {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.Config.LockNamespace, Name: LockName},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me)}}
			err = e.Client.Create(ctx, lease)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return Verdict{Open: err == nil}, err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == me {
			return Verdict{Open: true}, nil
		}
		lease.Spec.HolderIdentity = ptr.To(me)
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		err = e.Client.Update(ctx, lease)
		if apierrors.IsConflict(err) {
			continue
		}
		return Verdict{Open: err == nil}, err
	}
	return Verdict{}, fmt.Errorf("the Lease %s/%s kept changing while it was claimed", e.Config.LockNamespace, LockName)
}

// holderExists reports whether the workflow a holder identity names still exists, by UID.
// An identity that does not parse names nothing; one whose kind the API server does not
// serve is taken to exist (the claim fails closed: a person must look).
func (e GateEnv) holderExists(ctx context.Context, id string) (bool, error) {
	return holderExists(ctx, e.APIReader, id)
}

// Holding is the cluster-wide workflow that holds the claim, as HolderOf reads it.
type Holding struct {
	Kind, Name string
	// Phase is its phase: a Failed workflow holds the claim until a person deletes it, with no
	// node work going on.
	Phase nwv1.WorkflowPhase
	// Nodes are the nodes it changes now, or is about to, as its kind's descriptor says
	// (Descriptor.Changing). NodesKnown is false when that is not known: its kind says
	// nothing of it, is not described in this program, or its object could not be read.
	Nodes      []string
	NodesKnown bool
}

// HolderOf says which cluster-wide workflow holds the claim in namespace ns, read past any
// cache with r, and which nodes it changes; nil when none holds it (no Lease, no holder, or
// one that no longer exists). For what must stay out of node work's way without claiming it.
func HolderOf(ctx context.Context, r client.Reader, ns string) (*Holding, error) {
	var lease coordinationv1.Lease
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: LockName}, &lease); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	id := ptr.Deref(lease.Spec.HolderIdentity, "")
	if id == "" {
		return nil, nil
	}
	alive, err := holderExists(ctx, r, id)
	if err != nil || !alive {
		return nil, err
	}
	kind, name, _, _ := parseHolder(id)
	h := &Holding{Kind: kind, Name: name}
	described := Described()
	i := slices.IndexFunc(described, func(s Summary) bool { return s.Kind.Name == kind })
	if i < 0 {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(nwv1.GroupVersion.WithKind(kind))
		if err := r.Get(ctx, client.ObjectKey{Name: name}, u); err == nil {
			p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			h.Phase = nwv1.WorkflowPhase(p)
		} else if !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return nil, err
		}
		return h, nil
	}
	o := described[i].New()
	if err := r.Get(ctx, client.ObjectKey{Name: name}, o); apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return h, nil
	} else if err != nil {
		return nil, err
	}
	h.Phase = o.GetWorkflowStatus().Phase
	if changing := described[i].Changing; changing != nil {
		h.Nodes, h.NodesKnown = changing(o)
	}
	return h, nil
}

func holderExists(ctx context.Context, r client.Reader, id string) (bool, error) {
	kind, name, uid, ok := parseHolder(id)
	if !ok {
		return false, nil
	}
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(nwv1.GroupVersion.WithKind(kind))
	err := r.Get(ctx, client.ObjectKey{Name: name}, o)
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

// releaseLock gives the claim up if o holds it. Only a cluster-wide kind's workflows ever
// hold it: another kind reads nothing (its operator's role need not let it read the Lease).
func (e *Engine[O]) releaseLock(ctx context.Context, o O) error {
	if !e.Descriptor.ClusterWide || e.gates.LockNamespace == "" {
		return nil
	}
	key := client.ObjectKey{Namespace: e.gates.LockNamespace, Name: LockName}
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

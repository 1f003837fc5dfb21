// Package children is how a workflow names, labels, creates and deletes the objects it makes
// (its children): deterministic names, so that a stale cache can never make a duplicate;
// labels that name the workflow, so that the operator's cache holds only its own objects and
// a person can find them; creation that never adopts what someone else made; and deletion
// only of what is the workflow's, with a UID precondition.
package children

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelManagedBy is ManagedBy on every child of every workflow: the operator's cache holds
// only the Jobs, Pods and snapshots that carry it.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "nodewright"
)

// MaxName keeps every child's name usable as a label value (a Job's pods carry it).
const MaxName = 63

// Name is the deterministic name of a child of the workflow named owner: "<owner>-<suffix>",
// or, when that would be longer than MaxName, the owner's name shortened and a hash of it. A
// shortened name that would end in a "." loses it: ".-" is not a valid name.
func Name(owner, suffix string) string {
	name := owner + "-" + suffix
	if len(name) <= MaxName {
		return name
	}
	keep := MaxName - len(suffix) - 10 - 2
	return strings.TrimRight(owner[:keep], ".") + "-" + hash(owner, 10) + "-" + suffix
}

// LabelValue is a name as a label value: itself, or its hash when too long for one.
func LabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	return hash(name, 40)
}

// hash is the first n hex digits of the SHA-256 of name.
func hash(name string, n int) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:n]
}

// Owner is a workflow object as the labels of its children name it: its name under
// NameLabel and its UID under UIDLabel (labels of the workflow's kind). Noun is what messages
// call it ("migration").
type Owner struct {
	Name, NameLabel string
	UID             types.UID
	UIDLabel        string
	Noun            string
}

// Labels are the labels of every child of o.
func (o Owner) Labels() map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedBy,
		o.NameLabel:    LabelValue(o.Name),
		o.UIDLabel:     string(o.UID),
	}
}

// Owns reports whether obj is o's child: it carries o's UID.
func (o Owner) Owns(obj client.Object) bool { return obj.GetLabels()[o.UIDLabel] == string(o.UID) }

// NotOursError says a child's name is taken by an object the workflow did not create. Waiting
// will not help, so the step fails.
type NotOursError struct{ Message string }

func (e NotOursError) Error() string { return e.Message }

// Ensure creates obj, with o's labels added to its own (Labels: without them the operator's
// cache would not hold it, and a re-run after a crash would take it for someone else's),
// unless an object of that name exists, and reads the existing one back into obj through
// apiReader (the API server: the operator's cache holds only its own children). A same-named
// object that is not o's is a NotOursError: a workflow never adopts or overwrites what
// someone else made. kind names obj's kind in that error.
func Ensure(ctx context.Context, c client.Client, apiReader client.Reader, o Owner, kind string, obj client.Object) error {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range o.Labels() {
		labels[k] = v
	}
	obj.SetLabels(labels)
	err := c.Create(ctx, obj)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := apiReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if !o.Owns(obj) {
		return NotOursError{fmt.Sprintf("%s %s/%s exists and was not created by this %s", kind, obj.GetNamespace(), obj.GetName(), o.Noun)}
	}
	return nil
}

// DeleteIfOurs deletes the named child when it is o's, and reports whether it is gone. An
// object of that name that is not o's is left alone, and counts as gone.
func DeleteIfOurs(ctx context.Context, c client.Client, o Owner, obj client.Object, opts ...client.DeleteOption) (bool, error) {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	if !o.Owns(obj) {
		return true, nil
	}
	if obj.GetDeletionTimestamp() == nil {
		// The precondition keeps a stale read from deleting a same-named successor.
		opts = append(opts, client.Preconditions{UID: ptr.To(obj.GetUID())})
		if err := c.Delete(ctx, obj, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, err
		}
	}
	return false, nil
}

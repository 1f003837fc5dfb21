// Package selfservice holds the rules of VMOperationRequests (docs/selfservice.md) that the
// admission webhook and the controller both apply: who may ask for what (Access), and what
// holds a request back (Gates).
package selfservice

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Check is one SubjectAccessReview a request must pass: the requester may do Verb on
// Resource (with Subresource) of Group, named Name, in Namespace.
type Check struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
}

// String is the check as `kubectl auth can-i` would name it: "create
// virtualmachinesnapshots.snapshot.kubevirt.io in team-a".
func (c Check) String() string {
	r := c.Resource
	if c.Subresource != "" {
		r += "/" + c.Subresource
	}
	if c.Group != "" {
		r += "." + c.Group
	}
	if c.Name != "" {
		r += " " + c.Name
	}
	return c.Verb + " " + r + " in " + c.Namespace
}

// NativeCheck is the native verb of op on vm: what the requester could do without Nodewright.
//   - SnapshotNow: create virtualmachinesnapshots (snapshot.kubevirt.io);
//   - Restore: create virtualmachinerestores (snapshot.kubevirt.io);
//   - Restart: update virtualmachines/restart (subresources.kubevirt.io), as virtctl restart;
//   - MigrateVolume: update virtualmachines (kubevirt.io): the VM's volume is pointed at
//     another claim, which the owner could otherwise do only by editing the VM.
func NativeCheck(op nwv1.VMOperation, ns, vm string) (Check, error) {
	switch op {
	case nwv1.VMSnapshotNow:
		return Check{Verb: "create", Group: "snapshot.kubevirt.io", Resource: "virtualmachinesnapshots", Namespace: ns}, nil
	case nwv1.VMRestore:
		return Check{Verb: "create", Group: "snapshot.kubevirt.io", Resource: "virtualmachinerestores", Namespace: ns}, nil
	case nwv1.VMRestart:
		return Check{Verb: "update", Group: "subresources.kubevirt.io", Resource: "virtualmachines", Subresource: "restart", Namespace: ns, Name: vm}, nil
	case nwv1.VMMigrateVolume:
		return Check{Verb: "update", Group: "kubevirt.io", Resource: "virtualmachines", Namespace: ns, Name: vm}, nil
	}
	return Check{}, fmt.Errorf("spec.operation: %q is not an operation (one of %s)", op, operations())
}

// NodewrightCheck is Nodewright's verb for op: create vmoperationrequests/<op, lower case> of
// the VM (the name is the VM's, so that a grant may name VMs), which an administrator grants
// per operation, as CDI grants a clone with datavolumes/source.
func NodewrightCheck(op nwv1.VMOperation, ns, vm string) Check {
	return Check{Verb: "create", Group: nwv1.GroupVersion.Group, Resource: "vmoperationrequests",
		Subresource: strings.ToLower(string(op)), Namespace: ns, Name: vm}
}

// Checks are the checks of op on vm: the native verb, then Nodewright's. A Restore also stops
// the VM and starts it again: the requester must be allowed KubeVirt's stop and start of it
// too (update virtualmachines/stop and /start, subresources.kubevirt.io).
func Checks(op nwv1.VMOperation, ns, vm string) ([]Check, error) {
	native, err := NativeCheck(op, ns, vm)
	if err != nil {
		return nil, err
	}
	checks := []Check{native}
	if op == nwv1.VMRestore {
		for _, sub := range []string{"stop", "start"} {
			checks = append(checks, Check{Verb: "update", Group: "subresources.kubevirt.io", Resource: "virtualmachines", Subresource: sub, Namespace: ns, Name: vm})
		}
	}
	return append(checks, NodewrightCheck(op, ns, vm)), nil
}

func operations() string {
	names := make([]string, len(nwv1.VMOperations))
	for i, op := range nwv1.VMOperations {
		names[i] = string(op)
	}
	return strings.Join(names, ", ")
}

// Decision is the API server's answer to one check.
type Decision struct {
	Check
	Allowed bool
	// Reason is the authorizer's reason, or why it was denied.
	Reason string
}

// String is the decision for the audit trail and a refusal.
func (d Decision) String() string {
	s := "denied"
	if d.Allowed {
		s = "allowed"
	}
	if d.Reason != "" {
		s += " (" + d.Reason + ")"
	}
	return d.Check.String() + ": " + s
}

// Authorize asks the API server, with a SubjectAccessReview for each check, whether user may
// do it. It never decides itself, and never from a SelfSubjectRulesReview: the API server's
// authorizers (RBAC, webhooks) answer. A check the API server does not answer is an error.
func Authorize(ctx context.Context, c client.Client, user nwv1.RequestUser, checks []Check) ([]Decision, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	decisions := make([]Decision, 0, len(checks))
	for _, ch := range checks {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ch.Namespace, Verb: ch.Verb, Group: ch.Group, Resource: ch.Resource,
				Subresource: ch.Subresource, Name: ch.Name,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			return nil, fmt.Errorf("asking the API server whether %s may %s: %w", user.Username, ch, err)
		}
		d := Decision{Check: ch, Allowed: sar.Status.Allowed && !sar.Status.Denied, Reason: sar.Status.Reason}
		if sar.Status.EvaluationError != "" && !d.Allowed {
			d.Reason = strings.TrimSpace(d.Reason + " " + sar.Status.EvaluationError)
		}
		decisions = append(decisions, d)
	}
	return decisions, nil
}

// Denied is the first decision that denies, or nil.
func Denied(ds []Decision) *Decision {
	for i := range ds {
		if !ds[i].Allowed {
			return &ds[i]
		}
	}
	return nil
}

// Summary joins the decisions for the audit trail: "create ...: allowed; create ...: allowed".
func Summary(ds []Decision) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

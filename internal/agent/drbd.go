package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
)

// DRBD performs the DRBD operations with drbdadm, from drbd-utils, on the resource files
// LINSTOR wrote, which it never edits. Each is safe to run again: pausing a paused resync,
// resuming a running one or adjusting a resource already as its files say changes nothing,
// and an online verification only reads and compares, so one interrupted by the agent's death
// is run again.
type DRBD struct {
	Runner drbd.Runner
	// Drbdadm is how drbdadm is run: its program and any options before the command (tests
	// add drbd-utils' dry-run mode and a configuration file). ["drbdadm"] when empty.
	Drbdadm []string
	// VerifyPoll is how often a verification's progress is read; 1s when zero.
	VerifyPoll time.Duration

	mu       sync.Mutex
	verifies map[types.UID]types.NamespacedName // the verifications this process started
}

// Executors are the DRBD operations d performs.
func (d *DRBD) Executors() map[nwv1.NodeOperationType]Executor {
	return map[nwv1.NodeOperationType]Executor{
		nwv1.OperationDRBDPauseSync: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDPauseSync == nil {
				return nil, errMissing(op)
			}
			return drbd.PauseSyncCommand(op.Spec.DRBDPauseSync.Resource, op.Spec.DRBDPauseSync.Peer)
		}},
		nwv1.OperationDRBDResumeSync: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDResumeSync == nil {
				return nil, errMissing(op)
			}
			return drbd.ResumeSyncCommand(op.Spec.DRBDResumeSync.Resource, op.Spec.DRBDResumeSync.Peer)
		}},
		nwv1.OperationDRBDAdjust: drbdExecutor{d, func(op *nwv1.NodeOperation) ([]string, error) {
			if op.Spec.DRBDAdjust == nil {
				return nil, errMissing(op)
			}
			return drbd.AdjustCommand(op.Spec.DRBDAdjust.Resource)
		}},
		nwv1.OperationDRBDVerify: verifyExecutor{d},
	}
}

// verifyExecutor runs DRBD's online verification of a resource: `drbdadm verify` starts it in
// the kernel, against every connected peer, and the agent reads `drbdsetup status` until no
// volume is in VerifyS or VerifyT any more, then reports what the verification found out of
// sync (result.outOfSyncKiB, summed over volumes and peers). It changes no data: blocks found
// different are only marked out of sync, for a later resync; what to do is the operator's call.
// A verification can take hours: between two reads the operation stays Running (Pending) and the
// agent's worker is free for other operations.
//
// A verification compares every replica only when the resource is fully replicated (every
// connection Connected, every volume Established, every disk UpToDate) from its start to its
// end. DRBD stops a verification when a connection is lost and does not take it up again;
// after the reconnection, a resync shows as out of sync what the peers missed meanwhile, not
// what a comparison found. So the agent starts a verification only on a fully replicated
// resource, and one that ends on a resource that is not (a connection lost, a resync running)
// was cut short: it is started again once the resource is fully replicated, the operation
// Running meanwhile and its deadline the bound. The agent notices a cut only if it reads the
// state while it lasts; DRBD's events wake it at each change.
type verifyExecutor struct{ d *DRBD }

func (verifyExecutor) Resumable() bool { return true }

func (e verifyExecutor) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	if op.Spec.DRBDVerify == nil {
		return nil, errMissing(op)
	}
	resource := op.Spec.DRBDVerify.Resource
	poll := e.d.VerifyPoll
	if poll <= 0 {
		poll = time.Second
	}
	wait := func(why []string) (*nwv1.NodeOperationResult, error) {
		klog.FromContext(ctx).V(1).Info("The verification waits for its resource to be fully replicated",
			"operation", op.Name, "resource", resource, "problems", why)
		return &nwv1.NodeOperationResult{}, &Pending{Until: time.Now().Add(poll)}
	}
	if !e.d.verifyStarted(op.UID) {
		// Started here once; after a restart, or a verification cut short, it is started
		// again, which only begins the comparison anew.
		found, err := e.status(ctx, op, resource)
		if err != nil {
			return nil, err
		}
		if why := found.Problems(); len(why) > 0 {
			return wait(why)
		}
		if _, err := (drbdExecutor{e.d, func(*nwv1.NodeOperation) ([]string, error) { return drbd.VerifyCommand(resource) }}).Run(ctx, op); err != nil {
			return nil, err
		}
		e.d.markVerify(op, true)
	}
	found, err := e.status(ctx, op, resource)
	if err != nil {
		return nil, err
	}
	if verifying(found) {
		return &nwv1.NodeOperationResult{}, &Pending{Until: time.Now().Add(poll)}
	}
	e.d.markVerify(op, false)
	if why := found.Problems(); len(why) > 0 {
		// Cut short: what shows out of sync now is no comparison's finding.
		return wait(why)
	}
	return &nwv1.NodeOperationResult{OutOfSyncKiB: ptr.To(int64(min(found.OutOfSyncKiB(), math.MaxInt64)))}, nil
}

// status is resource's state as `drbdsetup status` prints it; a resource drbdsetup does not
// know fails the operation.
func (e verifyExecutor) status(ctx context.Context, op *nwv1.NodeOperation, resource string) (drbd.Resource, error) {
	status, err := drbd.ResourceStatusCommand(resource)
	if err != nil {
		return drbd.Resource{}, &OperationError{Reason: ReasonInvalidOperation, Message: err.Error()}
	}
	out, err := e.d.Runner.Run(ctx, status)
	if err != nil {
		return drbd.Resource{}, err
	}
	resources, err := drbd.ParseStatus(out.Stdout)
	if err != nil {
		return drbd.Resource{}, &OperationError{Reason: ReasonCommandFailed, Message: err.Error()}
	}
	for _, r := range resources {
		if r.Name == resource {
			return r, nil
		}
	}
	e.d.markVerify(op, false)
	return drbd.Resource{}, &OperationError{Reason: "ResourceNotFound", Message: fmt.Sprintf("drbdsetup does not know %s on this node", resource)}
}

func (d *DRBD) verifyStarted(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.verifies[uid]
	return ok
}

func (d *DRBD) markVerify(op *nwv1.NodeOperation, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.verifies == nil {
		d.verifies = map[types.UID]types.NamespacedName{}
	}
	if on {
		d.verifies[op.UID] = types.NamespacedName{Namespace: op.Namespace, Name: op.Name}
	} else {
		delete(d.verifies, op.UID)
	}
}

// Verifying names the verifications this process started and has not seen end: DRBD's events
// wake them (Operations.Wake) on a change, so that a verification's end is recorded as DRBD
// announces it rather than at its next VerifyPoll.
func (d *DRBD) Verifying() []types.NamespacedName {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(d.verifies))
	for _, key := range d.verifies {
		out = append(out, key)
	}
	return out
}

// verifying: a volume of r is being verified against a peer.
func verifying(r drbd.Resource) bool {
	for _, c := range r.Connections {
		for _, p := range c.PeerDevices {
			if p.ReplicationState == "VerifyS" || p.ReplicationState == "VerifyT" {
				return true
			}
		}
	}
	return false
}

func errMissing(op *nwv1.NodeOperation) error {
	return &OperationError{Reason: "InvalidOperation", Message: fmt.Sprintf("spec.type is %s but its parameters are missing", op.Spec.Type)}
}

// drbdExecutor runs the one drbdadm command an operation stands for.
type drbdExecutor struct {
	d       *DRBD
	command func(*nwv1.NodeOperation) ([]string, error)
}

func (e drbdExecutor) Resumable() bool { return true }

func (e drbdExecutor) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	argv, err := e.command(op)
	if err != nil {
		var failed *OperationError
		if errors.As(err, &failed) {
			return nil, failed
		}
		// The API's patterns should have refused it; drbd's own check is the last word.
		return nil, &OperationError{Reason: "InvalidOperation", Message: err.Error()}
	}
	if len(e.d.Drbdadm) > 0 {
		argv = append(append([]string{}, e.d.Drbdadm...), argv[1:]...)
	}
	if _, err := e.d.Runner.Run(ctx, argv); err != nil {
		return nil, err // a *drbd.CommandError, quoting drbdadm: CommandFailed
	}
	return &nwv1.NodeOperationResult{}, nil
}

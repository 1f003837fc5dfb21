package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
	// VerifySettle is how long a verification waits for its resource's connections to be
	// back before it fails (NotFullyReplicated); 5 minutes when zero.
	VerifySettle time.Duration

	mu       sync.Mutex
	verifies map[types.UID]*verifyRun // the verifications this process runs
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
// connection Connected, every volume Established, every disk UpToDate or diskless on purpose)
// from its start to its end. DRBD stops a peer's verification when its connection is lost and
// does not take it up again; after the reconnection, a resync shows as out of sync what the
// peers missed meanwhile, not what a comparison found. So:
//
//   - the agent starts a verification only on a fully replicated resource: it waits for one,
//     and fails the operation (NotFullyReplicated, naming what is wrong) once it has not been
//     for VerifySettle with nothing under way (a connection down, a resync paused, a disk
//     neither UpToDate nor resynchronising); a resynchronisation or a verification under way
//     (one an agent started before a restart) is waited for, its deadline the bound;
//   - a verification is cut short when any read while it runs, or the read that finds it ended,
//     shows a connection down or a volume neither verifying nor Established (resynchronising);
//   - a cut verification that had found blocks different reports them (the most its reads
//     showed, of the volumes verifying or, at its end, Established): what it compared, it
//     compared, and those blocks differ (the resync after it may copy them over); one that had
//     found none is started again once the resource is fully replicated.
//
// The agent notices a cut only if it reads the state while it lasts; DRBD's events wake it at
// each change. Its record of a verification is in memory: an agent started again starts the
// verification again once the one the kernel runs has ended.
type verifyExecutor struct{ d *DRBD }

// defaultVerifySettle is how long a verification waits for a resource's connections to be
// back before it fails: a connection lost for a moment comes back well within it.
const defaultVerifySettle = 5 * time.Minute

// ReasonNotFullyReplicated fails a verification whose resource stayed not fully replicated with
// nothing under way (VerifySettle).
const ReasonNotFullyReplicated = "NotFullyReplicated"

// verifyRun is what this process knows of a verification it runs.
type verifyRun struct {
	key types.NamespacedName
	// started: the verification runs in the kernel, as far as this process knows.
	started bool
	// cut: a read while it ran showed a connection down or a volume resynchronising.
	cut bool
	// foundKiB is the most out of sync a read showed on the volumes being verified (or, in the
	// read that found the verification ended, on those Established on a connected peer).
	foundKiB uint64
	// stuckSince is when a read first found the resource not fully replicated with nothing
	// under way while the verification waited to start; zero when it was not.
	stuckSince time.Time
}

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
	settle := e.d.VerifySettle
	if settle <= 0 {
		settle = defaultVerifySettle
	}
	pending := func() (*nwv1.NodeOperationResult, error) {
		return &nwv1.NodeOperationResult{}, &Pending{Until: time.Now().Add(poll)}
	}
	found, err := e.status(ctx, op, resource)
	if err != nil {
		return nil, err
	}
	if v := e.d.record(op); !v.started {
		// Started once the resource is fully replicated.
		if why := found.Problems(); len(why) > 0 {
			since := e.d.noteWaiting(op.UID, !underWay(found))
			if !since.IsZero() && time.Since(since) >= settle {
				e.d.forgetVerify(op.UID)
				return nil, &OperationError{Reason: ReasonNotFullyReplicated, Message: fmt.Sprintf(
					"%s has not been fully replicated for %s, with no resynchronisation under way, so no verification can compare every replica: %s", resource, settle, strings.Join(why, "; "))}
			}
			klog.FromContext(ctx).V(1).Info("The verification waits for its resource to be fully replicated",
				"operation", op.Name, "resource", resource, "problems", why)
			return pending()
		}
		// Recorded first, so that DRBD's events of the start wake the operation.
		e.d.noteStarted(op.UID)
		if _, err := (drbdExecutor{e.d, func(*nwv1.NodeOperation) ([]string, error) { return drbd.VerifyCommand(resource) }}).Run(ctx, op); err != nil {
			e.d.forgetVerify(op.UID)
			return nil, err
		}
		if found, err = e.status(ctx, op, resource); err != nil {
			return nil, err
		}
	}
	if verifying(found) {
		e.d.noteVerifying(op.UID, found)
		return pending()
	}
	// Ended: as the last read shows it, or cut short if any read did.
	switch v := e.d.noteEnded(op.UID, found); {
	case !v.cut:
		e.d.forgetVerify(op.UID)
		return &nwv1.NodeOperationResult{OutOfSyncKiB: ptr.To(int64(min(found.OutOfSyncKiB(), math.MaxInt64)))}, nil
	case v.foundKiB > 0:
		e.d.forgetVerify(op.UID)
		klog.FromContext(ctx).Info("A verification cut short had found blocks different: they are its finding",
			"operation", op.Name, "resource", resource, "outOfSyncKiB", v.foundKiB)
		return &nwv1.NodeOperationResult{OutOfSyncKiB: ptr.To(int64(min(v.foundKiB, math.MaxInt64)))}, nil
	}
	klog.FromContext(ctx).Info("A verification was cut short by a lost connection or a resynchronisation: it is started again once the resource is fully replicated",
		"operation", op.Name, "resource", resource)
	return pending()
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
		e.d.forgetVerify(op.UID)
		return drbd.Resource{}, err
	}
	resources, err := drbd.ParseStatus(out.Stdout)
	if err != nil {
		e.d.forgetVerify(op.UID)
		return drbd.Resource{}, &OperationError{Reason: ReasonCommandFailed, Message: err.Error()}
	}
	for _, r := range resources {
		if r.Name == resource {
			return r, nil
		}
	}
	e.d.forgetVerify(op.UID)
	return drbd.Resource{}, &OperationError{Reason: "ResourceNotFound", Message: fmt.Sprintf("drbdsetup does not know %s on this node", resource)}
}

// record is this process's record of op's verification, made when there is none.
func (d *DRBD) record(op *nwv1.NodeOperation) verifyRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.verifies == nil {
		d.verifies = map[types.UID]*verifyRun{}
	}
	v := d.verifies[op.UID]
	if v == nil {
		v = &verifyRun{key: types.NamespacedName{Namespace: op.Namespace, Name: op.Name}}
		d.verifies[op.UID] = v
	}
	return *v
}

// update changes the record of uid's verification, if there is one, and returns it.
func (d *DRBD) update(uid types.UID, change func(*verifyRun)) verifyRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.verifies[uid]
	if v == nil {
		return verifyRun{}
	}
	change(v)
	return *v
}

func (d *DRBD) noteStarted(uid types.UID) {
	d.update(uid, func(v *verifyRun) { *v = verifyRun{key: v.key, started: true} })
}

// noteVerifying records a read of a verification under way.
func (d *DRBD) noteVerifying(uid types.UID, r drbd.Resource) {
	d.update(uid, func(v *verifyRun) {
		v.cut = v.cut || cutShort(r)
		v.foundKiB = max(v.foundKiB, verifyingOutOfSyncKiB(r))
	})
}

// noteEnded records the read that found a verification ended.
func (d *DRBD) noteEnded(uid types.UID, r drbd.Resource) verifyRun {
	return d.update(uid, func(v *verifyRun) {
		v.started = false
		v.cut = v.cut || len(r.Problems()) > 0
		// A peer still connected and Established at the end shows what its verification
		// found, which no read while it ran may have seen.
		v.foundKiB = max(v.foundKiB, establishedOutOfSyncKiB(r))
	})
}

// noteWaiting records a read of a resource not fully replicated that a verification waits
// for, stuck (nothing under way that would end it) or not, and returns since when it has been
// stuck, zero when it is not.
func (d *DRBD) noteWaiting(uid types.UID, stuck bool) time.Time {
	return d.update(uid, func(v *verifyRun) {
		*v = verifyRun{key: v.key, stuckSince: v.stuckSince}
		switch {
		case !stuck:
			v.stuckSince = time.Time{}
		case v.stuckSince.IsZero():
			v.stuckSince = time.Now()
		}
	}).stuckSince
}

func (d *DRBD) forgetVerify(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.verifies, uid)
}

// Verifying names the verifications this process started and has not seen end: DRBD's events
// wake them (Operations.Wake) on a change, so that a verification's end is recorded as DRBD
// announces it rather than at its next VerifyPoll.
func (d *DRBD) Verifying() []types.NamespacedName {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(d.verifies))
	for _, v := range d.verifies {
		if v.started {
			out = append(out, v.key)
		}
	}
	return out
}

// verifying: a volume of r is being verified against a peer.
func verifying(r drbd.Resource) bool {
	return anyVolume(r, func(_ drbd.Connection, p drbd.PeerDevice) bool { return inState(p, "VerifyS", "VerifyT") })
}

// cutShort: r, read while a verification runs, has a connection down or a volume neither being
// verified nor Established (resynchronising, or off): DRBD has stopped that peer's verification.
func cutShort(r drbd.Resource) bool {
	return down(r) || anyVolume(r, func(_ drbd.Connection, p drbd.PeerDevice) bool {
		return !inState(p, "VerifyS", "VerifyT", drbd.ReplicationEstablished)
	})
}

// underWay: a resynchronisation or a verification of a volume of r is running; waiting for r
// to be fully replicated waits for it to end.
func underWay(r drbd.Resource) bool {
	return anyVolume(r, func(_ drbd.Connection, p drbd.PeerDevice) bool {
		return inState(p, "SyncSource", "SyncTarget", "VerifyS", "VerifyT")
	})
}

// down: a connection of r is not Connected.
func down(r drbd.Resource) bool {
	for _, c := range r.Connections {
		if c.ConnectionState != drbd.ConnectionConnected {
			return true
		}
	}
	return false
}

// anyVolume: is holds of some volume of a peer of r, on its connection.
func anyVolume(r drbd.Resource, is func(drbd.Connection, drbd.PeerDevice) bool) bool {
	for _, c := range r.Connections {
		if slices.ContainsFunc(c.PeerDevices, func(p drbd.PeerDevice) bool { return is(c, p) }) {
			return true
		}
	}
	return false
}

func inState(p drbd.PeerDevice, states ...string) bool {
	return slices.Contains(states, p.ReplicationState)
}

// verifyingOutOfSyncKiB is what the volumes being verified show out of sync: what the
// verification found different so far.
func verifyingOutOfSyncKiB(r drbd.Resource) uint64 {
	return r.OutOfSyncKiBWhere(func(_ drbd.Connection, p drbd.PeerDevice) bool { return inState(p, "VerifyS", "VerifyT") })
}

// establishedOutOfSyncKiB is what the volumes Established on a connected peer show out of sync.
func establishedOutOfSyncKiB(r drbd.Resource) uint64 {
	return r.OutOfSyncKiBWhere(func(c drbd.Connection, p drbd.PeerDevice) bool {
		return c.ConnectionState == drbd.ConnectionConnected && inState(p, drbd.ReplicationEstablished)
	})
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

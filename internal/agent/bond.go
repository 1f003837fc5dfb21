package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/netconf"
)

// A bond change is decided by the agent alone once it is made, because a bad one can cut the
// node off the API server, and with it off the operator. Before it changes anything the agent
// writes a checkpoint to the host's disk: the bond's previous mode and the previous content of
// the persistent files it will write. Then it changes the runtime mode and the persistent
// configuration, and probes. The change is kept only when a CommitCheckpoint for the bond
// arrives before the checkpoint expires (spec.setBondMode.checkpointTimeout after the change).
// Otherwise, or when the probes fail, or when the agent finds on starting that it stopped in
// the middle of the change, it restores the previous mode and files by itself, probes again,
// and reports the operation RolledBack as soon as it reaches the API server. All of this
// needs nothing from the API server: the checkpoint, its timer and the restore are local.
//
// While the change waits for its commit the SetBondMode operation stays Running, its result
// saying the bond as changed, the previous mode, the probes and when the checkpoint expires.
// It ends Succeeded when committed, RolledBack when restored, or Failed (RestoreFailed) when
// even the restore failed, saying what the bond runs now.

// The reasons of the bond operations.
const (
	ReasonBondNotFound      = "BondNotFound"
	ReasonCheckpointPending = "CheckpointPending"
	ReasonProbeFailed       = "ProbeFailed"
	ReasonNotCommitted      = "NotCommitted"
	ReasonApplyFailed       = "ApplyFailed"
	ReasonRestoreFailed     = "RestoreFailed"
	ReasonNoCheckpoint      = "NoCheckpoint"
	ReasonInvalidOperation  = "InvalidOperation"
)

// The states of a checkpoint.
const (
	checkpointApplying   = "Applying"
	checkpointArmed      = "Armed"
	checkpointCommitted  = "Committed"
	checkpointRolledBack = "RolledBack"
)

// checkpoint is one bond change as the host's disk keeps it, one file per operation.
type checkpoint struct {
	Operation types.UID `json:"operation"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Bond      string    `json:"bond"`
	// PreviousMode is what a restore sets; Mode what the change set.
	PreviousMode nwv1.BondMode `json:"previousMode"`
	Mode         nwv1.BondMode `json:"mode"`
	// PreviousFiles are the persistent files' contents before the change (nil: absent);
	// Files what the change wrote.
	PreviousFiles []hostos.File   `json:"previousFiles"`
	Files         []hostos.File   `json:"files"`
	Probes        nwv1.BondProbes `json:"probes"`
	Expires       time.Time       `json:"expires"`
	State         string          `json:"state"`
	// What ended it: the probes after the change (Armed, Committed) or after the restore
	// (RolledBack), and for a rollback its reason.
	Results    []nwv1.ProbeResult `json:"results,omitempty"`
	Reason     string             `json:"reason,omitempty"`
	Message    string             `json:"message,omitempty"`
	ResolvedAt time.Time          `json:"resolvedAt,omitzero"`
}

// Bonds performs SetBondMode and CommitCheckpoint on this node's bond, each under the
// checkpoint above.
type Bonds struct {
	Net netconf.Backend
	// OS is the host's operating system, which says where the mode persists.
	OS hostos.Provider
	// HostRoot is where the host's root file system is mounted ("/" on the host itself).
	HostRoot string
	// StateDir keeps the checkpoints, on the host's disk so that they outlive the agent.
	StateDir string
	Prober   Prober
	// Resolved is told the operation whose checkpoint was committed or rolled back, so that
	// its outcome is recorded at once.
	Resolved func(types.NamespacedName)

	// mu serialises the changes and the checkpoint files; tmu guards the timers, apart
	// from mu, which a firing timer takes.
	mu     sync.Mutex
	tmu    sync.Mutex
	timers map[types.UID]*time.Timer
}

// Executors are the bond operations.
func (b *Bonds) Executors() map[nwv1.NodeOperationType]Executor {
	return map[nwv1.NodeOperationType]Executor{
		nwv1.OperationSetBondMode:      setBondMode{b},
		nwv1.OperationCommitCheckpoint: commitCheckpoint{b},
	}
}

// Recover is run when the agent starts, before it reaches the API server: a change it was in
// the middle of is undone, an expired checkpoint is rolled back, and the others' timers are
// set again. Checkpoints resolved more than two days ago (longer than any operation's
// deadline) are removed.
func (b *Bonds) Recover(ctx context.Context) error {
	all, err := b.list()
	if err != nil {
		return err
	}
	for _, c := range all {
		switch c.State {
		case checkpointApplying:
			b.mu.Lock()
			b.rollback(ctx, c, ReasonApplyFailed, "the agent stopped while it was changing the bond; the previous configuration was restored when it started again")
			b.mu.Unlock()
		case checkpointArmed:
			b.arm(c)
		default:
			if time.Since(c.ResolvedAt) > 48*time.Hour {
				_ = os.Remove(b.path(c.Operation))
			}
		}
	}
	return nil
}

// setBondMode is the SetBondMode executor.
type setBondMode struct{ b *Bonds }

// Resumable: the checkpoint on disk says how far a change got, so Run after a restart goes on
// from there and never changes the bond twice.
func (setBondMode) Resumable() bool { return true }

// Holds: the host keeps a record of the operation; its outcome is the record's, whatever the
// deadline.
func (e setBondMode) Holds(op *nwv1.NodeOperation) bool {
	c, _ := e.b.load(op.UID)
	return c != nil
}

func (e setBondMode) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	b := e.b
	spec := op.Spec.SetBondMode
	if spec == nil {
		return nil, errMissing(op)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, err := b.load(op.UID)
	if err != nil {
		return nil, err
	}
	if c != nil {
		return b.outcome(ctx, c)
	}
	timeout := spec.CheckpointTimeout.Duration
	if timeout <= 0 {
		timeout = time.Minute
	}
	if !op.Spec.Deadline.After(time.Now().Add(timeout + 30*time.Second)) {
		return nil, &OperationError{Reason: ReasonInvalidOperation, Message: fmt.Sprintf(
			"its deadline %s leaves less than the checkpoint's %s and 30s to commit or roll back the change", op.Spec.Deadline.UTC().Format(time.RFC3339), timeout)}
	}
	if pending, err := b.pending(spec.Bond); err != nil {
		return nil, err
	} else if pending != nil {
		return nil, &OperationError{Reason: ReasonCheckpointPending, Message: fmt.Sprintf(
			"%s has an uncommitted change to %s (operation %s) until %s", spec.Bond, pending.Mode, pending.Name, pending.Expires.UTC().Format(time.RFC3339))}
	}
	obs, err := b.Net.Bond(ctx, spec.Bond)
	if errors.Is(err, netconf.ErrNoBond) {
		return nil, &OperationError{Reason: ReasonBondNotFound, Message: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	if obs.Mode == spec.Mode {
		// Nothing to change, so nothing to commit or roll back.
		return &nwv1.NodeOperationResult{Bond: &obs, PreviousMode: obs.Mode}, nil
	}
	base, err := hostos.FindBondNetdev(b.HostRoot, spec.Bond)
	if err != nil {
		return nil, err
	}
	files, err := hostos.BondFiles(b.OS, hostos.BondConfig{Bond: spec.Bond, Mode: spec.Mode, BaseNetdev: base})
	if errors.Is(err, hostos.ErrUnsupported) {
		return nil, &OperationError{Reason: ReasonUnsupported, Message: err.Error()}
	}
	if err != nil {
		return nil, &OperationError{Reason: ReasonInvalidOperation, Message: err.Error()}
	}
	previous, err := hostos.ReadFiles(b.HostRoot, files)
	if err != nil {
		return nil, err
	}
	c = &checkpoint{Operation: op.UID, Namespace: op.Namespace, Name: op.Name, Bond: spec.Bond,
		PreviousMode: obs.Mode, Mode: spec.Mode, PreviousFiles: previous, Files: files, Probes: spec.Probes,
		Expires: time.Now().Add(timeout), State: checkpointApplying}
	// The checkpoint is on disk before anything changes.
	if err := b.save(c); err != nil {
		return nil, fmt.Errorf("writing the checkpoint: %w", err)
	}
	if err := b.Net.SetBondMode(ctx, spec.Bond, spec.Mode); err != nil {
		b.rollback(ctx, c, ReasonApplyFailed, "setting the mode failed: "+err.Error())
		return b.outcome(ctx, c)
	}
	if err := hostos.WriteFiles(b.HostRoot, files); err != nil {
		b.rollback(ctx, c, ReasonApplyFailed, "writing the persistent configuration failed: "+err.Error())
		return b.outcome(ctx, c)
	}
	c.State, c.Expires = checkpointArmed, time.Now().Add(timeout)
	if err := b.save(c); err != nil {
		b.rollback(ctx, c, ReasonApplyFailed, "recording the change failed: "+err.Error())
		return b.outcome(ctx, c)
	}
	b.arm(c)
	// A link that changed mode takes a moment to carry traffic again (LACP negotiates): the
	// probes are tried again for up to half the checkpoint's time.
	b.mu.Unlock()
	results, ok := b.Prober.ProbeUntil(ctx, spec.Probes, timeout/2)
	b.mu.Lock()
	c, err = b.load(op.UID)
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint of %s back: %w", op.Name, err)
	}
	if c == nil {
		return nil, fmt.Errorf("the checkpoint of %s is gone", op.Name)
	}
	if c.State == checkpointArmed {
		c.Results = results
		if !ok {
			b.rollback(ctx, c, ReasonProbeFailed, "after the change to "+string(spec.Mode)+": "+failed(results))
		} else if err := b.save(c); err != nil {
			return nil, err
		}
	}
	return b.outcome(ctx, c)
}

// outcome is what the record of c says of its operation.
func (b *Bonds) outcome(ctx context.Context, c *checkpoint) (*nwv1.NodeOperationResult, error) {
	result := &nwv1.NodeOperationResult{PreviousMode: c.PreviousMode, Probes: c.Results}
	if obs, err := b.Net.Bond(ctx, c.Bond); err == nil {
		result.Bond = &obs
	}
	switch c.State {
	case checkpointApplying:
		// Only Recover or a failed change leaves one behind; roll it back now.
		b.rollback(ctx, c, ReasonApplyFailed, "the change did not finish; the previous configuration was restored")
		return b.outcome(ctx, c)
	case checkpointArmed:
		if !time.Now().Before(c.Expires) {
			b.rollback(ctx, c, ReasonNotCommitted, fmt.Sprintf("not committed by %s", c.Expires.UTC().Format(time.RFC3339)))
			return b.outcome(ctx, c)
		}
		result.CheckpointExpires = ptr.To(metav1.NewTime(c.Expires))
		return result, &Pending{Until: c.Expires}
	case checkpointCommitted:
		return result, nil
	default:
		// RolledBack, unless even the restore failed: then Failed, saying what the bond runs.
		return result, &OperationError{Reason: c.Reason, Message: c.Message, RolledBack: c.Reason != ReasonRestoreFailed}
	}
}

// rollback restores c's previous mode and files, probes, and records the outcome. b.mu is
// held. It is not stopped by ctx's end (the agent shutting down mid-change still restores),
// only bounded.
func (b *Bonds) rollback(ctx context.Context, c *checkpoint, reason, message string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	b.disarm(c.Operation)
	var problems []string
	if err := b.Net.SetBondMode(ctx, c.Bond, c.PreviousMode); err != nil {
		problems = append(problems, "restoring the mode "+string(c.PreviousMode)+": "+err.Error())
	}
	if err := hostos.WriteFiles(b.HostRoot, c.PreviousFiles); err != nil {
		problems = append(problems, "restoring the persistent configuration: "+err.Error())
	}
	c.State = checkpointRolledBack
	if len(problems) > 0 {
		c.Reason = ReasonRestoreFailed
		c.Message = message + "; the restore failed: " + strings.Join(problems, "; ")
		if obs, err := b.Net.Bond(ctx, c.Bond); err == nil {
			c.Message += "; the bond runs " + string(obs.Mode)
		}
	} else {
		results, ok := b.Prober.ProbeUntil(ctx, c.Probes, 10*time.Second)
		c.Results = results
		c.Reason, c.Message = reason, message+"; restored "+string(c.PreviousMode)
		if !ok {
			c.Message += ", and after the restore: " + failed(results)
		} else {
			c.Message += ", every probe answers"
		}
	}
	// Resolved once restored and probed.
	c.ResolvedAt = time.Now()
	if err := b.save(c); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Recording a rollback", "operation", c.Name)
	}
	b.tell(c)
}

// expire rolls c back when its time is up and it was not committed.
func (b *Bonds) expire(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, err := b.load(uid)
	if err != nil || c == nil || c.State != checkpointArmed {
		return
	}
	b.rollback(context.Background(), c, ReasonNotCommitted, fmt.Sprintf("not committed by %s", c.Expires.UTC().Format(time.RFC3339)))
}

func (b *Bonds) arm(c *checkpoint) {
	b.disarm(c.Operation)
	uid := c.Operation
	t := time.AfterFunc(time.Until(c.Expires), func() { b.expire(uid) })
	b.tmu.Lock()
	defer b.tmu.Unlock()
	if b.timers == nil {
		b.timers = map[types.UID]*time.Timer{}
	}
	b.timers[uid] = t
}

func (b *Bonds) disarm(uid types.UID) {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	if t := b.timers[uid]; t != nil {
		t.Stop()
		delete(b.timers, uid)
	}
}

func (b *Bonds) tell(c *checkpoint) {
	if b.Resolved != nil {
		b.Resolved(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
	}
}

// commitCheckpoint is the CommitCheckpoint executor.
type commitCheckpoint struct{ b *Bonds }

// Resumable: committing a committed checkpoint changes nothing.
func (commitCheckpoint) Resumable() bool { return true }

func (e commitCheckpoint) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	b := e.b
	spec := op.Spec.CommitCheckpoint
	if spec == nil {
		return nil, errMissing(op)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all, err := b.list()
	if err != nil {
		return nil, err
	}
	var latest *checkpoint
	for _, c := range all {
		if c.Bond != spec.Bond {
			continue
		}
		if c.State == checkpointArmed || c.State == checkpointApplying {
			latest = c
			break
		}
		if latest == nil || c.ResolvedAt.After(latest.ResolvedAt) {
			latest = c
		}
	}
	result := &nwv1.NodeOperationResult{}
	if obs, err := b.Net.Bond(ctx, spec.Bond); err == nil {
		result.Bond = &obs
	}
	switch {
	case latest == nil:
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: spec.Bond + " has no change waiting for its commit"}
	case latest.State == checkpointArmed && time.Now().Before(latest.Expires):
		latest.State, latest.ResolvedAt = checkpointCommitted, time.Now()
		if err := b.save(latest); err != nil {
			return nil, err
		}
		b.disarm(latest.Operation)
		b.tell(latest)
		result.PreviousMode = latest.PreviousMode
		return result, nil
	case latest.State == checkpointCommitted:
		result.PreviousMode = latest.PreviousMode
		return result, nil
	case latest.State == checkpointRolledBack:
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: fmt.Sprintf(
			"the change of %s to %s (operation %s) was already rolled back at %s (%s)", spec.Bond, latest.Mode, latest.Name, latest.ResolvedAt.UTC().Format(time.RFC3339), latest.Reason)}
	default:
		// Armed but expired (its timer is about to fire), or still being applied.
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: fmt.Sprintf(
			"the change of %s to %s (operation %s) expired at %s and is being rolled back", spec.Bond, latest.Mode, latest.Name, latest.Expires.UTC().Format(time.RFC3339))}
	}
}

// The checkpoint files.

func (b *Bonds) path(uid types.UID) string {
	return filepath.Join(b.StateDir, "checkpoint-"+string(uid)+".json")
}

func (b *Bonds) save(c *checkpoint) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return hostos.WriteFileAtomic(b.path(c.Operation), data, 0o600)
}

func (b *Bonds) load(uid types.UID) (*checkpoint, error) {
	data, err := os.ReadFile(b.path(uid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c := &checkpoint{}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", b.path(uid), err)
	}
	return c, nil
}

// list reads every checkpoint, oldest first.
func (b *Bonds) list() ([]*checkpoint, error) {
	entries, err := os.ReadDir(b.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var all []*checkpoint
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "checkpoint-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		c, err := b.load(types.UID(strings.TrimSuffix(strings.TrimPrefix(name, "checkpoint-"), ".json")))
		if err != nil {
			return nil, err
		}
		if c != nil {
			all = append(all, c)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Expires.Before(all[j].Expires) })
	return all, nil
}

// pending is the bond's change that waits for its commit, if any.
func (b *Bonds) pending(bond string) (*checkpoint, error) {
	all, err := b.list()
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.Bond == bond && (c.State == checkpointArmed || c.State == checkpointApplying) {
			return c, nil
		}
	}
	return nil, nil
}

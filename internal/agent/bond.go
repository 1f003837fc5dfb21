package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/netconf"
)

// A bond change is decided by the agent alone once it is made, because a bad one can cut the
// node off the API server, and with it off the operator. Before it changes anything the agent
// checks the change against the signed EdgeProfile in force and insists on its own probes
// (profile.go): a compromised operator can neither ask for a mode the site's switch does not
// carry nor switch off what would undo a bad one. Then it writes a checkpoint to the host's
// disk: the bond as observed (mode, members) and the previous content of the persistent files
// it will write. Then it changes the runtime mode and the persistent configuration, and
// probes. The change is kept only when a CommitCheckpoint for the bond arrives before the
// checkpoint expires (spec.setBondMode.checkpointTimeout after the change). Otherwise, or when
// the probes fail, or when the agent finds on starting that it stopped before the change was
// checked, it restores the previous bond and files by itself, probes again, and reports the
// operation RolledBack as soon as it reaches the API server. The checkpoint, its timer and the
// restore need nothing from the API server: they are local.
//
// A checkpoint moves through these states, each written to disk before what it names is done:
//
//	Applying -> Probing -> Armed -> Committed
//	   |           |         |
//	   +-----------+---------+--> RollingBack -> RolledBack
//
// A restart finds Applying or Probing (the change not checked: rolled back, Interrupted),
// RollingBack (the restore done again, as it may be half done), Armed (its timer set again, or
// rolled back at once when expired), or an end.
//
// While the change is probed and waits for its commit the SetBondMode operation stays Running;
// once checked, its result shows the bond as changed, the previous mode, the probes and when
// the checkpoint expires. It ends Succeeded when committed, RolledBack when restored, or Failed
// (RestoreFailed) when even the restore failed, saying what the bond runs.

// The reasons of the bond operations.
const (
	ReasonBondNotFound         = "BondNotFound"
	ReasonCheckpointPending    = "CheckpointPending"
	ReasonCheckpointUnreadable = "CheckpointUnreadable"
	ReasonProbeFailed          = "ProbeFailed"
	ReasonNotCommitted         = "NotCommitted"
	ReasonApplyFailed          = "ApplyFailed"
	ReasonRestoreFailed        = "RestoreFailed"
	ReasonNoCheckpoint         = "NoCheckpoint"
	ReasonInvalidOperation     = "InvalidOperation"
)

// The states of a checkpoint.
const (
	checkpointApplying    = "Applying"
	checkpointProbing     = "Probing"
	checkpointArmed       = "Armed"
	checkpointCommitted   = "Committed"
	checkpointRollingBack = "RollingBack"
	checkpointRolledBack  = "RolledBack"
)

// open: the checkpoint's change is made (or being made) and neither committed nor undone.
func (c *checkpoint) open() bool {
	return c.State == checkpointApplying || c.State == checkpointProbing || c.State == checkpointArmed || c.State == checkpointRollingBack
}

// checkpoint is one bond change as the host's disk keeps it, one file per operation.
type checkpoint struct {
	Operation types.UID `json:"operation"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Bond      string    `json:"bond"`
	// Previous is the bond as observed before the change: what a restore makes it again.
	Previous nwv1.BondObservation `json:"previous"`
	// Mode is what the change set.
	Mode nwv1.BondMode `json:"mode"`
	// PreviousFiles are the persistent files' contents before the change (nil: absent);
	// Files what the change wrote.
	PreviousFiles []hostos.File   `json:"previousFiles"`
	Files         []hostos.File   `json:"files"`
	Probes        nwv1.BondProbes `json:"probes"`
	Timeout       time.Duration   `json:"timeout"`
	Expires       time.Time       `json:"expires"`
	State         string          `json:"state"`
	// The probes after the change (Armed, Committed) or after the restore (RolledBack); for
	// a rollback its reason and message.
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
	// Profiles gives the signed EdgeProfile in force, which every change is checked against
	// before the host is touched (profile.go); nil refuses every change.
	Profiles Profiles
	// Through checks that a peer's address is reached through the bond; nil: the kernel's
	// route lookup in the agent's network namespace (netconf.Netlink.ThroughBond).
	Through func(bond string, ip net.IP) error
	// Resolved is told the operation whose checkpoint was checked, committed or rolled back,
	// so that its outcome is recorded at once.
	Resolved func(types.NamespacedName)

	// mu serialises the changes and the checkpoint files; tmu guards the timers and the
	// probing set, apart from mu, which a firing timer takes.
	mu      sync.Mutex
	tmu     sync.Mutex
	timers  map[types.UID]*time.Timer
	probing map[types.UID]bool
}

// Executors are the bond operations.
func (b *Bonds) Executors() map[nwv1.NodeOperationType]Executor {
	return map[nwv1.NodeOperationType]Executor{
		nwv1.OperationSetBondMode:      setBondMode{b},
		nwv1.OperationCommitCheckpoint: commitCheckpoint{b},
	}
}

// Recover is run when the agent starts, before it reaches the API server: a change it had not
// checked is undone, a restore it was in the middle of is done again, an expired checkpoint is
// rolled back, and the others' timers are set again. A checkpoint file it cannot read is set
// aside (renamed *.unreadable), and a new bond change is refused while one is there.
// Checkpoints resolved more than two days ago (longer than any operation's deadline) are
// removed.
func (b *Bonds) Recover(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	all, err := b.list(ctx)
	if err != nil {
		return err
	}
	for _, c := range all {
		switch c.State {
		case checkpointApplying, checkpointProbing:
			b.rollback(ctx, c, ReasonInterrupted, "the agent stopped before the change was checked; the previous configuration was restored when it started again")
		case checkpointRollingBack:
			b.rollback(ctx, c, c.Reason, c.Message)
		case checkpointArmed:
			if !time.Now().Before(c.Expires) {
				b.rollback(ctx, c, ReasonNotCommitted, fmt.Sprintf("not committed by %s", c.Expires.UTC().Format(time.RFC3339)))
			} else {
				b.arm(c)
			}
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
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
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
	all, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	if unreadable, _ := filepath.Glob(filepath.Join(b.StateDir, "*.unreadable")); len(unreadable) > 0 {
		return nil, &OperationError{Reason: ReasonCheckpointUnreadable, Message: fmt.Sprintf(
			"the checkpoint %s could not be read, so what it recorded cannot be undone by the agent: a person must look at the node and remove it", unreadable[0])}
	}
	for _, other := range all {
		if other.Bond == spec.Bond && other.open() {
			return nil, &OperationError{Reason: ReasonCheckpointPending, Message: fmt.Sprintf(
				"%s has an uncommitted change to %s (operation %s) until %s", spec.Bond, other.Mode, other.Name, other.Expires.UTC().Format(time.RFC3339))}
		}
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
	if err := b.allowed(ctx, spec); err != nil {
		return nil, err
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
		Previous: obs, Mode: spec.Mode, PreviousFiles: previous, Files: files, Probes: spec.Probes,
		Timeout: timeout, Expires: time.Now().Add(timeout), State: checkpointApplying}
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
	c.State, c.Expires = checkpointProbing, time.Now().Add(timeout)
	if err := b.save(c); err != nil {
		b.rollback(ctx, c, ReasonApplyFailed, "recording the change failed: "+err.Error())
		return b.outcome(ctx, c)
	}
	b.arm(c)
	// The probes run on their own, not holding the agent's one worker: a commit or another
	// operation is not kept waiting behind them.
	b.setProbing(c.Operation, true)
	go b.probe(c.Operation, spec.Probes, timeout/2)
	return b.outcome(ctx, c)
}

// allowed says why the change spec may not be made, nil when it may: it is checked against the
// signed EdgeProfile in force, whatever the operator asked (profile.go).
func (b *Bonds) allowed(ctx context.Context, spec *nwv1.SetBondModeOperation) error {
	if b.Profiles == nil {
		return &OperationError{Reason: ReasonNoProfile, Message: "this agent has no EdgeProfile to check a bond change against"}
	}
	p, err := b.Profiles.InForce(ctx)
	if err != nil {
		return err
	}
	through := b.Through
	if through == nil {
		through = netconf.Netlink{}.ThroughBond
	}
	if err := checkChange(spec, p, through); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("The EdgeProfile in force allows the bond change", "profile", p.Name, "version", p.Spec.Version,
		"bond", spec.Bond, "mode", spec.Mode, "peers", spec.Probes.Peers)
	return nil
}

// probe checks a change: again every 250 ms for up to budget (a link that changed mode takes a
// moment to carry traffic; LACP negotiates). All answering, the checkpoint is Armed and waits
// for its commit; otherwise the change is rolled back (ProbeFailed).
func (b *Bonds) probe(uid types.UID, probes nwv1.BondProbes, budget time.Duration) {
	defer b.setProbing(uid, false)
	results, ok := b.Prober.ProbeUntil(context.Background(), probes, budget)
	b.mu.Lock()
	defer b.mu.Unlock()
	c, err := b.load(uid)
	if err != nil || c == nil || c.State != checkpointProbing {
		return // expired and rolled back meanwhile, or unreadable
	}
	c.Results = results
	if !ok {
		b.rollback(context.Background(), c, ReasonProbeFailed, "after the change to "+string(c.Mode)+": "+failed(results))
		return
	}
	c.State = checkpointArmed
	if err := b.save(c); err != nil {
		b.rollback(context.Background(), c, ReasonApplyFailed, "recording the probes failed: "+err.Error())
		return
	}
	b.tell(c)
}

func (b *Bonds) setProbing(uid types.UID, on bool) {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	if b.probing == nil {
		b.probing = map[types.UID]bool{}
	}
	if on {
		b.probing[uid] = true
	} else {
		delete(b.probing, uid)
	}
}

func (b *Bonds) isProbing(uid types.UID) bool {
	b.tmu.Lock()
	defer b.tmu.Unlock()
	return b.probing[uid]
}

// outcome is what the record of c says of its operation, finishing what a crash left. b.mu is
// held.
func (b *Bonds) outcome(ctx context.Context, c *checkpoint) (*nwv1.NodeOperationResult, error) {
	switch c.State {
	case checkpointApplying:
		// Only a crash leaves one behind (Recover undoes it at the start).
		b.rollback(ctx, c, ReasonInterrupted, "the change did not finish; the previous configuration was restored")
	case checkpointProbing:
		if !b.isProbing(c.Operation) {
			b.rollback(ctx, c, ReasonInterrupted, "the agent stopped before the change was checked; the previous configuration was restored")
		}
	case checkpointRollingBack:
		b.rollback(ctx, c, c.Reason, c.Message)
	case checkpointArmed:
		if !time.Now().Before(c.Expires) {
			b.rollback(ctx, c, ReasonNotCommitted, fmt.Sprintf("not committed by %s", c.Expires.UTC().Format(time.RFC3339)))
		}
	}
	result := &nwv1.NodeOperationResult{PreviousMode: c.Previous.Mode, Probes: c.Results}
	if obs, err := b.Net.Bond(ctx, c.Bond); err == nil {
		result.Bond = &obs
	}
	switch c.State {
	case checkpointProbing:
		// Woken when the probes end; at the latest a second after the expiry, by when the
		// checkpoint's timer has fired.
		return result, &Pending{Until: c.Expires.Add(time.Second)}
	case checkpointArmed:
		result.CheckpointExpires = ptr.To(metav1.NewTime(c.Expires))
		// The checkpoint's timer started when the change was made.
		result.ChangedAt = ptr.To(metav1.NewMicroTime(c.Expires.Add(-c.Timeout)))
		return result, &Pending{Until: c.Expires.Add(time.Second)}
	case checkpointCommitted:
		return result, nil
	default:
		// RolledBack, unless even the restore failed: then Failed, saying what the bond runs.
		return result, &OperationError{Reason: c.Reason, Message: c.Message, RolledBack: c.Reason != ReasonRestoreFailed}
	}
}

// rollback restores c's previous bond and files, probes, and records the outcome; RollingBack
// is recorded first, so that a restart finishes a restore it interrupted. b.mu is held. It is
// not stopped by ctx's end (the agent shutting down mid-change still restores), only bounded.
func (b *Bonds) rollback(ctx context.Context, c *checkpoint, reason, message string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	b.disarm(c.Operation)
	c.State, c.Reason, c.Message = checkpointRollingBack, reason, message
	if err := b.save(c); err != nil {
		klog.FromContext(ctx).Error(err, "Recording a rollback's start", "operation", c.Name)
	}
	var problems []string
	if err := b.Net.Restore(ctx, c.Previous); err != nil {
		problems = append(problems, "restoring the bond in "+string(c.Previous.Mode)+": "+err.Error())
	}
	if err := hostos.WriteFiles(b.HostRoot, c.PreviousFiles); err != nil {
		problems = append(problems, "restoring the persistent configuration: "+err.Error())
	}
	if len(problems) > 0 {
		c.Reason = ReasonRestoreFailed
		c.Message = message + "; the restore failed: " + strings.Join(problems, "; ")
		if obs, err := b.Net.Bond(ctx, c.Bond); err == nil {
			c.Message += "; the bond runs " + string(obs.Mode)
		}
	} else {
		results, ok := b.Prober.ProbeUntil(ctx, c.Probes, 10*time.Second)
		c.Results = results
		c.Message = message + "; restored " + string(c.Previous.Mode)
		if !ok {
			c.Message += ", and after the restore: " + failed(results)
		} else {
			c.Message += ", every probe answers"
		}
	}
	// Resolved once restored and probed.
	c.State, c.ResolvedAt = checkpointRolledBack, time.Now()
	if err := b.save(c); err != nil {
		klog.FromContext(ctx).Error(err, "Recording a rollback", "operation", c.Name)
	}
	b.tell(c)
}

// expire rolls c back when its time is up and it was not committed.
func (b *Bonds) expire(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, err := b.load(uid)
	if err != nil || c == nil || (c.State != checkpointArmed && c.State != checkpointProbing) {
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
	all, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	// The change to commit: the one named, or the bond's open one, or else its latest.
	var latest *checkpoint
	for _, c := range all {
		if c.Bond != spec.Bond || (spec.Operation != "" && c.Name != spec.Operation) {
			continue
		}
		if c.open() {
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
	what := spec.Bond + " has no change"
	if spec.Operation != "" {
		what = spec.Bond + " has no change by operation " + spec.Operation
	}
	switch {
	case latest == nil:
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: what + " waiting for its commit"}
	case latest.State == checkpointArmed && time.Now().Before(latest.Expires):
		latest.State, latest.ResolvedAt = checkpointCommitted, time.Now()
		if err := b.save(latest); err != nil {
			return nil, err
		}
		b.disarm(latest.Operation)
		b.tell(latest)
		result.PreviousMode = latest.Previous.Mode
		return result, nil
	case latest.State == checkpointCommitted:
		// Committed already (this commit run again after a restart, or a second one).
		result.PreviousMode = latest.Previous.Mode
		return result, nil
	case latest.State == checkpointProbing || latest.State == checkpointApplying:
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: fmt.Sprintf(
			"the change of %s to %s (operation %s) is not checked yet: commit it once its result shows every probe answering", spec.Bond, latest.Mode, latest.Name)}
	case latest.State == checkpointRolledBack:
		return result, &OperationError{Reason: ReasonNoCheckpoint, Message: fmt.Sprintf(
			"the change of %s to %s (operation %s) was already rolled back at %s (%s)", spec.Bond, latest.Mode, latest.Name, latest.ResolvedAt.UTC().Format(time.RFC3339), latest.Reason)}
	default:
		// Armed but expired (its timer is about to fire), or being rolled back.
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

// list reads every checkpoint, oldest first. One it cannot read is set aside (renamed
// *.unreadable) and logged, so that the others are still recovered.
func (b *Bonds) list(ctx context.Context) ([]*checkpoint, error) {
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
			path := filepath.Join(b.StateDir, name)
			klog.FromContext(ctx).Error(err, "A bond checkpoint cannot be read; it is set aside, and bond changes are refused until a person removes it", "path", path+".unreadable")
			if rerr := os.Rename(path, path+".unreadable"); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			continue
		}
		if c != nil {
			all = append(all, c)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Expires.Before(all[j].Expires) })
	return all, nil
}

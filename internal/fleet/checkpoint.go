package fleet

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// WitnessOptions say whose countersignature the hub trusts for the members' audit trails.
type WitnessOptions struct {
	// Keys are the witnesses' public keys (a receiver each, nodewright-audit serve
	// --witness-key). With keys, the hub records only checkpoints one of them countersigned,
	// and each member's recorded checkpoint stays with the witness key it was first
	// countersigned by. Without keys, the hub records checkpoints on the member's word.
	Keys []ed25519.PublicKey
	// Grace is how long a member's checkpoint may be later than the witnessed one before
	// CheckpointConsistent turns False (NotWitnessed): the time shipping has to get it
	// countersigned. Default DefaultWitnessGrace.
	Grace time.Duration
}

// DefaultWitnessGrace is the default WitnessOptions.Grace: a shipped checkpoint is
// countersigned within seconds; minutes allow a receiver's restart.
const DefaultWitnessGrace = 10 * time.Minute

// Published is the checkpoint line the member publishes in its checkpoint ConfigMap, and the
// witnessed checkpoint beside it.
type Published struct {
	// Found is false when there is no ConfigMap or no line in it.
	Found bool
	Line  string
	// Witnessed is the line of the newest checkpoint the trail's witness countersigned, as the
	// operator relays it; empty when there is none.
	Witnessed string
}

// setCheckpoint checks the published checkpoints against the one the hub recorded, on the
// witness's word when the hub has witness keys (setWitnessedCheckpoint), else on the member's.
// It returns when to look again, 0 for no need.
func setCheckpoint(status *fleetv1alpha1.NodewrightClusterSummaryStatus, p Published, w WitnessOptions, now time.Time) time.Duration {
	if len(w.Keys) > 0 {
		return setWitnessedCheckpoint(status, p, w, now)
	}
	setPublishedCheckpoint(status, p)
	return 0
}

// setPublishedCheckpoint checks the published checkpoint against the one the hub recorded,
// on the member's word alone. The recorded checkpoint only moves forward, to a published one
// with a higher sequence. One behind it, or different from it at the same sequence, means the
// member's trail was rewritten or its ConfigMap replaced: CheckpointConsistent turns False and
// the recorded one stays. The hub cannot tell whether a later checkpoint extends the recorded
// one (that needs the trail itself: nodewright-audit verify); it records it, so that an
// operator that rewrites its trail and publishes a later checkpoint of the rewrite is
// believed. A witness closes that (setWitnessedCheckpoint).
func setPublishedCheckpoint(status *fleetv1alpha1.NodewrightClusterSummaryStatus, p Published) {
	cond := metav1.Condition{Type: fleetv1alpha1.ConditionCheckpointConsistent}
	recorded := status.Checkpoint
	status.PublishedCheckpoint = nil
	published, err := parseCheckpoint(p)
	switch {
	case !p.Found && recorded == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, fleetv1alpha1.ReasonNoCheckpoint, "The member publishes no audit checkpoint yet"
	case !p.Found:
		cond.Status, cond.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonNoCheckpoint
		cond.Message = fmt.Sprintf("The member no longer publishes a checkpoint; the hub recorded sequence %d", recorded.Sequence)
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBad, shortMessage(err.Error())
	case recorded == nil || published.Sequence > recorded.Sequence:
		status.Checkpoint = published
		cond.Status, cond.Reason = metav1.ConditionTrue, fleetv1alpha1.ReasonCheckpointOK
		cond.Message = fmt.Sprintf("Sequence %d recorded", published.Sequence)
	case published.Sequence == recorded.Sequence && published.Hash == recorded.Hash:
		cond.Status, cond.Reason = metav1.ConditionTrue, fleetv1alpha1.ReasonCheckpointOK
		cond.Message = fmt.Sprintf("Sequence %d recorded", published.Sequence)
	case published.Sequence == recorded.Sequence:
		status.PublishedCheckpoint = published
		cond.Status, cond.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointForked
		cond.Message = fmt.Sprintf("The published checkpoint at sequence %d hashes to %s, the recorded one to %s", published.Sequence, published.Hash, recorded.Hash)
	default:
		status.PublishedCheckpoint = published
		cond.Status, cond.Reason = metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBehind
		cond.Message = fmt.Sprintf("The published checkpoint is at sequence %d, behind the recorded %d", published.Sequence, recorded.Sequence)
	}
	status.AwaitingWitnessSince = nil
	meta.SetStatusCondition(&status.Conditions, cond)
}

// parseCheckpoint reads the published line as the operator writes it (internal/operator:
// one canonical checkpoint entry, newline-terminated).
func parseCheckpoint(p Published) (*fleetv1alpha1.AuditCheckpoint, error) {
	if !p.Found {
		return nil, nil
	}
	e, err := audit.ParseLine([]byte(strings.TrimSpace(p.Line)))
	if err != nil {
		return nil, fmt.Errorf("the published checkpoint does not parse: %w", err)
	}
	if e.Checkpoint == nil {
		return nil, fmt.Errorf("the published line is a record, not a checkpoint")
	}
	t := metav1.NewTime(e.Checkpoint.Time.Truncate(time.Second)) // as the API server keeps it: an unchanged one compares equal
	return &fleetv1alpha1.AuditCheckpoint{Sequence: int64(e.Checkpoint.Size), Hash: e.Checkpoint.Head.String(), Time: &t}, nil
}

// setWitnessedCheckpoint checks the member's checkpoints on the witness's word.
//
// The recorded checkpoint is the newest the witness countersigned, as the member relays it
// (the operator cannot make one: it has no witness key, and the witness countersigns only
// checkpoints of its own copy of the trail, which only grows). It moves only to a later one
// countersigned by the same witness key, which extends it because the witness's copy only
// grows; a countersigned one at the same sequence with another head, or by another key, is a
// fork against the witness, and one behind it was withheld or put back. The recorded one
// stays in every such case.
//
// The member's own checkpoint is then held against the witnessed one: at the same sequence it
// must be the same (else the trail forked from the witness's copy: rewritten); behind it, it
// was put back. Later than it, the hub cannot tell whether it extends the witnessed one (that
// needs the entries between): it gives shipping Grace to get it countersigned, counted from
// when the hub first saw it later with the witnessed one not moving since. A rewritten trail
// is never countersigned, so past Grace it shows NotWitnessed, as does a trail no longer
// shipped. It returns when Grace runs out, to look again then.
func setWitnessedCheckpoint(status *fleetv1alpha1.NodewrightClusterSummaryStatus, p Published, w WitnessOptions, now time.Time) time.Duration {
	grace := w.Grace
	if grace <= 0 {
		grace = DefaultWitnessGrace
	}
	cond := metav1.Condition{Type: fleetv1alpha1.ConditionCheckpointConsistent}
	since := status.AwaitingWitnessSince
	status.PublishedCheckpoint, status.AwaitingWitnessSince = nil, nil
	set := func(s metav1.ConditionStatus, reason, format string, args ...any) time.Duration {
		cond.Status, cond.Reason, cond.Message = s, reason, shortMessage(fmt.Sprintf(format, args...))
		meta.SetStatusCondition(&status.Conditions, cond)
		return 0
	}

	recorded := status.Checkpoint
	if recorded != nil && recorded.WitnessKeyID == "" {
		recorded = nil // recorded on the member's word, before the hub had witness keys
	}
	witnessed, err := parseWitnessed(p.Witnessed, w.Keys)
	advanced := false
	switch {
	case err != nil:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonWitnessedBad, "%v", err)
	case witnessed == nil && recorded != nil:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonNoCheckpoint,
			"The member no longer publishes the witnessed checkpoint; the hub recorded sequence %d countersigned by witness key %s", recorded.Sequence, recorded.WitnessKeyID)
	case witnessed == nil:
	case recorded == nil:
		status.Checkpoint, recorded, advanced = witnessed, witnessed, true
	case witnessed.WitnessKeyID != recorded.WitnessKeyID:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonForkedFromWitness,
			"Fork against the witness: the published witnessed checkpoint (sequence %d) is countersigned by witness key %s, the recorded one (sequence %d) by %s: another witness holds another copy, which the hub cannot hold against the recorded one",
			witnessed.Sequence, witnessed.WitnessKeyID, recorded.Sequence, recorded.WitnessKeyID)
	case witnessed.Sequence > recorded.Sequence:
		status.Checkpoint, recorded, advanced = witnessed, witnessed, true
	case witnessed.Sequence == recorded.Sequence && witnessed.Hash == recorded.Hash:
	case witnessed.Sequence == recorded.Sequence:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonForkedFromWitness,
			"Fork against the witness: witness key %s countersigned sequence %d with head %s, and before with head %s: its copy was replaced (a new receiver with the same key?)",
			recorded.WitnessKeyID, recorded.Sequence, witnessed.Hash, recorded.Hash)
	default:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBehind,
			"The published witnessed checkpoint is at sequence %d, behind the recorded %d: withheld or put back", witnessed.Sequence, recorded.Sequence)
	}

	published, err := parseCheckpoint(p)
	switch {
	case !p.Found && recorded == nil:
		return set(metav1.ConditionUnknown, fleetv1alpha1.ReasonNoCheckpoint, "The member publishes no audit checkpoint yet")
	case !p.Found:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonNoCheckpoint,
			"The member no longer publishes its checkpoint; the witness countersigned sequence %d", recorded.Sequence)
	case err != nil:
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBad, "%v", err)
	case recorded != nil && published.Sequence == recorded.Sequence && published.Hash == recorded.Hash:
		return set(metav1.ConditionTrue, fleetv1alpha1.ReasonCheckpointOK, "Sequence %d countersigned by witness key %s", recorded.Sequence, recorded.WitnessKeyID)
	case recorded != nil && published.Sequence == recorded.Sequence:
		status.PublishedCheckpoint = published
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonForkedFromWitness,
			"Fork against the witness: the member's checkpoint at sequence %d has head %s, the witness (key %s) countersigned head %s: the trail was rewritten",
			published.Sequence, published.Hash, recorded.WitnessKeyID, recorded.Hash)
	case recorded != nil && published.Sequence < recorded.Sequence:
		status.PublishedCheckpoint = published
		return set(metav1.ConditionFalse, fleetv1alpha1.ReasonCheckpointBehind,
			"The member's checkpoint is at sequence %d, behind the witnessed %d: put back", published.Sequence, recorded.Sequence)
	}

	// Later than the witnessed one, or nothing witnessed yet.
	status.PublishedCheckpoint = published
	if since == nil || advanced {
		since = &metav1.Time{Time: now.Truncate(time.Second)} // as the API server keeps it
	}
	status.AwaitingWitnessSince = since
	witnessedUpTo := "the member publishes no witnessed checkpoint"
	if recorded != nil {
		witnessedUpTo = fmt.Sprintf("the witness (key %s) countersigned up to sequence %d", recorded.WitnessKeyID, recorded.Sequence)
	}
	if left := since.Add(grace).Sub(now); left > 0 {
		set(metav1.ConditionTrue, fleetv1alpha1.ReasonAwaitingWitness,
			"The member's checkpoint at sequence %d is not countersigned yet (%s); shipping has until %s", published.Sequence, witnessedUpTo, since.Add(grace).UTC().Format(time.RFC3339))
		return left
	}
	return set(metav1.ConditionFalse, fleetv1alpha1.ReasonNotWitnessed,
		"The member's checkpoint at sequence %d is not countersigned by the witness after %s (%s): its trail forked from the witness's copy (a rewrite, which the witness never countersigns), or is no longer shipped; verify it against the witness's checkpoint",
		published.Sequence, grace, witnessedUpTo)
}

// maxMessageBytes bounds a condition message made from what a member publishes: a key ID or
// a parse error may quote up to a whole line of it, and the API server refuses a message over
// 32 KiB.
const maxMessageBytes = 1024

// shortMessage cuts a message to maxMessageBytes, between characters.
func shortMessage(m string) string {
	if len(m) <= maxMessageBytes {
		return m
	}
	return strings.ToValidUTF8(m[:maxMessageBytes-3], "") + "..."
}

// parseWitnessed reads the witnessed checkpoint the member relays and checks its
// countersignature; nil when the member relays none. The checkpoint's own signature, by the
// trail's key, is the witness's to check: it countersigns only checkpoints that verify.
func parseWitnessed(line string, keys []ed25519.PublicKey) (*fleetv1alpha1.AuditCheckpoint, error) {
	if strings.TrimSpace(line) == "" {
		return nil, nil
	}
	w, err := audit.ParseWitnessed([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("the published witnessed checkpoint does not parse: %w", err)
	}
	if err := w.VerifyWitness(keys); err != nil {
		return nil, fmt.Errorf("the published witnessed checkpoint: %w", err)
	}
	c := w.Checkpoint()
	signed, witnessedAt := metav1.NewTime(c.Time.Truncate(time.Second)), metav1.NewTime(w.Time.Truncate(time.Second))
	return &fleetv1alpha1.AuditCheckpoint{Sequence: int64(c.Size), Hash: c.Head.String(), Time: &signed,
		WitnessKeyID: w.KeyID, WitnessTime: &witnessedAt}, nil
}

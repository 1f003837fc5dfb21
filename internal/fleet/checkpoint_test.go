package fleet

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// TestCheckpointMismatch: a member that publishes a checkpoint other than the one the hub
// recorded, at the same sequence (a rewritten trail) or at an earlier one (a trail or
// ConfigMap put back), shows CheckpointConsistent False with the published checkpoint beside
// the recorded one, which stays; publishing the recorded one again makes it consistent.
func TestCheckpointMismatch(t *testing.T) {
	hub, members := startFleet(t, 1)
	m := members[0]
	createCluster(t, m)
	main, _ := trail(t, "main", 2, 2) // checkpoints at sequences 2 and 5
	fork, _ := trail(t, "fork", 2, 2) // the same sequences, other hashes
	checkpoint := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseCheckpoint(Published{Found: true, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at2, at5, fork5 := checkpoint(main[0]), checkpoint(main[1]), checkpoint(fork[1])
	same := func(a, b *fleetv1alpha1.AuditCheckpoint) bool {
		return a != nil && b != nil && a.Sequence == b.Sequence && a.Hash == b.Hash
	}
	// expect waits for the condition's reason and the recorded and published checkpoints.
	expect := func(reason string, recorded, published *fleetv1alpha1.AuditCheckpoint) {
		t.Helper()
		waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
			want := metav1.ConditionFalse
			if reason == fleetv1alpha1.ReasonCheckpointOK {
				want = metav1.ConditionTrue
			}
			switch {
			case c == nil || c.Status != want || c.Reason != reason:
				return fmt.Sprintf("CheckpointConsistent %+v; want %s %s", c, want, reason)
			case !same(s.Status.Checkpoint, recorded):
				return fmt.Sprintf("recorded %+v; want %+v", s.Status.Checkpoint, recorded)
			case published == nil && s.Status.PublishedCheckpoint != nil, published != nil && !same(s.Status.PublishedCheckpoint, published):
				return fmt.Sprintf("publishedCheckpoint %+v; want %+v", s.Status.PublishedCheckpoint, published)
			}
			return ""
		})
	}

	publish(t, m, main[0])
	registerKubeconfig(t, hub, "site", m, bearer(m.hubToken(t, "hub-credential")))
	expect(fleetv1alpha1.ReasonCheckpointOK, at2, nil)
	publish(t, m, main[1])
	expect(fleetv1alpha1.ReasonCheckpointOK, at5, nil)

	// The same sequence, another hash: the trail was rewritten.
	publish(t, m, fork[1])
	expect(fleetv1alpha1.ReasonCheckpointForked, at5, fork5)
	// A sequence going back.
	publish(t, m, main[0])
	expect(fleetv1alpha1.ReasonCheckpointBehind, at5, at2)
	// The recorded checkpoint published again.
	publish(t, m, main[1])
	expect(fleetv1alpha1.ReasonCheckpointOK, at5, nil)
}

// newSigner makes a key of its own: the trail's, or a witness's.
func newSigner(t *testing.T) *audit.Signer {
	t.Helper()
	key, _, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := audit.LoadSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countersign is the witnessed checkpoint of a checkpoint line, as the witness key w makes it.
func countersign(t *testing.T, w *audit.Signer, line string) string {
	t.Helper()
	e, err := audit.ParseLine([]byte(strings.TrimSpace(line)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.Countersign(e, time.Date(2025, 6, 1, 13, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return string(c.Line()) + "\n"
}

func TestSetWitnessedCheckpoint(t *testing.T) {
	main, _ := trail(t, "main", 2, 2, 2) // checkpoints at sequences 2, 5 and 8
	fork, _ := trail(t, "fork", 2, 2)    // at 2 and 5, other hashes
	witness, another := newSigner(t), newSigner(t)
	opts := WitnessOptions{Keys: []ed25519.PublicKey{witness.PublicKey(), another.PublicKey()}, Grace: 10 * time.Minute}
	now := time.Date(2025, 6, 2, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	w2, w5, w8 := countersign(t, witness, main[0]), countersign(t, witness, main[1]), countersign(t, witness, main[2])
	witnessed := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseWitnessed(line, opts.Keys)
		if err != nil || c == nil {
			t.Fatal(err)
		}
		return c
	}
	own := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseCheckpoint(Published{Found: true, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at2, at5, fork5 := witnessed(w2), witnessed(w5), own(fork[1])
	if at5.WitnessKeyID != audit.KeyID(witness.PublicKey()) || at5.WitnessTime == nil || at5.Sequence != 5 || at5.Hash != own(main[1]).Hash {
		t.Fatalf("a witnessed checkpoint: %+v", at5)
	}
	legacy := own(main[0])
	published := func(line, witnessed string) Published {
		return Published{Found: line != "", Line: line, Witnessed: witnessed}
	}
	for _, tc := range []struct {
		name         string
		recorded     *fleetv1alpha1.AuditCheckpoint
		since        *metav1.Time
		published    Published
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantRecorded *fleetv1alpha1.AuditCheckpoint
		wantShown    *fleetv1alpha1.AuditCheckpoint
		wantSince    *metav1.Time
		wantRecheck  time.Duration
	}{
		{name: "none yet", wantStatus: metav1.ConditionUnknown, wantReason: fleetv1alpha1.ReasonNoCheckpoint},
		{name: "first", published: published(main[0], w2), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at2},
		{name: "forward", recorded: at2, published: published(main[1], w5), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		{name: "same", recorded: at5, published: published(main[1], w5), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		{name: "recorded on the member's word, before the hub had witness keys", recorded: legacy, published: published(main[1], w5),
			wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		// The member's checkpoint later than the witnessed one: shipping has the grace.
		{name: "not countersigned yet", recorded: at2, published: published(main[1], w2), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonAwaitingWitness,
			wantRecorded: at2, wantShown: own(main[1]), wantSince: &metav1.Time{Time: now}, wantRecheck: 10 * time.Minute},
		{name: "still within the grace", recorded: at2, since: ago(4 * time.Minute), published: published(main[2], w2), wantStatus: metav1.ConditionTrue,
			wantReason: fleetv1alpha1.ReasonAwaitingWitness, wantRecorded: at2, wantShown: own(main[2]), wantSince: ago(4 * time.Minute), wantRecheck: 6 * time.Minute},
		{name: "past the grace", recorded: at2, since: ago(10 * time.Minute), published: published(main[1], w2), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonNotWitnessed, wantRecorded: at2, wantShown: own(main[1]), wantSince: ago(10 * time.Minute)},
		{name: "the witness moved: the grace starts again", recorded: at2, since: ago(time.Hour), published: published(main[2], w5), wantStatus: metav1.ConditionTrue,
			wantReason: fleetv1alpha1.ReasonAwaitingWitness, wantRecorded: at5, wantShown: own(main[2]), wantSince: &metav1.Time{Time: now}, wantRecheck: 10 * time.Minute},
		{name: "caught up", recorded: at2, since: ago(time.Hour), published: published(main[1], w5), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonCheckpointOK, wantRecorded: at5},
		{name: "nothing witnessed yet", published: published(main[0], ""), wantStatus: metav1.ConditionTrue, wantReason: fleetv1alpha1.ReasonAwaitingWitness,
			wantShown: own(main[0]), wantSince: &metav1.Time{Time: now}, wantRecheck: 10 * time.Minute},
		{name: "never witnessed", since: ago(time.Hour), published: published(main[0], ""), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonNotWitnessed,
			wantShown: own(main[0]), wantSince: ago(time.Hour)},
		// What a rewrite can show.
		{name: "the member's checkpoint forked at the witnessed sequence", recorded: at5, published: published(fork[1], w5), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonForkedFromWitness, wantRecorded: at5, wantShown: fork5},
		{name: "the member's checkpoint behind the witnessed one", recorded: at5, published: published(main[0], w5), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonCheckpointBehind, wantRecorded: at5, wantShown: own(main[0])},
		{name: "the witnessed one behind the recorded one", recorded: at5, published: published(main[1], w2), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonCheckpointBehind, wantRecorded: at5},
		{name: "the witnessed one gone", recorded: at5, published: published(main[1], ""), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonNoCheckpoint, wantRecorded: at5},
		{name: "the member's checkpoint gone", recorded: at5, published: Published{Witnessed: w5}, wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonNoCheckpoint, wantRecorded: at5},
		{name: "countersigned by the operator's key", recorded: at5, published: published(fork[1], countersign(t, newSigner(t), fork[1])), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonWitnessedBad, wantRecorded: at5},
		{name: "the witnessed one edited", recorded: at5, published: published(main[2], strings.Replace(w8, `"size":8`, `"size":9`, 1)), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonWitnessedBad, wantRecorded: at5},
		{name: "the witness countersigned two checkpoints at one sequence", recorded: at5, published: published(fork[1], countersign(t, witness, fork[1])), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonForkedFromWitness, wantRecorded: at5},
		{name: "another witness", recorded: at5, published: published(main[2], countersign(t, another, main[2])), wantStatus: metav1.ConditionFalse,
			wantReason: fleetv1alpha1.ReasonForkedFromWitness, wantRecorded: at5},
		{name: "the member's checkpoint unreadable", recorded: at5, published: published("not json\n", w5), wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonCheckpointBad, wantRecorded: at5},
		// A key ID as long as a line may be, quoted in the message: the message stays short.
		{name: "a witness key ID of 60 KiB", recorded: at5, published: published(main[1], strings.Replace(w5, `"keyId":"`+audit.KeyID(witness.PublicKey())+`"`, `"keyId":"`+strings.Repeat("é", 30<<10)+`"`, 1)),
			wantStatus: metav1.ConditionFalse, wantReason: fleetv1alpha1.ReasonWitnessedBad, wantRecorded: at5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := &fleetv1alpha1.NodewrightClusterSummaryStatus{Checkpoint: tc.recorded, AwaitingWitnessSince: tc.since}
			recheck := setCheckpoint(status, tc.published, opts, now)
			c := meta.FindStatusCondition(status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
			if c == nil || c.Status != tc.wantStatus || c.Reason != tc.wantReason || c.Message == "" || len(c.Message) > maxMessageBytes || !utf8.ValidString(c.Message) {
				t.Errorf("condition %.300v; want %s %s with a message of at most %d bytes", c, tc.wantStatus, tc.wantReason, maxMessageBytes)
			}
			if !equality.Semantic.DeepEqual(status.Checkpoint, tc.wantRecorded) {
				t.Errorf("recorded %+v; want %+v", status.Checkpoint, tc.wantRecorded)
			}
			if !equality.Semantic.DeepEqual(status.PublishedCheckpoint, tc.wantShown) {
				t.Errorf("publishedCheckpoint %+v; want %+v", status.PublishedCheckpoint, tc.wantShown)
			}
			if !equality.Semantic.DeepEqual(status.AwaitingWitnessSince, tc.wantSince) {
				t.Errorf("awaitingWitnessSince %v; want %v", status.AwaitingWitnessSince, tc.wantSince)
			}
			if recheck != tc.wantRecheck {
				t.Errorf("looks again in %s; want %s", recheck, tc.wantRecheck)
			}
		})
	}
}

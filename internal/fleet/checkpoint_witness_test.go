package fleet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// operatorTrail writes a trail into dir as the operator does, with its key: one record by
// each actor (the same actor, the same record) and the closing checkpoint. It returns the lines.
func operatorTrail(t *testing.T, dir string, key *audit.Signer, actors ...string) []string {
	t.Helper()
	sink, err := audit.OpenFileSink(dir, audit.FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	log := audit.NewLog(sink, key, sink.State(), audit.LogOptions{})
	for _, actor := range actors {
		subject := audit.Subject{Kind: "Node", Name: "edge-1", UID: "edge-1"}
		r := audit.Transition(subject, actor, "Reboot", "Ready", "Rebooting", "Maintenance", "", actor, time.Date(2025, 6, 1, 12, 0, len(actor), 0, time.UTC))
		if _, err := log.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := audit.ChainFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.SplitAfter(data, []byte("\n")) {
			if len(l) > 0 {
				lines = append(lines, string(l))
			}
		}
	}
	return lines
}

// shipToWitness ships the trail in dir to the receiver at url, as the operator's shipper does,
// until the receiver holds it all, or until the shipper's last error says wantErr; it returns
// the last witnessed checkpoint the receiver handed back, and the shipper's status.
func shipToWitness(t *testing.T, dir, url, wantErr string) (string, audit.ShipperStatus) {
	t.Helper()
	var mu sync.Mutex
	var witnessed string
	shipper, err := audit.NewShipper(dir, audit.ShipperOptions{URL: url, PollInterval: 20 * time.Millisecond, OnWitnessed: func(w *audit.Witnessed) {
		mu.Lock()
		defer mu.Unlock()
		witnessed = string(w.Line()) + "\n"
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shipper.Start(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, patience, func() string {
		st := shipper.Status()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case wantErr == "" && (!st.CaughtUp || witnessed == ""):
			return fmt.Sprintf("shipping: %+v, witnessed %q", st, witnessed)
		case wantErr != "" && (!strings.Contains(st.LastError, wantErr) || witnessed == ""):
			return fmt.Sprintf("shipping: %+v, want the error %q", st, wantErr)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	return witnessed, shipper.Status()
}

// publishWitnessed publishes the member's checkpoint and the witnessed one (none when empty)
// in its checkpoint ConfigMap, as the operator may: its role lets it patch that ConfigMap.
func publishWitnessed(t *testing.T, m *apiServer, line, witnessed string) {
	t.Helper()
	ctx := context.Background()
	m.installHubReader(t) // the namespace
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: memberNS, Name: CheckpointConfigMap}}
	err := m.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	cm.Data = map[string]string{operator.CheckpointKey: line}
	if witnessed != "" {
		cm.Data[operator.WitnessedKey] = witnessed
	}
	switch {
	case apierrors.IsNotFound(err):
		err = m.Client.Create(ctx, cm)
	case err == nil:
		err = m.Client.Update(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointWitnessed is the attack of issue 28, item 5, against the hub. The operator
// holds the trail's key and may patch its checkpoint ConfigMap. Its trail of alice, mallory
// and bob, checkpointed at seq 3, was shipped to the witness, which countersigned that
// checkpoint; the hub recorded it. The operator rewrites the trail as alice, bob, carol and
// dave, checkpointed at seq 4 with the same key, and patches the ConfigMap with the new
// checkpoint. A hub without a witness records seq 4; with one, it keeps the witnessed seq 3,
// the witness never countersigns the rewrite (shipping it is refused), and once the grace has
// passed the hub shows CheckpointConsistent False, NotWitnessed. A "witnessed" checkpoint the
// operator countersigns with its own key, or none, is flagged too, and a rewrite at the
// witnessed sequence is a fork against the witness at once.
func TestCheckpointWitnessed(t *testing.T) {
	witness, key := newSigner(t), newSigner(t)
	const grace = 5 * time.Second // what this test is about; the healthy steps do not wait on it
	hub, members := startFleetWith(t, 1, func(o *Options) {
		o.Witness = WitnessOptions{Keys: []ed25519.PublicKey{witness.PublicKey()}, Grace: grace}
	})
	m := members[0]
	createCluster(t, m)
	recv, err := audit.OpenReceiver(t.TempDir(), audit.ReceiverOptions{PublicKeys: []ed25519.PublicKey{key.PublicKey()}, Witness: witness})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	t.Cleanup(func() { srv.Close(); _ = recv.Close() })

	dir := filepath.Join(t.TempDir(), "audit")
	original := operatorTrail(t, dir, key, "alice", "mallory", "bob")
	if len(original) != 4 || !strings.Contains(original[3], `"checkpoint":{"size":3,`) {
		t.Fatalf("the trail: %q", original)
	}
	w3, _ := shipToWitness(t, dir, srv.URL, "")
	parsed := func(line string) *fleetv1alpha1.AuditCheckpoint {
		c, err := parseCheckpoint(Published{Found: true, Line: line})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at3 := parsed(original[3])
	// expect waits for the condition's reason and the recorded and published checkpoints.
	expect := func(reason string, published *fleetv1alpha1.AuditCheckpoint) {
		t.Helper()
		waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
			c := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionCheckpointConsistent)
			want := metav1.ConditionFalse
			if reason == fleetv1alpha1.ReasonCheckpointOK {
				want = metav1.ConditionTrue
			}
			switch r := s.Status.Checkpoint; {
			case c == nil || c.Status != want || c.Reason != reason:
				return fmt.Sprintf("CheckpointConsistent %+v; want %s %s", c, want, reason)
			case r == nil || r.Sequence != at3.Sequence || r.Hash != at3.Hash:
				return fmt.Sprintf("recorded %+v; want the witnessed %+v", r, at3)
			case published == nil && s.Status.PublishedCheckpoint != nil:
				return fmt.Sprintf("publishedCheckpoint %+v; want none", s.Status.PublishedCheckpoint)
			case published != nil && (s.Status.PublishedCheckpoint == nil || s.Status.PublishedCheckpoint.Hash != published.Hash):
				return fmt.Sprintf("publishedCheckpoint %+v; want %+v", s.Status.PublishedCheckpoint, published)
			}
			return ""
		})
	}

	publishWitnessed(t, m, original[3], w3)
	registerKubeconfig(t, hub, "site", m, bearer(m.hubToken(t, "hub-credential")))
	expect(fleetv1alpha1.ReasonCheckpointOK, nil)

	// The rewrite, in place of the trail, with the same key.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	rewritten := operatorTrail(t, dir, key, "alice", "bob", "carol", "dave")
	if len(rewritten) != 5 || rewritten[0] != original[0] || !strings.Contains(rewritten[4], `"checkpoint":{"size":4,`) {
		t.Fatalf("the rewrite: %q", rewritten)
	}
	// Shipped, it is refused, and the witness hands back its checkpoint of the original.
	if again, st := shipToWitness(t, dir, srv.URL, "the audit receiver's copy is another chain"); again != w3 || st.Delivered != 0 {
		t.Fatalf("the witness handed back %s (delivered %d), want %s", again, st.Delivered, w3)
	}
	if recv.Head().Next != 4 {
		t.Fatalf("the witness's copy moved: %s", recv.Head())
	}
	// The operator patches its ConfigMap with the rewrite's checkpoint.
	publishWitnessed(t, m, rewritten[4], w3)
	expect(fleetv1alpha1.ReasonNotWitnessed, parsed(rewritten[4]))
	// It countersigns the rewrite's checkpoint itself, with the only key it holds.
	publishWitnessed(t, m, rewritten[4], countersign(t, key, rewritten[4]))
	expect(fleetv1alpha1.ReasonWitnessedBad, nil)
	// It withholds the witnessed checkpoint.
	publishWitnessed(t, m, rewritten[4], "")
	expect(fleetv1alpha1.ReasonNoCheckpoint, nil)
	// A rewrite of the same length, alice, bob and carol, checkpointed at seq 3: a fork
	// against the witness at once.
	same := operatorTrail(t, filepath.Join(t.TempDir(), "audit"), key, "alice", "bob", "carol")
	publishWitnessed(t, m, same[3], w3)
	expect(fleetv1alpha1.ReasonForkedFromWitness, parsed(same[3]))
	// The original again.
	publishWitnessed(t, m, original[3], w3)
	expect(fleetv1alpha1.ReasonCheckpointOK, nil)
	waitSummary(t, hub.Client, "site", func(s *fleetv1alpha1.NodewrightClusterSummary) string {
		if r := s.Status.Checkpoint; r == nil || r.WitnessKeyID != audit.KeyID(witness.PublicKey()) || r.WitnessTime == nil {
			return fmt.Sprintf("the recorded checkpoint is not the witness's: %+v", r)
		}
		return ""
	})
}

package operator_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// With its trail shipped to a receiver that is a witness, the operator relays each checkpoint
// the witness countersigned into its checkpoint ConfigMap beside its own (the key
// witnessed.jsonl), for the fleet hub and for verification; it is the checkpoint the operator
// published, countersigned by the witness's key, which the operator does not hold.
func TestTheOperatorRelaysTheWitnessedCheckpoint(t *testing.T) {
	ns := env.Namespace(t)
	dir := t.TempDir()
	priv, pub, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "audit.key")
	if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	trailKey, err := audit.ParsePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	witnessPriv, _, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	witness, err := audit.LoadSigner(witnessPriv)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := audit.OpenReceiver(t.TempDir(), audit.ReceiverOptions{PublicKeys: []ed25519.PublicKey{trailKey}, Witness: witness})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	t.Cleanup(func() { srv.Close(); _ = recv.Close() })

	ctx := context.Background()
	appendRecords, checkpoint, stop, err := operator.RunAuditTrail(env.Config, env.Client, operator.AuditOptions{
		Dir: filepath.Join(dir, "audit"), KeyFile: keyFile, Actor: "system:serviceaccount:nodewright-system:nodewright-operator",
		CheckpointConfigMap: ns + "/nodewright-audit-checkpoint", CheckpointInterval: time.Hour, ShipURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop) // after TempDir: the trail is closed before its folder is removed
	n := 0
	for _, size := range []uint64{3, 7} { // three records and a checkpoint (seq 0..3, then 4..7)
		for end := n + 3; n < end; n++ {
			r := audit.Transition(audit.Subject{Kind: "Node", Name: "edge-1", UID: "u"}, "operator", "Reboot", "Ready", "Rebooting", "Maintenance", "",
				fmt.Sprint(n), time.Date(2026, 11, 21, 10, 0, n, 0, time.UTC))
			if err := appendRecords(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		var last string
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			var cm corev1.ConfigMap
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "nodewright-audit-checkpoint"}, &cm)
			if err == nil {
				last = fmt.Sprintf("%q", cm.Data)
				if w, err := audit.ParseWitnessed([]byte(cm.Data[operator.WitnessedKey])); err == nil && w.Checkpoint().Size == size {
					if err := w.VerifyWitness([]ed25519.PublicKey{witness.PublicKey()}); err != nil {
						t.Fatal(err)
					}
					if err := w.VerifyCheckpoint([]ed25519.PublicKey{trailKey}); err != nil {
						t.Fatal(err)
					}
					if got := cm.Data[operator.CheckpointKey]; got != string(w.Entry.Line())+"\n" {
						t.Fatalf("the checkpoint published is %q, the witnessed one %s", got, w.Entry.Line())
					}
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no witnessed checkpoint of size %d in the ConfigMap: %v %s", size, err, last)
			}
		}
	}
}

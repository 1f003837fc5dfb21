package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
)

// The live view of the stories' upgrades, frame by frame, and the log a script reads
// (goldenViews).
func TestUpgradeWatchGolden(t *testing.T) {
	for name, story := range upgradeStories {
		t.Run(name, func(t *testing.T) { goldenViews(t, name, story(t, "to-three"), upgrades) })
	}
}

// What a person must know is in the view: each stage's state and message, the progress of
// the one running, the volumes, the synchronisation replica by replica, the stage waiting and
// why with the command that approves it; and how an upgrade that rolled back ended: in which
// stage, why, and which rollback steps ran.
func TestUpgradeViewSaysWhatWaitsAndWhy(t *testing.T) {
	snaps := manualUpgradeStory(t, "to-three")
	end := snaps[len(snaps)-1].At
	frame := frameText(renderUpgradeFrame(upgradeHeldAt(t, snaps, "Verify"), end))
	wantAll(t, "the frame", frame,
		"  ✓ Preflight      Succeeded      4s  edge-1 holds 4 volumes; 8 new replicas to place\n",
		"  ✓ Sync           Succeeded   1m13s  every new replica is UpToDate\n",
		"  ‖ Verify         Waiting\n",
		"  · Quorum         Pending\n",
		"  Volumes: 4 volumes of edge-1, new replicas on edge-2, edge-3\n",
		"           replicas placed 8/8 · up to date 4/4 · verified 0/4\n",
		"  Sync:    [██████████████████████████████] 100%\n",
		"  ‖ Held: AwaitingApproval: awaiting approval: kubectl nodewright approve replicationupgrade/to-three\n",
		"    Approve it: kubectl nodewright approve rupg/to-three --step Verify\n")

	syncing := firstVersion(t, snaps, "two replicas syncing", func(u *nwv1.ReplicationUpgrade) bool { return len(u.Status.Syncing) == 2 })
	frame = frameText(renderUpgradeFrame(syncing, end))
	wantAll(t, "the frame mid-sync", frame,
		"  ▶ Sync           Running",
		"      synced 2/4\n",
		"  Sync:    [██████████████████████░░░░░░░░]  75%\n",
		"           pvc-c3d4  edge-3  [████░░░░░░]  41%\n",
		"           pvc-0a1b  edge-3  [████████░░]  88%\n")

	rolledBack := rolledBackUpgradeStory(t, "to-two")
	last := rolledBack[len(rolledBack)-1].Obj
	wantAll(t, "the result", frameText(upgradeFinalLines(last)),
		"Volumes: 4 volumes of edge-1, new replicas on edge-2: replicas placed 8/8 · up to date 2/4 · verified 0/4\n",
		"Result: RolledBack after 10m20s in stage Sync (3 of 6): SyncFailed: step Sync failed: the sync timeout (10m00s) passed with 2 of 4 volumes UpToDate; pvc-77ce on edge-2 at 22%; "+replupgrade.Kind.RolledBack+"\n",
		"Rollback: RemoveReplicas Succeeded, RestorePlaceCount Succeeded, RestoreBalance Succeeded\n")
}

// --replicas, --peer and --sync-timeout take what the API server admits: the bounds of the
// CRD's schema.
func TestUpgradeFlagsTakeTheAPIsBounds(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, "config", "crd", "bases", "nodewright.spectrocloud.com_replicationupgrades.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	replicas, peers := spec["replicaCount"], spec["peerNodes"]
	var defaultReplicasInCRD int
	if err := json.Unmarshal(replicas.Default.Raw, &defaultReplicasInCRD); err != nil {
		t.Fatal(err)
	}
	if *replicas.Minimum != minReplicas || *replicas.Maximum != maxReplicas || defaultReplicasInCRD != defaultReplicas {
		t.Errorf("spec.replicaCount is %v to %v, default %d; --replicas takes %d to %d, default %d",
			*replicas.Minimum, *replicas.Maximum, defaultReplicasInCRD, minReplicas, maxReplicas, defaultReplicas)
	}
	if *peers.MaxItems != maxPeers {
		t.Errorf("spec.peerNodes has at most %d items; --peer takes %d", *peers.MaxItems, maxPeers)
	}
	bounded := false
	for _, rule := range spec["syncTimeout"].XValidations {
		bounded = bounded || strings.Contains(rule.Rule, "duration('"+shortDurationFlag(minSyncTimeout)+"')") &&
			strings.Contains(rule.Rule, "duration('"+shortDurationFlag(maxSyncTimeout)+"')")
	}
	if !bounded {
		t.Errorf("no rule of spec.syncTimeout bounds it to %s..%s, as --sync-timeout does", minSyncTimeout, maxSyncTimeout)
	}
	var syncDefault string
	if err := json.Unmarshal(spec["syncTimeout"].Default.Raw, &syncDefault); err != nil || syncDefault != "6h" {
		t.Errorf("spec.syncTimeout defaults to %q (%v); the help says 6h", syncDefault, err)
	}
}

// shortDurationFlag writes a whole number of minutes or hours as the CRD's rules do: 1m, 48h.
func shortDurationFlag(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}

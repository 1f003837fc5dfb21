package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// Valid objects of every kind; each invalid case changes one field of one of them.
const (
	validCluster = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: NodewrightCluster
metadata: {name: nodewright}
spec:
  legacy:
    configMapRef: {namespace: node-init, name: node-init-state}
    daemonSetRef: {namespace: node-init, name: node-init}
    eventComponent: node-init
`
	validMigration = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: VMVolumeMigration
metadata: {name: m}
spec:
  vmName: database
  volumeName: rootdisk
  mode: Cold
  target: {storageClassName: linstor-rwx}
`
	validFlip = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: BondModeFlipPlan
metadata: {generateName: flip-}
spec:
  targetMode: 802.3ad
`
	validUpgrade = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: ReplicationUpgrade
metadata: {generateName: upgrade-}
spec:
  peerNodes: [node-b]
`
	validOperation = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: NodeOperation
metadata: {generateName: op-}
spec:
  nodeName: edge-2
  type: SetBondMode
  deadline: "2026-12-01T03:00:00Z"
  setBondMode: {bond: bond0, mode: 802.3ad, probes: {peers: [10.10.0.1, "fd00::3"]}}
`
	validProfile = `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: EdgeProfile
metadata: {generateName: profile-}
spec:
  version: 1.0.0
  topology: SingleNode
  storage: {backend: LINSTOR}
  os: Kairos
  network: {bondInterface: bond0, bondMode: active-backup}
`
)

// TestInvalidObjectsAreRejected proves that the real API server refuses each bad object with
// an error that names the offending field and says why.
func TestInvalidObjectsAreRejected(t *testing.T) {
	cases := []struct {
		name  string
		base  string
		set   map[string]any // dotted path -> value; nil value removes the field
		field string         // the field path the error must name
		why   string         // what the error must say
	}{
		// A rule on metadata is reported on the object itself; its message names the field.
		{"cluster singleton name", validCluster, map[string]any{"metadata.name": "other"},
			"", "singleton: metadata.name must be 'nodewright'"},
		{"cluster staleness too long", validCluster, map[string]any{"spec.heartbeatStaleAfter": "2h"},
			"spec.heartbeatStaleAfter", "must be between 1s and 1h"},
		{"cluster staleness too short", validCluster, map[string]any{"spec.heartbeatStaleAfter": "500ms"},
			"spec.heartbeatStaleAfter", "must be between 1s and 1h"},
		{"cluster staleness not a duration", validCluster, map[string]any{"spec.heartbeatStaleAfter": "soon"},
			"spec.heartbeatStaleAfter", "must be a duration such as 30s, 5m or 1h30m"},
		{"cluster event component missing", validCluster, map[string]any{"spec.legacy.eventComponent": nil},
			"spec.legacy.eventComponent", "Required value"},
		{"cluster configmap namespace invalid", validCluster, map[string]any{"spec.legacy.configMapRef.namespace": "Node_Init"},
			"spec.legacy.configMapRef.namespace", "should match"},

		{"migration mode", validMigration, map[string]any{"spec.mode": "Warm"},
			"spec.mode", `supported values: "Cold", "Hot"`},
		{"migration access mode", validMigration, map[string]any{"spec.target.accessMode": "ReadOnlyMany"},
			"spec.target.accessMode", "supported values"},
		{"migration volume mode", validMigration, map[string]any{"spec.target.volumeMode": "Raw"},
			"spec.target.volumeMode", "supported values"},
		{"migration zero size", validMigration, map[string]any{"spec.target.size": "0"},
			"spec.target.size", "must be greater than zero"},
		{"migration negative size", validMigration, map[string]any{"spec.target.size": "-1Gi"},
			"spec.target.size", "must be greater than zero"},
		{"migration vm start timeout", validMigration, map[string]any{"spec.timeouts.vmStart": "5s"},
			"spec.timeouts.vmStart", "must be between 10s and 1h"},
		{"migration vm stop timeout", validMigration, map[string]any{"spec.timeouts.vmStop": "2h"},
			"spec.timeouts.vmStop", "must be between 10s and 1h"},
		{"migration volume name", validMigration, map[string]any{"spec.volumeName": "Root_Disk"},
			"spec.volumeName", "should match"},
		{"migration vm name missing", validMigration, map[string]any{"spec.vmName": nil},
			"spec.vmName", "Required value"},
		{"migration storage class missing", validMigration, map[string]any{"spec.target.storageClassName": ""},
			"spec.target.storageClassName", "at least 1 chars"},
		{"migration checksum algorithm", validMigration, map[string]any{"spec.checksumAlgorithm": "MD5"},
			"spec.checksumAlgorithm", `supported values: "BLAKE3", "SHA256"`},

		{"flip target mode", validFlip, map[string]any{"spec.targetMode": "lacp"},
			"spec.targetMode", "supported values"},
		{"flip vm protection", validFlip, map[string]any{"spec.vmProtection": "Hope"},
			"spec.vmProtection", `supported values: "LiveMigrate", "Stop", "None"`},
		{"flip connectivity timeout", validFlip, map[string]any{"spec.connectivityTimeout": "1h"},
			"spec.connectivityTimeout", "must be between 10s and 10m"},
		{"flip bond interface name too long", validFlip, map[string]any{"spec.bondInterface": "bond-with-a-long-name"},
			"spec.bondInterface", "should match"},
		{"flip node order repeats", validFlip, map[string]any{"spec.nodeOrder": []any{"a", "a"}},
			"spec.nodeOrder[1]", "Duplicate value"},

		{"upgrade without peers", validUpgrade, map[string]any{"spec.peerNodes": []any{}},
			"spec.peerNodes", "at least 1 items"},
		{"upgrade too many peers", validUpgrade, map[string]any{"spec.peerNodes": []any{"a", "b", "c"}},
			"spec.peerNodes", "at most 2 items"},
		{"upgrade replica count", validUpgrade, map[string]any{"spec.replicaCount": int64(4)},
			"spec.replicaCount", "less than or equal to 3"},
		{"upgrade replicas exceed data nodes", validUpgrade, map[string]any{"spec.replicaCount": int64(3)},
			"spec.replicaCount", "cannot exceed the number of data nodes"},
		{"upgrade tiebreaker not a peer", validUpgrade, map[string]any{"spec.tiebreakerNode": "node-z"},
			"spec.tiebreakerNode", "must be one of peerNodes"},
		{"upgrade tiebreaker leaves too few data nodes", validUpgrade,
			map[string]any{"spec.peerNodes": []any{"node-b", "node-c"}, "spec.tiebreakerNode": "node-c", "spec.replicaCount": int64(3)},
			"spec.replicaCount", "with a tiebreaker it can be at most the number of peerNodes"},
		{"upgrade sync timeout", validUpgrade, map[string]any{"spec.syncTimeout": "30s"},
			"spec.syncTimeout", "must be between 1m and 48h"},

		{"operation without its member", validOperation, map[string]any{"spec.setBondMode": nil},
			"spec.setBondMode", "setBondMode is set exactly when type is SetBondMode"},
		{"operation with another member", validOperation, map[string]any{"spec.drbdAdjust": map[string]any{"resource": "pvc-1"}},
			"spec.drbdAdjust", "drbdAdjust is set exactly when type is DRBDAdjust"},
		{"operation type and member disagree", validOperation, map[string]any{"spec.type": "DRBDVerify"},
			"spec.setBondMode", "setBondMode is set exactly when type is SetBondMode"},
		{"operation unknown type", validOperation, map[string]any{"spec.type": "RunCommand"},
			"spec.type", "supported values"},
		{"operation without a node", validOperation, map[string]any{"spec.nodeName": nil},
			"spec.nodeName", "Required value"},
		{"operation node name", validOperation, map[string]any{"spec.nodeName": "Edge_2"},
			"spec.nodeName", "should match"},
		{"operation without a deadline", validOperation, map[string]any{"spec.deadline": nil},
			"spec.deadline", "Required value"},
		{"operation probe not an address", validOperation, map[string]any{"spec.setBondMode.probes.peers": []any{"edge-1"}},
			"spec.setBondMode.probes.peers[0]", "must be an IPv4 or IPv6 address"},
		{"operation checkpoint too long", validOperation, map[string]any{"spec.setBondMode.checkpointTimeout": "1h"},
			"spec.setBondMode.checkpointTimeout", "must be between 10s and 10m"},
		{"operation bond mode", validOperation, map[string]any{"spec.setBondMode.mode": "lacp"},
			"spec.setBondMode.mode", "supported values"},
		{"operation bond name is not a path", validOperation, map[string]any{"spec.setBondMode.bond": "../etc"},
			"spec.setBondMode.bond", "should match"},
		{"operation drbd resource is not a path", validOperation, map[string]any{"spec.type": "DRBDVerify", "spec.setBondMode": nil,
			"spec.drbdVerify": map[string]any{"resource": "/etc/drbd.d/r0.res"}},
			"spec.drbdVerify.resource", "should match"},
		{"operation drbd resource all", validOperation, map[string]any{"spec.type": "DRBDAdjust", "spec.setBondMode": nil,
			"spec.drbdAdjust": map[string]any{"resource": "all"}},
			"spec.drbdAdjust.resource", "must name one resource"},
		{"operation drbd resource by minor", validOperation, map[string]any{"spec.type": "DRBDPauseSync", "spec.setBondMode": nil,
			"spec.drbdPauseSync": map[string]any{"resource": "minor-1000", "peer": "edge-1"}},
			"spec.drbdPauseSync.resource", "must name one resource"},
		{"operation drbd peer", validOperation, map[string]any{"spec.type": "DRBDPauseSync", "spec.setBondMode": nil,
			"spec.drbdPauseSync": map[string]any{"resource": "pvc-1"}},
			"spec.drbdPauseSync.peer", "Required value"},

		{"profile version", validProfile, map[string]any{"spec.version": "one"},
			"spec.version", "should match"},
		{"profile topology", validProfile, map[string]any{"spec.topology": "Mesh"},
			"spec.topology", "supported values"},
		{"profile backend", validProfile, map[string]any{"spec.storage.backend": "NFS"},
			"spec.storage.backend", "supported values"},
		{"profile os", validProfile, map[string]any{"spec.os": "Windows"},
			"spec.os", `supported values: "Kairos", "SystemdNetworkd", "Talos"`},
		{"profile vlan", validProfile, map[string]any{"spec.network.storageVLAN": int64(5000)},
			"spec.network.storageVLAN", "less than or equal to 4094"},
		{"profile bond mode", validProfile, map[string]any{"spec.network.bondMode": "lacp"},
			"spec.network.bondMode", "supported values"},
		{"profile staleness", validProfile, map[string]any{"spec.thresholds.heartbeatStaleAfter": "0s"},
			"spec.thresholds.heartbeatStaleAfter", "must be between 1s and 1h"},
		{"profile sync timeout", validProfile, map[string]any{"spec.thresholds.drbdSyncTimeout": "72h"},
			"spec.thresholds.drbdSyncTimeout", "must be between 1m and 48h"},
		// Every duration field has a format rule before its range rule.
		{"migration vm start not a duration", validMigration, map[string]any{"spec.timeouts.vmStart": "5 minutes"},
			"spec.timeouts.vmStart", "must be a duration such as 30s, 5m or 1h30m"},
		{"migration vm stop not a duration", validMigration, map[string]any{"spec.timeouts.vmStop": "-5m"},
			"spec.timeouts.vmStop", "must be a duration such as 30s, 5m or 1h30m"},
		{"flip connectivity timeout not a duration", validFlip, map[string]any{"spec.connectivityTimeout": "fast"},
			"spec.connectivityTimeout", "must be a duration such as 30s, 5m or 1h30m"},
		{"upgrade sync timeout not a duration", validUpgrade, map[string]any{"spec.syncTimeout": "6"},
			"spec.syncTimeout", "must be a duration such as 30s, 5m or 1h30m"},
		{"profile staleness not a duration", validProfile, map[string]any{"spec.thresholds.heartbeatStaleAfter": "1 day"},
			"spec.thresholds.heartbeatStaleAfter", "must be a duration such as 30s, 5m or 1h30m"},
		{"profile sync timeout not a duration", validProfile, map[string]any{"spec.thresholds.drbdSyncTimeout": "6h "},
			"spec.thresholds.drbdSyncTimeout", "must be a duration such as 30s, 5m or 1h30m"},
		{"profile signature not base64", validProfile, map[string]any{"signature": "not base64!"},
			"signature", "byte"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			obj := object(t, tc.base, ns)
			for path, value := range tc.set {
				setField(t, obj, path, value)
			}
			err := env.Client.Create(context.Background(), obj)
			expectInvalid(t, err, tc.field, tc.why)
		})
	}
}

// TestValidObjectsAreDefaulted checks that the valid bases are accepted and the documented
// defaults are filled in by the API server.
func TestValidObjectsAreDefaulted(t *testing.T) {
	cases := []struct {
		base     string
		defaults map[string]any
	}{
		{validCluster, map[string]any{"spec.heartbeatStaleAfter": "30s"}},
		{validMigration, map[string]any{
			"spec.target.accessMode": "ReadWriteMany", "spec.target.volumeMode": "Block",
			"spec.retainSource": true, "spec.checksumAlgorithm": "BLAKE3",
			"spec.timeouts.vmStop": "5m", "spec.timeouts.vmStart": "5m",
		}},
		{validFlip, map[string]any{"spec.vmProtection": "LiveMigrate", "spec.connectivityTimeout": "60s"}},
		{validUpgrade, map[string]any{"spec.replicaCount": int64(2), "spec.syncTimeout": "6h"}},
		{validProfile, map[string]any{"spec.thresholds.heartbeatStaleAfter": "30s", "spec.thresholds.drbdSyncTimeout": "6h"}},
	}
	for _, tc := range cases {
		ns := env.Namespace(t)
		obj := object(t, tc.base, ns)
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating a valid %s: %v", obj.GetKind(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
		for path, want := range tc.defaults {
			got, found, err := unstructured.NestedFieldNoCopy(obj.Object, strings.Split(path, ".")...)
			if err != nil || !found || got != want {
				t.Errorf("%s %s = %v (found %v), want the default %v", obj.GetKind(), path, got, found, want)
			}
		}
	}
}

// TestWorkflowSpecIsImmutableOnceStarted checks the transition rule on every workflow kind:
// the spec may change while the workflow is Pending and not after.
func TestWorkflowSpecIsImmutableOnceStarted(t *testing.T) {
	cases := []struct {
		base, path string
		first      any
		second     any
		why        string
	}{
		{validMigration, "spec.target.storageClassName", "other-rwx", "third-rwx", "spec cannot change once the migration has started"},
		{validFlip, "spec.targetMode", "balance-xor", "active-backup", "spec cannot change once the flip has started"},
		{validUpgrade, "spec.syncTimeout", "2h", "3h", "spec cannot change once the upgrade has started"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		ns := env.Namespace(t)
		obj := object(t, tc.base, ns)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v", obj.GetKind(), err)
		}
		kind := obj.GetKind()

		setField(t, obj, "status.phase", "Pending")
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatalf("%s: setting phase Pending: %v", kind, err)
		}
		setField(t, obj, tc.path, tc.first)
		if err := env.Client.Update(ctx, obj); err != nil {
			t.Fatalf("%s: changing %s while Pending was refused: %v", kind, tc.path, err)
		}

		setField(t, obj, "status.phase", "Running")
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatalf("%s: setting phase Running: %v", kind, err)
		}
		setField(t, obj, tc.path, tc.second)
		expectInvalid(t, env.Client.Update(ctx, obj), "spec", tc.why)

		// Metadata stays editable: labels are how tools and people annotate a running workflow.
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		obj.SetLabels(map[string]string{"team": "storage"})
		if err := env.Client.Update(ctx, obj); err != nil {
			t.Errorf("%s: labelling a running workflow was refused: %v", kind, err)
		}
	}
}

// TestEdgeProfileChangeNeedsNewVersion checks that a signed profile cannot be edited in place.
func TestEdgeProfileChangeNeedsNewVersion(t *testing.T) {
	ctx := context.Background()
	obj := object(t, validProfile, env.Namespace(t))
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	setField(t, obj, "spec.topology", "ThreeNode")
	expectInvalid(t, env.Client.Update(ctx, obj), "spec.version", "a changed profile needs a new spec.version")

	setField(t, obj, "spec.version", "1.1.0")
	if err := env.Client.Update(ctx, obj); err != nil {
		t.Errorf("a change with a new version was refused: %v", err)
	}
}

// TestAgentStatusValidation checks the status-only kind through its status subresource.
func TestAgentStatusValidation(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		path  string
		value any
		field string
		why   string
	}{
		{"status.role", "leader", "status.role", `supported values: "primary", "secondary", "tiebreaker"`},
		{"status.storage", map[string]any{"resources": int64(2), "connected": int64(-1), "upToDate": int64(2), "outOfSyncKiB": int64(0)},
			"status.storage.connected", "greater than or equal to 0"},
		{"status.network.bondMode", "fast", "status.network.bondMode", "supported values"},
		{"status.reporter", "Operator", "status.reporter", `supported values: "Agent", "Legacy"`},
		{"status.os", map[string]any{"kairos": map[string]any{"bootEntry": "fallback"}},
			"status.os.kairos.bootEntry", `supported values: "Active", "Passive", "Recovery", "AutoReset", "LiveCD"`},
		{"status.network.bond", map[string]any{"interface": "bond0", "members": []any{map[string]any{"name": "a-name-longer-than-15", "up": true}}},
			"status.network.bond.members[0].name", "may not be more than 15"},
		{"status.storage", map[string]any{"resources": int64(1), "connected": int64(1), "upToDate": int64(1), "outOfSyncKiB": int64(0),
			"resourceStatuses": []any{map[string]any{"name": "pvc-1", "peers": []any{map[string]any{"name": "node-b", "connectionState": "Connected",
				"volumes": []any{map[string]any{"volume": int64(0), "replicationState": "SyncSource", "peerDiskState": "Inconsistent", "resyncDonePercent": int64(101)}}}}}}},
			"status.storage.resourceStatuses[0].peers[0].volumes[0].resyncDonePercent", "less than or equal to 100"},
	}
	for i, tc := range cases {
		obj := object(t, `
apiVersion: nodewright.spectrocloud.com/v1alpha1
kind: NodewrightAgentStatus
metadata: {generateName: node-}
`, "")
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		setField(t, obj, "status.heartbeat.stale", false)
		setField(t, obj, tc.path, tc.value)
		err := env.Client.Status().Update(ctx, obj)
		if err == nil {
			t.Errorf("case %d: the API server accepted %s=%v", i, tc.path, tc.value)
			continue
		}
		expectInvalid(t, err, tc.field, tc.why)
	}
}

// TestSamplesAreAccepted applies every file in config/samples to the real API server.
func TestSamplesAreAccepted(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(env.RepoRoot, "config", "samples", "nodewright_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found (err %v)", err)
	}
	ns := env.Namespace(t)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		obj := object(t, string(data), ns)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Errorf("%s was refused: %v", filepath.Base(file), err)
			continue
		}
		_ = env.Client.Delete(ctx, obj)
	}
}

// object parses a YAML manifest; namespaced kinds are put in ns.
func object(t *testing.T, manifest, ns string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		t.Fatalf("parsing manifest: %v", err)
	}
	if obj.GetKind() == "VMVolumeMigration" || obj.GetKind() == "NodeOperation" {
		obj.SetNamespace(ns)
	}
	return obj
}

// setField sets (or, for a nil value, removes) a dotted path in obj.
func setField(t *testing.T, obj *unstructured.Unstructured, path string, value any) {
	t.Helper()
	fields := strings.Split(path, ".")
	if value == nil {
		unstructured.RemoveNestedField(obj.Object, fields...)
		return
	}
	if err := unstructured.SetNestedField(obj.Object, value, fields...); err != nil {
		t.Fatalf("setting %s: %v", path, err)
	}
}

// expectInvalid fails unless err is the API server's Invalid error naming field (unless
// empty) and saying why.
func expectInvalid(t *testing.T, err error, field, why string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the API server accepted the object; want a refusal naming %s", field)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error naming %s, got: %v", field, err)
	}
	msg := err.Error()
	if (field != "" && !strings.Contains(msg, field+":")) || !strings.Contains(msg, why) {
		t.Errorf("the refusal does not name %q with %q:\n%s", field, why, msg)
	}
}

// TestNodeOperationSpecIsImmutable: an operation is what was asked; a change is a new one.
// Its status is the agent's to write, and an ended one stays ended.
func TestNodeOperationSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	obj := object(t, validOperation, env.Namespace(t))
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	setField(t, obj, "spec.setBondMode.mode", "active-backup")
	expectInvalid(t, env.Client.Update(ctx, obj), "spec", "spec cannot change: create a new NodeOperation")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	setField(t, obj, "status.phase", "Running")
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatalf("writing the status was refused: %v", err)
	}
	setField(t, obj, "status.phase", "Pending")
	expectInvalid(t, env.Client.Status().Update(ctx, obj), "status.phase", "an operation that started cannot go back to Pending")
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	setField(t, obj, "status.phase", "Succeeded")
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatalf("ending the operation was refused: %v", err)
	}
	setField(t, obj, "status.phase", "Running")
	expectInvalid(t, env.Client.Status().Update(ctx, obj), "status.phase", "an operation that ended (Succeeded, Failed, RolledBack) cannot change phase again")
}

// TestAnAgentListsOnlyItsNodesOperations: spec.nodeName is a selectable field, so an agent
// lists and watches its own node's operations only, as the kubelet does with pods.
func TestAnAgentListsOnlyItsNodesOperations(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, node := range []string{"edge-1", "edge-2", "edge-2"} {
		obj := object(t, validOperation, ns)
		setField(t, obj, "spec.nodeName", node)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("nodewright.spectrocloud.com/v1alpha1")
	list.SetKind("NodeOperationList")
	if err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": "edge-2"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("listing edge-2's operations gave %d, want 2", len(list.Items))
	}
	for _, item := range list.Items {
		if node, _, _ := unstructured.NestedString(item.Object, "spec", "nodeName"); node != "edge-2" {
			t.Errorf("listing edge-2's operations gave one of %s", node)
		}
	}
}

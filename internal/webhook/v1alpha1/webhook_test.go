package v1alpha1_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/profile"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
	"github.com/spectrocloud/nodewright/internal/webhook/certs"
)

var env = testenv.New().WithWebhooks()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

const (
	systemNS     = operatortest.Namespace
	certSecret   = operatortest.CertSecret
	keysCM       = operatortest.ProfileKeys
	linstorClass = "wh-linstor"
	topolvmClass = "wh-topolvm"
	genericClass = "wh-generic"
)

var (
	startOnce sync.Once
	trailDir  string
	startErr  error
)

// startOperator runs the operator once for the package, as it runs in a cluster but
// reached by the API server at the local address the Env rewrote the webhook
// configurations to: it keeps its own certificate and writes its CA into them.
func startOperator(t *testing.T) {
	t.Helper()
	startOnce.Do(func() {
		op, err := operatortest.Start(env, operatortest.Options{TempPrefix: "nodewright-webhook-test-", WithoutFlips: true})
		if err != nil {
			startErr = err
			return
		}
		trailDir = op.TrailDir
	})
	if startErr != nil {
		t.Fatal(startErr)
	}
}

// as is a client that the API server authenticates as user (a member of system:masters,
// so that every request reaches admission).
func as(t *testing.T, user string) client.Client {
	t.Helper()
	c, _ := asWithWarnings(t, user)
	return c
}

// warnings collects the warnings the API server passes on from admission.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// asWithWarnings is as, with the warnings of its requests collected.
func asWithWarnings(t *testing.T, user string) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// refused checks that err is the webhook's refusal and that it says want.
func refused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want a refusal saying %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not say %q", err.Error(), want)
	}
	if !strings.Contains(err.Error(), "denied the request") {
		t.Fatalf("refusal %q did not come from the admission webhook", err.Error())
	}
}

// trailRecords reads the admission records of the operator's trail about namespace/name.
func trailRecords(t *testing.T, namespace, name string) []audit.Record {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(trailDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Record
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Record *audit.Record `json:"record"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil || line.Record == nil {
				continue
			}
			if line.Record.Action == "AdmissionDecision" && line.Record.Subject.Namespace == namespace && line.Record.Subject.Name == name {
				out = append(out, *line.Record)
			}
		}
	}
	return out
}

// eventually polls cond until it holds or two minutes pass: a limit only a stuck test
// reaches, even on a busy machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storage creates the classes once: LINSTOR (RWX block, snapshots, clones), TopoLVM (none of
// those) and a CSI driver Nodewright does not know.
func storage(t *testing.T) {
	t.Helper()
	operatortest.StorageClasses(t, env.Client, operatortest.Class{Name: linstorClass, Driver: "linstor.csi.linbit.com"},
		operatortest.Class{Name: topolvmClass, Driver: "topolvm.io"}, operatortest.Class{Name: genericClass, Driver: "csi.example.com"})
}

// vmWithVolume creates VM name, stopped, on a bound 1 GiB block PVC of class.
func vmWithVolume(t *testing.T, ns, name, class string) {
	t.Helper()
	operatortest.HaltedVM(t, env.Client, ns, name, class)
}

func migration(ns, name, vm, class string) *nwv1.VMVolumeMigration {
	return &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: nwv1.VMVolumeMigrationSpec{VMName: vm, VolumeName: "root",
			Target: nwv1.MigrationTarget{StorageClassName: class}},
	}
}

func TestTheOperatorKeepsItsOwnCertificateAndWritesItsCA(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNS, Name: certSecret}, secret); err != nil {
		t.Fatal(err)
	}
	bundle := secret.Data[certs.KeyCABundle]
	if len(bundle) == 0 || len(secret.Data[certs.KeyCert]) == 0 {
		t.Fatalf("Secret %s holds %v", certSecret, keys(secret.Data))
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "nodewright-validating-webhook"}, v); err != nil {
		t.Fatal(err)
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "nodewright-mutating-webhook"}, m); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			t.Errorf("validating webhook %s does not trust the operator's CA", w.Name)
		}
	}
	for _, w := range m.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			t.Errorf("mutating webhook %s does not trust the operator's CA", w.Name)
		}
	}

	// Someone re-applies the configuration without the CA (an upgrade, say): it is put back.
	v.Webhooks[0].ClientConfig.CABundle = nil
	if err := env.Client.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the CA bundle to be written back", func() bool {
		got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		return env.Client.Get(ctx, client.ObjectKey{Name: v.Name}, got) == nil && bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, bundle)
	})
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTheRequesterIsStampedAndCannotBeForged(t *testing.T) {
	startOperator(t)
	storage(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	vmWithVolume(t, ns, "db", linstorClass)

	m := migration(ns, "move-db", "db", linstorClass)
	m.Annotations = map[string]string{nwv1.AnnotationRequestedBy: "mallory"}
	if err := as(t, "alice").Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got := m.Annotations[nwv1.AnnotationRequestedBy]; got != "alice" {
		t.Fatalf("requested-by = %q, want alice", got)
	}

	// Bob rewrites it: the update goes through with alice kept.
	// (The controller works on the migration meanwhile: each edit retries on a conflict.)
	bob := as(t, "bob")
	edit := func(change func(*nwv1.VMVolumeMigration)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := bob.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
			change(m)
			return bob.Update(ctx, m)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	edit(func(m *nwv1.VMVolumeMigration) {
		m.Annotations[nwv1.AnnotationRequestedBy] = "bob"
		m.Labels = map[string]string{"team": "storage"}
	})
	if got := m.Annotations[nwv1.AnnotationRequestedBy]; got != "alice" || m.Labels["team"] != "storage" {
		t.Fatalf("after bob's update: requested-by = %q, labels %v; want alice and bob's label", got, m.Labels)
	}
	// Removing it puts it back too.
	edit(func(m *nwv1.VMVolumeMigration) { delete(m.Annotations, nwv1.AnnotationRequestedBy) })
	if got := m.Annotations[nwv1.AnnotationRequestedBy]; got != "alice" {
		t.Fatalf("after removal: requested-by = %q, want alice", got)
	}
}

func TestMigrationDefaultsAndWarnings(t *testing.T) {
	startOperator(t)
	storage(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	vmWithVolume(t, ns, "db", linstorClass)

	c, w := asWithWarnings(t, "alice")
	m := migration(ns, "move-db", "db", linstorClass)
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Mode != nwv1.MigrationCold || m.Spec.Target.Size == nil || m.Spec.Target.Size.String() != "1Gi" {
		t.Fatalf("defaults: mode %q size %v; want Cold and the source's 1Gi", m.Spec.Mode, m.Spec.Target.Size)
	}
	if len(w.text) != 1 || !strings.Contains(w.text[0], "LINSTOR can clone, so spec.mode Hot would keep it running") {
		t.Fatalf("warnings %q; want the one saying Hot is available", w.text)
	}

	// The trail says who asked, what was filled in and that it was admitted.
	eventually(t, "the admission records", func() bool { return len(trailRecords(t, ns, "move-db")) >= 2 })
	recs := trailRecords(t, ns, "move-db")
	if recs[0].To != "Defaulted" || recs[0].Actor != "alice" || !strings.Contains(recs[0].Message, "spec.target.size=1Gi") || !strings.Contains(recs[0].Message, "spec.mode=Cold") {
		t.Errorf("first record %+v; want alice's defaults", recs[0])
	}
	if recs[1].To != "Admitted" || recs[1].Actor != "alice" || recs[1].Subject.UID != m.UID || recs[1].Message != "allowed to be created" {
		t.Errorf("second record %+v; want alice's admission of uid %s", recs[1], m.UID)
	}

	// A dry run decides nothing and is not recorded.
	dry := migration(ns, "dry", "db", linstorClass)
	if err := c.Create(ctx, dry, client.DryRunAll); err == nil {
		t.Fatal("a second migration of db was admitted (dry run)")
	}
	if recs := trailRecords(t, ns, "dry"); len(recs) != 0 {
		t.Fatalf("a dry run was recorded: %+v", recs)
	}
}

func TestMigrationRefusals(t *testing.T) {
	startOperator(t)
	storage(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	vmWithVolume(t, ns, "db", linstorClass)
	vmWithVolume(t, ns, "web", linstorClass)
	vmWithVolume(t, ns, "local", topolvmClass)
	alice := as(t, "alice")

	cases := []struct {
		name string
		edit func(*nwv1.VMVolumeMigration)
		want string
	}{
		{"no-vm", func(m *nwv1.VMVolumeMigration) { m.Spec.VMName = "nope" },
			`spec.vmName: VirtualMachine "nope" not found in namespace ` + ns},
		{"no-volume", func(m *nwv1.VMVolumeMigration) { m.Spec.VolumeName = "data" },
			`spec.volumeName: VirtualMachine db has no volume "data" (it has "root")`},
		{"no-class", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.StorageClassName = "gold" },
			`spec.target.storageClassName: StorageClass "gold" not found`},
		{"not-rwx", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.StorageClassName = topolvmClass },
			"spec.target.storageClassName: wh-topolvm is TopoLVM, which cannot provide ReadWriteMany block volumes"},
		{"too-small", func(m *nwv1.VMVolumeMigration) { m.Spec.Target.Size = ptr.To(resource.MustParse("512Mi")) },
			"spec.target.size: 512Mi is smaller than the source PVC's 1Gi"},
		{"hot-cannot-clone", func(m *nwv1.VMVolumeMigration) {
			m.Spec.VMName, m.Spec.Mode = "local", nwv1.MigrationHot
		}, "spec.mode: Hot needs a CSI clone, which TopoLVM (the source's backend) cannot make; use Cold"},
		{"hot-across-drivers", func(m *nwv1.VMVolumeMigration) {
			m.Spec.Mode = nwv1.MigrationHot
			m.Spec.Target.StorageClassName, m.Spec.Target.AccessMode = genericClass, corev1.ReadWriteOnce
		}, "spec.mode: Hot clones within one CSI driver, but the source is on linstor.csi.linbit.com and the target class on csi.example.com; use Cold"},
		{"target-cannot-snapshot", func(m *nwv1.VMVolumeMigration) {
			m.Spec.Target.StorageClassName, m.Spec.Target.AccessMode = genericClass, corev1.ReadWriteOnce
		}, `spec.target.storageClassName: wh-generic is generic CSI (csi.example.com), which cannot take the "after" snapshot`},
		{"no-snapshot-class", func(m *nwv1.VMVolumeMigration) { m.Spec.SnapshotClassName = "none" },
			`spec.snapshotClassName: VolumeSnapshotClass "none" not found`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := migration(ns, c.name, "db", linstorClass)
			c.edit(m)
			err := alice.Create(ctx, m)
			refused(t, err, c.want)
			eventually(t, "the refusal's record", func() bool {
				for _, r := range trailRecords(t, ns, c.name) {
					if r.To == "Refused" && r.Actor == "alice" && strings.Contains(r.Message, c.want) {
						return true
					}
				}
				return false
			})
		})
	}

	// A size that is empty, not a quantity or not positive is refused naming the field and
	// the value as sent; the decoder would not name the field, and the CRD's rule shows
	// `Invalid value: ""` for any size.
	for i, c := range []struct {
		size any
		want string
	}{
		{"", "spec.target.size: empty, which is no size; leave the field out for the source's size"},
		{" ", "spec.target.size: empty, which is no size"},
		{"0", "spec.target.size: 0 is not greater than zero; leave the field out for the source's size"},
		{0, "spec.target.size: 0 is not greater than zero"},
		{"-1Gi", "spec.target.size: -1Gi is not greater than zero"},
		{"ten gigs", "spec.target.size: ten gigs is not a size such as 10Gi"},
	} {
		name := fmt.Sprintf("size-%d", i)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": nwv1.GroupVersion.String(), "kind": "VMVolumeMigration",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"vmName": "db", "volumeName": "root",
				"target": map[string]any{"storageClassName": linstorClass, "size": c.size}},
		}}
		err := alice.Create(ctx, u)
		refused(t, err, c.want)
		if strings.Contains(err.Error(), `Invalid value: ""`) || strings.Contains(err.Error(), "regular expression") {
			t.Errorf("size %#v: %v", c.size, err)
		}
	}
	eventually(t, "the record of the refused size 0", func() bool {
		for _, r := range trailRecords(t, ns, "size-2") {
			if r.To == "Refused" && r.Actor == "alice" && strings.Contains(r.Message, "spec.target.size: 0 is not greater than zero") {
				return true
			}
		}
		return false
	})

	// One migration per VM: a second one is refused while the first has not finished.
	if err := alice.Create(ctx, migration(ns, "first", "web", linstorClass)); err != nil {
		t.Fatal(err)
	}
	refused(t, alice.Create(ctx, migration(ns, "second", "web", linstorClass)), "spec.vmName: VirtualMachine web already has migration first")
}

func TestWorkflowShapes(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	alice := as(t, "alice")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "wh-edge-1"}}
	if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	managedCluster(t)

	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad", NodeOrder: []string{"wh-edge-1", "wh-edge-9"}}}
	refused(t, alice.Create(ctx, flip), `spec.nodeOrder[1]: "wh-edge-9" is not a Node of the cluster`)

	flip.Spec.NodeOrder = []string{"wh-edge-1"}
	flip.Spec.MaintenanceWindow = &nwv1.MaintenanceWindow{Start: "22:00", End: "02:00", TimeZone: "Mars/Olympus_Mons"}
	refused(t, alice.Create(ctx, flip), `spec.maintenanceWindow.timeZone: unknown time zone "Mars/Olympus_Mons"`)
	flip.Spec.MaintenanceWindow.TimeZone = "Europe/Berlin"
	if err := alice.Create(ctx, flip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, flip) })
	up := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "to-two"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"wh-edge-9"}}}
	refused(t, alice.Create(ctx, up), `spec.peerNodes[0]: "wh-edge-9" is not a Node of the cluster`)
	up.Spec.PeerNodes = []string{"wh-edge-1"}
	refused(t, alice.Create(ctx, up), "metadata.name: BondModeFlipPlan to-lacp has not finished (Pending); one cluster-wide workflow at a time")

	// Deleting a workflow cancels it, and the trail says who did.
	if err := as(t, "bob").Delete(ctx, flip); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deletion's record", func() bool {
		for _, r := range trailRecords(t, "", "to-lacp") {
			if r.To == "DeletionAllowed" && r.Actor == "bob" {
				return true
			}
		}
		return false
	})
}

// TestAnUpgradeNamesOnlyNodes: a ReplicationUpgrade whose peer is not a Node of the cluster
// is refused, naming the field, when it is created and when its spec is changed to name one
// before it starts; a tiebreaker is one of the peers (the CRD's rule), so it is checked with
// them. An update that names no node anew (a label) is not held up by a Node gone since. The
// test needs the cluster's singleton NodewrightCluster and no other cluster-wide workflow:
// it does not run in parallel.
func TestAnUpgradeNamesOnlyNodes(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	alice := as(t, "alice")
	for _, name := range []string{"whu-edge-1", "whu-edge-2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	}
	managedCluster(t)
	upgrade := func(tiebreaker string, peers ...string) *nwv1.ReplicationUpgrade {
		return &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "whu-to-three"},
			Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: peers, TiebreakerNode: tiebreaker, ReplicaCount: 2}}
	}
	refused(t, alice.Create(ctx, upgrade("", "whu-edge-1", "ghost-node")), `spec.peerNodes[1]: "ghost-node" is not a Node of the cluster`)
	refused(t, alice.Create(ctx, upgrade("ghost-node", "whu-edge-1", "ghost-node")), `spec.peerNodes[1]: "ghost-node" is not a Node of the cluster`)

	// Admitted with its nodes there, it waits to start (no controller runs upgrades here),
	// and its spec may still change: not to a node that is not there.
	u := upgrade("whu-edge-2", "whu-edge-1", "whu-edge-2")
	if err := alice.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	u.Spec.PeerNodes, u.Spec.TiebreakerNode = []string{"whu-edge-1", "ghost-node"}, "ghost-node"
	refused(t, alice.Update(ctx, u), `spec.peerNodes[1]: "ghost-node" is not a Node of the cluster`)

	// Its nodes named before are not read again: whu-edge-2 gone, a label is still admitted.
	if err := alice.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "whu-edge-2"}}); err != nil {
		t.Fatal(err)
	}
	u.Labels = map[string]string{"team": "storage"}
	if err := alice.Update(ctx, u); err != nil {
		t.Errorf("a label on an upgrade whose tiebreaker's Node is gone: %v", err)
	}
}

// signer makes a key pair, trusts its public key (alone, replacing any other) and returns
// the private key.
func signer(t *testing.T) *profile.PrivateKey {
	t.Helper()
	ctx := context.Background()
	priv, pub, err := profile.GenerateKeyPair([]byte("test"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := profile.LoadPrivateKey(priv, []byte("test"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: keysCM}}
	_, err = controllerutil.CreateOrUpdate(ctx, env.Client, cm, func() error {
		cm.Data = map[string]string{"site.pub": string(pub)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func edgeProfile(name, version string) *nwv1.EdgeProfile {
	return &nwv1.EdgeProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nwv1.EdgeProfileSpec{
			Version: version, Topology: nwv1.TopologyTwoNodeTiebreaker, OS: nwv1.HostOSKairos,
			Storage: nwv1.ProfileStorage{Backend: nwv1.StorageLINSTOR},
			Network: nwv1.ProfileNetwork{BondInterface: "bond0", BondMode: "active-backup"},
			Legacy: &nwv1.LegacySource{
				ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "edge-system", Name: "node-init-state"},
				DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "edge-system", Name: "node-init"},
				EventComponent: "node-init",
			},
		},
	}
}

func sign(t *testing.T, p *nwv1.EdgeProfile, key *profile.PrivateKey) {
	t.Helper()
	sig, err := profile.Sign(p.Spec, key)
	if err != nil {
		t.Fatal(err)
	}
	p.Signature = sig
}

func TestEdgeProfilesMustBeSignedByATrustedKeyAndNeverDowngraded(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	key := signer(t)
	alice := as(t, "alice")

	unsigned := edgeProfile("unsigned", "1.0.0")
	refused(t, alice.Create(ctx, unsigned), "signature: the profile is not signed")

	tampered := edgeProfile("tampered", "1.0.0")
	sign(t, tampered, key)
	tampered.Spec.Network.BondInterface = "bond1" // one byte of the signed spec
	refused(t, alice.Create(ctx, tampered), "signature: the signature does not verify: it is not a signature of this spec by the trusted key")

	otherPriv, _, err := profile.GenerateKeyPair([]byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := profile.LoadPrivateKey(otherPriv, []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	untrusted := edgeProfile("untrusted", "1.0.0")
	sign(t, untrusted, otherKey)
	refused(t, alice.Create(ctx, untrusted), "signature: the signature does not verify: it is not a signature of this spec by the trusted key")

	site := edgeProfile("site-a", "1.2.0")
	sign(t, site, key)
	if err := alice.Create(ctx, site); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SignatureVerified", func() bool {
		got := &nwv1.EdgeProfile{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(site), got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, nwv1.ConditionSignatureVerified)
	})

	// A lower version, even signed, is refused.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(site), site); err != nil {
			return err
		}
		site.Spec.Version = "1.1.9"
		site.Spec.Network.BondMode = "802.3ad"
		sign(t, site, key)
		return alice.Update(ctx, site)
	})
	refused(t, err, "1.1.9 is lower than")

	// A higher one goes through.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(site), site); err != nil {
			return err
		}
		site.Spec.Version = "1.3.0"
		site.Spec.Network.BondMode = "802.3ad"
		sign(t, site, key)
		return alice.Update(ctx, site)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTheClusterAppliesOnlyAVerifiedProfileAndNeverALowerVersion(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	key := signer(t)
	alice := as(t, "alice")

	// The legacy DaemonSet keeps its state where the profile says, not where the cluster's
	// own spec points.
	for _, ns := range []string{"edge-system"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	legacyCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "edge-system", Name: "node-init-state"}, Data: map[string]string{
		"state": "SINGLE_NODE_READY", "previousState": "STORAGE_BOOTSTRAPPING", "stateSince": time.Now().UTC().Format(time.RFC3339),
		"generation": "3", "nodes": "edge-1", "node.edge-1.heartbeat": time.Now().UTC().Format(time.RFC3339), "node.edge-1.role": "primary",
	}}
	if err := env.Client.Create(ctx, legacyCM); err != nil {
		t.Fatal(err)
	}
	cluster := &nwv1.NodewrightCluster{
		ObjectMeta: metav1.ObjectMeta{Name: nwv1.NodewrightClusterName},
		Spec: nwv1.NodewrightClusterSpec{
			Legacy: nwv1.LegacySource{
				ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
				DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "elsewhere", Name: "absent"},
				EventComponent: "absent",
			},
			ProfileRef: &nwv1.ProfileReference{Name: "nope"},
		},
	}
	refused(t, alice.Create(ctx, cluster.DeepCopy()), `spec.profileRef.name: EdgeProfile "nope" not found`)
	// The singleton: the CRD's own rule refuses another name before the webhook is asked.
	other := cluster.DeepCopy()
	other.Name, other.Spec.ProfileRef = "second", nil
	if err := alice.Create(ctx, other); err == nil || !strings.Contains(err.Error(), "NodewrightCluster is a singleton: metadata.name must be 'nodewright'") {
		t.Fatalf("a second NodewrightCluster: %v; want the singleton refusal", err)
	}

	site := edgeProfile("site-b", "2.0.0")
	site.Spec.Thresholds.HeartbeatStaleAfter = metav1.Duration{Duration: 45 * time.Second}
	sign(t, site, key)
	if err := alice.Create(ctx, site); err != nil {
		t.Fatal(err)
	}
	digest, err := profile.Digest(site.Spec)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Spec.ProfileRef.Name = "site-b"
	if err := alice.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cluster) })
	got := &nwv1.NodewrightCluster{}
	eventually(t, "the profile in force and the legacy state read through it", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
			return false
		}
		p := got.Status.Profile
		return p != nil && p.Name == "site-b" && p.Version == "2.0.0" && p.Digest == digest && p.KeyID != "" &&
			meta.IsStatusConditionTrue(got.Status.Conditions, nwv1.ConditionProfileApplied) &&
			got.Status.LegacyState == "SINGLE_NODE_READY"
	})

	// The trusted keys are gone: the profile no longer applies, the cluster says why and
	// observes with its own names (which find nothing), and remembers the version in force.
	if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: keysCM}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ProfileApplied False without trusted keys", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, nwv1.ConditionProfileApplied)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == nwv1.ReasonProfileUnverified &&
			strings.Contains(c.Message, "no trusted public keys") && got.Status.Phase == nwv1.ClusterUnknown &&
			got.Status.Profile != nil && got.Status.Profile.Version == "2.0.0"
	})
	key = signer(t)
	// Re-signed with the new key: the version is unchanged, only the signature is new.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKey{Name: "site-b"}, site); err != nil {
			return err
		}
		sign(t, site, key)
		return alice.Update(ctx, site)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the profile in force again", func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, nwv1.ConditionProfileApplied) && got.Status.LegacyState == "SINGLE_NODE_READY"
	})

	// A lower version is refused at admission ...
	old := edgeProfile("site-b-old", "1.0.0")
	sign(t, old, key)
	if err := alice.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Spec.ProfileRef.Name = "site-b-old"
		return alice.Update(ctx, cluster)
	})
	refused(t, err, "spec.profileRef.name: EdgeProfile site-b-old: spec.version: 1.0.0 is lower than")
	// Clearing the ref first does not help: the version in force is remembered outside the
	// cluster object, in the floor ConfigMap.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Spec.ProfileRef = nil
		return alice.Update(ctx, cluster)
	})
	if err != nil {
		t.Fatal(err)
	}
	floor := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: systemNS, Name: "nodewright-profile-floor"}, floor); err != nil || floor.Data["version"] != "2.0.0" {
		t.Fatalf("the profile floor: %v %v; want version 2.0.0", floor.Data, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Spec.ProfileRef = &nwv1.ProfileReference{Name: "site-b-old"}
		return alice.Update(ctx, cluster)
	})
	refused(t, err, "spec.profileRef.name: EdgeProfile site-b-old: spec.version: 1.0.0 is lower than")

	// ... and by the controller when the webhook is not there to refuse it.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "nodewright-validating-webhook"}, vwc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vwc.ResourceVersion = ""
		if err := env.Client.Create(ctx, vwc); err != nil {
			t.Errorf("restoring the validating webhooks: %v", err)
		}
	})
	eventually(t, "the API server to stop calling the validating webhooks", func() bool {
		probe := &nwv1.NodewrightCluster{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), probe); err != nil {
			return false
		}
		probe.Spec.ProfileRef = &nwv1.ProfileReference{Name: "site-b-old"}
		return env.Client.Update(ctx, probe, client.DryRunAll) == nil
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		cluster.Spec.ProfileRef = &nwv1.ProfileReference{Name: "site-b-old"}
		return alice.Update(ctx, cluster)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the controller to refuse the downgrade", func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cluster), got); err != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, nwv1.ConditionProfileApplied)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == nwv1.ReasonProfileDowngrade &&
			got.Status.Profile != nil && got.Status.Profile.Name == "site-b" && got.Status.Profile.Version == "2.0.0"
	})
}

func TestAProfileSignedWithCosignIsAdmitted(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	bin, err := testenv.CosignBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cosign := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "COSIGN_PASSWORD=edge")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("cosign %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out.String()
	}
	// A key made by cosign, trusted as the user would: its cosign.pub in the ConfigMap.
	cosign("generate-key-pair")
	pub, err := os.ReadFile(filepath.Join(dir, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: keysCM}}
	if _, err := controllerutil.CreateOrUpdate(ctx, env.Client, cm, func() error {
		cm.Data = map[string]string{"cosign.pub": string(pub)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The canonical spec signed by cosign sign-blob; its output pasted into signature.
	p := edgeProfile("cosign-signed", "1.0.0")
	blob, err := profile.Canonical(p.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "profile.json"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	printed := strings.TrimSpace(cosign("sign-blob", "--key", "cosign.key", "--tlog-upload=false", "profile.json"))
	sig, err := base64.StdEncoding.DecodeString(printed)
	if err != nil {
		t.Fatalf("cosign printed %q: %v", printed, err)
	}
	p.Signature = sig
	if err := as(t, "alice").Create(ctx, p); err != nil {
		t.Fatalf("a profile signed by cosign was refused: %v", err)
	}
}

// withoutWebhooks runs fn with the webhook configurations removed, as on a cluster where
// objects were stored before Nodewright's admission was installed, and puts them back.
func withoutWebhooks(t *testing.T, fn func()) {
	t.Helper()
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	for _, obj := range []client.Object{v, m} {
		name := "nodewright-validating-webhook"
		if obj == client.Object(m) {
			name = "nodewright-mutating-webhook"
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The API server stops calling them once its informer saw the deletions: a forged stamp
	// then goes through.
	probe := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "probe",
		Annotations: map[string]string{nwv1.AnnotationRequestedBy: "nobody"}}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "active-backup"}}
	eventually(t, "the API server to stop calling the webhooks", func() bool {
		p := probe.DeepCopy()
		return env.Client.Create(ctx, p, client.DryRunAll) == nil && p.Annotations[nwv1.AnnotationRequestedBy] == "nobody"
	})
	fn()
	for _, obj := range []client.Object{v, m} {
		obj.SetResourceVersion("")
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// Called again: the probe is stamped and admitted, or refused for the cluster's mode (not
	// Managed) by the validating webhook, which refuses a stamp the mutating one did not write.
	eventually(t, "the API server to call the webhooks again", func() bool {
		p := probe.DeepCopy()
		err := as(t, "alice").Create(ctx, p, client.DryRunAll)
		return (err == nil && p.Annotations[nwv1.AnnotationRequestedBy] == "alice") ||
			(operatortest.WebhookRefused(err, "BondModeFlipPlan") && strings.Contains(err.Error(), "is admitted only in the Managed mode"))
	})
}

func TestObjectsStoredBeforeTheWebhooksStayEditable(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	key := signer(t)
	old := migration(ns, "stored-before", "absent", linstorClass)
	p := edgeProfile("stored-before", "1.0.0")
	sign(t, p, key)
	withoutWebhooks(t, func() {
		// Stored as the API server defaulted them: vmStop "5m", not Go's "5m0s". The
		// controller starts it (and fails it: the VM does not exist), after which its spec may
		// not change.
		if err := env.Client.Create(ctx, old); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the migration to start", func() bool {
			got := &nwv1.VMVolumeMigration{}
			return env.Client.Get(ctx, client.ObjectKeyFromObject(old), got) == nil &&
				got.Status.Phase != "" && got.Status.Phase != nwv1.WorkflowPending
		})
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	})

	// Edits that leave the spec alone go through, made as kubectl makes them (a merge
	// patch)...
	alice := as(t, "alice")
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"storage"}}}`))
	if err := alice.Patch(ctx, old, label); err != nil {
		t.Fatalf("labelling a started migration stored before the webhooks: %v", err)
	}
	if old.Labels["team"] != "storage" {
		t.Fatalf("labels %v after the patch", old.Labels)
	}
	if _, ok := old.Annotations[nwv1.AnnotationRequestedBy]; ok {
		t.Fatalf("an object created without the webhook got a requester: %v", old.Annotations)
	}
	// ... or as a Go client makes them, reading the object into the Go types and writing it
	// all back (which writes "5m" as "5m0s": the webhook keeps the spec as stored).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := alice.Get(ctx, client.ObjectKeyFromObject(old), old); err != nil {
			return err
		}
		old.Labels["owner"] = "alice"
		return alice.Update(ctx, old)
	})
	if err != nil {
		t.Fatalf("updating a started migration whole: %v", err)
	}
	// ... a profile is re-signed in place ...
	key = signer(t)
	sig, err := profile.Sign(p.Spec, key)
	if err != nil {
		t.Fatal(err)
	}
	resign, err := json.Marshal(map[string]any{"signature": sig})
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Patch(ctx, p, client.RawPatch(types.MergePatchType, resign)); err != nil {
		t.Fatalf("re-signing a profile stored before the webhooks: %v", err)
	}
	// ... and deletion finishes, finalizer and all.
	if err := alice.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the started migration to be gone", func() bool {
		got := &nwv1.VMVolumeMigration{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), got)
		return apierrors.IsNotFound(err)
	})
}

func TestATryToForgeTheRequesterIsRecorded(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	storage(t)
	vmWithVolume(t, ns, "db", linstorClass)
	m := migration(ns, "forged", "db", linstorClass)
	m.Annotations = map[string]string{nwv1.AnnotationRequestedBy: "mallory"}
	if err := as(t, "alice").Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record of the kept stamp", func() bool {
		for _, r := range trailRecords(t, ns, "forged") {
			if r.To == "RequesterKept" && r.Actor == "alice" && strings.Contains(r.Message, `the request set nodewright.spectrocloud.com/requested-by to "mallory"; it stays "alice"`) {
				return true
			}
		}
		return false
	})
}

// A forged requester too long to be quoted whole in one line of the trail is still recorded,
// cut: otherwise the log refuses the record, and a forger chooses whether the attempt is
// recorded. (An annotation may hold 256 KiB; each control character is quoted as \x01, and
// each backslash escaped again in the trail: 5 bytes for one.)
func TestAHugeForgedRequesterIsRecordedCut(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	storage(t)
	vmWithVolume(t, ns, "db", linstorClass)
	m := migration(ns, "forged-huge", "db", linstorClass)
	m.Annotations = map[string]string{nwv1.AnnotationRequestedBy: "mallory" + strings.Repeat("\x01", 250_000)}
	if err := as(t, "alice").Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record of the kept stamp", func() bool {
		for _, r := range trailRecords(t, ns, "forged-huge") {
			if r.To == "RequesterKept" && r.Actor == "alice" && strings.Contains(r.Message, `the request set nodewright.spectrocloud.com/requested-by to "mallory\x01`) &&
				strings.HasSuffix(r.Message, "...") && len(r.Message) <= 4096 {
				return true
			}
		}
		return false
	})
}

// noClusterWorkflows waits until no BondModeFlipPlan or ReplicationUpgrade exists: one
// cluster-wide workflow at a time, and other tests of the package create them.
func noClusterWorkflows(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "no cluster-wide workflow", func() bool {
		var flips nwv1.BondModeFlipPlanList
		var ups nwv1.ReplicationUpgradeList
		return env.Client.List(ctx, &flips) == nil && len(flips.Items) == 0 &&
			env.Client.List(ctx, &ups) == nil && len(ups.Items) == 0
	})
}

// The approve annotation is stamped with who set it: on create and whenever it changes; kept
// while it stays, whoever updates the object; removed with it. No request can forge it.
func TestTheApproverIsStampedAndCannotBeForged(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	noClusterWorkflows(t)
	managedCluster(t)
	flip := &nwv1.BondModeFlipPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "approve-stamp", Annotations: map[string]string{
			nwv1.AnnotationApprove: "Node1SetBondMode", nwv1.AnnotationApprovedBy: "mallory"}},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad", Approval: nwv1.ApprovalManual},
	}
	// A new object cannot carry an approval: its manifest may hold an old one.
	refused(t, as(t, "alice").Create(ctx, flip.DeepCopy()), "metadata.annotations[nodewright.spectrocloud.com/approve]: a step can be approved only while it waits for approval; this one has not started")
	flip.Annotations = nil
	if err := as(t, "alice").Create(ctx, flip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, flip); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		noClusterWorkflows(t)
	})
	// stamped checks the stored annotations: approve and approved-by, "" for absent.
	stamped := func(when, approve, approver string) {
		t.Helper()
		got := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(flip), got); err != nil {
			t.Fatal(err)
		}
		a := got.Annotations
		gotApprove, set := a[nwv1.AnnotationApprove]
		gotApprover, stampedBy := a[nwv1.AnnotationApprovedBy]
		if gotApprove != approve || set != (approve != "") || gotApprover != approver || stampedBy != (approver != "") {
			t.Fatalf("%s: approve %q, approved-by %q (annotations %v); want %q and %q", when, gotApprove, gotApprover, a, approve, approver)
		}
		if a[nwv1.AnnotationRequestedBy] != "alice" {
			t.Fatalf("%s: requested-by %q, want alice", when, a[nwv1.AnnotationRequestedBy])
		}
	}
	// edit changes the flip as a Go client does: read, change, write it all back.
	edit := func(user string, change func(*nwv1.BondModeFlipPlan)) {
		t.Helper()
		c := as(t, user)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &nwv1.BondModeFlipPlan{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(flip), got); err != nil {
				return err
			}
			change(got)
			return c.Update(ctx, got)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// annotate changes the annotations as kubectl annotate does: a merge patch, null removes.
	annotate := func(user string, annotations map[string]any) {
		t.Helper()
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		if err := as(t, user).Patch(ctx, flip.DeepCopy(), client.RawPatch(types.MergePatchType, data)); err != nil {
			t.Fatal(err)
		}
	}

	// waits writes the status a controller would: the steps before done, step waiting.
	waits := func(step string) {
		t.Helper()
		got := &nwv1.BondModeFlipPlan{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(flip), got); err != nil {
			t.Fatal(err)
		}
		got.Status.Phase = nwv1.WorkflowRunning
		got.Status.Steps = nil
		for _, s := range []string{"Node1SetBondMode", "Node2SetBondMode"} {
			state := nwv1.StepSucceeded
			if s == step {
				state = nwv1.StepWaiting
			}
			got.Status.Steps = append(got.Status.Steps, nwv1.WorkflowStep{Name: s, State: state})
			if s == step {
				break
			}
		}
		if err := env.Client.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	// Only a step that waits can be approved.
	annotateRefused := func(user string, annotations map[string]any, want string) {
		t.Helper()
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		refused(t, as(t, user).Patch(ctx, flip.DeepCopy(), client.RawPatch(types.MergePatchType, data)), want)
	}
	annotateRefused("alice", map[string]any{nwv1.AnnotationApprove: "Node1SetBondMode"},
		`metadata.annotations[nodewright.spectrocloud.com/approve]: there is no step "Node1SetBondMode"; a step can be approved only while it waits for approval`)
	waits("Node1SetBondMode")
	annotateRefused("alice", map[string]any{nwv1.AnnotationApprove: "Node2SetBondMode"},
		`metadata.annotations[nodewright.spectrocloud.com/approve]: there is no step "Node2SetBondMode"`)
	annotate("alice", map[string]any{nwv1.AnnotationApprove: "Node1SetBondMode", nwv1.AnnotationApprovedBy: "mallory"})
	stamped("alice approved, naming mallory", "Node1SetBondMode", "alice")
	edit("bob", func(f *nwv1.BondModeFlipPlan) {
		f.Labels = map[string]string{"team": "network"}
		f.Annotations[nwv1.AnnotationApprovedBy] = "bob"
	})
	stamped("bob changed a label and approved-by", "Node1SetBondMode", "alice")

	waits("Node2SetBondMode")
	annotateRefused("carol", map[string]any{nwv1.AnnotationApprove: "Node1SetBondMode-again"},
		`there is no step "Node1SetBondMode-again"`)
	annotate("carol", map[string]any{nwv1.AnnotationApprove: "Node2SetBondMode"})
	annotateRefused("carol", map[string]any{nwv1.AnnotationApprove: "Node1SetBondMode"},
		`metadata.annotations[nodewright.spectrocloud.com/approve]: step "Node1SetBondMode" is Succeeded; a step can be approved only while it waits for approval`)
	stamped("carol approved the next step", "Node2SetBondMode", "carol")
	edit("dave", func(f *nwv1.BondModeFlipPlan) { f.Labels["owner"] = "dave" })
	stamped("dave changed a label", "Node2SetBondMode", "carol")
	annotate("dave", map[string]any{nwv1.AnnotationApprove: "Node2SetBondMode", nwv1.AnnotationApprovedBy: nil})
	stamped("dave set approve to what it was and removed approved-by", "Node2SetBondMode", "carol")

	annotate("erin", map[string]any{nwv1.AnnotationApprove: nil})
	stamped("erin withdrew the approval", "", "")
	annotate("erin", map[string]any{nwv1.AnnotationApprovedBy: "erin"})
	stamped("erin set approved-by alone", "", "")

	// Every try is recorded, under the name of who tried.
	eventually(t, "the records of the kept stamps", func() bool {
		want := map[string]string{
			"alice": `the request set nodewright.spectrocloud.com/approved-by to "mallory"; it stays "alice"`,
			"bob":   `the request set nodewright.spectrocloud.com/approved-by to "bob"; it stays "alice"`,
			"dave":  `the request removed nodewright.spectrocloud.com/approved-by; it stays "carol"`,
			"erin":  `the request set nodewright.spectrocloud.com/approved-by to "erin" without setting nodewright.spectrocloud.com/approve; removed`,
		}
		for _, r := range trailRecords(t, "", flip.Name) {
			if r.To == "ApproverKept" && want[r.Actor] == r.Message {
				delete(want, r.Actor)
			}
		}
		return len(want) == 0
	})
}

// TestAFlipToAModeTheSwitchDoesNotCarryIsRefused: with an EdgeProfile in force whose switch
// carries active-backup and balance-alb, a flip to 802.3ad cannot work (its Preflight would
// fail, and every agent refuses the change): admission refuses it, naming spec.targetMode, the
// profile and what the switch carries. A flip to a mode the switch carries is admitted. The
// test needs the cluster's singleton NodewrightCluster: it does not run in parallel.
func TestAFlipToAModeTheSwitchDoesNotCarryIsRefused(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	key := signer(t)
	alice := as(t, "alice")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "wh-edge-1"}}
	if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := edgeProfile("wh-switch", "9.0.0")
	p.Spec.Legacy = nil
	p.Spec.Network.AllowedBondModes = []nwv1.BondMode{nwv1.BondModeBalanceALB}
	sign(t, p, key)
	if err := alice.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	noCluster(t)
	heartbeats(t)
	c := legacyIn("wh-nowhere", "wh-nowhere")
	c.Spec.Management, c.Spec.ProfileRef = nwv1.ManagementManaged, &nwv1.ProfileReference{Name: p.Name}
	if err := alice.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { noCluster(t) })
	inEffect(t, nwv1.ManagementManaged)
	eventually(t, "the profile wh-switch in force", func() bool {
		got := &nwv1.NodewrightCluster{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(c), got) == nil && got.Status.Profile != nil && got.Status.Profile.Name == p.Name
	})

	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp-uncarried"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: nwv1.BondMode8023AD, NodeOrder: []string{"wh-edge-1"}}}
	refused(t, alice.Create(ctx, flip.DeepCopy()),
		"spec.targetMode: EdgeProfile wh-switch (version 9.0.0) says the switch carries active-backup, balance-alb, not 802.3ad")
	flip.Spec.TargetMode = nwv1.BondModeBalanceALB
	if err := alice.Create(ctx, flip, client.DryRunAll); err != nil {
		t.Fatalf("a flip to balance-alb, which the switch carries: %v", err)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The BootRecoveryPolicy is a singleton: the boot tests store their own, one at a time, and
// delete it when they end.

const (
	bootT0       = "2026-11-29T10:00:00Z"
	bootIDEdge1  = "1c4e0f3a-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
	bootIDEdge2  = "9b2d77e0-1111-4222-8333-444455556666"
	bootIDEdge3  = "3f3f3f3f-aaaa-4bbb-8ccc-dddddddddddd"
	bootIDEdge5  = "55555555-0000-4000-8000-000000000005"
	bootEvilName = "edge-6\x1b[2J\x1b]0;owned\x07"
	// bootEvilImage is an image a node reports with a terminal's escape in it.
	bootEvilImage = "evil\x1b]0;owned\x07:v9"
)

func bootTime(t *testing.T, d time.Duration) metav1.Time {
	t.Helper()
	t0, err := time.Parse(time.RFC3339, bootT0)
	if err != nil {
		t.Fatal(err)
	}
	return metav1.NewTime(t0.Add(d))
}

// bootPolicy is a cluster of six Kairos nodes as the operator would record them: edge-1 on
// its active image, healthy; edge-2 fell back from v2 to v1, pinned, its health waiting;
// edge-3 a UKI node whose fallback is acknowledged, whose next boot would fall back and
// whose health timed out; edge-4 in recovery, cordoned, reporting an image with a terminal
// escape; edge-5 fell back too; and a node whose name holds escapes.
func bootPolicy(t *testing.T) *nwv1.BootRecoveryPolicy {
	at := func(d time.Duration) *metav1.Time { tm := bootTime(t, d); return &tm }
	fallback := func(boot string) *nwv1.KairosFallback {
		return &nwv1.KairosFallback{FromImage: osImageV2, ToImage: osBootV1, BootID: boot, SeenAt: *at(-time.Hour)}
	}
	p := &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}}
	p.Status = nwv1.BootRecoveryPolicyStatus{
		Nodes: []nwv1.NodeBootRecord{
			{Name: "edge-1", BootEntry: nwv1.KairosBootActive, BootID: bootIDEdge1, BootSeenAt: at(-2 * time.Hour), Image: osBootV2,
				PostBootHealth: &nwv1.PostBootHealthStatus{BootID: bootIDEdge1, Deadline: *at(-105 * time.Minute), PassedAt: at(-110 * time.Minute)},
				// A rollback of an earlier boot, still Pending: its step would refuse it.
				Rollback: &nwv1.BootRepairStatus{BootID: "0a0a0a0a", Policy: "edge-1-rollback-0a0a0a0a", Image: osBootV1 + "@sha256:" + strings.Repeat("1", 64), Phase: "Pending"}},
			{Name: "edge-2", BootEntry: nwv1.KairosBootPassive, BootID: bootIDEdge2, BootSeenAt: at(-11 * time.Minute), Image: osBootV1, UpgradeFailure: true,
				LastFallback: fallback(bootIDEdge2), PinnedImage: osBootV1,
				Repair:         &nwv1.BootRepairStatus{BootID: bootIDEdge2, Policy: "edge-2-repair-9b2d77e0", Image: osBootV1 + "@sha256:" + strings.Repeat("1", 64), Phase: "Pending"},
				PostBootHealth: &nwv1.PostBootHealthStatus{BootID: bootIDEdge2, Deadline: *at(4 * time.Minute), Failing: "Node not Ready;\nDRBD pvc-1 Connecting"}},
			{Name: "edge-3", BootEntry: nwv1.KairosBootActive, BootID: bootIDEdge3, BootSeenAt: at(-time.Hour), Image: osBootV1,
				BootCounting:      &nwv1.KairosBootCounting{TriesLeft: 1, TriesDone: 2},
				NextBootFallsBack: "boot_assessment_tentative=yes with enable_boot_assessment=yes",
				LastFallback:      fallback(bootIDEdge3), Acknowledged: &nwv1.FallbackAcknowledgement{BootID: bootIDEdge3, By: "ada@example.com", At: *at(-30 * time.Minute)},
				PostBootHealth: &nwv1.PostBootHealthStatus{BootID: bootIDEdge3, Deadline: *at(-45 * time.Minute), TimedOutAt: at(-45 * time.Minute), Failing: "LINSTOR satellite OFFLINE"},
				Rollback:       &nwv1.BootRepairStatus{BootID: bootIDEdge3, Message: "no rollback of edge-3's boot " + bootIDEdge3 + ", whose post-boot health timed out: it runs " + osBootV1 + ", the image of its last healthy boot 0000: its image is not what changed"}},
			{Name: "edge-4", BootEntry: nwv1.KairosBootRecovery, BootID: "4444", Image: bootEvilImage, Cordon: nwv1.NodeCordoned},
			{Name: "edge-5", BootEntry: nwv1.KairosBootPassive, BootID: bootIDEdge5, Image: osBootV1, LastFallback: fallback(bootIDEdge5), PinnedImage: osBootV1,
				Repair: &nwv1.BootRepairStatus{BootID: "55550000", Policy: "edge-5-repair-55550000", Image: osBootV1 + "@sha256:" + strings.Repeat("1", 64), Phase: "Succeeded"}},
			{Name: bootEvilName, BootEntry: nwv1.KairosBootActive, BootID: "66666666", Image: osBootV2},
		},
		FellBack: "edge-2,edge-5", Recovery: "edge-4", Unhealthy: "edge-3",
		Conditions: []metav1.Condition{
			{Type: nwv1.ConditionFellBack, Status: metav1.ConditionTrue, Reason: "NodeFellBack", LastTransitionTime: *at(-time.Hour),
				Message: "edge-2 fell back from " + osImageV2 + " to " + osBootV1 + " at boot " + bootIDEdge2 + " (seen " + bootT0 + ")"},
			{Type: nwv1.ConditionRecoveryBoot, Status: metav1.ConditionTrue, Reason: "RecoveryBoot", LastTransitionTime: *at(-time.Hour),
				Message: "edge-4 runs its recovery system (image " + bootEvilImage + ")"},
			{Type: nwv1.ConditionPostBootHealthy, Status: metav1.ConditionFalse, Reason: "PostBootHealthTimedOut", LastTransitionTime: *at(-45 * time.Minute),
				Message: "post-boot health timed out: edge-3: LINSTOR satellite OFFLINE"},
		},
	}
	return p
}

// storeBootPolicy stores p with its status (and annotations), as the operator and the webhook
// would have written them, and deletes it when the test ends (waiting until it is gone, for
// the next test's).
func storeBootPolicy(t *testing.T, p *nwv1.BootRecoveryPolicy) *nwv1.BootRecoveryPolicy {
	t.Helper()
	ctx := context.Background()
	created := p.DeepCopy()
	created.Status = nwv1.BootRecoveryPolicyStatus{}
	if err := env.Client.Create(ctx, created); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(ctx, created); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		key := client.ObjectKeyFromObject(created)
		if err := waitUntil(func() bool { return apierrors.IsNotFound(env.Client.Get(ctx, key, &nwv1.BootRecoveryPolicy{})) }); err != nil {
			t.Errorf("the BootRecoveryPolicy is still there: %v", err)
		}
	})
	stored := created.DeepCopy()
	stored.Status = p.Status
	if err := env.Client.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	return stored
}

// waitUntil polls cond for up to three minutes.
func waitUntil(cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func getBootPolicyForTest(t *testing.T) *nwv1.BootRecoveryPolicy {
	t.Helper()
	p := &nwv1.BootRecoveryPolicy{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nwv1.BootRecoveryPolicyName}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Without the policy, both commands say so and how to create it (exit code 1). With it, boot
// status prints the golden table: each node's slot, image, short boot, fallback (or who
// acknowledged it), pin, health and cordon; what the nodes report with a terminal escape
// (a node's name, an image) quoted, never printed; the next boot that falls back, the command
// that acknowledges each fallback, the conditions. -o json and yaml print the policy.
func TestBootStatus(t *testing.T) {
	want := "Error: " + errNoBootPolicy.Error() + "\n"
	wantError(t, ExitFailed, want, "boot", "status")
	wantError(t, ExitFailed, want, "boot", "ack", "edge-2")

	now := bootTime(t, 0).Time
	var b strings.Builder
	empty := storeBootPolicy(t, &nwv1.BootRecoveryPolicy{ObjectMeta: metav1.ObjectMeta{Name: nwv1.BootRecoveryPolicyName}})
	r := plugin(t, runOpts{now: now}, "boot", "status")
	r.wantCode(t, ExitOK)
	b.WriteString("=== a policy with its defaults, before any node reported\n" + r.stdout)

	full := bootPolicy(t)
	full.ResourceVersion = empty.ResourceVersion
	full.Spec = empty.Spec
	full.Spec.PostBootHealth.Timeout = metav1.Duration{Duration: 20 * time.Minute}
	full.Spec.OnRecoveryBoot.Cordon = new(bool)
	if err := env.Client.Update(context.Background(), full); err != nil {
		t.Fatal(err)
	}
	full.Status = bootPolicy(t).Status
	if err := env.Client.Status().Update(context.Background(), full); err != nil {
		t.Fatal(err)
	}
	r = plugin(t, runOpts{now: now}, "boot", "status")
	r.wantCode(t, ExitOK)
	b.WriteString("=== six nodes\n" + r.stdout)
	golden(t, "boot-status.golden", b.String())
	if strings.ContainsAny(b.String(), "\x1b\x07") {
		t.Errorf("boot status prints a terminal escape a node reported")
	}
	if r.stderr != "" {
		t.Errorf("stderr %q", r.stderr)
	}

	r = plugin(t, runOpts{now: now}, "boot", "status", "-o", "json")
	r.wantCode(t, ExitOK)
	var got nwv1.BootRecoveryPolicy
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if got.Kind != "BootRecoveryPolicy" || got.ManagedFields != nil || len(got.Status.Nodes) != 6 || got.Status.Nodes[1].LastFallback.BootID != bootIDEdge2 {
		t.Errorf("-o json: kind %q, managed fields %v, nodes %+v", got.Kind, got.ManagedFields != nil, got.Status.Nodes)
	}
	r = plugin(t, runOpts{now: now}, "boot", "status", "-o", "yaml")
	r.wantCode(t, ExitOK)
	wantAll(t, "-o yaml", r.stdout, "kind: BootRecoveryPolicy\n", "    name: edge-2\n", "      bootID: "+bootIDEdge2+"\n")

	for _, c := range []usageCase{
		{[]string{"boot", "status", "-o", "wide"}, `Error: --output "wide": want one of table, json, yaml`},
		{[]string{"boot", "status", "edge-2"}, `Error: unknown command "edge-2" for "kubectl nodewright boot status"`},
		{[]string{"boot", "ack"}, "Error: kubectl nodewright boot ack wants at least one NODE, got none"},
		{[]string{"boot", "ack", "Edge_2"}, `Error: NODE: "Edge_2" is not a node name`},
		{[]string{"boot", "ack", "edge-2", "edge-2"}, "Error: NODE: node edge-2 is named twice"},
	} {
		r := plugin(t, runOpts{}, c.args...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("%v: stderr %q, want it to start with %q", c.args, r.stderr, c.want)
		}
	}
}

// boot ack of two nodes adds NODE@BOOTID of each, read from the status, to the annotation:
// another node's entry and the other annotations kept, an older entry of edge-2 (an earlier
// boot) replaced. These tests run no webhook, so nothing stamps acknowledged-by, and the
// command says so (cmd/kubectl-nodewright's tests run the operator's webhooks).
func TestBootAckTwoNodes(t *testing.T) {
	p := bootPolicy(t)
	p.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "edge-3@" + bootIDEdge3 + ", edge-2@0ld-b00t", "keep": "me"}
	storeBootPolicy(t, p)

	r := plugin(t, runOpts{}, "boot", "ack", "edge-2", "edge-5")
	r.wantCode(t, ExitOK)
	want := "bootrecoverypolicy/nodewright: acknowledged the fallback of edge-2@" + bootIDEdge2 + ", edge-5@" + bootIDEdge5 + "\n" +
		"Not stamped: the policy has no acknowledged-by (is the operator's admission webhook running?)\n" +
		"Next: the operator records it (boot status: \"acknowledged by\") and lifts the pin; the OSVersionPolicies start their nodes' steps again once no fallback waits.\n"
	if r.stdout != want || r.stderr != "" {
		t.Errorf("stdout %q, stderr %q\nwant %q", r.stdout, r.stderr, want)
	}
	a := getBootPolicyForTest(t).Annotations
	if got, want := a[nwv1.AnnotationAcknowledgeFallback], "edge-3@"+bootIDEdge3+",edge-2@"+bootIDEdge2+",edge-5@"+bootIDEdge5; got != want || a["keep"] != "me" {
		t.Errorf("acknowledge-fallback %q, want %q; annotations %v", got, want, a)
	}

	// Again, before the operator recorded it: the annotation acknowledges it already.
	before := getBootPolicyForTest(t).ResourceVersion
	r = plugin(t, runOpts{}, "boot", "ack", "edge-2")
	r.wantCode(t, ExitFailed)
	wantAll(t, "ack again", r.stderr, "Error: bootrecoverypolicy/nodewright: nothing acknowledged: edge-2: its fallback at boot "+bootIDEdge2+
		" is acknowledged already by the annotation (nodewright.spectrocloud.com/acknowledge-fallback); the operator has not recorded it yet\n")
	if after := getBootPolicyForTest(t).ResourceVersion; after != before {
		t.Errorf("written again: resourceVersion %s → %s", before, after)
	}
}

// A node with nothing to acknowledge is refused, naming it and why, and nothing is written
// for any node, the one with a fallback included: no fallback (edge-1), acknowledged already
// (edge-3), not in the status (edge-9). A node whose agent reports a boot ID with a comma and
// another node's entry in it (edge-7, "b,edge-1@b") is refused too: written as it is, it
// would have acknowledged a fallback of a node the person did not name.
func TestBootAckRefusedWritesNothing(t *testing.T) {
	p := bootPolicy(t)
	p.Status.Nodes = append(p.Status.Nodes, nwv1.NodeBootRecord{Name: "edge-7", BootEntry: nwv1.KairosBootPassive, BootID: "b",
		LastFallback: &nwv1.KairosFallback{FromImage: osImageV2, BootID: "b,edge-1@b", SeenAt: bootTime(t, 0)}})
	p.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "edge-3@" + bootIDEdge3}
	stored := storeBootPolicy(t, p)

	for _, c := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"edge-2", "edge-1"}, "edge-1: no fallback to acknowledge (status.nodes[edge-1].lastFallback is empty)"},
		{[]string{"edge-3", "edge-2"}, "edge-3: its fallback at boot " + bootIDEdge3 + " is acknowledged already by ada@example.com at 2026-11-29T09:30:00Z"},
		{[]string{"edge-2", "edge-9", "edge-1"}, "edge-9: not in the BootRecoveryPolicy's status (no agent reports its boot)\nedge-1: no fallback"},
		{[]string{"edge-7"}, `edge-7: status.nodes[edge-7].lastFallback.bootID "b,edge-1@b" is not a boot ID (1 to 64 letters, digits and dashes): not written into the annotation`},
		{[]string{"edge-2", "edge-7"}, `edge-7: status.nodes[edge-7].lastFallback.bootID "b,edge-1@b" is not a boot ID`},
	} {
		r := plugin(t, runOpts{}, append([]string{"boot", "ack"}, c.nodes...)...)
		r.wantCode(t, ExitFailed)
		if !strings.HasPrefix(r.stderr, "Error: bootrecoverypolicy/nodewright: nothing acknowledged: ") || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%v: stdout %q, stderr %q, want it to say %q", c.nodes, r.stdout, r.stderr, c.want)
		}
	}
	got := getBootPolicyForTest(t)
	if got.ResourceVersion != stored.ResourceVersion || got.Annotations[nwv1.AnnotationAcknowledgeFallback] != "edge-3@"+bootIDEdge3 {
		t.Errorf("a refused ack wrote the policy: resourceVersion %s → %s, annotations %v", stored.ResourceVersion, got.ResourceVersion, got.Annotations)
	}
}

// The patch is a merge patch carrying the resourceVersion read: a policy changed between the
// read and the patch is read again and checked again, never overwritten. Another person's
// entry written in between is kept; the operator recording, in between, that the node's
// fallback is acknowledged makes the second try refuse it, writing nothing.
func TestBootAckRereadsOnConflict(t *testing.T) {
	storeBootPolicy(t, bootPolicy(t))
	ctx := context.Background()
	c := &racingClient{Client: env.Client, race: func() {
		other := getBootPolicyForTest(t)
		other.Annotations = map[string]string{nwv1.AnnotationAcknowledgeFallback: "edge-5@" + bootIDEdge5}
		if err := env.Client.Update(ctx, other); err != nil {
			t.Error(err)
		}
	}}
	res, err := AcknowledgeBootFallback(ctx, c, []string{"edge-2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := getBootPolicyForTest(t).Annotations[nwv1.AnnotationAcknowledgeFallback]; got != "edge-5@"+bootIDEdge5+",edge-2@"+bootIDEdge2 || c.patches != 2 {
		t.Errorf("acknowledge-fallback %q after %d patches, want edge-5@…,edge-2@… after 2 (the first refused as stale)", got, c.patches)
	}
	if len(res.Added) != 1 || res.Added[0] != "edge-2@"+bootIDEdge2 {
		t.Errorf("added %v", res.Added)
	}

	// Someone else acknowledged edge-2 too, and the operator records it between the read and
	// the patch (a status write): the second read refuses it. (The annotation's entry of
	// edge-2 is taken out first, so that the first read has something to write.)
	ack := getBootPolicyForTest(t)
	ack.Annotations[nwv1.AnnotationAcknowledgeFallback] = "edge-5@" + bootIDEdge5
	if err := env.Client.Update(ctx, ack); err != nil {
		t.Fatal(err)
	}
	c = &racingClient{Client: env.Client, race: func() {
		other := getBootPolicyForTest(t)
		for i := range other.Status.Nodes {
			if other.Status.Nodes[i].Name == "edge-2" {
				other.Status.Nodes[i].Acknowledged = &nwv1.FallbackAcknowledgement{BootID: bootIDEdge2, By: "bob", At: metav1.Now()}
			}
		}
		if err := env.Client.Status().Update(ctx, other); err != nil {
			t.Error(err)
		}
	}}
	before := getBootPolicyForTest(t).Annotations[nwv1.AnnotationAcknowledgeFallback]
	_, err = AcknowledgeBootFallback(ctx, c, []string{"edge-2"})
	if err == nil || !strings.Contains(err.Error(), "edge-2: its fallback at boot "+bootIDEdge2+" is acknowledged already by bob") || c.patches != 1 {
		t.Errorf("after the operator recorded it: %v, %d patches (want 1, refused as stale)", err, c.patches)
	}
	if after := getBootPolicyForTest(t).Annotations[nwv1.AnnotationAcknowledgeFallback]; after != before {
		t.Errorf("acknowledge-fallback %q, was %q", after, before)
	}
}

// NODE completes from the policy's nodes whose fallback is not acknowledged, leaving out
// those named already and a name that is not a node's.
func TestBootAckCompletion(t *testing.T) {
	p := bootPolicy(t)
	p.Status.Nodes = append(p.Status.Nodes, nwv1.NodeBootRecord{Name: "edge-8\nedge-1", BootEntry: nwv1.KairosBootPassive,
		LastFallback: &nwv1.KairosFallback{FromImage: osImageV2, BootID: "b-8", SeenAt: bootTime(t, 0)}})
	storeBootPolicy(t, p)
	wantCompletions(t, []completionCase{
		{[]string{"boot", "ack", ""}, "edge-2\nedge-5\n:4\n"},
		{[]string{"boot", "ack", "edge-2", ""}, "edge-5\n:4\n"},
		{[]string{"boot", "ack", "edge-5", "edge-2", ""}, ":4\n"},
		{[]string{"boot", "status", "-o", ""}, "table\njson\nyaml\n:4\n"},
	})
}

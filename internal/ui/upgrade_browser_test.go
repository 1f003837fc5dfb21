package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
	"github.com/spectrocloud/nodewright/internal/workflow"
)

// upgradeWords are what an upgrade's stages say.
var upgradeWords = stepWords{
	done: func(s workflow.Step) string {
		return map[workflow.Step]string{
			replupgrade.Preflight:     "edge-1 holds 4 volumes; 8 new replicas to place",
			replupgrade.Place:         "placed 8 replicas on edge-2 and edge-3; the resource group's place count is 3",
			replupgrade.Sync:          "every new replica is UpToDate",
			replupgrade.Verify:        "DRBD's online verify found every volume identical on its 3 replicas",
			replupgrade.Quorum:        "quorum majority on resource group rg-vms; the balance task is back on",
			replupgrade.ReleaseTaints: "removed the not-ready taints from edge-2 and edge-3",
		}[s]
	},
	running: "waiting for LINSTOR",
	failed:  "the sync timeout (10m0s) passed with 2 of 4 volumes UpToDate; pvc-77ce on edge-2 at 22%",
}

// upgradeProgress writes into u's status what its controller would have written
// (writeProgress), with the volumes counted as far as the stages went.
func upgradeProgress(u *nwv1.ReplicationUpgrade, done int, next nwv1.StepState, reason string) {
	st := &u.Status
	writeProgress(&st.WorkflowStatus, replupgrade.Plan{}, replupgrade.Kind, "replicationupgrade/"+u.Name, done, next, reason, upgradeWords)
	st.OriginalNode, st.DataNodes, st.Progress = "edge-1", replupgrade.DataNodes(u.Spec), ""
	st.Volumes = &nwv1.ReplicationVolumeCounts{Total: 4, Replicas: 4 * int32(len(st.DataNodes))}
	st.SyncPercent, st.Syncing = nil, nil
	if done >= 2 {
		st.Volumes.Placed = st.Volumes.Replicas
	}
	if done >= 3 {
		st.Volumes.UpToDate, st.SyncPercent = 4, ptr.To[int32](100)
	}
	if done >= 4 {
		st.Volumes.Verified = 4
	}
}

// TestUpgradeOnTheWorkflowsPage: a Manual ReplicationUpgrade appears on the workflows page with
// its six stages in order, what waits and why and the approve command; the user who may
// approve does so with the keyboard while the page re-renders without pause, and the approval
// is the one `kubectl nodewright approve` writes; the page follows the status as it is
// written: the running stage's progress, the volumes, the synchronisation and the replicas
// still synchronising, the next stage waiting, to Succeeded. An upgrade that rolled back says in
// which stage and why, with its rollback steps.
//
// It runs on a control plane of its own, without the operator, as the flip's test does: the
// test writes the status as the controller would, and RBAC decides what the user may do.
func TestUpgradeOnTheWorkflowsPage(t *testing.T) {
	start := time.Now()
	own := testenv.New()
	own.StartForTest(t)
	ctx := context.Background()
	approver := "ada@example.com"
	grant(t, own, "nodewright-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}, approver)
	grant(t, own, "nodewright-upgrade-approver", []rbacv1.PolicyRule{
		{APIGroups: []string{nwv1.GroupVersion.Group}, Resources: []string{"replicationupgrades"}, Verbs: []string{"patch"}},
	}, approver)

	upgrade := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "to-three"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2", "edge-3"}, ReplicaCount: 3, Approval: nwv1.ApprovalManual}}
	if err := own.Client.Create(ctx, upgrade); err != nil {
		t.Fatal(err)
	}
	write := func(done int, next nwv1.StepState, reason string, more func(*nwv1.ReplicationUpgradeStatus)) {
		t.Helper()
		writeStatus(t, own, upgrade, func() {
			upgradeProgress(upgrade, done, next, reason)
			if more != nil {
				more(&upgrade.Status)
			}
		})
	}
	// The Preflight passed; Place waits for a person.
	write(1, nwv1.StepWaiting, nwv1.ReasonAwaitingApproval, nil)

	card := `[data-key="upgrade/to-three"]`
	stage := func(name string) string { return fmt.Sprintf(`%s .stages [data-step=%q]`, card, name) }
	approve := `[data-key="upgrade/to-three#approve"]`
	states := func(list string) string {
		return fmt.Sprintf(`[...document.querySelectorAll(%s)].map((s) => s.dataset.step + ':' + s.dataset.state).join(',')`, js(card+" "+list+" > li"))
	}

	url, _ := runUIAs(t, as(own, approver), ui.Options{})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.goTo("workflows")
	p.waitJS("the upgrade, its six stages in order, Place waiting", states(".stages")+
		` === 'Preflight:Succeeded,Place:Waiting,Sync:Pending,Verify:Pending,Quorum:Pending,ReleaseTaints:Pending'`)
	shown := p.text(card)
	for _, want := range []string{"Running", "Peers edge-2, edge-3", "3 replicas of each volume · sync timeout 6h · approval Manual",
		"edge-1 holds 4 volumes", "Place waits: AwaitingApproval", "kubectl nodewright approve rupg/to-three --step Place",
		"4 of edge-1, new replicas on edge-2, edge-3", "0 of 8"} {
		if !contains(shown, want) {
			t.Errorf("the upgrade's card does not show %q:\n%s", want, shown)
		}
	}
	p.shot("upgrade", laptopWidth, laptopHeight)

	// Approved with the keyboard while the page re-renders without pause.
	stopChurn := p.churn()
	p.press(approve, kb.Enter)
	p.waitJS("the approval said on the card, with the focus on it", query(card+` .approve-feedback`)+
		`?.innerText.includes('replicationupgrade/to-three: approved step Place') && document.activeElement?.dataset.key === 'upgrade/to-three#feedback'`)
	stopChurn()
	if got := annotationsOf(t, own, upgrade)[nwv1.AnnotationApprove]; got != "Place" {
		t.Fatalf("approve=%q; want Place", got)
	}
	p.waitJS("the approval shown once the upgrade says so", query(card+` .approved`)+`?.innerText.includes('Step Place approved')`)

	// Place runs: its progress under it, the replicas counted.
	write(1, nwv1.StepRunning, "", func(st *nwv1.ReplicationUpgradeStatus) { st.Progress, st.Volumes.Placed = "placed 4/8", 4 })
	p.waitJS("Place running, placed 4 of 8", query(stage("Place"))+`?.dataset.state === 'Running' && `+
		query(stage("Place")+` .stage-progress`)+`?.innerText === 'placed 4/8' && `+query(card+` [data-count="placed"]`)+`?.innerText === '4 of 8'`)

	// Sync runs: the overall percent, and the replicas still synchronising, least done first.
	write(2, nwv1.StepRunning, "", func(st *nwv1.ReplicationUpgradeStatus) {
		st.Progress, st.Volumes.UpToDate, st.SyncPercent = "synced 2/4", 2, ptr.To[int32](75)
		st.Syncing = []nwv1.ReplicaSync{{Resource: "pvc-c3d4", Node: "edge-3", Percent: 41}, {Resource: "pvc-0a1b", Node: "edge-3", Percent: 88}}
	})
	p.waitJS("the sync at 75 %, two replicas syncing, the least done first", query(card+` .sync progress`)+`?.value === 75 && `+
		fmt.Sprintf(`[...document.querySelectorAll(%s)].map((r) => r.dataset.resource + '@' + r.dataset.node + ':' + r.dataset.percent).join(',')`, js(card+` .syncing tbody tr`))+
		` === 'pvc-c3d4@edge-3:41,pvc-0a1b@edge-3:88'`)
	if shown := p.text(card); !contains(shown, "75 %", "synced 2/4", "pvc-c3d4", "41 %", "2 of 4") {
		t.Errorf("the upgrade's card mid-sync:\n%s", shown)
	}
	p.shot("upgrade-sync", laptopWidth, laptopHeight)

	// Synchronised: Verify waits for a person; then on to the end.
	write(3, nwv1.StepWaiting, nwv1.ReasonAwaitingApproval, nil)
	p.waitJS("Verify waiting for approval, the sync done", query(approve)+`?.dataset.step === 'Verify' && !`+query(card+` .syncing`)+
		` && `+query(card+` .sync progress`)+`?.value === 100`)
	write(6, "", "", nil)
	p.waitJSFor("the upgrade Succeeded, every stage Succeeded", query(card)+`?.dataset.phase === 'Succeeded' && `+states(".stages")+
		` === 'Preflight:Succeeded,Place:Succeeded,Sync:Succeeded,Verify:Succeeded,Quorum:Succeeded,ReleaseTaints:Succeeded'`, patience)
	if shown := p.text(card); !contains(shown, replupgrade.Kind.Succeeded, "4 of 4") || contains(shown, "Approve") {
		t.Errorf("the finished upgrade:\n%s", shown)
	}

	// Another upgrade, rolled back when its synchronisation timed out: where, why, and the
	// rollback steps that ran.
	back := &nwv1.ReplicationUpgrade{ObjectMeta: metav1.ObjectMeta{Name: "to-two"},
		Spec: nwv1.ReplicationUpgradeSpec{PeerNodes: []string{"edge-2"}, ReplicaCount: 2}}
	if err := own.Client.Create(ctx, back); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, own, back, func() { upgradeProgress(back, 2, nwv1.StepFailed, "") })
	backCard := `[data-key="upgrade/to-two"]`
	p.waitJS("the rolled back upgrade, where and why", query(backCard)+`?.dataset.phase === 'RolledBack' && `+
		query(backCard+` .result`)+`?.innerText.includes('RolledBack in stage Sync (3 of 6): SyncFailed: step Sync failed: the sync timeout (10m0s) passed')`)
	if got, _ := evaluate[string](p, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((s) => s.dataset.step + ':' + s.dataset.state).join(',')`,
		js(backCard+` .rollback-steps > li`))); got != "RemoveReplicas:Succeeded,RestorePlaceCount:Succeeded,RestoreBalance:Succeeded" {
		t.Errorf("the rollback steps shown: %s", got)
	}
	if got, _ := evaluate[string](p, fmt.Sprintf(`[...document.querySelectorAll(%s)].map((s) => s.dataset.state).join(',')`, js(backCard+` .stages > li`))); got != "Succeeded,Succeeded,Failed,Skipped,Skipped,Skipped" {
		t.Errorf("the rolled back upgrade's stages are %s", got)
	}
	p.shot("upgrade-rolledback", laptopWidth, laptopHeight)
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}

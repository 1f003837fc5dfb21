package nodewrightcluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	bt "github.com/spectrocloud/nodewright/internal/bridge/bridgetest"
	"github.com/spectrocloud/nodewright/internal/controller/nodewrightcluster"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// TestUnknownPreviousStateDoesNotHoldThePhase is the legacy DaemonSet that wrote an unknown
// state once, moved on to MULTI_NODE_READY (so previousState keeps the unknown name), and
// whose ConfigMap was then deleted and recreated with the same data. The phase follows state;
// the transition that cannot be checked is a warning, an Event and an audit record.
func TestUnknownPreviousStateDoesNotHoldThePhase(t *testing.T) {
	f := bt.New(t, env, time.Minute)
	trail := openTrail(t)
	env.StartManager(t, func(ctx context.Context, mgr manager.Manager) error {
		return (&nodewrightcluster.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorderFor("nodewright-test"),
			Audit: trail.log, Actor: "operator", Version: "1.2.3"}).SetupWithManager(ctx, mgr)
	})
	f.SetNodes(f.Node(1), f.Node(2))
	f.Transition(legacy.TaintsReleasing)
	expect(f, phaseIs(nwv1.ClusterUpgrading, legacy.TaintsReleasing))
	// The operator's version, which a fleet hub reads from the status.
	if v := f.Status().Status.OperatorVersion; v != "1.2.3" {
		t.Errorf("status.operatorVersion %q, want the operator's 1.2.3", v)
	}

	f.Transition("WARP_DRIVE_ENGAGED")
	expect(f, func(c *nwv1.NodewrightCluster) string {
		if c.Status.Phase != nwv1.ClusterUnknown || condition(c, nwv1.ConditionStateRecognized).Status != metav1.ConditionFalse {
			return fmt.Sprintf("phase %s, StateRecognized %+v; want Unknown, False", c.Status.Phase, condition(c, nwv1.ConditionStateRecognized))
		}
		return ""
	})

	f.Transition(legacy.MultiNodeReady)
	if f.Data[legacy.KeyPreviousState] != "WARP_DRIVE_ENGAGED" {
		t.Fatalf("the fixture wrote previousState %q", f.Data[legacy.KeyPreviousState])
	}
	recognized := func(c *nwv1.NodewrightCluster) string {
		if msg := phaseIs(nwv1.ClusterMultiNode, legacy.MultiNodeReady)(c); msg != "" {
			return msg
		}
		if cond := condition(c, nwv1.ConditionStateRecognized); cond.Status != metav1.ConditionTrue {
			return fmt.Sprintf("StateRecognized %+v, want True", cond)
		}
		return ""
	}
	expect(f, recognized)
	expect(f, hasWarning(nwv1.WarningFromTransition, string(legacy.UnknownPreviousState), `previousState "WARP_DRIVE_ENGAGED"`))

	f.DeleteConfigMap()
	expect(f, conditionIs(nwv1.ConditionObserved, metav1.ConditionFalse, nwv1.ReasonConfigMapNotFound))
	f.Write()
	expect(f, recognized)

	bt.Eventually(t, wait, func() string {
		if msg, ok := clusterEvent(t, f.Cluster.UID, string(legacy.UnknownPreviousState)); !ok || !strings.Contains(msg, "WARP_DRIVE_ENGAGED") {
			return fmt.Sprintf("no Warning Event %s naming WARP_DRIVE_ENGAGED on the cluster: %q", legacy.UnknownPreviousState, msg)
		}
		return ""
	})
	// The recreated ConfigMap's generation is the one already seen: no second warning.
	if n := warningsWith(f.Status(), string(legacy.UnknownPreviousState)); n != 1 {
		t.Errorf("%d recent warnings %s, want 1", n, legacy.UnknownPreviousState)
	}
	records := trail.records(t, string(f.Cluster.UID))
	if strings.Count(records, `"action":"`+nodewrightcluster.ActionLegacyAnomaly+`","from":"","to":"`+string(legacy.UnknownPreviousState)+`"`) != 1 {
		t.Errorf("the audit trail does not hold one %s record of %s:\n%s", nodewrightcluster.ActionLegacyAnomaly, legacy.UnknownPreviousState, records)
	}
}

func warningsWith(c *nwv1.NodewrightCluster, reason string) int {
	n := 0
	for _, w := range c.Status.RecentWarnings {
		if w.Reason == reason {
			n++
		}
	}
	return n
}

// trail is an audit log on a file sink, as the operator keeps one.
type trail struct {
	dir string
	log *audit.Log
}

func openTrail(t *testing.T) *trail {
	t.Helper()
	privPEM, _, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trail{dir: t.TempDir()}
	sink, err := audit.OpenFileSink(tr.dir, audit.FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr.log = audit.NewLog(sink, signer, sink.State(), audit.LogOptions{})
	t.Cleanup(func() { _ = tr.log.Close() })
	return tr
}

// records are the lines of the trail's files that mention uid, as written so far.
func (tr *trail) records(t *testing.T, uid string) string {
	t.Helper()
	if _, err := tr.log.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, err := audit.ChainFiles(tr.dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, uid) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

// Package kairossite tests a real agent process on a played Kairos host (test/site/kairosplay)
// in a node's network namespace, against a real API server: the agent's OS operations, and the
// played reboot that ends its process and starts it again (siteagent's Kairos option).
package kairossite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/clusterplay"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

var env = testenv.New()

func TestMain(m *testing.M) {
	code := env.Run(m)
	siteagent.Remove()
	os.Exit(code)
}

// patience bounds every wait: only a stuck test reaches it.
const patience = 3 * time.Minute

// operate creates op in the API server and waits for it to end; it returns it as it ended.
func operate(t *testing.T, op *nwv1.NodeOperation) *nwv1.NodeOperation {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	got := &nwv1.NodeOperation{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(op), got); err != nil {
			return err.Error()
		}
		switch got.Status.Phase {
		case nwv1.OperationSucceeded, nwv1.OperationFailed, nwv1.OperationRolledBack:
			return ""
		}
		return fmt.Sprintf("%s %s is %q", op.Spec.Type, op.Name, got.Status.Phase)
	})
	return got
}

func repo(ref string) string { r, _, _ := strings.Cut(ref, "@"); return r }

// kairosNode is a node of a played network whose agent runs on a played Kairos host installed
// with v1, the registry holding v2 too.
type kairosNode struct {
	host   *kairosplay.Host
	sup    *siteagent.Supervisor
	ns     string
	v1, v2 string
	// before is the boot ID of the installation's boot.
	before string
}

const node = "kos-1"

// newKairosNode plays the node; faults are set on its host before its agent starts.
func newKairosNode(t *testing.T, faults ...string) kairosNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := netsite.New(t, nwv1.BondModeActiveBackup, node)
	if err := n.PlayDRBD(); err != nil {
		t.Fatal(err)
	}
	go n.Run(ctx)
	kubeconfig := n.APIServer(t, env.Kubeconfig(t))
	k := kairosNode{ns: env.Namespace(t)}
	nodeObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node}}}
	if err := env.Client.Create(ctx, nodeObj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), nodeObj)
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	reg := kairosplay.Registry{Dir: filepath.Join(t.TempDir(), "registry")}
	var err error
	if k.v1, err = reg.AddVersion("v3.4.2"); err != nil {
		t.Fatal(err)
	}
	if k.v2, err = reg.AddVersion("v3.5.0"); err != nil {
		t.Fatal(err)
	}
	// The agent stages only an image the signed EdgeProfile in force allows: these, v2 and
	// v1 (which a RecoveryRestage stages again after a fallback).
	cleanup, err := clusterplay.ManagedWith(ctx, env.Client, func(p *nwv1.EdgeProfileSpec) {
		p.OS = nwv1.HostOSKairos
		p.Network = nwv1.ProfileNetwork{BondInterface: netsite.Bond, BondMode: nwv1.BondModeActiveBackup}
		p.OSImages = []string{k.v2, k.v1}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	nd := n.Node(node)
	k.host = &kairosplay.Host{Root: nd.Root, Dir: filepath.Join(t.TempDir(), "kairos"), Registry: reg, DRBDDir: nd.DRBDDir}
	if _, err := k.host.Install(ctx, k.v1); err != nil {
		t.Fatal(err)
	}
	if k.before, err = k.host.BootID(); err != nil {
		t.Fatal(err)
	}
	for _, f := range faults {
		content := []string(nil)
		if f == kairosplay.FaultFailBoot {
			content = []string{k.v2}
		}
		if err := k.host.SetFault(f, true, content...); err != nil {
			t.Fatal(err)
		}
	}
	k.sup = siteagent.Supervised(siteagent.Start(t, n, node, siteagent.Options{Kubeconfig: kubeconfig, Namespace: k.ns, Kairos: k.host}))
	return k
}

// stageAndReboot runs an OSUpgradeStage of v2 then a Reboot, each to its end, and requires
// both Succeeded: the Reboot succeeds on any new boot, the fallback's too (the policy's
// verification tells them apart).
func (k kairosNode) stageAndReboot(t *testing.T) (stage, reboot *nwv1.NodeOperation) {
	t.Helper()
	deadline := metav1.NewTime(time.Now().Add(30 * time.Minute))
	stage = operate(t, &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: "stage", Namespace: k.ns},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationOSUpgradeStage, Deadline: deadline,
			OSUpgradeStage: &nwv1.OSImageOperation{Image: k.v2}}})
	if stage.Status.Phase != nwv1.OperationSucceeded {
		t.Fatalf("OSUpgradeStage ended %s: %+v", stage.Status.Phase, stage.Status.Error)
	}
	if ref, _, _ := k.host.Slot(kairosplay.Active); ref != k.v2 {
		t.Fatalf("the active slot holds %s after the stage, want %s", ref, k.v2)
	}
	if ref, _, _ := k.host.Slot(kairosplay.Passive); ref != k.v1 {
		t.Fatalf("the passive slot holds %s after the stage, want %s", ref, k.v1)
	}
	if r := stage.Status.Result; r == nil || r.Boot == nil || r.Boot.BootID != k.before || r.Boot.Image != repo(k.v1) {
		t.Fatalf("the stage's result %+v: want the boot it ran from (%s, %s)", r, k.before, repo(k.v1))
	}
	reboot = operate(t, &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Name: "reboot", Namespace: k.ns},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationReboot, Deadline: deadline,
			Reboot: &nwv1.RebootOperation{Reason: "the site's test"}}})
	if reboot.Status.Phase != nwv1.OperationSucceeded {
		t.Fatalf("Reboot ended %s: %+v", reboot.Status.Phase, reboot.Status.Error)
	}
	return stage, reboot
}

// TestStageThenRebootBootsTheNewImage: on a node installed with v3.4.2, an OSUpgradeStage of
// v3.5.0 then a Reboot, created in the API server, end Succeeded; the agent's process died at
// the reboot and was started again on the new boot; and the host's files show v3.5.0 booted
// from the active slot, with a new boot ID and the boot assessment's flags cleared.
func TestStageThenRebootBootsTheNewImage(t *testing.T) {
	k := newKairosNode(t)
	ctx := context.Background()
	host := k.host
	_, reboot := k.stageAndReboot(t)

	// The host's own files, not the operation's word.
	after, err := host.BootID()
	if err != nil || after == k.before {
		t.Fatalf("boot ID %q after the reboot (%v), was %q", after, err, k.before)
	}
	boots := k.sup.Boots()
	if len(boots) != 1 || boots[0].BootID != after || boots[0].Entry != kairosplay.Active || boots[0].Fallback {
		t.Fatalf("played boots %+v: want one, of the active slot, boot ID %s", boots, after)
	}
	raw, err := os.ReadFile(filepath.Join(host.Root, "etc/kairos-release"))
	if err != nil || kairosplay.ReleaseValue(string(raw), "KAIROS_IMAGE_REPO") != repo(k.v2) {
		t.Fatalf("/etc/kairos-release after the reboot (%v):\n%s\nwant KAIROS_IMAGE_REPO %s", err, raw, repo(k.v2))
	}
	cmdline, err := os.ReadFile(filepath.Join(host.Proc(), "cmdline"))
	if entry, _ := hostos.KairosBootFromCmdline(string(cmdline)); err != nil || entry != nwv1.KairosBootActive || strings.Contains(string(cmdline), "upgrade_failure") {
		t.Fatalf("/proc/cmdline %q (%v): want the active entry, no upgrade_failure", cmdline, err)
	}
	if _, err := os.Stat(filepath.Join(host.Root, "run/cos/upgrade_failure")); !os.IsNotExist(err) {
		t.Fatalf("/run/cos/upgrade_failure after a good boot: %v", err)
	}
	grubenv, err := host.GRUBEnv(ctx)
	if err != nil || grubenv[kairosplay.EnableBootAssessment] != "" || grubenv[kairosplay.BootAssessmentTentative] != "" {
		t.Fatalf("grubenv %v (%v): want the assessment flags cleared", grubenv, err)
	}
	if r := reboot.Status.Result; r == nil || r.PreviousBootID != k.before || r.Boot == nil || r.Boot.BootID != after || r.Boot.Image != repo(k.v2) {
		t.Fatalf("the reboot's result %+v: want previousBootID %s and the boot %s of %s", r, k.before, after, repo(k.v2))
	}
	// The agent's report of the new boot, which the policy verifies: every assessment flag
	// cleared is still reported (and accepted by the API server).
	status := &nwv1.NodewrightAgentStatus{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, status); err != nil {
			return err.Error()
		}
		o := status.Status.OS
		if o == nil || o.Kairos == nil {
			return fmt.Sprintf("the agent's report of the OS: %+v", o)
		}
		if ka := o.Kairos; o.BootID != after || ka.Image != repo(k.v2) || ka.BootEntry != nwv1.KairosBootActive || ka.UpgradeFailure ||
			ka.BootAssessment == nil || *ka.BootAssessment != (nwv1.KairosBootAssessment{}) || ka.LastFallback != nil {
			return fmt.Sprintf("the agent's report: boot ID %s, Kairos %+v, bootAssessment %+v; want boot %s of %s, active, the flags cleared",
				o.BootID, *ka, ka.BootAssessment, after, repo(k.v2))
		}
		return ""
	})
}

// TestNewImageFailsToBootFallsBack: the new image fails to boot (the fault hook); GRUB's
// assessment falls back to the passive slot with upgrade_failure, the agent comes back there,
// and its report says so: upgradeFailure, and lastFallback from the staged image to the
// running one, on the fallback's boot ID.
func TestNewImageFailsToBootFallsBack(t *testing.T) {
	k := newKairosNode(t, kairosplay.FaultFailBoot)
	_, reboot := k.stageAndReboot(t)
	after, err := k.host.BootID()
	if err != nil || after == k.before {
		t.Fatalf("boot ID %q after the reboot (%v), was %q", after, err, k.before)
	}
	boots := k.sup.Boots()
	if len(boots) != 1 || boots[0].Entry != kairosplay.Passive || !boots[0].Fallback || boots[0].Image != k.v1 {
		t.Fatalf("played boots %+v: want the fallback to %s", boots, k.v1)
	}
	raw, err := os.ReadFile(filepath.Join(k.host.Root, "etc/kairos-release"))
	if err != nil || kairosplay.ReleaseValue(string(raw), "KAIROS_IMAGE_REPO") != repo(k.v1) {
		t.Fatalf("/etc/kairos-release after the fallback (%v): want %s", err, repo(k.v1))
	}
	if _, err := os.Stat(filepath.Join(k.host.Root, "run/cos/upgrade_failure")); err != nil {
		t.Fatalf("no /run/cos/upgrade_failure after the fallback: %v", err)
	}
	if r := reboot.Status.Result; r == nil || r.Boot == nil || r.Boot.BootID != after || r.Boot.Image != repo(k.v1) || r.Boot.Entry != nwv1.KairosBootPassive {
		t.Fatalf("the reboot's result %+v: want the fallback boot %s, passive, of %s", r, after, repo(k.v1))
	}
	status := &nwv1.NodewrightAgentStatus{}
	testenv.Eventually(t, patience, func() string {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, status); err != nil {
			return err.Error()
		}
		o := status.Status.OS
		if o == nil || o.BootID != after || o.Kairos == nil || !o.Kairos.UpgradeFailure || o.Kairos.LastFallback == nil {
			if o != nil && o.Kairos != nil {
				return fmt.Sprintf("the agent's report: boot ID %s, Kairos %+v, lastFallback %+v", o.BootID, *o.Kairos, o.Kairos.LastFallback)
			}
			return fmt.Sprintf("the agent's report of the OS: %+v", o)
		}
		if fb := o.Kairos.LastFallback; fb.FromImage != k.v2 || fb.ToImage != repo(k.v1) || fb.BootID != after {
			return fmt.Sprintf("lastFallback %+v: want from %s to %s on boot %s", fb, k.v2, repo(k.v1), after)
		}
		return ""
	})
}

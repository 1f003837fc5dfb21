package cli

import (
	"bytes"
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
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// flipStories are the flips the golden files record: a Manual flip of two nodes that
// succeeds, and an Automatic one of three nodes whose second node does not reach its peers
// and that rolls back.
var flipStories = map[string]func(*testing.T, string) []flipSnapshot{
	"flip-manual-succeeded": manualSucceededStory,
	"flip-rolledback":       rolledBackStory,
}

// The live view, frame by frame, and the log a script reads (goldenViews).
func TestFlipWatchGolden(t *testing.T) {
	for name, story := range flipStories {
		t.Run(name, func(t *testing.T) { goldenViews(t, name, story(t, "to-lacp"), flips) })
	}
}

// goldenViews compares the views of a story's workflow with the golden files name.frames.golden
// and name.lines.golden. The live view, frame by frame: at each version's arrival, and five
// seconds later while the next is later still (the once-a-second redraw: the running step's
// duration moves on). The log a script reads: one line per change, then the result.
func goldenViews[O gatedWorkflow](t *testing.T, name string, snaps []storySnapshot[O], kind gatedKind[O]) {
	t.Helper()
	golden(t, name+".frames.golden", storyFrames(snaps, kind.frame))
	var out bytes.Buffer
	view := kind.view(&out, false, palette{}, 0)
	for _, s := range snaps {
		view.show(s.Obj, false, s.At)
	}
	golden(t, name+".lines.golden", out.String())
}

// storyFrames are the frames render draws of a story: at each version's arrival, and five
// seconds later while the next is later still.
func storyFrames[O gatedWorkflow](snaps []storySnapshot[O], render func(O, time.Time) []line) string {
	var b strings.Builder
	for i, s := range snaps {
		clocks := []time.Time{s.At}
		if i+1 < len(snaps) && snaps[i+1].At.Sub(s.At) > 5*time.Second {
			clocks = append(clocks, s.At.Add(5*time.Second))
		}
		for _, now := range clocks {
			fmt.Fprintf(&b, "=== %s (version %d)\n", now.Format("15:04:05"), i+1)
			b.WriteString(frameText(render(s.Obj, now)))
		}
	}
	return b.String()
}

// What a person must know is in the view: each node's modes and state, the step waiting and
// why, the command that approves it, and where a flip that rolled back failed.
func TestFlipViewSaysWhatWaitsAndWhy(t *testing.T) {
	snaps := manualSucceededStory(t, "to-lacp")
	frame := frameText(renderFlipFrame(heldAt(t, snaps, "Node2"), snaps[len(snaps)-1].At))
	wantAll(t, "the frame", frame,
		"  ✓ 1  edge-1  active-backup → 802.3ad  Done\n",
		"  · 2  edge-2  active-backup            Pending\n",
		"      ‖ Node2      Waiting\n",
		"  ‖ Held: AwaitingApproval: awaiting approval: kubectl nodewright approve bondmodeflipplan/to-lacp\n",
		"    Approve it: kubectl nodewright approve bondflip/to-lacp --step Node2\n")

	rolledBack := rolledBackStory(t, "to-lacp")
	last := rolledBack[len(rolledBack)-1].Obj
	end := frameText(flipFinalLines(last))
	if want := "Result: RolledBack after 3m11s on node edge-3 (2 of 3): Node2Failed: step Node2 failed: Confirm: edge-3 did not reach its peers within 60s; its agent restored active-backup; rolled back: every node runs the bond mode it had before the flip\n"; end != want {
		t.Errorf("the result:\n%q\nwant\n%q", end, want)
	}
}

// TestEveryNodeStateHasAnIcon: the watch draws every node state the API allows.
func TestEveryNodeStateHasAnIcon(t *testing.T) {
	for _, v := range testenv.EnumValues(t, "NodeFlipState") {
		if _, ok := nodeIcons[nwv1.NodeFlipState(v)]; !ok {
			t.Errorf("node state %s has no icon in the watch", v)
		}
	}
}

// --to takes exactly the bond modes the API server admits (the CRD's enum), --vm-protection
// and --approval the API's values.
func TestFlipFlagsTakeTheAPIsValues(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(env.RepoRoot, "config", "crd", "bases", "nodewright.spectrocloud.com_bondmodeflipplans.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, v := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["targetMode"].Enum {
		var mode string
		if err := json.Unmarshal(v.Raw, &mode); err != nil {
			t.Fatal(err)
		}
		modes = append(modes, mode)
	}
	for enum, c := range map[string]struct{ got, want []string }{
		"spec.targetMode": {mapSlice(bondModes, func(m nwv1.BondMode) string { return string(m) }), modes},
		"VMProtection":    {mapSlice(vmProtections, func(v nwv1.VMProtection) string { return string(v) }), testenv.EnumValues(t, "VMProtection")},
		"Approval":        {mapSlice(approvals, func(a nwv1.Approval) string { return string(a) }), testenv.EnumValues(t, "Approval")},
	} {
		if strings.Join(c.got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: the flags take %v, the API %v", enum, c.got, c.want)
		}
	}
}

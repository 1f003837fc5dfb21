package kairosplay

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/systemdunit"
)

// TestPlayedSystemctlPrintsWhatSystemctlPrints: the played systemctl show prints, for units
// set running and failed and one never set, the same bytes as the sample of systemctl's
// output in internal/systemdunit's testdata, which the agent's parser reads; a state set
// again is shown; any other command fails as systemctl does.
func TestPlayedSystemctlPrintsWhatSystemctlPrints(t *testing.T) {
	h := &Host{Root: t.TempDir(), Dir: t.TempDir()}
	r := Runner{Host: h}
	if err := h.SetUnit("k3s.service", &UnitState{ActiveState: "active", SubState: "running"}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetUnit("nodewright-demo.service", &UnitState{ActiveState: "failed", SubState: "failed"}); err != nil {
		t.Fatal(err)
	}
	names := []string{"k3s.service", "nodewright-demo.service", "absent.service"}
	// The properties named in another order than systemctl prints them.
	argv := append([]string{"systemctl", "show", "--property=SubState,Id,ActiveState,LoadState", "--no-pager", "--"}, names...)
	res, err := r.Run(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../../internal/systemdunit/testdata/show-k3s-failed-notfound.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != string(sample) {
		t.Fatalf("the played systemctl printed\n%s\nwant the sample\n%s", res.Stdout, sample)
	}

	if err := h.SetUnit("nodewright-demo.service", &UnitState{ActiveState: "active", SubState: "running"}); err != nil {
		t.Fatal(err)
	}
	res, err = r.Run(context.Background(), append([]string{"systemctl"}, systemdunit.ShowArgs(names)...))
	if err != nil {
		t.Fatal(err)
	}
	states, err := systemdunit.ParseShow(res.Stdout, names)
	if err != nil || !states[1].Active() || states[2].LoadState != "not-found" {
		t.Fatalf("after the unit is set active: %+v, %v", states, err)
	}

	for _, bad := range [][]string{{"systemctl", "restart", "k3s.service"}, {"systemctl", "show", "--all", "k3s.service"}, {"systemctl", "show", "--property=MainPID", "k3s.service"}} {
		res, err := r.Run(context.Background(), bad)
		if err == nil || res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "systemctl") {
			t.Errorf("%q: %+v, %v; want it to fail with exit status 1", bad, res, err)
		}
	}
}

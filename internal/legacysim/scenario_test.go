package legacysim

import (
	"errors"
	"testing"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

var testFleet = []string{"edge-1", "edge-2", "edge-3"}

// Every transition of every built-in scenario, walked from its start, is one the legacy state
// machine allows.
func TestBuiltInScenariosUseOnlyAllowedTransitions(t *testing.T) {
	for _, fleet := range [][]string{testFleet[:2], testFleet} {
		for _, name := range ScenarioNames() {
			sc, err := BuiltIn(name, fleet)
			if err != nil {
				t.Fatalf("%s with %d nodes: %v", name, len(fleet), err)
			}
			at, transitions := sc.From, 0
			for i, st := range sc.Steps {
				switch st.Kind {
				case StepTransition:
					if !legacy.Allowed(at, st.State) {
						t.Errorf("%s step %d: %s -> %s is not allowed", name, i+1, at, st.State)
					}
					at = st.State
					transitions++
				case StepForceState, StepJumpGeneration, StepGarbage:
					t.Errorf("%s step %d: a built-in scenario misbehaves (%s)", name, i+1, st)
				}
			}
			if transitions == 0 {
				t.Errorf("%s has no transitions", name)
			}
			if err := sc.Check(); err != nil {
				t.Errorf("%s: Check: %v", name, err)
			}
			if sc.End() != at {
				t.Errorf("%s: End() = %s, walked to %s", name, sc.End(), at)
			}
		}
	}
}

func TestBuiltInScenarioShapes(t *testing.T) {
	cases := []struct {
		name     string
		from, to legacy.State
	}{
		{ScenarioBootstrap, legacy.Init, legacy.SingleNodeReady},
		{ScenarioUpgrade, legacy.SingleNodeReady, legacy.MultiNodeReady},
		{ScenarioPeerLost, legacy.MultiNodeReady, legacy.MultiNodeReady},
		{ScenarioFull, legacy.Init, legacy.MultiNodeReady},
	}
	for _, c := range cases {
		sc, err := BuiltIn(c.name, testFleet)
		if err != nil {
			t.Fatal(err)
		}
		if sc.From != c.from || sc.End() != c.to {
			t.Errorf("%s: %s -> %s, want %s -> %s", c.name, sc.From, sc.End(), c.from, c.to)
		}
	}
	peerLost, _ := BuiltIn(ScenarioPeerLost, testFleet)
	if !containsState(peerLost, legacy.PeerLost) {
		t.Errorf("peer-lost never reaches PEER_LOST")
	}
}

func containsState(sc Scenario, s legacy.State) bool {
	for _, st := range sc.Steps {
		if st.Kind == StepTransition && st.State == s {
			return true
		}
	}
	return false
}

func TestBuiltInRefusesBadInput(t *testing.T) {
	if _, err := BuiltIn("nope", testFleet); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	if _, err := BuiltIn(ScenarioUpgrade, testFleet[:1]); err == nil {
		t.Error("upgrade with a single node was accepted")
	}
	if _, err := BuiltIn(ScenarioBootstrap, testFleet[:1]); err != nil {
		t.Errorf("bootstrap with a single node: %v", err)
	}
}

func TestCheckFindsForbiddenStep(t *testing.T) {
	sc := Scenario{Name: "bad", From: legacy.Init, Steps: []Step{To(legacy.NetworkConfiguring), To(legacy.MultiNodeReady)}}
	if err := sc.Check(); !errors.Is(err, ErrForbidden) {
		t.Errorf("Check = %v, want ErrForbidden", err)
	}
	forced := Scenario{Name: "forced", From: legacy.Init, Steps: []Step{Force(legacy.MultiNodeReady), To(legacy.PeerLost)}}
	if err := forced.Check(); err != nil {
		t.Errorf("Check after a forced state: %v", err)
	}
}

func TestPathFollowsAllowedTransitions(t *testing.T) {
	for _, from := range legacy.States() {
		for _, to := range []legacy.State{legacy.Init, legacy.SingleNodeReady, legacy.MultiNodeReady} {
			route, err := path(from, to)
			if err != nil {
				t.Errorf("%s -> %s: %v", from, to, err)
				continue
			}
			at := from
			for _, next := range route {
				if !legacy.Allowed(at, next) {
					t.Errorf("%s -> %s: route step %s -> %s is not allowed", from, to, at, next)
				}
				at = next
			}
			if at != to {
				t.Errorf("%s -> %s: route ends at %s", from, to, at)
			}
		}
	}
	route, _ := path(legacy.Init, legacy.SingleNodeReady)
	if len(route) != 3 {
		t.Errorf("INIT -> SINGLE_NODE_READY took %v, want the 3 bootstrap transitions", route)
	}
	if _, err := path("BOGUS", legacy.Init); err == nil {
		t.Error("a route from an unknown state was found")
	}
}

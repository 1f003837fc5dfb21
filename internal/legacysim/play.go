package legacysim

import (
	"context"
	"fmt"
	"slices"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Play runs a scenario: first it brings the site to the scenario's start (the nodes in Joined,
// the state From) by allowed transitions, then it applies the steps. It pauses pace after
// every transition, so someone watching sees each phase; other steps follow at once. It
// returns ctx's error if ctx ends first.
func (s *Simulator) Play(ctx context.Context, sc Scenario, pace time.Duration) error {
	if err := sc.Check(); err != nil {
		return err
	}
	if err := s.prepare(ctx, sc, pace); err != nil {
		return fmt.Errorf("preparing scenario %s: %w", sc.Name, err)
	}
	s.log.Info("Playing scenario", "scenario", sc.Name, "steps", len(sc.Steps))
	for i, st := range sc.Steps {
		if err := s.Apply(ctx, st); err != nil {
			return fmt.Errorf("scenario %s, step %d (%s): %w", sc.Name, i+1, st, err)
		}
		if st.Kind == StepTransition || st.Kind == StepForceState {
			if err := sleep(ctx, pace); err != nil {
				return err
			}
		}
	}
	s.log.Info("Scenario finished", "scenario", sc.Name, "state", string(sc.End()))
	return nil
}

// prepare makes the nodes key hold exactly sc.Joined and walks the shortest allowed path from
// the current state to sc.From. Going back to an earlier state takes the machine's own way
// round (through FAILED to INIT, say), which is what --loop shows between rounds.
func (s *Simulator) prepare(ctx context.Context, sc Scenario, pace time.Duration) error {
	cm, err := s.read(ctx)
	if err != nil {
		return err
	}
	listed, state := managedNodes(cm), legacy.State(cm.Data[legacy.KeyState])
	for _, name := range listed {
		if !slices.Contains(sc.Joined, name) {
			if err := s.RemoveNode(ctx, name); err != nil {
				return err
			}
		}
	}
	for _, name := range sc.Joined {
		if slices.Contains(listed, name) {
			continue
		}
		if err := s.Apply(ctx, Join(name)); err != nil {
			return err
		}
	}
	if state == sc.From {
		return nil
	}
	route, err := path(state, sc.From)
	if err != nil {
		return err
	}
	s.log.Info("Preparing scenario", "scenario", sc.Name, "from", string(orNone(state)), "to", string(sc.From), "transitions", len(route))
	for _, to := range route {
		if err := s.Transition(ctx, to); err != nil {
			return err
		}
		if err := sleep(ctx, pace); err != nil {
			return err
		}
	}
	return nil
}

// path is the shortest list of allowed transitions from one state to another that avoids
// the Degraded and Recovering phases, or, when there is none (back to INIT is only through
// FAILED), the shortest of all. Avoiding them keeps a prepared start honest: INIT reaches
// SINGLE_NODE_READY through bootstrap rather than the BOOT_RECOVERY shortcut.
func path(from, to legacy.State) ([]legacy.State, error) {
	healthy := func(s legacy.State) bool {
		phase := legacy.PhaseOf(s)
		return s == to || (phase != nwv1.ClusterDegraded && phase != nwv1.ClusterRecovering)
	}
	if route, ok := shortest(from, to, healthy); ok {
		return route, nil
	}
	if route, ok := shortest(from, to, func(legacy.State) bool { return true }); ok {
		return route, nil
	}
	return nil, fmt.Errorf("no allowed transitions lead from %s to %s", orNone(from), to)
}

// shortest searches breadth-first over legacy.Allowed through the states usable accepts; ties
// go to the earlier state in the contract's order.
func shortest(from, to legacy.State, usable func(legacy.State) bool) ([]legacy.State, bool) {
	prev := map[legacy.State]legacy.State{from: ""}
	queue := []legacy.State{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		if at == to {
			var route []legacy.State
			for ; at != from; at = prev[at] {
				route = append(route, at)
			}
			slices.Reverse(route)
			return route, true
		}
		for _, next := range legacy.States() {
			if _, seen := prev[next]; !seen && usable(next) && legacy.Allowed(at, next) {
				prev[next] = at
				queue = append(queue, next)
			}
		}
	}
	return nil, false
}

package legacysim

import (
	"context"
	"fmt"
	"time"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// StepKind says what a scenario step does.
type StepKind string

// The step kinds. The last three break the contract on purpose.
const (
	StepTransition     StepKind = "transition"
	StepWait           StepKind = "wait"
	StepJoin           StepKind = "join"
	StepRemove         StepKind = "remove"
	StepSilence        StepKind = "silence"
	StepResume         StepKind = "resume"
	StepSetDRBD        StepKind = "set-drbd"
	StepSetBondMode    StepKind = "set-bond-mode"
	StepForceState     StepKind = "force-state"
	StepJumpGeneration StepKind = "jump-generation"
	StepGarbage        StepKind = "garbage"
)

// Step is one thing a scenario does; only the fields its Kind names are used.
type Step struct {
	Kind StepKind
	// State: transition, force-state.
	State legacy.State
	// Node: join (a node of the fleet), remove, silence, resume, set-drbd, set-bond-mode.
	Node string
	// DRBD: set-drbd.
	DRBD legacy.DRBD
	// BondMode: set-bond-mode.
	BondMode nwv1.BondMode
	// Wait: wait.
	Wait time.Duration
	// By: jump-generation.
	By int64
	// Key and Value: garbage.
	Key, Value string
}

// Step constructors, so scenarios read as lists.

// To is an allowed transition.
func To(s legacy.State) Step { return Step{Kind: StepTransition, State: s} }

// Wait pauses the scenario.
func Wait(d time.Duration) Step { return Step{Kind: StepWait, Wait: d} }

// Join adds a node of the fleet.
func Join(node string) Step { return Step{Kind: StepJoin, Node: node} }

// Remove takes a node out.
func Remove(node string) Step { return Step{Kind: StepRemove, Node: node} }

// Silence holds back a node's heartbeat.
func Silence(node string) Step { return Step{Kind: StepSilence, Node: node} }

// Resume lets a node heartbeat again.
func Resume(node string) Step { return Step{Kind: StepResume, Node: node} }

// SetDRBD writes a node's DRBD health.
func SetDRBD(node string, d legacy.DRBD) Step { return Step{Kind: StepSetDRBD, Node: node, DRBD: d} }

// SetBondMode writes a node's bond mode.
func SetBondMode(node string, mode nwv1.BondMode) Step {
	return Step{Kind: StepSetBondMode, Node: node, BondMode: mode}
}

// Force writes a state whether or not the state machine allows it.
func Force(s legacy.State) Step { return Step{Kind: StepForceState, State: s} }

// JumpGeneration moves the generation by n without a transition.
func JumpGeneration(n int64) Step { return Step{Kind: StepJumpGeneration, By: n} }

// Garbage writes value into key.
func Garbage(key, value string) Step { return Step{Kind: StepGarbage, Key: key, Value: value} }

func (st Step) String() string {
	switch st.Kind {
	case StepTransition, StepForceState:
		return fmt.Sprintf("%s to %s", st.Kind, st.State)
	case StepWait:
		return fmt.Sprintf("wait %s", st.Wait)
	case StepSetDRBD:
		return fmt.Sprintf("%s %s %+v", st.Kind, st.Node, st.DRBD)
	case StepSetBondMode:
		return fmt.Sprintf("%s %s %s", st.Kind, st.Node, st.BondMode)
	case StepJumpGeneration:
		return fmt.Sprintf("%s by %d", st.Kind, st.By)
	case StepGarbage:
		return fmt.Sprintf("%s %s=%q", st.Kind, st.Key, st.Value)
	}
	return fmt.Sprintf("%s %s", st.Kind, st.Node)
}

// Apply performs one step. A wait step waits (ending early, with ctx's error, if ctx ends).
func (s *Simulator) Apply(ctx context.Context, st Step) error {
	switch st.Kind {
	case StepTransition:
		return s.Transition(ctx, st.State)
	case StepWait:
		s.log.Info("Waiting", "for", st.Wait.String())
		return sleep(ctx, st.Wait)
	case StepJoin:
		n, err := s.fleetNode(st.Node)
		if err != nil {
			return err
		}
		return s.JoinNode(ctx, n)
	case StepRemove:
		return s.RemoveNode(ctx, st.Node)
	case StepSilence:
		return s.Silence(ctx, st.Node)
	case StepResume:
		return s.Resume(ctx, st.Node)
	case StepSetDRBD:
		return s.SetDRBD(ctx, st.Node, st.DRBD)
	case StepSetBondMode:
		return s.SetBondMode(ctx, st.Node, st.BondMode)
	case StepForceState:
		return s.ForceState(ctx, st.State)
	case StepJumpGeneration:
		return s.JumpGeneration(ctx, st.By)
	case StepGarbage:
		return s.WriteGarbage(ctx, st.Key, st.Value)
	}
	return fmt.Errorf("unknown step kind %q", st.Kind)
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

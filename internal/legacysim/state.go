package legacysim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// ErrForbidden is returned by Transition for a move the state machine does not allow.
var ErrForbidden = errors.New("transition not allowed by the legacy state machine")

// Transition moves the state machine as the DaemonSet does: state, previousState, stateSince
// and generation+1 in one update, then a StateChanged Event (Warning into PEER_LOST,
// DRBD_DEGRADED, SPLIT_BRAIN or FAILED, Normal otherwise). It refuses, with ErrForbidden, a
// move legacy.Allowed rejects, judged against the state actually in the ConfigMap.
func (s *Simulator) Transition(ctx context.Context, to legacy.State) error {
	return s.writeState(ctx, func(from legacy.State) (legacy.State, error) {
		if !legacy.Allowed(from, to) {
			return "", fmt.Errorf("%s -> %s: %w", orNone(from), to, ErrForbidden)
		}
		return to, nil
	})
}

// ForceState writes a state the way Transition does but without asking the state machine, so
// it can write a state that is not one of the 21 or a move that is not allowed.
func (s *Simulator) ForceState(ctx context.Context, to legacy.State) error {
	if err := checkValue(string(to)); err != nil {
		return err
	}
	return s.writeState(ctx, func(legacy.State) (legacy.State, error) { return to, nil })
}

// ForbiddenJump moves to the first state, in the contract's order, that the current state may
// not go to, and returns it.
func (s *Simulator) ForbiddenJump(ctx context.Context) (legacy.State, error) {
	var target legacy.State
	err := s.writeState(ctx, func(from legacy.State) (legacy.State, error) {
		for _, to := range legacy.States() {
			if to != from && !legacy.Allowed(from, to) {
				target = to
				return to, nil
			}
		}
		return "", fmt.Errorf("every state is allowed after %s", from)
	})
	return target, err
}

// writeState writes the state pick chooses from the current one, with the bookkeeping of a
// transition, and emits the Event.
func (s *Simulator) writeState(ctx context.Context, pick func(from legacy.State) (legacy.State, error)) error {
	var from, to legacy.State
	var generation int64
	cm, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		from = legacy.State(cm.Data[legacy.KeyState])
		var err error
		if to, err = pick(from); err != nil {
			return err
		}
		if generation, err = currentGeneration(cm); err != nil {
			return err
		}
		generation++
		cm.Data[legacy.KeyState] = string(to)
		cm.Data[legacy.KeyPreviousState] = string(from)
		cm.Data[legacy.KeyStateSince] = timestamp(time.Now())
		cm.Data[legacy.KeyGeneration] = strconv.FormatInt(generation, 10)
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the state: %w", err)
	}
	s.log.Info("State changed", "from", string(orNone(from)), "to", string(to), "generation", generation,
		"phase", string(legacy.PhaseOf(to)))
	if err := s.stateEvent(ctx, cm, from, to, generation); err != nil {
		return fmt.Errorf("state %s written: %w", to, err)
	}
	return nil
}

// JumpGeneration adds n (which may be negative, to make the generation go back) to the
// generation without a transition, as if transitions had been missed or the ConfigMap reset.
func (s *Simulator) JumpGeneration(ctx context.Context, n int64) error {
	var generation int64
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		current, err := currentGeneration(cm)
		if err != nil {
			return err
		}
		generation = current + n
		if generation < 0 {
			return fmt.Errorf("generation %d%+d would be negative; write it with WriteGarbage instead", current, n)
		}
		cm.Data[legacy.KeyGeneration] = strconv.FormatInt(generation, 10)
		return nil
	})
	if err != nil {
		return fmt.Errorf("jumping the generation by %d: %w", n, err)
	}
	s.log.Info("Generation jumped", "by", n, "generation", generation)
	return nil
}

// WriteGarbage writes value into key as it is: any key, contract or not.
func (s *Simulator) WriteGarbage(ctx context.Context, key, value string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		cm.Data[key] = value
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing garbage into %q: %w", key, err)
	}
	s.log.Info("Garbage written", "key", key, "value", value)
	return nil
}

func currentGeneration(cm *corev1.ConfigMap) (int64, error) {
	value := cm.Data[legacy.KeyGeneration]
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the generation in the ConfigMap, %q, is not a decimal integer: %w", value, err)
	}
	return n, nil
}

package legacysim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Heartbeat refreshes, in one update, the heartbeat of every node the ConfigMap lists except
// the silenced ones, and returns the nodes it refreshed. With nothing to refresh it writes
// nothing.
func (s *Simulator) Heartbeat(ctx context.Context) ([]string, error) {
	var beat []string
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		silenced := silencedOf(cm)
		beat = slices.DeleteFunc(managedNodes(cm), func(n string) bool { return slices.Contains(silenced, n) })
		if len(beat) == 0 {
			return errNothingToWrite
		}
		now := timestamp(time.Now())
		for _, n := range beat {
			cm.Data[legacy.NodeKey(n, legacy.FieldHeartbeat)] = now
		}
		return nil
	})
	if errors.Is(err, errNothingToWrite) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	return beat, nil
}

// errNothingToWrite stops an update that would change nothing.
var errNothingToWrite = errors.New("nothing to write")

// RunHeartbeats refreshes heartbeats now and then every interval, as the DaemonSet's pods do,
// until ctx ends. The silenced set is read from the cluster on every beat, so a node silenced
// or resumed by another process is honoured within one interval. A failed beat is logged and
// the loop goes on: the API server being briefly away must not stop the site's heartbeats.
func (s *Simulator) RunHeartbeats(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if _, err := s.Heartbeat(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("Heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Silence holds back a node's heartbeat, as if its pod had hung: the SilencedAnnotation gets
// the node, and every heartbeat writer (this process or another) skips it until Resume.
func (s *Simulator) Silence(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		if !slices.Contains(managedNodes(cm), node) {
			return fmt.Errorf("node %s is not in the ConfigMap's nodes", node)
		}
		silenced := silencedOf(cm)
		if !slices.Contains(silenced, node) {
			silenced = append(silenced, node)
		}
		setSilenced(cm, silenced)
		return nil
	})
	if err != nil {
		return fmt.Errorf("silencing node %s: %w", node, err)
	}
	s.log.Info("Node silenced", "node", node)
	return nil
}

// Resume lets a silenced node heartbeat again and, in the same update, gives it a fresh
// heartbeat if the ConfigMap lists it, as its pod would on coming back.
func (s *Simulator) Resume(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		setSilenced(cm, slices.DeleteFunc(silencedOf(cm), func(n string) bool { return n == node }))
		if slices.Contains(managedNodes(cm), node) {
			cm.Data[legacy.NodeKey(node, legacy.FieldHeartbeat)] = timestamp(time.Now())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resuming node %s: %w", node, err)
	}
	s.log.Info("Node resumed", "node", node)
	return nil
}

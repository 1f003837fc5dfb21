package legacysim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// conflictBackoff is longer than retry.DefaultRetry: the heartbeat loop, a scenario and
// one-shot commands from other processes all write the same ConfigMap, and a burst of them
// should still get through.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Second}

// update is the one way the simulator writes the ConfigMap: read it, let mutate change a
// copy, and update it at the resourceVersion that was read, again from the top on conflict.
// An error from mutate ends it without writing. It returns the ConfigMap as written.
func (s *Simulator) update(ctx context.Context, mutate func(cm *corev1.ConfigMap) error) (*corev1.ConfigMap, error) {
	var written *corev1.ConfigMap
	var last error
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		last = s.tryUpdate(ctx, mutate, &written)
		return last
	})
	if written == nil {
		// The last attempt's error is the truth. RetryOnConflict takes an error wrapping
		// context.Canceled for its own interruption and reports instead the last conflict,
		// or success when there was none.
		return nil, last
	}
	return written, err
}

func (s *Simulator) tryUpdate(ctx context.Context, mutate func(cm *corev1.ConfigMap) error, written **corev1.ConfigMap) error {
	cm := &corev1.ConfigMap{}
	if err := s.cfg.Client.Get(ctx, s.cfg.ConfigMap, cm); err != nil {
		return fmt.Errorf("reading ConfigMap %s: %w", s.cfg.ConfigMap, err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	if err := mutate(cm); err != nil {
		return err
	}
	if err := s.cfg.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("writing ConfigMap %s: %w", s.cfg.ConfigMap, err)
	}
	*written = cm
	return nil
}

// read returns the ConfigMap as it is now.
func (s *Simulator) read(ctx context.Context) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := s.cfg.Client.Get(ctx, s.cfg.ConfigMap, cm); err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s: %w", s.cfg.ConfigMap, err)
	}
	return cm, nil
}

// Observe reads the ConfigMap and parses it as Nodewright would.
func (s *Simulator) Observe(ctx context.Context) (legacy.Observation, []legacy.Problem, error) {
	cm, err := s.read(ctx)
	if err != nil {
		return legacy.Observation{}, nil, err
	}
	obs, problems := legacy.Parse(cm.Data)
	return obs, problems, nil
}

// Silenced lists the nodes whose heartbeats are held back (SilencedAnnotation).
func (s *Simulator) Silenced(ctx context.Context) ([]string, error) {
	cm, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return silencedOf(cm), nil
}

// managedNodes reads the nodes key leniently, keeping the names that make valid keys: a
// misbehaviour may have written garbage there, and the heartbeat loop must keep working for
// the names it can use.
func managedNodes(cm *corev1.ConfigMap) []string {
	return splitList(cm.Data[legacy.KeyNodes], func(name string) bool {
		return len(validation.IsDNS1123Subdomain(name)) == 0
	})
}

func silencedOf(cm *corev1.ConfigMap) []string {
	return splitList(cm.Annotations[SilencedAnnotation], func(string) bool { return true })
}

func splitList(value string, keep func(string) bool) []string {
	var out []string
	for _, raw := range strings.Split(value, ",") {
		name := strings.TrimSpace(raw)
		if name != "" && keep(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// setSilenced writes the annotation, dropping it when no node is silenced.
func setSilenced(cm *corev1.ConfigMap, nodes []string) {
	if len(nodes) == 0 {
		delete(cm.Annotations, SilencedAnnotation)
		return
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	slices.Sort(nodes)
	cm.Annotations[SilencedAnnotation] = strings.Join(nodes, ",")
}

// timestamp is the contract's time format.
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

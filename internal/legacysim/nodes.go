package legacysim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/legacy"
)

// writeNode writes what a node's pod writes when it starts: its role, bond mode and a first
// heartbeat.
func writeNode(data map[string]string, n NodeSpec, now time.Time) {
	data[legacy.NodeKey(n.Name, legacy.FieldRole)] = string(n.Role)
	if n.BondMode != "" {
		data[legacy.NodeKey(n.Name, legacy.FieldBondMode)] = string(n.BondMode)
	}
	data[legacy.NodeKey(n.Name, legacy.FieldHeartbeat)] = timestamp(now)
}

// JoinNode adds a node to the nodes key and writes its role, bond mode and first heartbeat
// (no heartbeat while it is silenced), then emits a NodeJoined Event about the Node. The node
// need not be in the fleet; joining a node already listed rewrites its keys.
func (s *Simulator) JoinNode(ctx context.Context, n NodeSpec) error {
	if err := n.validate(); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		nodes := managedNodes(cm)
		if !slices.Contains(nodes, n.Name) {
			nodes = append(nodes, n.Name)
		}
		cm.Data[legacy.KeyNodes] = strings.Join(nodes, ",")
		heartbeatKey := legacy.NodeKey(n.Name, legacy.FieldHeartbeat)
		last, hadHeartbeat := cm.Data[heartbeatKey]
		writeNode(cm.Data, n, time.Now())
		if slices.Contains(silencedOf(cm), n.Name) {
			// A silenced node's pod says nothing: keep whatever heartbeat it had.
			delete(cm.Data, heartbeatKey)
			if hadHeartbeat {
				cm.Data[heartbeatKey] = last
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("joining node %s: %w", n.Name, err)
	}
	s.log.Info("Node joined", "node", n.Name, "role", string(n.Role))
	return s.nodeEvent(ctx, n.Name, ReasonNodeJoined, fmt.Sprintf("Node %s joined as %s", n.Name, n.Role))
}

// nodeFields are the per-node fields. They are listed rather than matched by the prefix
// node.<name>. because a node name may contain dots: removing edge-1 must not delete the keys
// of edge-1.lab.
var nodeFields = []string{legacy.FieldHeartbeat, legacy.FieldRole, legacy.FieldDRBD, legacy.FieldBondMode}

// RemoveNode takes a node out of the nodes key, deletes its node.<name>.<field> keys and emits a
// NodeLeft Event about the Node.
func (s *Simulator) RemoveNode(ctx context.Context, node string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		nodes := managedNodes(cm)
		if !slices.Contains(nodes, node) {
			return fmt.Errorf("node %s is not in the ConfigMap's nodes", node)
		}
		cm.Data[legacy.KeyNodes] = strings.Join(slices.DeleteFunc(nodes, func(n string) bool { return n == node }), ",")
		for _, field := range nodeFields {
			delete(cm.Data, legacy.NodeKey(node, field))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("removing node %s: %w", node, err)
	}
	s.log.Info("Node left", "node", node)
	return s.nodeEvent(ctx, node, ReasonNodeLeft, fmt.Sprintf("Node %s left the cluster", node))
}

// SetDRBD writes a node's node.<name>.drbd JSON.
func (s *Simulator) SetDRBD(ctx context.Context, node string, d legacy.DRBD) error {
	if d.Resources < 0 || d.Connected < 0 || d.UpToDate < 0 || d.OutOfSyncKiB < 0 ||
		d.Connected > d.Resources || d.UpToDate > d.Resources {
		return fmt.Errorf("DRBD %+v for node %s: counts must not be negative nor exceed resources (use WriteGarbage for a bad value)", d, node)
	}
	value, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encoding DRBD for node %s: %w", node, err)
	}
	if err := s.setNodeField(ctx, node, legacy.FieldDRBD, string(value)); err != nil {
		return err
	}
	s.log.Info("DRBD set", "node", node, "resources", d.Resources, "connected", d.Connected,
		"upToDate", d.UpToDate, "outOfSyncKiB", d.OutOfSyncKiB)
	return nil
}

// SetBondMode writes a node's node.<name>.bondMode.
func (s *Simulator) SetBondMode(ctx context.Context, node string, mode nwv1.BondMode) error {
	if mode == "" {
		return fmt.Errorf("bond mode for node %s is empty", node)
	}
	if err := s.setNodeField(ctx, node, legacy.FieldBondMode, string(mode)); err != nil {
		return err
	}
	s.log.Info("Bond mode set", "node", node, "bondMode", string(mode))
	return nil
}

// setNodeField writes one field of a node the ConfigMap lists: a node's pod only reports
// about itself, so a field for an unlisted node is refused.
func (s *Simulator) setNodeField(ctx context.Context, node, field, value string) error {
	if err := checkNode(node); err != nil {
		return err
	}
	_, err := s.update(ctx, func(cm *corev1.ConfigMap) error {
		if !slices.Contains(managedNodes(cm), node) {
			return fmt.Errorf("node %s is not in the ConfigMap's nodes", node)
		}
		cm.Data[legacy.NodeKey(node, field)] = value
		return nil
	})
	if err != nil {
		return fmt.Errorf("setting %s of node %s: %w", field, node, err)
	}
	return nil
}

func checkKey(key string) error {
	if msgs := validation.IsConfigMapKey(key); len(msgs) > 0 {
		return fmt.Errorf("key %q is not a valid ConfigMap key: %s", key, strings.Join(msgs, "; "))
	}
	return nil
}

// checkValue rejects what the API server would silently mangle: ConfigMap data is UTF-8.
func checkValue(value string) error {
	if !utf8.ValidString(value) {
		return fmt.Errorf("value %q is not UTF-8, which ConfigMap data must be", value)
	}
	return nil
}

package legacy

import (
	"strings"
	"time"
)

// Changes is what an update of the ConfigMap can change in what is derived from it.
type Changes struct {
	// Nodes are the nodes whose derived status may have changed: each node with a key that
	// changed, other than a quiet heartbeat (see QuietHeartbeat), and every node of both
	// lists when the list changed.
	Nodes map[string]bool
	// Cluster is true when the cluster's derived status may have changed: any key changed
	// other than a quiet heartbeat.
	Cluster bool
}

// Compare tells what the update from before to after can change, judged at now with the
// staleness threshold staleAfter. Most updates at steady state are heartbeats ticking, and
// they change nothing: Compare reports none, so that no one parses and reconciles the whole
// ConfigMap for each of them.
func Compare(before, after map[string]string, now time.Time, staleAfter time.Duration) Changes {
	return compare(before, after, true, now, staleAfter)
}

// CompareEvery is Compare with no heartbeat quiet: every key that changed, heartbeats
// included, is a change. An observer that last saw a node stale uses it, since a heartbeat
// may then bring the node back, and this judgement (its clock, its threshold) need not be
// the one the node was found stale by.
func CompareEvery(before, after map[string]string) Changes {
	return compare(before, after, false, time.Time{}, 0)
}

func compare(before, after map[string]string, quiet bool, now time.Time, staleAfter time.Duration) Changes {
	c := Changes{Nodes: map[string]bool{}}
	if before[KeyNodes] != after[KeyNodes] {
		for _, list := range []string{before[KeyNodes], after[KeyNodes]} {
			for _, name := range strings.Split(list, ",") {
				if name = strings.TrimSpace(name); name != "" {
					c.Nodes[name] = true
				}
			}
		}
	}
	note := func(key string) {
		c.Cluster = true
		if node, ok := nodeOf(key); ok {
			c.Nodes[node] = true
		}
	}
	for k, v := range after {
		old, ok := before[k]
		switch {
		case ok && old == v:
		case ok && quiet && isHeartbeatKey(k) && QuietHeartbeat(old, v, now, staleAfter):
		default:
			note(k)
		}
	}
	if len(before) != len(after) || c.Cluster {
		for k := range before {
			if _, ok := after[k]; !ok {
				note(k)
			}
		}
	}
	return c
}

// QuietHeartbeat reports whether a heartbeat moving from before to after changes nothing
// derived from it, judged at now: both are times, after is not earlier, and before was
// fresh. The node was then fresh when it was last observed, and whoever observed it is due to
// look again when before would go stale, which is no later than after will: looking again
// then is soon enough. A heartbeat that was stale, unreadable or goes backwards is a change.
//
// An observer must take its own now before it reads the ConfigMap: then a heartbeat it found
// stale is stale at the later now of this judgement too, never taken for a quiet one.
func QuietHeartbeat(before, after string, now time.Time, staleAfter time.Duration) bool {
	b, err := time.Parse(time.RFC3339, before)
	if err != nil {
		return false
	}
	a, err := time.Parse(time.RFC3339, after)
	return err == nil && !a.Before(b) && now.Sub(b) <= staleAfter
}

func isHeartbeatKey(k string) bool {
	return strings.HasPrefix(k, "node.") && strings.HasSuffix(k, "."+FieldHeartbeat)
}

// nodeOf is the node a node.<node>.<field> key is about.
func nodeOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "node.")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

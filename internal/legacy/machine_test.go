package legacy

import (
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// contract is the design brief's table, copied as text so that the test checks the Go table
// against an independent transcription rather than against itself.
const contract = `
INIT | Bootstrap | NETWORK_CONFIGURING, BOOT_RECOVERY, FAILED
NETWORK_CONFIGURING | Bootstrap | STORAGE_BOOTSTRAPPING, FAILED
STORAGE_BOOTSTRAPPING | Bootstrap | SINGLE_NODE_READY, FAILED
SINGLE_NODE_READY | SingleNode | PEER_DETECTED, DRBD_DEGRADED, BOOT_RECOVERY
PEER_DETECTED | Upgrading | PEER_NETWORK_CONFIGURING, SINGLE_NODE_READY, FAILED
PEER_NETWORK_CONFIGURING | Upgrading | PEER_STORAGE_JOINING, PEER_LOST, FAILED
PEER_STORAGE_JOINING | Upgrading | REPLICA_PLACEMENT, PEER_LOST, FAILED
REPLICA_PLACEMENT | Upgrading | DRBD_CONNECTING, PEER_LOST, FAILED
DRBD_CONNECTING | Upgrading | DRBD_SYNCING, PEER_LOST, FAILED
DRBD_SYNCING | Upgrading | DRBD_VERIFYING, PEER_LOST, DRBD_DEGRADED, FAILED
DRBD_VERIFYING | Upgrading | QUORUM_CONFIGURING, DRBD_SYNCING, FAILED
QUORUM_CONFIGURING | Upgrading | TAINTS_RELEASING, FAILED
TAINTS_RELEASING | Upgrading | MULTI_NODE_READY, FAILED
MULTI_NODE_READY | MultiNode | PEER_DETECTED, PEER_LOST, DRBD_DEGRADED, SPLIT_BRAIN, BOOT_RECOVERY
PEER_LOST | Degraded | RECOVERING, FAILED
DRBD_DEGRADED | Degraded | RESYNCING, RECOVERING, FAILED
SPLIT_BRAIN | Degraded | RECOVERING, FAILED
FAILED | Degraded | RECOVERING, INIT
BOOT_RECOVERY | Recovering | SINGLE_NODE_READY, MULTI_NODE_READY, RECOVERING, FAILED
RECOVERING | Recovering | RESYNCING, SINGLE_NODE_READY, MULTI_NODE_READY, FAILED
RESYNCING | Recovering | MULTI_NODE_READY, DRBD_DEGRADED, FAILED
`

type contractRow struct {
	phase nwv1.ClusterPhase
	next  map[State]bool
}

func readContract(t *testing.T) (order []State, rows map[State]contractRow) {
	t.Helper()
	rows = map[State]contractRow{}
	for _, line := range strings.Split(strings.TrimSpace(contract), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 3 {
			t.Fatalf("bad contract line %q", line)
		}
		state := State(strings.TrimSpace(cells[0]))
		row := contractRow{phase: nwv1.ClusterPhase(strings.TrimSpace(cells[1])), next: map[State]bool{}}
		for _, n := range strings.Split(cells[2], ",") {
			row.next[State(strings.TrimSpace(n))] = true
		}
		order = append(order, state)
		rows[state] = row
	}
	return order, rows
}

func TestEveryStateHasItsPhase(t *testing.T) {
	order, rows := readContract(t)
	if got := States(); len(got) != 21 || strings.Join(asStrings(got), ",") != strings.Join(asStrings(order), ",") {
		t.Fatalf("States() = %v, want the contract's 21 in order %v", got, order)
	}
	for _, s := range order {
		if !Known(s) {
			t.Errorf("%s is not known", s)
		}
		if got := PhaseOf(s); got != rows[s].phase {
			t.Errorf("PhaseOf(%s) = %s, want %s", s, got, rows[s].phase)
		}
	}
	for _, bad := range []State{"", "init", "READY", "MULTI_NODE_READY "} {
		if Known(bad) || PhaseOf(bad) != nwv1.ClusterUnknown {
			t.Errorf("%q should be unknown with phase Unknown", bad)
		}
	}
}

// TestEveryTransition checks all 21 × 21 pairs against the contract.
func TestEveryTransition(t *testing.T) {
	order, rows := readContract(t)
	allowed := 0
	for _, from := range order {
		for _, to := range order {
			want := rows[from].next[to]
			if got := Allowed(from, to); got != want {
				t.Errorf("Allowed(%s → %s) = %v, want %v", from, to, got, want)
			}
			if want {
				allowed++
			}
		}
		if Allowed(from, "BOGUS") || Allowed("BOGUS", from) {
			t.Errorf("a transition with an unknown state is allowed from/to %s", from)
		}
	}
	if allowed != 61 {
		t.Errorf("the contract has %d allowed transitions, want 61", allowed)
	}
}

func asStrings(states []State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

package legacysim

import (
	"fmt"
	"slices"

	"github.com/spectrocloud/nodewright/internal/legacy"
)

// Scenario is a scripted run of the DaemonSet: where it starts and the steps it takes.
type Scenario struct {
	Name        string
	Description string
	// From is the state the scenario starts in, and Joined the nodes listed then; Play gets
	// the site there first if it is elsewhere.
	From   legacy.State
	Joined []string
	Steps  []Step
}

// The built-in scenarios.
const (
	ScenarioBootstrap = "bootstrap"
	ScenarioUpgrade   = "upgrade"
	ScenarioPeerLost  = "peer-lost"
	ScenarioFull      = "full"
)

// ScenarioNames lists the built-in scenarios.
func ScenarioNames() []string {
	return []string{ScenarioBootstrap, ScenarioUpgrade, ScenarioPeerLost, ScenarioFull}
}

// BuiltIn returns a built-in scenario for a fleet (node names, primary first). upgrade,
// peer-lost and full need at least two nodes: every node after the primary joins in upgrade,
// and the last one is lost in peer-lost.
func BuiltIn(name string, fleet []string) (Scenario, error) {
	if len(fleet) == 0 {
		return Scenario{}, fmt.Errorf("scenario %s: no nodes", name)
	}
	if name != ScenarioBootstrap && len(fleet) < 2 {
		return Scenario{}, fmt.Errorf("scenario %s needs at least two nodes, got %d", name, len(fleet))
	}
	switch name {
	case ScenarioBootstrap:
		return bootstrap(fleet), nil
	case ScenarioUpgrade:
		return upgrade(fleet), nil
	case ScenarioPeerLost:
		return peerLost(fleet), nil
	case ScenarioFull:
		b, u, p := bootstrap(fleet), upgrade(fleet), peerLost(fleet)
		return Scenario{
			Name:        ScenarioFull,
			Description: "bootstrap, then upgrade, then peer-lost",
			From:        b.From,
			Joined:      b.Joined,
			Steps:       slices.Concat(b.Steps, u.Steps, p.Steps),
		}, nil
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (known: %v)", name, ScenarioNames())
}

// Check reports the first transition step the state machine does not allow, following the
// steps from From. Force steps are exempt: breaking the rules is what they are for, and the
// check carries on from the state they force.
func (sc Scenario) Check() error {
	at := sc.From
	for i, st := range sc.Steps {
		switch st.Kind {
		case StepTransition:
			if !legacy.Allowed(at, st.State) {
				return fmt.Errorf("scenario %s, step %d: %s -> %s: %w", sc.Name, i+1, at, st.State, ErrForbidden)
			}
			at = st.State
		case StepForceState:
			at = st.State
		}
	}
	return nil
}

// End is the state the scenario leaves the site in.
func (sc Scenario) End() legacy.State {
	end := sc.From
	for _, st := range sc.Steps {
		if st.Kind == StepTransition || st.Kind == StepForceState {
			end = st.State
		}
	}
	return end
}

// drbdResources is how many DRBD resources the simulated site replicates.
const drbdResources = 4

// fullSyncKiB is what a new peer has to receive: all resources, 1 GiB each.
const fullSyncKiB = drbdResources * 1024 * 1024

func drbd(connected, upToDate int32, outOfSyncKiB int64) legacy.DRBD {
	return legacy.DRBD{Resources: drbdResources, Connected: connected, UpToDate: upToDate, OutOfSyncKiB: outOfSyncKiB}
}

func bootstrap(fleet []string) Scenario {
	primary := fleet[0]
	return Scenario{
		Name:        ScenarioBootstrap,
		Description: "a new site boots its primary: INIT to SINGLE_NODE_READY",
		From:        legacy.Init,
		Joined:      []string{primary},
		Steps: []Step{
			To(legacy.NetworkConfiguring),
			To(legacy.StorageBootstrapping),
			SetDRBD(primary, drbd(0, drbdResources, 0)),
			To(legacy.SingleNodeReady),
		},
	}
}

// upgrade grows the site from its primary to the whole fleet: the second node is detected,
// the others join while storage is joined, and DRBD syncs every peer up to date. Roles and
// bond modes come from the fleet when a node joins.
func upgrade(fleet []string) Scenario {
	primary, peers := fleet[0], fleet[1:]
	steps := []Step{Join(peers[0]), To(legacy.PeerDetected), To(legacy.PeerNetworkConfiguring), To(legacy.PeerStorageJoining)}
	for _, p := range peers[1:] {
		steps = append(steps, Join(p))
	}
	steps = append(steps, To(legacy.ReplicaPlacement), To(legacy.DRBDConnecting))
	for _, p := range peers {
		steps = append(steps, SetDRBD(p, drbd(0, 0, fullSyncKiB)))
	}
	steps = append(steps, To(legacy.DRBDSyncing), SetDRBD(primary, drbd(drbdResources, drbdResources, fullSyncKiB)))
	for _, p := range peers {
		steps = append(steps, SetDRBD(p, drbd(drbdResources, drbdResources/2, fullSyncKiB/2)))
	}
	steps = append(steps, To(legacy.DRBDVerifying), SetDRBD(primary, drbd(drbdResources, drbdResources, 0)))
	for _, p := range peers {
		steps = append(steps, SetDRBD(p, drbd(drbdResources, drbdResources, 0)))
	}
	steps = append(steps, To(legacy.QuorumConfiguring), To(legacy.TaintsReleasing), To(legacy.MultiNodeReady))
	return Scenario{
		Name:        ScenarioUpgrade,
		Description: "the site grows from SINGLE_NODE_READY to MULTI_NODE_READY as the other nodes join and DRBD syncs them",
		From:        legacy.SingleNodeReady,
		Joined:      []string{primary},
		Steps:       steps,
	}
}

// peerLost loses the fleet's last node: its heartbeat stops, the survivors lose their DRBD
// connections and fall behind, and when it comes back it resyncs.
func peerLost(fleet []string) Scenario {
	lost, survivors := fleet[len(fleet)-1], fleet[:len(fleet)-1]
	const behindKiB = 64 * 1024
	steps := []Step{Silence(lost), To(legacy.PeerLost)}
	for _, n := range survivors {
		steps = append(steps, SetDRBD(n, drbd(0, drbdResources, behindKiB)))
	}
	steps = append(steps, To(legacy.Recovering), Resume(lost), To(legacy.Resyncing))
	for _, n := range survivors {
		steps = append(steps, SetDRBD(n, drbd(drbdResources, drbdResources, behindKiB)))
	}
	steps = append(steps, SetDRBD(lost, drbd(drbdResources, drbdResources/2, behindKiB)), To(legacy.MultiNodeReady))
	for _, n := range fleet {
		steps = append(steps, SetDRBD(n, drbd(drbdResources, drbdResources, 0)))
	}
	return Scenario{
		Name:        ScenarioPeerLost,
		Description: "the last node's heartbeat stops (PEER_LOST), then it comes back, resyncs, and the site is MULTI_NODE_READY again",
		From:        legacy.MultiNodeReady,
		Joined:      slices.Clone(fleet),
		Steps:       steps,
	}
}

// Package legacy is a pure model of the legacy node-init DaemonSet as Nodewright observes it:
// its 21-state machine, the phase each state rolls up to, the transitions it may make, and a
// parser for the ConfigMap in which it keeps its state. Nothing here talks to a cluster.
package legacy

import (
	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// State is one of the legacy state machine's states.
type State = nwv1.LegacyState

// The 21 states, in the order of the design's table.
const (
	Init                   State = "INIT"
	NetworkConfiguring     State = "NETWORK_CONFIGURING"
	StorageBootstrapping   State = "STORAGE_BOOTSTRAPPING"
	SingleNodeReady        State = "SINGLE_NODE_READY"
	PeerDetected           State = "PEER_DETECTED"
	PeerNetworkConfiguring State = "PEER_NETWORK_CONFIGURING"
	PeerStorageJoining     State = "PEER_STORAGE_JOINING"
	ReplicaPlacement       State = "REPLICA_PLACEMENT"
	DRBDConnecting         State = "DRBD_CONNECTING"
	DRBDSyncing            State = "DRBD_SYNCING"
	DRBDVerifying          State = "DRBD_VERIFYING"
	QuorumConfiguring      State = "QUORUM_CONFIGURING"
	TaintsReleasing        State = "TAINTS_RELEASING"
	MultiNodeReady         State = "MULTI_NODE_READY"
	PeerLost               State = "PEER_LOST"
	DRBDDegraded           State = "DRBD_DEGRADED"
	SplitBrain             State = "SPLIT_BRAIN"
	Failed                 State = "FAILED"
	BootRecovery           State = "BOOT_RECOVERY"
	Recovering             State = "RECOVERING"
	Resyncing              State = "RESYNCING"
)

type stateRule struct {
	phase nwv1.ClusterPhase
	next  []State
}

// machine is the contract's table: each state's phase and the states it may go to.
var machine = map[State]stateRule{
	Init:                   {nwv1.ClusterBootstrap, []State{NetworkConfiguring, BootRecovery, Failed}},
	NetworkConfiguring:     {nwv1.ClusterBootstrap, []State{StorageBootstrapping, Failed}},
	StorageBootstrapping:   {nwv1.ClusterBootstrap, []State{SingleNodeReady, Failed}},
	SingleNodeReady:        {nwv1.ClusterSingleNode, []State{PeerDetected, DRBDDegraded, BootRecovery}},
	PeerDetected:           {nwv1.ClusterUpgrading, []State{PeerNetworkConfiguring, SingleNodeReady, Failed}},
	PeerNetworkConfiguring: {nwv1.ClusterUpgrading, []State{PeerStorageJoining, PeerLost, Failed}},
	PeerStorageJoining:     {nwv1.ClusterUpgrading, []State{ReplicaPlacement, PeerLost, Failed}},
	ReplicaPlacement:       {nwv1.ClusterUpgrading, []State{DRBDConnecting, PeerLost, Failed}},
	DRBDConnecting:         {nwv1.ClusterUpgrading, []State{DRBDSyncing, PeerLost, Failed}},
	DRBDSyncing:            {nwv1.ClusterUpgrading, []State{DRBDVerifying, PeerLost, DRBDDegraded, Failed}},
	DRBDVerifying:          {nwv1.ClusterUpgrading, []State{QuorumConfiguring, DRBDSyncing, Failed}},
	QuorumConfiguring:      {nwv1.ClusterUpgrading, []State{TaintsReleasing, Failed}},
	TaintsReleasing:        {nwv1.ClusterUpgrading, []State{MultiNodeReady, Failed}},
	MultiNodeReady:         {nwv1.ClusterMultiNode, []State{PeerDetected, PeerLost, DRBDDegraded, SplitBrain, BootRecovery}},
	PeerLost:               {nwv1.ClusterDegraded, []State{Recovering, Failed}},
	DRBDDegraded:           {nwv1.ClusterDegraded, []State{Resyncing, Recovering, Failed}},
	SplitBrain:             {nwv1.ClusterDegraded, []State{Recovering, Failed}},
	Failed:                 {nwv1.ClusterDegraded, []State{Recovering, Init}},
	BootRecovery:           {nwv1.ClusterRecovering, []State{SingleNodeReady, MultiNodeReady, Recovering, Failed}},
	Recovering:             {nwv1.ClusterRecovering, []State{Resyncing, SingleNodeReady, MultiNodeReady, Failed}},
	Resyncing:              {nwv1.ClusterRecovering, []State{MultiNodeReady, DRBDDegraded, Failed}},
}

// States lists the 21 states in the contract's order.
func States() []State {
	return []State{Init, NetworkConfiguring, StorageBootstrapping, SingleNodeReady, PeerDetected,
		PeerNetworkConfiguring, PeerStorageJoining, ReplicaPlacement, DRBDConnecting, DRBDSyncing,
		DRBDVerifying, QuorumConfiguring, TaintsReleasing, MultiNodeReady, PeerLost, DRBDDegraded,
		SplitBrain, Failed, BootRecovery, Recovering, Resyncing}
}

// Known reports whether s is one of the 21 states.
func Known(s State) bool {
	_, ok := machine[s]
	return ok
}

// PhaseOf is the phase a state rolls up to; Unknown for a state that is not one of the 21.
func PhaseOf(s State) nwv1.ClusterPhase {
	if rule, ok := machine[s]; ok {
		return rule.phase
	}
	return nwv1.ClusterUnknown
}

// Allowed reports whether the DaemonSet may go from one state to the other.
func Allowed(from, to State) bool {
	for _, next := range machine[from].next {
		if next == to {
			return true
		}
	}
	return false
}

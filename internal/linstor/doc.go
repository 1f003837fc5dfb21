// Package linstor is Nodewright's client of a site's LINSTOR controller, on LINBIT's golinstor:
// exactly the calls a replication upgrade (single-node storage made replicated) needs, each a
// small typed function whose errors say what was asked and what LINSTOR answered.
//
//   - nodes and whether each satellite is online (Nodes, Node), and registering a satellite
//     where Piraeus does not (RegisterNode); the controller's version (Version);
//   - storage pools with their free capacity (StoragePools);
//   - resource groups: read (ResourceGroups, ResourceGroup), the place count set
//     (SetPlaceCount) and properties changed (ModifyResourceGroupProps,
//     SetResourceGroupQuorum), each returning what it replaced;
//   - resource definitions (ResourceDefinitions, ResourceDefinition) and their properties
//     (ModifyResourceDefinitionProps, SetResourceDefinitionQuorum);
//   - resources per node with their volumes' states, replication_states towards each peer
//     included, which golinstor does not decode (Resources, DecodeReplicationStates);
//   - a replica of an existing definition placed on a named node and pool (PlaceReplica), a
//     diskless tiebreaker (PlaceTiebreaker), and their deletion, guarded so that the original
//     node's replica and the last whole copy are never deleted (DeleteAddedReplica,
//     DeleteTiebreaker);
//   - the controller's properties, BalanceResourcesEnabled among them (ControllerProps,
//     ModifyControllerProps, BalanceResourcesEnabled, SetBalanceResourcesEnabled).
//
// Every change returns the PropChange (or old value) that undoes it, read just before the
// change; recording it before acting, so that a crash between the two loses nothing, is the
// caller's job. Every call is bounded by Config.RequestTimeout. Failures are *Error (what was
// asked, LINSTOR's status and messages; errors.Is matches ErrNotFound, ErrExists, ErrInUse,
// ErrNoAnswer) or *RefusedError (ErrRefused: refused here, LINSTOR not asked).
//
// It does not decide anything: which nodes, pools, batches and order are the caller's, and it
// does not wait for a synchronisation or retry.
package linstor

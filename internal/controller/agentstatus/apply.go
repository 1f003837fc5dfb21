package agentstatus

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// FieldManager is the bridge's field manager on NodewrightAgentStatus. Two writers share the
// status, and each field has one owner (docs/agent.md):
//
//   - the bridge (this controller, from the legacy ConfigMap): role, heartbeat and the
//     HeartbeatFresh condition, always;
//   - whoever reports the node: reporter, storage, network, os and the StorageHealthy and
//     HostObserved conditions. The bridge writes reporter (Legacy), storage, network.bondMode
//     and StorageHealthy while no agent reports the node and the legacy ConfigMap is read (the
//     Observe mode); once status.reporter is Agent, the agent (field manager
//     nodewright-agent) has taken them with a forced apply, and the bridge applies without
//     them, letting go of what it held. In the Managed mode the ConfigMap is not read and the
//     bridge lets go of them too: until the node's agent reports, no one does.
const FieldManager = "nodewright-bridge"

// bridgeFields are the status fields the bridge applies.
type bridgeFields struct {
	Reporter  nwv1.Reporter    `json:"reporter,omitempty"`
	Role      nwv1.NodeRole    `json:"role,omitempty"`
	Heartbeat bridgeHeartbeat  `json:"heartbeat"`
	Storage   *nwv1.DRBDStatus `json:"storage,omitempty"`
	Network   *bridgeNetwork   `json:"network,omitempty"`
	// Conditions are HeartbeatFresh and, while the legacy DaemonSet reports the node,
	// StorageHealthy: a list keyed by type, each entry owned on its own.
	Conditions []metav1.Condition `json:"conditions"`
}

// bridgeHeartbeat sends stale even when false, so that the bridge owns the field whatever
// its value.
type bridgeHeartbeat struct {
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	Stale    bool         `json:"stale"`
}

type bridgeNetwork struct {
	BondMode nwv1.BondMode `json:"bondMode,omitempty"`
}

// agentReports says whether the node's agent reports it, so that the bridge leaves the report
// fields to it.
func agentReports(st nwv1.NodewrightAgentStatusStatus) bool {
	return st.Reporter == nwv1.ReporterAgent
}

// fieldsOf is what the bridge applies of a status it computed: with report, the report fields
// (the legacy DaemonSet's report of the node) too.
func fieldsOf(st nwv1.NodewrightAgentStatusStatus, report bool) bridgeFields {
	f := bridgeFields{Role: st.Role, Heartbeat: bridgeHeartbeat{LastSeen: st.Heartbeat.LastSeen, Stale: st.Heartbeat.Stale}}
	owned := []string{nwv1.ConditionHeartbeatFresh}
	if report {
		f.Reporter, f.Storage = nwv1.ReporterLegacy, st.Storage
		if st.Network.BondMode != "" {
			f.Network = &bridgeNetwork{BondMode: st.Network.BondMode}
		}
		owned = append(owned, nwv1.ConditionStorageHealthy)
	}
	f.Conditions = []metav1.Condition{}
	for _, t := range owned {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			f.Conditions = append(f.Conditions, *c)
		}
	}
	return f
}

// applyStatus applies the bridge's fields of st to as's status, with as's resourceVersion: a
// write based on a stale read (an agent took the node over since) fails with a Conflict and is
// retried. ForceOwnership settles only the fields the bridge owns by the split above; it takes
// them over from a writer that updated the status before this controller applied it (the
// operator before v0.2), whose fields are then moved to this manager (migrate).
func (r *Reconciler) applyStatus(ctx context.Context, as *nwv1.NodewrightAgentStatus, st nwv1.NodewrightAgentStatusStatus, report bool) error {
	data, err := json.Marshal(fieldsOf(st, report))
	if err != nil {
		return err
	}
	var status map[string]any
	if err := json.Unmarshal(data, &status); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": nwv1.GroupVersion.String(),
		"kind":       "NodewrightAgentStatus",
		"metadata":   map[string]any{"name": as.Name, "resourceVersion": as.ResourceVersion},
		"status":     status,
	}}
	if err := r.Client.Status().Patch(ctx, u, client.Apply, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return err
	}
	return r.migrate(ctx, u)
}

// migrate moves to the bridge's manager the status fields that writers with Update (not
// Apply) hold, once: the operator wrote the status with merge patches before v0.2, and a
// field it holds would otherwise outlive the bridge letting go of it. The bridge then owns
// them until its next apply, which keeps only its own. The move is a JSON patch of
// metadata.managedFields, on the main resource (the status subresource ignores metadata),
// conditioned on the resourceVersion just written.
func (r *Reconciler) migrate(ctx context.Context, applied *unstructured.Unstructured) error {
	updaters := sets.New[string]()
	for _, m := range applied.GetManagedFields() {
		if m.Operation == metav1.ManagedFieldsOperationUpdate && m.Subresource == "status" {
			updaters.Insert(m.Manager)
		}
	}
	if updaters.Len() == 0 {
		return nil
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(applied, updaters, FieldManager, csaupgrade.Subresource("status"))
	if err != nil || patch == nil {
		return err
	}
	if err := r.Client.Patch(ctx, applied, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("moving the status fields of %v to %s: %w", sets.List(updaters), FieldManager, err)
	}
	return nil
}

package linstor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
)

// Resource is a resource of a definition on one node: a replica (diskful) or a diskless DRBD
// client or tiebreaker, as the controller last heard of it from the node's satellite.
type Resource struct {
	Definition, Node string
	// Diskless: no data on this node (DRBD_DISKLESS, DISKLESS or TIE_BREAKER).
	Diskless bool
	// Deleting: deleted, LINSTOR waiting for the satellite to take it down (DELETE).
	Deleting bool
	// InUse is whether the resource is open (Primary) on its node; nil when the satellite's
	// state is unknown (the node is offline).
	InUse *bool
	Flags []string
	// Props are the resource's own properties (StorPoolName; the LINSTOR gate's stamp
	// GateStampProp on the resources it created).
	Props map[string]string
	// Created is when LINSTOR created the resource (zero when it does not say).
	Created time.Time
	// Connections are the node's DRBD connections to the resource's peers, by peer node.
	Connections map[string]Connection
	Volumes     []Volume
}

// Connection is a DRBD connection to a peer.
type Connection struct {
	Connected bool
	// State is DRBD's connection state: Connected, Connecting, StandAlone...
	State string
}

// Volume is one volume of a resource on its node.
type Volume struct {
	Number      int32
	StoragePool string
	// DiskState is DRBD's disk state: UpToDate, Inconsistent, Outdated, Diskless...; empty
	// when unknown (the node is offline).
	DiskState    string
	AllocatedKiB int64
	// Replication is the volume's replication towards each peer node.
	Replication map[string]ReplicationState
}

// StateKnown reports whether the controller knows the resource's state: its satellite is
// online and reported it.
func (r Resource) StateKnown() bool {
	if r.InUse == nil {
		return false
	}
	for _, v := range r.Volumes {
		if v.DiskState == "" {
			return false
		}
	}
	return true
}

// UpToDate reports whether every volume of the resource is UpToDate: the replica holds the
// data whole. Never for a diskless resource.
func (r Resource) UpToDate() bool {
	if r.Diskless || len(r.Volumes) == 0 {
		return false
	}
	for _, v := range r.Volumes {
		if v.DiskState != "UpToDate" {
			return false
		}
	}
	return true
}

// SyncProgress is how far the resource's resynchronisation as a target is: the lowest
// done_percentage of its volumes that are a SyncTarget, 100 when it is UpToDate. ok is false
// when LINSTOR reports no progress for a volume not UpToDate (the node offline, the
// connection down, a diskless resource).
func (r Resource) SyncProgress() (percent float64, ok bool) {
	if r.UpToDate() {
		return 100, true
	}
	if r.Diskless || len(r.Volumes) == 0 {
		return 0, false
	}
	percent = 100
	for _, v := range r.Volumes {
		if v.DiskState == "UpToDate" {
			continue
		}
		found := false
		for _, rs := range v.Replication {
			if rs.Target() && rs.DonePercent != nil {
				percent, found = min(percent, *rs.DonePercent), true
			}
		}
		if !found {
			return 0, false
		}
	}
	return percent, true
}

// ResourceFilter narrows Resources to some definitions and some nodes (none: all).
type ResourceFilter struct {
	Definitions []string
	Nodes       []string
}

// Resources lists resources with their volumes' states, replication towards each peer
// included (GET /v1/view/resources, one request for every definition asked).
func (c *Client) Resources(ctx context.Context, f ResourceFilter) ([]Resource, error) {
	op := "list resources"
	q := url.Values{}
	for _, d := range f.Definitions {
		if err := checkName("resource definition", d); err != nil {
			return nil, &RefusedError{Op: op, Reason: err.Error()}
		}
		q.Add("resources", d)
	}
	for _, n := range f.Nodes {
		if err := checkName("node", n); err != nil {
			return nil, &RefusedError{Op: op, Reason: err.Error()}
		}
		q.Add("nodes", n)
	}
	if len(f.Definitions) > 0 || len(f.Nodes) > 0 {
		op = fmt.Sprintf("list the resources of definitions %q on nodes %q", f.Definitions, f.Nodes)
	}
	var view []viewResource
	if err := c.get(ctx, op, "/v1/view/resources", q, &view); err != nil {
		return nil, err
	}
	out := make([]Resource, 0, len(view))
	for i, v := range view {
		r, err := v.resource()
		if err != nil {
			return nil, &Error{Op: op, Reason: fmt.Sprintf("resource %d (%q on %q): %v", i, v.Name, v.NodeName, err), Err: err}
		}
		out = append(out, r)
	}
	return out, nil
}

// viewResource is an entry of the resource view (the document's ResourceWithVolumes), decoded
// here because golinstor's types drop the volumes' replication_states.
type viewResource struct {
	Name            string            `json:"name"`
	NodeName        string            `json:"node_name"`
	Flags           []string          `json:"flags"`
	Props           map[string]string `json:"props"`
	CreateTimestamp *int64            `json:"create_timestamp"`
	LayerObject     *struct {
		Drbd *struct {
			Connections map[string]struct {
				Connected bool   `json:"connected"`
				Message   string `json:"message"`
			} `json:"connections"`
		} `json:"drbd"`
	} `json:"layer_object"`
	State *struct {
		InUse *bool `json:"in_use"`
	} `json:"state"`
	Volumes []struct {
		VolumeNumber     int32  `json:"volume_number"`
		StoragePoolName  string `json:"storage_pool_name"`
		ProviderKind     string `json:"provider_kind"`
		AllocatedSizeKiB int64  `json:"allocated_size_kib"`
		State            *struct {
			DiskState         string          `json:"disk_state"`
			ReplicationStates json.RawMessage `json:"replication_states"`
		} `json:"state"`
	} `json:"volumes"`
}

func (v viewResource) resource() (Resource, error) {
	r := Resource{Definition: v.Name, Node: v.NodeName, Flags: v.Flags, Props: v.Props, Connections: map[string]Connection{}}
	if r.Props == nil {
		r.Props = map[string]string{}
	}
	if v.CreateTimestamp != nil && *v.CreateTimestamp > 0 {
		r.Created = time.UnixMilli(*v.CreateTimestamp)
	}
	for _, f := range v.Flags {
		switch f {
		case "DISKLESS", "DRBD_DISKLESS", "TIE_BREAKER", "NVME_INITIATOR":
			r.Diskless = true
		case "DELETE", "DRBD_DELETE":
			r.Deleting = true
		}
	}
	if v.State != nil {
		r.InUse = v.State.InUse
	}
	if v.LayerObject != nil && v.LayerObject.Drbd != nil {
		for peer, c := range v.LayerObject.Drbd.Connections {
			r.Connections[peer] = Connection{Connected: c.Connected, State: c.Message}
		}
	}
	for _, vol := range v.Volumes {
		out := Volume{Number: vol.VolumeNumber, StoragePool: vol.StoragePoolName, AllocatedKiB: vol.AllocatedSizeKiB, Replication: map[string]ReplicationState{}}
		if vol.ProviderKind == "DISKLESS" {
			r.Diskless = true
		}
		if vol.State != nil {
			out.DiskState = vol.State.DiskState
			states, err := DecodeReplicationStates(vol.State.ReplicationStates)
			if err != nil {
				return Resource{}, fmt.Errorf("volume %d: state.%w", vol.VolumeNumber, err)
			}
			out.Replication = states
		}
		r.Volumes = append(r.Volumes, out)
	}
	return r, nil
}

// resource reads the resource of def on node, nil when there is none.
func (c *Client) resource(ctx context.Context, def, node string) (*Resource, []Resource, error) {
	all, err := c.Resources(ctx, ResourceFilter{Definitions: []string{def}})
	if err != nil {
		return nil, nil, err
	}
	for i := range all {
		if strings.EqualFold(all[i].Node, node) {
			return &all[i], all, nil
		}
	}
	return nil, all, nil
}

// PlaceReplica creates a diskful replica of an existing definition on node, in pool, with
// LINSTOR's resource create on that node (POST .../resources/{node}), which LINSTOR follows by
// an initial synchronisation from the replicas it has. The caller names the node and the pool:
// nothing is chosen for it, so the replica lands where the upgrade's preflight checked the
// space. It is idempotent: a diskful replica in that pool on the node is success (a retry
// after a crash); anything else there is an error.
//
// Not autoplace: POST /v1/resource-definitions/{resource}/autoplace chooses nodes and pools by
// itself (the original node's peers, or any other that fits), adds another replica when
// retried with additional_place_count, and fails "already deployed" with place_count
// (linstor-server#201): none of which a workflow that must know and undo what it added wants.
func (c *Client) PlaceReplica(ctx context.Context, def, node, pool string) error {
	op := fmt.Sprintf("place a replica of %q on node %q in pool %q", def, node, pool)
	for _, n := range [][2]string{{"resource definition", def}, {"node", node}, {"storage pool", pool}} {
		if err := checkName(n[0], n[1]); err != nil {
			return &RefusedError{Op: op, Reason: err.Error()}
		}
	}
	err := c.create(ctx, op, def, node, map[string]string{"StorPoolName": pool}, nil)
	if err == nil || !isExists(err) {
		return err
	}
	there, _, readErr := c.resource(ctx, def, node)
	switch {
	case readErr != nil, there == nil:
		return err
	case there.Diskless:
		return withReason(err, fmt.Sprintf("node %q holds a diskless resource of %q", node, def))
	case there.Deleting:
		return withReason(err, fmt.Sprintf("the replica of %q on node %q is being deleted; place it again once it is gone", def, node))
	case len(there.Volumes) > 0 && !strings.EqualFold(there.Volumes[0].StoragePool, pool):
		return withReason(err, fmt.Sprintf("node %q holds a replica of %q in pool %q", node, def, there.Volumes[0].StoragePool))
	}
	return nil
}

// PlaceTiebreaker creates a diskless resource of an existing definition on node: no data, a
// DRBD quorum vote. It is idempotent: a diskless resource there is success; a diskful one an
// error.
//
// It is a plain diskless resource (flag DRBD_DISKLESS), not one LINSTOR manages as its own
// tiebreaker (TIE_BREAKER), which LINSTOR adds and removes by itself as replicas come and go
// (DrbdOptions/auto-add-quorum-tiebreaker): this one stays until deleted.
func (c *Client) PlaceTiebreaker(ctx context.Context, def, node string) error {
	op := fmt.Sprintf("place a diskless tiebreaker of %q on node %q", def, node)
	for _, n := range [][2]string{{"resource definition", def}, {"node", node}} {
		if err := checkName(n[0], n[1]); err != nil {
			return &RefusedError{Op: op, Reason: err.Error()}
		}
	}
	err := c.create(ctx, op, def, node, nil, []string{"DRBD_DISKLESS"})
	if err == nil || !isExists(err) {
		return err
	}
	there, _, readErr := c.resource(ctx, def, node)
	switch {
	case readErr != nil, there == nil:
		return err
	case !there.Diskless:
		return withReason(err, fmt.Sprintf("node %q holds a diskful replica of %q", node, def))
	case there.Deleting:
		return withReason(err, fmt.Sprintf("the resource of %q on node %q is being deleted; place it again once it is gone", def, node))
	}
	return nil
}

func (c *Client) create(ctx context.Context, op, def, node string, props map[string]string, flags []string) error {
	return c.call(ctx, op, func(ctx context.Context) error {
		return c.api.Resources.Create(ctx, resourceCreate(def, node, props, flags))
	})
}

// AddedReplica names a replica a workflow added, to delete it: the node it was added on, and
// the original node, whose replica held the data before and is never deleted.
type AddedReplica struct {
	Definition string
	// Node is the node the replica was added on: the one deleted.
	Node string
	// Original is the node whose replica must stay: it must hold a diskful replica of the
	// definition, or nothing is deleted.
	Original string
}

// DeleteAddedReplica deletes a replica a workflow added, after checking from LINSTOR's state
// that doing so keeps the data. It refuses (ErrRefused, nothing asked of LINSTOR):
//
//   - a Node that is the Original (the original replica is never deleted), or either empty;
//   - when the Original holds no diskful replica of the definition (it would not be the
//     original; the added one may be the last copy);
//   - when the replica on Node is not younger than the Original's (LINSTOR's create_timestamp):
//     the two nodes are swapped, or Original is not the original;
//   - a replica open on its node (a VM uses it there);
//   - the only UpToDate replica: the added one is UpToDate and no other diskful one is known
//     UpToDate (the original is offline, outdated or resynchronising), so it may hold the
//     only whole copy of the data.
//
// A replica that is not there (or already being deleted) is success: deleting is idempotent.
func (c *Client) DeleteAddedReplica(ctx context.Context, r AddedReplica) error {
	op := fmt.Sprintf("delete the replica of %q added on node %q (original on %q)", r.Definition, r.Node, r.Original)
	for _, n := range [][2]string{{"resource definition", r.Definition}, {"added node", r.Node}, {"original node", r.Original}} {
		if err := checkName(n[0], n[1]); err != nil {
			return &RefusedError{Op: op, Reason: err.Error()}
		}
	}
	if strings.EqualFold(r.Node, r.Original) {
		return &RefusedError{Op: op, Reason: "it is the original node's replica, which is never deleted"}
	}
	there, all, err := c.resource(ctx, r.Definition, r.Node)
	if err != nil {
		return err
	}
	if there == nil || there.Deleting {
		return nil
	}
	original := slices.IndexFunc(all, func(x Resource) bool { return strings.EqualFold(x.Node, r.Original) })
	if original < 0 || all[original].Diskless || all[original].Deleting {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("node %q holds no diskful replica of %q: it is not the original, and the replica on %q may be the last copy", r.Original, r.Definition, r.Node)}
	}
	if orig := all[original]; there.Created.IsZero() || orig.Created.IsZero() || !there.Created.After(orig.Created) {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("the replica on %q (created %s) is not younger than the one on %q (created %s): it is not the added one, or the nodes are swapped",
			r.Node, stamp(there.Created), r.Original, stamp(orig.Created))}
	}
	if there.InUse != nil && *there.InUse {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("the replica is open on node %q (in use): move what uses it first", r.Node)}
	}
	if !there.Diskless && there.UpToDate() {
		whole := slices.ContainsFunc(all, func(x Resource) bool {
			return !strings.EqualFold(x.Node, r.Node) && !x.Deleting && x.UpToDate()
		})
		if !whole {
			return &RefusedError{Op: op, Reason: fmt.Sprintf("it is the only replica of %q known UpToDate; the original on %q is %s", r.Definition, r.Original, describeState(all[original]))}
		}
	}
	return c.call(ctx, op, func(ctx context.Context) error {
		return c.api.Resources.Delete(ctx, r.Definition, there.Node)
	})
}

// DeleteTiebreaker deletes a diskless resource of def on node. It refuses (ErrRefused) a
// diskful replica: those go through DeleteAddedReplica. One that is not there is success.
func (c *Client) DeleteTiebreaker(ctx context.Context, def, node string) error {
	op := fmt.Sprintf("delete the diskless tiebreaker of %q on node %q", def, node)
	for _, n := range [][2]string{{"resource definition", def}, {"node", node}} {
		if err := checkName(n[0], n[1]); err != nil {
			return &RefusedError{Op: op, Reason: err.Error()}
		}
	}
	there, _, err := c.resource(ctx, def, node)
	if err != nil {
		return err
	}
	if there == nil || there.Deleting {
		return nil
	}
	if !there.Diskless {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("node %q holds a diskful replica of %q, not a tiebreaker", node, def)}
	}
	return c.call(ctx, op, func(ctx context.Context) error {
		return c.api.Resources.Delete(ctx, def, there.Node)
	})
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "at a time LINSTOR does not report"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func describeState(r Resource) string {
	if !r.StateKnown() {
		return "of unknown state (its node is offline)"
	}
	var states []string
	for _, v := range r.Volumes {
		states = append(states, v.DiskState)
	}
	return strings.Join(slices.Compact(states), ", ")
}

func isExists(err error) bool { return errors.Is(err, ErrExists) }

// withReason adds what this client found to LINSTOR's refusal.
func withReason(err error, reason string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	out := *e
	out.Reason = reason
	return &out
}

// resourceCreate is golinstor's create of a resource on a node. The body names the resource
// and node as the path does.
func resourceCreate(def, node string, props map[string]string, flags []string) lapi.ResourceCreate {
	return lapi.ResourceCreate{Resource: lapi.Resource{Name: def, NodeName: node, Props: props, Flags: flags}}
}

package linstor

import (
	"context"
	"fmt"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
)

// ResourceGroup is a LINSTOR resource group: the template its definitions were spawned from
// (a StorageClass of LINSTOR CSI has one).
type ResourceGroup struct {
	Name string
	// PlaceCount is how many diskful replicas its definitions get; 0 when unset, which
	// LINSTOR's autoplacer reads as 2.
	PlaceCount int32
	// StoragePools are the pools its select filter allows (storage_pool and
	// storage_pool_list); none means any.
	StoragePools []string
	Props        map[string]string
}

// Quorum is the group's DRBD quorum setting.
func (g ResourceGroup) Quorum() Quorum { return QuorumOf(g.Props) }

// ResourceGroups lists the resource groups.
func (c *Client) ResourceGroups(ctx context.Context) ([]ResourceGroup, error) {
	var groups []lapi.ResourceGroup
	err := c.call(ctx, "list resource groups", func(ctx context.Context) (err error) {
		groups, err = c.api.ResourceGroups.GetAll(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ResourceGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, groupOf(g))
	}
	return out, nil
}

// ResourceGroup reads one resource group; an *Error matching ErrNotFound when there is none.
// (LINSTOR's OpenAPI document declares no read of a single group, so the list is read.)
func (c *Client) ResourceGroup(ctx context.Context, name string) (ResourceGroup, error) {
	op := fmt.Sprintf("read resource group %q", name)
	if err := checkName("resource group", name); err != nil {
		return ResourceGroup{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	groups, err := c.ResourceGroups(ctx)
	if err != nil {
		return ResourceGroup{}, err
	}
	for _, g := range groups {
		if strings.EqualFold(g.Name, name) {
			return g, nil
		}
	}
	return ResourceGroup{}, &Error{Op: op, Reason: "LINSTOR has no resource group by this name", Err: ErrNotFound}
}

func groupOf(g lapi.ResourceGroup) ResourceGroup {
	out := ResourceGroup{Name: g.Name, PlaceCount: g.SelectFilter.PlaceCount, Props: g.Props}
	if g.SelectFilter.StoragePool != "" {
		out.StoragePools = append(out.StoragePools, g.SelectFilter.StoragePool)
	}
	out.StoragePools = append(out.StoragePools, g.SelectFilter.StoragePoolList...)
	if out.Props == nil {
		out.Props = map[string]string{}
	}
	return out
}

// SetPlaceCount sets the group's place count and returns the one it had (0: unset, which
// LINSTOR's API cannot set again; restore 2, the count LINSTOR used for it).
//
// Mind what LINSTOR does with it: a modify that sets the place count autoplaces, within the
// same request, every definition of the group that has fewer diskful replicas, on nodes its
// autoplacer chooses. Over many definitions that request can outlast any timeout and place
// only some (linstor-server#253): a call that fails with ErrNoAnswer may have placed some
// replicas or none. Place the new replicas first (PlaceReplica, in batches), and raise the
// place count once every definition has them: the modify then has nothing to place. Lowering
// the count deletes nothing.
func (c *Client) SetPlaceCount(ctx context.Context, group string, count int32) (old int32, err error) {
	op := fmt.Sprintf("set the place count of resource group %q to %d", group, count)
	if count < 1 || count > 32 {
		return 0, &RefusedError{Op: op, Reason: "a place count is 1 to 32 (DRBD's nodes per resource)"}
	}
	g, err := c.ResourceGroup(ctx, group)
	if err != nil {
		return 0, err
	}
	err = c.call(ctx, op, func(ctx context.Context) error {
		return c.api.ResourceGroups.Modify(ctx, g.Name, lapi.ResourceGroupModify{SelectFilter: lapi.AutoSelectFilter{PlaceCount: count}})
	})
	if err != nil {
		return 0, err
	}
	return g.PlaceCount, nil
}

// ModifyResourceGroupProps changes the group's properties (they apply to its definitions'
// resources unless a definition sets its own) and returns the change that undoes it, from the
// values read just before.
func (c *Client) ModifyResourceGroupProps(ctx context.Context, group string, change PropChange) (undo PropChange, err error) {
	op := fmt.Sprintf("change the properties %q of resource group %q", change.Keys(), group)
	if err := change.validate(); err != nil {
		return PropChange{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	if change.Empty() {
		return PropChange{}, nil
	}
	g, err := c.ResourceGroup(ctx, group)
	if err != nil {
		return PropChange{}, err
	}
	err = c.call(ctx, op, func(ctx context.Context) error {
		return c.api.ResourceGroups.Modify(ctx, g.Name, lapi.ResourceGroupModify{OverrideProps: change.Set, DeleteProps: change.Delete})
	})
	if err != nil {
		return PropChange{}, err
	}
	return change.undo(g.Props), nil
}

// SetResourceGroupQuorum sets the group's DRBD quorum options and returns the change that
// undoes it.
func (c *Client) SetResourceGroupQuorum(ctx context.Context, group string, q Quorum) (undo PropChange, err error) {
	change, err := q.Change()
	if err != nil {
		return PropChange{}, &RefusedError{Op: fmt.Sprintf("set the quorum of resource group %q", group), Reason: err.Error()}
	}
	return c.ModifyResourceGroupProps(ctx, group, change)
}

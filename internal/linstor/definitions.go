package linstor

import (
	"context"
	"fmt"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
)

// ResourceDefinition is a LINSTOR resource definition: one volume (a PersistentVolume of
// LINSTOR CSI) with its volume definitions, whatever nodes it has replicas on.
type ResourceDefinition struct {
	Name string
	// Group is its resource group.
	Group string
	Props map[string]string
	// VolumeSizesKiB are its volumes' sizes by volume number.
	VolumeSizesKiB []int64
}

// SizeKiB is what a new diskful replica takes from a storage pool: its volumes together
// (DRBD's metadata aside).
func (d ResourceDefinition) SizeKiB() int64 {
	var sum int64
	for _, s := range d.VolumeSizesKiB {
		sum += s
	}
	return sum
}

// Quorum is the definition's own DRBD quorum setting (its group's applies where unset).
func (d ResourceDefinition) Quorum() Quorum { return QuorumOf(d.Props) }

// ResourceDefinitions lists the resource definitions with their volume definitions; with
// names, only those.
func (c *Client) ResourceDefinitions(ctx context.Context, names ...string) ([]ResourceDefinition, error) {
	op := "list resource definitions"
	if len(names) > 0 {
		op = fmt.Sprintf("list resource definitions %q", names)
	}
	var defs []lapi.ResourceDefinitionWithVolumeDefinition
	err := c.call(ctx, op, func(ctx context.Context) (err error) {
		defs, err = c.api.ResourceDefinitions.GetAll(ctx, lapi.RDGetAllRequest{ResourceDefinitions: names, WithVolumeDefinitions: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ResourceDefinition, 0, len(defs))
	for _, d := range defs {
		def := ResourceDefinition{Name: d.Name, Group: d.ResourceGroupName, Props: d.Props}
		if def.Props == nil {
			def.Props = map[string]string{}
		}
		for i, v := range d.VolumeDefinitions {
			n := int32(i)
			if v.VolumeNumber != nil {
				n = *v.VolumeNumber
			}
			if n < 0 || n > 4095 {
				return nil, &Error{Op: op, Reason: fmt.Sprintf("resource definition %q: volume number %d is outside 0..4095", d.Name, n)}
			}
			for int(n) >= len(def.VolumeSizesKiB) {
				def.VolumeSizesKiB = append(def.VolumeSizesKiB, 0)
			}
			def.VolumeSizesKiB[n] = int64(v.SizeKib)
		}
		out = append(out, def)
	}
	return out, nil
}

// ResourceDefinition reads one resource definition; an *Error matching ErrNotFound when there
// is none.
func (c *Client) ResourceDefinition(ctx context.Context, name string) (ResourceDefinition, error) {
	op := fmt.Sprintf("read resource definition %q", name)
	if err := checkName("resource definition", name); err != nil {
		return ResourceDefinition{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	defs, err := c.ResourceDefinitions(ctx, name)
	if err != nil {
		return ResourceDefinition{}, err
	}
	for _, d := range defs {
		if strings.EqualFold(d.Name, name) {
			return d, nil
		}
	}
	return ResourceDefinition{}, &Error{Op: op, Reason: "LINSTOR has no resource definition by this name", Err: ErrNotFound}
}

// ModifyResourceDefinitionProps changes the definition's properties and returns the change
// that undoes it, from the values read just before.
func (c *Client) ModifyResourceDefinitionProps(ctx context.Context, name string, change PropChange) (undo PropChange, err error) {
	op := fmt.Sprintf("change the properties %q of resource definition %q", change.Keys(), name)
	if err := change.validate(); err != nil {
		return PropChange{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	if change.Empty() {
		return PropChange{}, nil
	}
	d, err := c.ResourceDefinition(ctx, name)
	if err != nil {
		return PropChange{}, err
	}
	err = c.call(ctx, op, func(ctx context.Context) error {
		return c.api.ResourceDefinitions.Modify(ctx, d.Name, lapi.GenericPropsModify{OverrideProps: change.Set, DeleteProps: change.Delete})
	})
	if err != nil {
		return PropChange{}, err
	}
	return change.undo(d.Props), nil
}

// SetResourceDefinitionQuorum sets the definition's DRBD quorum options and returns the change
// that undoes it.
func (c *Client) SetResourceDefinitionQuorum(ctx context.Context, name string, q Quorum) (undo PropChange, err error) {
	change, err := q.Change()
	if err != nil {
		return PropChange{}, &RefusedError{Op: fmt.Sprintf("set the quorum of resource definition %q", name), Reason: err.Error()}
	}
	return c.ModifyResourceDefinitionProps(ctx, name, change)
}

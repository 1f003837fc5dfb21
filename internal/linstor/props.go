package linstor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
)

// The properties a replication upgrade changes.
const (
	// PropQuorum is DRBD's quorum option of the resources of a group or a definition: off,
	// majority, all or a number of nodes.
	PropQuorum = "DrbdOptions/Resource/quorum"
	// PropOnNoQuorum is what DRBD does with I/O when a resource loses quorum: io-error or
	// suspend-io.
	PropOnNoQuorum = "DrbdOptions/Resource/on-no-quorum"
	// PropBalanceResourcesEnabled is the controller property that turns LINSTOR's balance
	// task on or off (since LINSTOR 1.26.0, on by default, hourly): it autoplaces definitions
	// below their group's place count by itself.
	PropBalanceResourcesEnabled = "BalanceResourcesEnabled"
)

// PropChange is a change to an object's properties: the keys to set and the keys to delete.
// Every change this package makes returns the PropChange that undoes it.
type PropChange struct {
	Set    map[string]string `json:"set,omitempty"`
	Delete []string          `json:"delete,omitempty"`
}

// Empty reports whether the change changes nothing.
func (p PropChange) Empty() bool { return len(p.Set) == 0 && len(p.Delete) == 0 }

// Keys are the keys the change touches, sorted.
func (p PropChange) Keys() []string {
	keys := slices.Collect(maps.Keys(p.Set))
	keys = append(keys, p.Delete...)
	slices.Sort(keys)
	return slices.Compact(keys)
}

func (p PropChange) validate() error {
	for k, v := range p.Set {
		if err := checkPropKey(k); err != nil {
			return err
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("the value of %s holds a NUL byte", k)
		}
	}
	for _, k := range p.Delete {
		if err := checkPropKey(k); err != nil {
			return err
		}
		if _, both := p.Set[k]; both {
			return fmt.Errorf("property %s is both set and deleted", k)
		}
	}
	return nil
}

func checkPropKey(k string) error {
	if k == "" || strings.HasPrefix(k, "/") || strings.HasSuffix(k, "/") || strings.Contains(k, "//") || strings.ContainsAny(k, " \t\r\n\x00") {
		return fmt.Errorf("%q is not a LINSTOR property key", k)
	}
	return nil
}

// undo is the change that puts back what before held for every key p touches.
func (p PropChange) undo(before map[string]string) PropChange {
	var out PropChange
	for _, k := range p.Keys() {
		if v, ok := before[k]; ok {
			if out.Set == nil {
				out.Set = map[string]string{}
			}
			out.Set[k] = v
		} else {
			out.Delete = append(out.Delete, k)
		}
	}
	return out
}

// Quorum is DRBD's quorum setting of a group's or a definition's resources.
type Quorum struct {
	// Quorum is off, majority, all or a number of nodes (1 to 32); empty leaves it as it is.
	Quorum string
	// OnNoQuorum is io-error or suspend-io; empty leaves it as it is.
	OnNoQuorum string
}

// QuorumOf reads the quorum setting from an object's properties (empty where unset).
func QuorumOf(props map[string]string) Quorum {
	return Quorum{Quorum: props[PropQuorum], OnNoQuorum: props[PropOnNoQuorum]}
}

// Change is the property change that sets q, refused when a value is not one DRBD takes.
func (q Quorum) Change() (PropChange, error) {
	out := PropChange{Set: map[string]string{}}
	if q.Quorum != "" {
		switch n, err := strconv.Atoi(q.Quorum); {
		case q.Quorum == "off" || q.Quorum == "majority" || q.Quorum == "all":
		case err == nil && n >= 1 && n <= 32:
		default:
			return PropChange{}, fmt.Errorf("quorum %q: want off, majority, all or 1 to 32", q.Quorum)
		}
		out.Set[PropQuorum] = q.Quorum
	}
	if q.OnNoQuorum != "" {
		if q.OnNoQuorum != "io-error" && q.OnNoQuorum != "suspend-io" {
			return PropChange{}, fmt.Errorf("on-no-quorum %q: want io-error or suspend-io", q.OnNoQuorum)
		}
		out.Set[PropOnNoQuorum] = q.OnNoQuorum
	}
	if out.Empty() {
		return PropChange{}, fmt.Errorf("neither quorum nor on-no-quorum is given")
	}
	return out, nil
}

// ControllerProps reads the controller's properties.
func (c *Client) ControllerProps(ctx context.Context) (map[string]string, error) {
	var props lapi.ControllerProps
	err := c.call(ctx, "read the controller's properties", func(ctx context.Context) (err error) {
		props, err = c.api.Controller.GetProps(ctx)
		return err
	})
	if props == nil {
		props = lapi.ControllerProps{}
	}
	return props, err
}

// ModifyControllerProps changes the controller's properties and returns the change that undoes
// it, from the values read just before.
func (c *Client) ModifyControllerProps(ctx context.Context, change PropChange) (undo PropChange, err error) {
	op := fmt.Sprintf("change the controller's properties %q", change.Keys())
	if err := change.validate(); err != nil {
		return PropChange{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	if change.Empty() {
		return PropChange{}, nil
	}
	before, err := c.ControllerProps(ctx)
	if err != nil {
		return PropChange{}, err
	}
	err = c.call(ctx, op, func(ctx context.Context) error {
		return c.api.Controller.Modify(ctx, lapi.GenericPropsModify{OverrideProps: change.Set, DeleteProps: change.Delete})
	})
	if err != nil {
		return PropChange{}, err
	}
	return change.undo(before), nil
}

// BalanceResourcesEnabled reports whether LINSTOR's balance task runs: unless the controller
// property is "false" (LINSTOR's default is on).
func (c *Client) BalanceResourcesEnabled(ctx context.Context) (bool, error) {
	props, err := c.ControllerProps(ctx)
	if err != nil {
		return false, err
	}
	return !strings.EqualFold(props[PropBalanceResourcesEnabled], "false"), nil
}

// SetBalanceResourcesEnabled turns LINSTOR's balance task on or off and returns the change that
// puts the property back as it was (deleted again when it was unset).
func (c *Client) SetBalanceResourcesEnabled(ctx context.Context, enabled bool) (undo PropChange, err error) {
	return c.ModifyControllerProps(ctx, PropChange{Set: map[string]string{PropBalanceResourcesEnabled: strconv.FormatBool(enabled)}})
}

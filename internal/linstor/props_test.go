package linstor_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

func TestResourceGroups(t *testing.T) {
	s := newSite(t, linstorsim.Options{})
	ctx := ctxFor(t)
	groups, err := s.client.ResourceGroups(ctx)
	if err != nil || len(groups) != 2 {
		t.Fatalf("groups %+v, %v; want DfltRscGrp and sc-replicated", groups, err)
	}
	g, err := s.client.ResourceGroup(ctx, "sc-replicated")
	if err != nil {
		t.Fatal(err)
	}
	if g.PlaceCount != 1 || !reflect.DeepEqual(g.StoragePools, []string{pool}) {
		t.Fatalf("sc-replicated: %+v", g)
	}
	if _, err := s.client.ResourceGroup(ctx, "sc-missing"); !errors.Is(err, linstor.ErrNotFound) {
		t.Fatalf("a group that does not exist: %v", err)
	}
}

// Raising the place count, LINSTOR autoplaces every definition of the group below it within
// the same request; the old count comes back.
func TestSetPlaceCount(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1", "pvc-2")
	ctx := ctxFor(t)
	old, err := s.client.SetPlaceCount(ctx, "sc-replicated", 2)
	if err != nil || old != 1 {
		t.Fatalf("SetPlaceCount: old %d, %v", old, err)
	}
	if g, _ := s.client.ResourceGroup(ctx, "sc-replicated"); g.PlaceCount != 2 {
		t.Fatalf("place count %d after setting 2", g.PlaceCount)
	}
	rs, err := s.client.Resources(ctx, linstor.ResourceFilter{})
	if err != nil || len(rs) != 4 {
		t.Fatalf("%d resources after the modify, want each definition on 2 nodes: %v", len(rs), err)
	}
	// Lowering it places and deletes nothing.
	if old, err := s.client.SetPlaceCount(ctx, "sc-replicated", 1); err != nil || old != 2 {
		t.Fatalf("back to 1: old %d, %v", old, err)
	}
	if rs, _ := s.client.Resources(ctx, linstor.ResourceFilter{}); len(rs) != 4 {
		t.Fatalf("%d resources after lowering the count", len(rs))
	}
	// More than there are nodes: the group changes, and LINSTOR says what it could not place.
	_, err = s.client.SetPlaceCount(ctx, "sc-replicated", 4)
	if err == nil || !strings.Contains(err.Error(), "Not enough available nodes") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("place count 4 on 3 nodes: %v", err)
	}
	if _, err := s.client.SetPlaceCount(ctx, "sc-replicated", 0); !errors.Is(err, linstor.ErrRefused) {
		t.Fatalf("place count 0: %v", err)
	}
	if _, err := s.client.SetPlaceCount(ctx, "sc-missing", 2); !errors.Is(err, linstor.ErrNotFound) {
		t.Fatalf("a group that does not exist: %v", err)
	}
}

// Every property change returns the change that puts back what was there, deleting what was
// not.
func TestPropertyChangesReturnTheirUndo(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1")
	ctx := ctxFor(t)
	must(t, func() error {
		_, err := s.client.ModifyResourceGroupProps(ctx, "sc-replicated", linstor.PropChange{Set: map[string]string{"Aux/nodewright": "before"}})
		return err
	}())
	before := s.sim.State()

	undo, err := s.client.SetResourceGroupQuorum(ctx, "sc-replicated", linstor.Quorum{Quorum: "majority", OnNoQuorum: "suspend-io"})
	if err != nil {
		t.Fatal(err)
	}
	want := linstor.PropChange{Delete: []string{linstor.PropOnNoQuorum, linstor.PropQuorum}}
	if !reflect.DeepEqual(undo, want) {
		t.Fatalf("undo %+v, want %+v", undo, want)
	}
	g, _ := s.client.ResourceGroup(ctx, "sc-replicated")
	if q := g.Quorum(); q.Quorum != "majority" || q.OnNoQuorum != "suspend-io" {
		t.Fatalf("quorum after setting it: %+v", q)
	}
	undo2, err := s.client.ModifyResourceGroupProps(ctx, "sc-replicated", linstor.PropChange{Set: map[string]string{"Aux/nodewright": "after"}, Delete: []string{linstor.PropQuorum}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(undo2, linstor.PropChange{Set: map[string]string{"Aux/nodewright": "before", linstor.PropQuorum: "majority"}}) {
		t.Fatalf("undo of a set and a delete: %+v", undo2)
	}
	for _, u := range []linstor.PropChange{undo2, undo} {
		if _, err := s.client.ModifyResourceGroupProps(ctx, "sc-replicated", u); err != nil {
			t.Fatal(err)
		}
	}
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after undoing:\n%+v\nwant\n%+v", after.Groups, before.Groups)
	}

	// A definition's own quorum, the same way.
	undo, err = s.client.SetResourceDefinitionQuorum(ctx, "pvc-1", linstor.Quorum{Quorum: "2"})
	if err != nil || !reflect.DeepEqual(undo, linstor.PropChange{Delete: []string{linstor.PropQuorum}}) {
		t.Fatalf("definition quorum: undo %+v, %v", undo, err)
	}
	d, err := s.client.ResourceDefinition(ctx, "pvc-1")
	if err != nil || d.Quorum().Quorum != "2" || d.Group != "sc-replicated" || d.SizeKiB() != gib {
		t.Fatalf("pvc-1: %+v, %v", d, err)
	}
	if _, err := s.client.ModifyResourceDefinitionProps(ctx, "pvc-1", undo); err != nil {
		t.Fatal(err)
	}
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after undoing the definition's quorum: %+v", after.Definitions)
	}
}

func TestPropertyChangesRefused(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1")
	ctx := ctxFor(t)
	// Refused here, before LINSTOR is asked.
	for _, q := range []linstor.Quorum{{Quorum: "most"}, {Quorum: "33"}, {OnNoQuorum: "freeze"}, {}} {
		if _, err := s.client.SetResourceGroupQuorum(ctx, "sc-replicated", q); !errors.Is(err, linstor.ErrRefused) {
			t.Errorf("quorum %+v: %v, want ErrRefused", q, err)
		}
	}
	for _, ch := range []linstor.PropChange{
		{Set: map[string]string{"": "x"}},
		{Set: map[string]string{"Aux/a": "x"}, Delete: []string{"Aux/a"}},
		{Delete: []string{"/Aux"}},
	} {
		if _, err := s.client.ModifyResourceDefinitionProps(ctx, "pvc-1", ch); !errors.Is(err, linstor.ErrRefused) {
			t.Errorf("%+v: %v, want ErrRefused", ch, err)
		}
	}
	// Refused by LINSTOR, which says why.
	_, err := s.client.ModifyResourceGroupProps(ctx, "sc-replicated", linstor.PropChange{Set: map[string]string{"DrbdOptions/Resource/quorum": "most"}})
	if err == nil || !strings.Contains(err.Error(), "The value 'most' is not valid for the key 'DrbdOptions/Resource/quorum'") {
		t.Fatalf("LINSTOR's refusal of a value: %v", err)
	}
	if _, err := s.client.ModifyResourceDefinitionProps(ctx, "pvc-9", linstor.PropChange{Set: map[string]string{"Aux/a": "b"}}); !errors.Is(err, linstor.ErrNotFound) {
		t.Fatalf("a definition that does not exist: %v", err)
	}
}

func TestResourceDefinitions(t *testing.T) {
	s := newSite(t, linstorsim.Options{}, "pvc-1", "pvc-2")
	must(t, s.sim.AddResourceDefinition(linstorsim.Definition{Name: "pvc-3", SizesKiB: []int64{gib, 2 * gib}}))
	ctx := ctxFor(t)
	defs, err := s.client.ResourceDefinitions(ctx)
	if err != nil || len(defs) != 3 {
		t.Fatalf("definitions %+v, %v", defs, err)
	}
	d, err := s.client.ResourceDefinition(ctx, "pvc-3")
	if err != nil || !reflect.DeepEqual(d.VolumeSizesKiB, []int64{gib, 2 * gib}) || d.SizeKiB() != 3*gib || d.Group != linstorsim.DefaultGroup {
		t.Fatalf("pvc-3: %+v, %v", d, err)
	}
	if _, err := s.client.ResourceDefinition(ctx, "pvc-9"); !errors.Is(err, linstor.ErrNotFound) {
		t.Fatalf("a definition that does not exist: %v", err)
	}
}

// LINSTOR's balance task is paused and restored through the controller's property.
func TestBalanceResourcesEnabled(t *testing.T) {
	s := newSite(t, linstorsim.Options{})
	ctx := ctxFor(t)
	before := s.sim.State()
	if on, err := s.client.BalanceResourcesEnabled(ctx); err != nil || !on {
		t.Fatalf("by default: %v, %v; LINSTOR's default is on", on, err)
	}
	undo, err := s.client.SetBalanceResourcesEnabled(ctx, false)
	if err != nil || !reflect.DeepEqual(undo, linstor.PropChange{Delete: []string{linstor.PropBalanceResourcesEnabled}}) {
		t.Fatalf("pausing: undo %+v, %v", undo, err)
	}
	if on, err := s.client.BalanceResourcesEnabled(ctx); err != nil || on {
		t.Fatalf("after pausing: %v, %v", on, err)
	}
	props, err := s.client.ControllerProps(ctx)
	if err != nil || props[linstor.PropBalanceResourcesEnabled] != "false" {
		t.Fatalf("the controller's properties: %v, %v", props, err)
	}
	if _, err := s.client.ModifyControllerProps(ctx, undo); err != nil {
		t.Fatal(err)
	}
	if after := s.sim.State(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after restoring: %+v", after.ControllerProps)
	}
	// Set explicitly, restored to its value.
	must(t, func() error { _, err := s.client.SetBalanceResourcesEnabled(ctx, true); return err }())
	undo, err = s.client.SetBalanceResourcesEnabled(ctx, false)
	if err != nil || !reflect.DeepEqual(undo, linstor.PropChange{Set: map[string]string{linstor.PropBalanceResourcesEnabled: "true"}}) {
		t.Fatalf("pausing a task set on: undo %+v, %v", undo, err)
	}
	_, err = s.client.ModifyControllerProps(ctx, linstor.PropChange{Set: map[string]string{"Not/AKey": "x"}})
	if err == nil || !strings.Contains(err.Error(), "The key 'Not/AKey' is not whitelisted") {
		t.Fatalf("an unknown key: %v", err)
	}
}

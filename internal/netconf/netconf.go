// Package netconf is the agent's network backend: it observes the node's bond and changes its
// mode at runtime. Backend is the seam; Netlink is the real implementation, through the
// kernel's rtnetlink. The persistent configuration (what the node boots with) is not here: it
// belongs to the host OS and is written through internal/hostos.
package netconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// Backend observes and changes the node's bond at runtime.
type Backend interface {
	// Bond observes the bond called name: its mode and its member links with their carrier.
	// A missing link is an error that wraps ErrNoBond.
	Bond(ctx context.Context, name string) (nwv1.BondObservation, error)
	// SetBondMode changes the runtime mode of the bond called name, keeping its members.
	SetBondMode(ctx context.Context, name string, mode nwv1.BondMode) error
	// Restore makes the bond as it was observed (Bond's answer before a change): its mode,
	// every member of the observation enslaved again, the bond and its members up. It does
	// what is needed whatever state a failed or interrupted change left, and nothing when the
	// bond is already so.
	Restore(ctx context.Context, was nwv1.BondObservation) error
}

// ErrNoBond says the node has no bond of that name.
var ErrNoBond = errors.New("no such bond")

// Netlink is the Backend of a real Linux host: the bonding driver through rtnetlink.
type Netlink struct {
	// Handle is the netlink socket to use, bound to a network namespace; nil uses the
	// process's own namespace.
	Handle *netlink.Handle
}

func (n Netlink) handle() *netlink.Handle {
	if n.Handle != nil {
		return n.Handle
	}
	return &netlink.Handle{}
}

// Bond reads the bond and its members.
func (n Netlink) Bond(_ context.Context, name string) (nwv1.BondObservation, error) {
	h := n.handle()
	link, err := linkByName(h, name)
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	bond, ok := link.(*netlink.Bond)
	if !ok {
		return nwv1.BondObservation{}, fmt.Errorf("%w: %s is a %s link, not a bond", ErrNoBond, name, link.Type())
	}
	obs, err := observe(h, link)
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	obs.Mode = nwv1.BondMode(bond.Mode.String())
	return obs, nil
}

// SetBondMode changes the bond's mode. The kernel changes a bond's mode only while the bond
// is down and has no members, so the members are released, the bond is taken down, its mode
// set, and the members enslaved again, each down while it is (as the kernel requires), then
// brought up as they were. Traffic on the bond stops for that time.
func (n Netlink) SetBondMode(_ context.Context, name string, mode nwv1.BondMode) error {
	h := n.handle()
	want := netlink.StringToBondMode(string(mode))
	if want == netlink.BOND_MODE_UNKNOWN {
		return fmt.Errorf("bond mode %q: not a Linux bonding mode", mode)
	}
	link, err := linkByName(h, name)
	if err != nil {
		return err
	}
	bond, ok := link.(*netlink.Bond)
	if !ok {
		return fmt.Errorf("%w: %s is a %s link, not a bond", ErrNoBond, name, link.Type())
	}
	if bond.Mode == want {
		return nil
	}
	members, err := membersOf(h, link)
	if err != nil {
		return err
	}
	wasUp := link.Attrs().Flags&net.FlagUp != 0
	if err := release(h, members); err != nil {
		return err
	}
	if err := h.LinkSetDown(link); err != nil {
		return fmt.Errorf("taking %s down: %w", name, err)
	}
	if err := setMode(h, link, want); err != nil {
		return err
	}
	return enslave(h, link, members, wasUp)
}

// setMode sets the mode of a bond that is down and has no members.
func setMode(h *netlink.Handle, link netlink.Link, mode netlink.BondMode) error {
	// Only the mode: every other attribute left as it is (NewLinkAttrs marks them unset;
	// a zero LinkAttrs would set the transmit queue length to 0).
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.Index = link.Attrs().Name, link.Attrs().Index
	change := netlink.NewLinkBond(attrs)
	change.Mode = mode
	if err := h.LinkModify(change); err != nil {
		return fmt.Errorf("setting the mode of %s to %s: %w", link.Attrs().Name, mode, err)
	}
	return nil
}

// Restore makes the bond as was observed it: its mode, was's members enslaved, all up.
func (n Netlink) Restore(_ context.Context, was nwv1.BondObservation) error {
	h := n.handle()
	want := netlink.StringToBondMode(string(was.Mode))
	if want == netlink.BOND_MODE_UNKNOWN {
		return fmt.Errorf("bond mode %q: not a Linux bonding mode", was.Mode)
	}
	link, err := linkByName(h, was.Interface)
	if err != nil {
		return err
	}
	bond, ok := link.(*netlink.Bond)
	if !ok {
		return fmt.Errorf("%w: %s is a %s link, not a bond", ErrNoBond, was.Interface, link.Type())
	}
	current, err := membersOf(h, link)
	if err != nil {
		return err
	}
	var members []netlink.Link
	for _, m := range was.Members {
		l, err := h.LinkByName(m.Name)
		if err != nil {
			return fmt.Errorf("member %s of %s: %w", m.Name, was.Interface, err)
		}
		members = append(members, l)
	}
	if bond.Mode == want && sameLinks(current, members) && up(link) && !slices.ContainsFunc(members, func(l netlink.Link) bool { return !up(l) }) {
		return nil
	}
	if err := release(h, current); err != nil {
		return err
	}
	if err := h.LinkSetDown(link); err != nil {
		return fmt.Errorf("taking %s down: %w", was.Interface, err)
	}
	if bond.Mode != want {
		if err := setMode(h, link, want); err != nil {
			return err
		}
	}
	for i := range members {
		// Every member up once enslaved again: they carried the bond before.
		members[i].Attrs().Flags |= net.FlagUp
	}
	return enslave(h, link, members, true)
}

func up(l netlink.Link) bool { return l.Attrs().Flags&net.FlagUp != 0 }

// sameLinks: a and b hold the same links, whatever their order.
func sameLinks(a, b []netlink.Link) bool {
	if len(a) != len(b) {
		return false
	}
	for _, l := range a {
		if !slices.ContainsFunc(b, func(o netlink.Link) bool { return o.Attrs().Index == l.Attrs().Index }) {
			return false
		}
	}
	return true
}

func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	link, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, fmt.Errorf("%w: no link %s on this node", ErrNoBond, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading link %s: %w", name, err)
	}
	return link, nil
}

// observe reads a master link (a bond, or a bridge) and its members, in index order.
func observe(h *netlink.Handle, master netlink.Link) (nwv1.BondObservation, error) {
	members, err := membersOf(h, master)
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	obs := nwv1.BondObservation{Interface: master.Attrs().Name}
	for _, m := range members {
		obs.Members = append(obs.Members, nwv1.BondMember{Name: m.Attrs().Name, Up: Carrier(m)})
	}
	if obs.Addresses, err = Addresses(h, master); err != nil {
		return nwv1.BondObservation{}, err
	}
	return obs, nil
}

// Addresses are the link's global IP addresses, without their prefix length, in the kernel's
// order.
func Addresses(h *netlink.Handle, l netlink.Link) ([]string, error) {
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("reading the addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []string
	for _, a := range addrs {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) && a.IP != nil {
			out = append(out, a.IP.String())
		}
	}
	return out, nil
}

// Carrier reports whether the link is up and has a carrier (IFF_LOWER_UP).
func Carrier(l netlink.Link) bool {
	a := l.Attrs()
	return a.Flags&net.FlagUp != 0 && (a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown) && a.RawFlags&0x10000 != 0 // IFF_LOWER_UP
}

// membersOf lists the links enslaved to master.
func membersOf(h *netlink.Handle, master netlink.Link) ([]netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var members []netlink.Link
	for _, l := range links {
		if l.Attrs().MasterIndex == master.Attrs().Index {
			members = append(members, l)
		}
	}
	return members, nil
}

// release frees members from their master.
func release(h *netlink.Handle, members []netlink.Link) error {
	for _, m := range members {
		if err := h.LinkSetNoMaster(m); err != nil {
			return fmt.Errorf("releasing %s: %w", m.Attrs().Name, err)
		}
	}
	return nil
}

// enslave gives members back to master, each taken down first, then brings master and the
// members that were up back up when up is set.
func enslave(h *netlink.Handle, master netlink.Link, members []netlink.Link, up bool) error {
	for _, m := range members {
		if err := h.LinkSetDown(m); err != nil {
			return fmt.Errorf("taking %s down: %w", m.Attrs().Name, err)
		}
		if err := h.LinkSetMasterByIndex(m, master.Attrs().Index); err != nil {
			return fmt.Errorf("enslaving %s to %s: %w", m.Attrs().Name, master.Attrs().Name, err)
		}
	}
	if !up {
		return nil
	}
	if err := h.LinkSetUp(master); err != nil {
		return fmt.Errorf("bringing %s up: %w", master.Attrs().Name, err)
	}
	for _, m := range members {
		if m.Attrs().Flags&net.FlagUp == 0 {
			continue
		}
		if err := h.LinkSetUp(m); err != nil {
			return fmt.Errorf("bringing %s up: %w", m.Attrs().Name, err)
		}
	}
	return nil
}

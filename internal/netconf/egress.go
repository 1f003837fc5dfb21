package netconf

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// ErrNotThroughBond says that a packet to an address would not leave the node through the
// bond: it is the node's own, or it leaves by another link, or the node has no route to it.
var ErrNotThroughBond = errors.New("not reached through the bond")

// stacked are the kinds of link whose packets leave by their parent link.
var stacked = map[string]bool{"vlan": true, "macvlan": true, "macvtap": true, "ipvlan": true, "ipvtap": true}

// maxStack bounds the walk down a stack of links (a VLAN on a bridge on the bond, say).
const maxStack = 8

// ThroughBond checks, with the kernel's own route lookup, that a packet to ip leaves the node
// through the bond called bond: by the bond itself, by a link stacked on it (a VLAN or
// macvlan whose parent is the bond, at any depth), or by a bridge the bond is a port of (or
// one stacked on such a bridge). A probe of an address that passes tests the bond: its echo
// comes back only if the bond carries traffic. The error, which wraps ErrNotThroughBond, says
// why an address does not: it is an address of this node (delivered without leaving it), or
// it leaves by another link (and which), or there is no route to it.
func (n Netlink) ThroughBond(bond string, ip net.IP) error {
	h := n.handle()
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.Equal(net.IPv4bcast) {
		return fmt.Errorf("%w: %s is not one host's address", ErrNotThroughBond, ip)
	}
	b, err := linkByName(h, bond)
	if err != nil {
		return err
	}
	routes, err := h.RouteGet(ip)
	if err != nil {
		return fmt.Errorf("%w: this node has no route to %s: %w", ErrNotThroughBond, ip, err)
	}
	if len(routes) == 0 {
		return fmt.Errorf("%w: this node has no route to %s", ErrNotThroughBond, ip)
	}
	r := routes[0]
	switch r.Type {
	case unix.RTN_LOCAL:
		return fmt.Errorf("%w: %s is an address of this node", ErrNotThroughBond, ip)
	case unix.RTN_UNICAST:
	default:
		return fmt.Errorf("%w: the route to %s is not to one host (route type %d)", ErrNotThroughBond, ip, r.Type)
	}
	out, err := h.LinkByIndex(r.LinkIndex)
	if err != nil {
		return fmt.Errorf("reading the link %s leaves by (index %d): %w", ip, r.LinkIndex, err)
	}
	link := out
	for range maxStack {
		a := link.Attrs()
		if a.Index == b.Attrs().Index || a.Index == b.Attrs().MasterIndex {
			return nil
		}
		// Only a stacked link's parent carries its packets: a veth's is its peer, in another
		// namespace, where the same index names another link.
		if !stacked[link.Type()] || a.ParentIndex == 0 || a.ParentIndex == a.Index {
			break
		}
		if link, err = h.LinkByIndex(a.ParentIndex); err != nil {
			break
		}
	}
	return fmt.Errorf("%w: %s leaves this node by %s, not by %s", ErrNotThroughBond, ip, out.Attrs().Name, bond)
}

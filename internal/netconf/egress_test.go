package netconf

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// addLink adds l to h's namespace with addr (a CIDR, or none when empty) and sets it up.
func addLink(t *testing.T, h *netlink.Handle, l netlink.Link, addr string) netlink.Link {
	t.Helper()
	if err := h.LinkAdd(l); err != nil {
		t.Fatalf("adding %s: %v", l.Attrs().Name, err)
	}
	got, err := h.LinkByName(l.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(got, a); err != nil {
			t.Fatalf("adding %s to %s: %v", addr, l.Attrs().Name, err)
		}
	}
	if err := h.LinkSetUp(got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestThroughBond asks the kernel's route lookup, in a namespace of the test's own, which
// link a packet to each address leaves by. A veth stands for the bond (this kernel has no
// bonding driver, nor dummy or VLAN links; the lookup does not care what kind the link is),
// with a macvlan stacked on it as a VLAN would be; a bridge has a second stand-in bond as its
// port; eth9 is another network, and the default route leaves by it. Only addresses reached through the bond pass; the node's own addresses,
// the other network's and the unroutable are refused, saying why.
func TestThroughBond(t *testing.T) {
	h := inNamespace(t)
	n := Netlink{Handle: h}
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	bond := addLink(t, h, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "bond9"}, PeerName: "bond9p"}, "10.9.0.1/24")
	addLink(t, h, &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "bond9mv", ParentIndex: bond.Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}, "10.9.5.1/24")
	eth := addLink(t, h, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth9"}, PeerName: "eth9p"}, "10.8.0.1/24")
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.ParseIP("10.8.0.254")}); err != nil {
		t.Fatal(err)
	}
	br := addLink(t, h, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br9"}}, "10.7.0.1/24")
	port := addLink(t, h, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "bond8"}, PeerName: "bond8p"}, "")
	if err := h.LinkSetMaster(port, br); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		bond, ip string
		want     string // "" when it passes; else what the refusal says
	}{
		{"bond9", "10.9.0.2", ""},
		{"bond9", "10.9.5.7", ""},
		{"bond8", "10.7.0.9", ""},
		{"bond9", "10.9.0.1", "10.9.0.1 is an address of this node"},
		{"bond9", "10.9.5.1", "10.9.5.1 is an address of this node"},
		{"bond9", "127.0.0.1", "127.0.0.1 is an address of this node"},
		{"bond9", "10.8.0.2", "10.8.0.2 leaves this node by eth9, not by bond9"},
		{"bond9", "192.0.2.1", "192.0.2.1 leaves this node by eth9, not by bond9"},
		{"bond9", "10.7.0.9", "10.7.0.9 leaves this node by br9, not by bond9"},
		{"bond8", "10.9.0.2", "10.9.0.2 leaves this node by bond9, not by bond8"},
		{"bond9", "224.0.0.1", "224.0.0.1 is not one host's address"},
		{"bond9", "255.255.255.255", "255.255.255.255 is not one host's address"},
		{"bond9", "10.9.0.255", "the route to 10.9.0.255 is not to one host"},
		{"bond9", "fd00::1", "this node has no route to fd00::1"},
	} {
		err := n.ThroughBond(tc.bond, net.ParseIP(tc.ip))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s through %s: %v; want it to pass", tc.ip, tc.bond, err)
		case tc.want != "" && (!errors.Is(err, ErrNotThroughBond) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s through %s: %v; want a refusal saying %q", tc.ip, tc.bond, err, tc.want)
		}
	}
	if err := n.ThroughBond("bond7", net.ParseIP("10.9.0.2")); !errors.Is(err, ErrNoBond) {
		t.Errorf("through a bond that is not there: %v; want ErrNoBond", err)
	}
}

package netconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The kernel these tests run on has no bonding driver, so what is tested is what it has: a
// bridge stands for the master (membersOf, release and enslave are the same rtnetlink calls
// for a bridge and a bond), veth pairs for the members, links up and down, and addresses.
// Each test gets a network namespace of its own.

// inNamespace returns a netlink handle in a new network namespace, deleted at the end of the
// test. It needs root, as creating a namespace does.
func inNamespace(t *testing.T) *netlink.Handle {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
			t.Fatal("these tests create network namespaces and need root")
		}
		t.Skip("creating network namespaces needs root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	name := fmt.Sprintf("nwt-netconf-%d", os.Getpid())
	ns, err := netns.NewNamed(name)
	if err != nil {
		t.Fatalf("creating network namespace %s: %v", name, err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		_ = ns.Close()
		_ = netns.DeleteNamed(name)
	})
	return h
}

func addVeth(t *testing.T, h *netlink.Handle, name, peer string) netlink.Link {
	t.Helper()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		t.Fatalf("adding veth %s: %v", name, err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestMembersAreReleasedAndEnslavedAgain(t *testing.T) {
	h := inNamespace(t)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-test"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	master, err := h.LinkByName("br-test")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.99.0.1/24")
	if err := h.AddrAdd(master, addr); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{"m0", "p0"}, {"m1", "p1"}} {
		m := addVeth(t, h, pair[0], pair[1])
		if err := h.LinkSetMaster(m, master); err != nil {
			t.Fatal(err)
		}
		p, _ := h.LinkByName(pair[1])
		for _, l := range []netlink.Link{m, p} {
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	master, _ = h.LinkByName("br-test")

	// A veth has its carrier a moment after both ends are up: wait for what is observed.
	var got string
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		obs, err := observe(h, master)
		if err != nil {
			t.Fatal(err)
		}
		if got = fmt.Sprint(obs.Members); got == "[{m0 true} {m1 true}]" {
			break
		}
	}
	if got != "[{m0 true} {m1 true}]" {
		t.Fatalf("members %s; want m0 and m1, both up", got)
	}
	// Its own address, not the members' (none) nor the link-local ones.
	if obs, err := observe(h, master); err != nil || fmt.Sprint(obs.Addresses) != "[10.99.0.1]" {
		t.Fatalf("addresses %v (%v); want [10.99.0.1]", obs.Addresses, err)
	}

	members, err := membersOf(h, master)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(h, members); err != nil {
		t.Fatal(err)
	}
	if left, _ := membersOf(h, master); len(left) != 0 {
		t.Fatalf("after release %d members are left", len(left))
	}
	if err := h.LinkSetDown(master); err != nil {
		t.Fatal(err)
	}
	if err := enslave(h, master, members, true); err != nil {
		t.Fatal(err)
	}
	master, _ = h.LinkByName("br-test")
	if master.Attrs().Flags&net.FlagUp == 0 {
		t.Error("the master is still down after enslave")
	}
	back, err := membersOf(h, master)
	if err != nil || len(back) != 2 {
		t.Fatalf("after enslave: %d members (%v); want 2", len(back), err)
	}
	for _, m := range back {
		if m.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("member %s was up before and is down after", m.Attrs().Name)
		}
	}
	addrs, err := h.AddrList(master, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.99.0.1/24" {
		t.Errorf("the master's addresses after the cycle: %v (%v); want 10.99.0.1/24 kept", addrs, err)
	}
}

func TestADownMemberIsReportedDown(t *testing.T) {
	h := inNamespace(t)
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br-test"}}); err != nil {
		t.Fatal(err)
	}
	master, _ := h.LinkByName("br-test")
	m := addVeth(t, h, "m0", "p0")
	if err := h.LinkSetMaster(m, master); err != nil {
		t.Fatal(err)
	}
	// m0 up but its peer down: no carrier.
	if err := h.LinkSetUp(m); err != nil {
		t.Fatal(err)
	}
	obs, err := observe(h, master)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.Members) != 1 || obs.Members[0].Up {
		t.Errorf("members %+v; want m0 without carrier reported down", obs.Members)
	}
}

func TestNotABond(t *testing.T) {
	h := inNamespace(t)
	n := Netlink{Handle: h}
	addVeth(t, h, "eth9", "eth9p")
	for _, name := range []string{"eth9", "bond7"} {
		_, err := n.Bond(context.Background(), name)
		if !errors.Is(err, ErrNoBond) || !strings.Contains(err.Error(), name) {
			t.Errorf("Bond(%s): %v; want ErrNoBond naming it", name, err)
		}
		if err := n.SetBondMode(context.Background(), name, "802.3ad"); !errors.Is(err, ErrNoBond) {
			t.Errorf("SetBondMode(%s): %v; want ErrNoBond", name, err)
		}
	}
	if err := n.SetBondMode(context.Background(), "eth9", "fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("SetBondMode(fast): %v; want the mode refused by name", err)
	}
}

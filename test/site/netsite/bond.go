// Package netsite plays a site's storage network on real network namespaces, veth pairs and
// a bridge, so that agents run as real processes, one per node, and their probes send real
// packets. What the kernel here lacks, it plays, and only that:
//
//   - The bonding driver. A node's "bond" is a veth in the node's namespace, carrying the
//     node's storage address; its one member is itself. Its mode is a file (PlayedBond), and
//     changing it takes the link down and up again, as re-enslaving a real bond's members
//     does, so traffic really stops for that moment.
//   - The switch's bond (LACP) configuration. The switch is a bridge in a namespace of its
//     own, one port per node. Each port expects a set of modes; a port whose node's bond runs
//     any other mode is taken down on the switch's side, so it carries no traffic at all (and
//     the node's link loses its carrier), as a switch port set up for LACP carries none for a
//     node in active-backup, and the reverse. A played bond tells the switch of a change
//     before its link comes up again, and the switch sets the port first, so that no packet
//     slips through in between. NeverCarry is the fault hook: a port that never carries a mode.
//
// Everything else is real: the addresses, the routes, the packets, the agent's ICMP and HTTPS
// probes, the API server (reached from the node namespaces through a forwarder on the host's
// port of the switch, which can cut one node off the API server alone).
package netsite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/netconf"
)

// PlayedBond is the network backend of an agent on the site: the bond is the link of that name
// (a veth), its mode is the file <Dir>/<bond>.mode, and every change is appended to
// <Dir>/<bond>.changes, one line per change, so that a test can count them.
type PlayedBond struct {
	Dir string
}

var _ netconf.Backend = PlayedBond{}

// ModeFile is where the played mode of bond is kept.
func (p PlayedBond) ModeFile(bond string) string { return filepath.Join(p.Dir, bond+".mode") }

// ChangesFile lists the mode changes made to bond.
func (p PlayedBond) ChangesFile(bond string) string { return filepath.Join(p.Dir, bond+".changes") }

// Bond observes the played bond: the mode from its file, the member (the link itself) from
// netlink.
func (p PlayedBond) Bond(_ context.Context, name string) (nwv1.BondObservation, error) {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nwv1.BondObservation{}, fmt.Errorf("%w: no link %s on this node", netconf.ErrNoBond, name)
	}
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	mode, err := os.ReadFile(p.ModeFile(name))
	if errors.Is(err, os.ErrNotExist) {
		return nwv1.BondObservation{}, fmt.Errorf("%w: %s is not a played bond (no %s)", netconf.ErrNoBond, name, p.ModeFile(name))
	}
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	addrs, err := netconf.Addresses(&netlink.Handle{}, link)
	if err != nil {
		return nwv1.BondObservation{}, err
	}
	return nwv1.BondObservation{Interface: name, Mode: nwv1.BondMode(strings.TrimSpace(string(mode))),
		Members: []nwv1.BondMember{{Name: name, Up: netconf.Carrier(link)}}, Addresses: addrs}, nil
}

// SetBondMode takes the link down, writes the mode and brings the link up again.
func (p PlayedBond) SetBondMode(ctx context.Context, name string, mode nwv1.BondMode) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return errors.Join(fmt.Errorf("%w: %s", netconf.ErrNoBond, name), err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return err
	}
	if err := hostos.WriteFileAtomic(p.ModeFile(name), []byte(string(mode)+"\n"), 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(p.ChangesFile(name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), mode)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// The switch sets the port for the new mode before the link comes up, as a real bond's
	// link carries nothing until the switch agrees (LACP), so no packet slips through a port
	// that should not carry it.
	if err := p.tellSwitch(ctx); err != nil {
		return err
	}
	return netlink.LinkSetUp(link)
}

// Restore sets the played bond's mode back to was's, and its link up.
func (p PlayedBond) Restore(ctx context.Context, was nwv1.BondObservation) error {
	obs, err := p.Bond(ctx, was.Interface)
	if err == nil && obs.Mode == was.Mode {
		link, err := netlink.LinkByName(was.Interface)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(link)
	}
	return p.SetBondMode(ctx, was.Interface, was.Mode)
}

// SwitchSocket is where the switch listens for the node's mode changes.
func (p PlayedBond) SwitchSocket() string { return filepath.Join(p.Dir, "switch.sock") }

// tellSwitch has the switch look at the ports now and waits for its answer; without a switch
// (no socket) there is no one to tell.
func (p PlayedBond) tellSwitch(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", p.SwitchSocket())
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("telling the switch: %w", err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("changed\n")); err != nil {
		return fmt.Errorf("telling the switch: %w", err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for the switch: %w", err)
	}
	return nil
}

package netsite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

var networks atomic.Int32

// Bond is the name of every node's played bond.
const Bond = "bond0"

// Network is a played storage network: a switch namespace with a bridge, one namespace per
// node joined to it by a veth pair, and the host joined to it too.
type Network struct {
	id     string
	subnet string // the first three octets
	sw     string // the switch's namespace
	host   string // the host's veth, in the root namespace
	// HostAddress is the host's address on the storage network, where APIServer listens.
	HostAddress string

	mu    sync.Mutex
	nodes map[string]*Node
	order []string
	proxy *proxy
	// drbdSlots number the played DRBD resources (drbdplay.WriteResource), by name, once
	// PlayDRBD wrote the nodes' played DRBD (non-nil).
	drbdSlots map[string]int
}

// Node is one node of the network.
type Node struct {
	Name string
	// Namespace is the node's network namespace (ip netns).
	Namespace string
	// Address is the node's storage address, on its bond.
	Address string
	// Bond is the node's played bond; Dir is the node's own directory.
	Bond PlayedBond
	// Root stands for the node's root file system (persistent network files).
	Root string
	// DRBDDir holds the node's played DRBD once PlayDRBD wrote it (drbdplay.WriteConfig), and
	// the resource files PlaceDRBD writes.
	DRBDDir string

	port   string // the switch's port for the node
	expect []nwv1.BondMode
	never  nwv1.BondMode
	state  string // the port's state as last set: forwarding, or disabled (down)
}

// New builds the network with nodes, each bond in mode, every port expecting it, for a test:
// it skips the test without root unless NODEWRIGHT_REQUIRE_NETNS is set, and removes
// everything it made at the test's end.
func New(t testing.TB, mode nwv1.BondMode, nodes ...string) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
			t.Fatal("the played network needs root: it creates network namespaces")
		}
		t.Skip("the played network needs root: it creates network namespaces")
	}
	n, err := Start(t.TempDir(), mode, nodes...)
	if n != nil {
		t.Cleanup(n.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Start builds the network with nodes, each bond in mode, every port expecting it, keeping
// the nodes' files under dir. It needs root and iproute2 (ip, bridge). Close removes it, also
// after an error.
func Start(dir string, mode nwv1.BondMode, nodes ...string) (*Network, error) {
	for _, tool := range []string{"ip", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the played network needs iproute2's %s: %w", tool, err)
		}
	}
	// Names and the subnet are the process's and the network's own, so that tests in other
	// processes, or networks one after another, never meet.
	pid, seq := os.Getpid(), networks.Add(1)
	n := &Network{
		id:     fmt.Sprintf("nw%d-%d", pid%100000, seq%100),
		subnet: fmt.Sprintf("10.%d.%d", 100+pid%100, (pid/100+int(seq))%250),
		nodes:  map[string]*Node{},
	}
	n.sw = n.id + "-sw"
	n.host = n.id + "h"
	n.HostAddress = n.subnet + ".254"
	steps := [][]string{
		{"ip", "netns", "add", n.sw},
		{"ip", "-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", n.sw, "link", "set", "br0", "up"},
		// The host's port.
		{"ip", "link", "add", n.host, "type", "veth", "peer", "name", "host", "netns", n.sw},
		{"ip", "-n", n.sw, "link", "set", "host", "master", "br0", "up"},
		{"ip", "addr", "add", n.HostAddress + "/24", "dev", n.host},
		{"ip", "link", "set", n.host, "up"},
	}
	if err := run(steps); err != nil {
		return n, err
	}
	for i, name := range nodes {
		node := &Node{
			Name:      name,
			Namespace: fmt.Sprintf("%s-%d", n.id, i+1),
			Address:   fmt.Sprintf("%s.%d", n.subnet, i+1),
			port:      fmt.Sprintf("p%d", i+1),
			expect:    []nwv1.BondMode{mode},
			state:     "forwarding",
		}
		node.Bond, node.Root = PlayedBond{Dir: filepath.Join(dir, name, "bond")}, filepath.Join(dir, name, "root")
		node.DRBDDir = filepath.Join(dir, name, "drbd")
		for _, d := range []string{node.Bond.Dir, node.Root} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return n, err
			}
		}
		if err := os.WriteFile(node.Bond.ModeFile(Bond), []byte(string(mode)+"\n"), 0o644); err != nil {
			return n, err
		}
		n.mu.Lock()
		n.nodes[name] = node
		n.order = append(n.order, name)
		n.mu.Unlock()
		if err := run([][]string{
			{"ip", "netns", "add", node.Namespace},
			{"ip", "-n", n.sw, "link", "add", node.port, "type", "veth", "peer", "name", Bond, "netns", node.Namespace},
			{"ip", "-n", n.sw, "link", "set", node.port, "master", "br0", "up"},
			{"ip", "-n", node.Namespace, "link", "set", "lo", "up"},
			{"ip", "-n", node.Namespace, "addr", "add", node.Address + "/24", "dev", Bond},
			{"ip", "-n", node.Namespace, "link", "set", Bond, "up"},
		}); err != nil {
			return n, err
		}
	}
	return n, nil
}

func run(steps [][]string) error {
	for _, argv := range steps {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return nil
}

// Close removes the namespaces (their veths go with them) and the host's veth.
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proxy != nil {
		n.proxy.close()
	}
	for _, name := range n.order {
		_ = exec.Command("ip", "netns", "del", n.nodes[name].Namespace).Run()
	}
	_ = exec.Command("ip", "link", "del", n.host).Run()
	_ = exec.Command("ip", "netns", "del", n.sw).Run()
}

// Node returns the node called name.
func (n *Network) Node(name string) *Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[name]
}

// Peers are the storage addresses of every node but name.
func (n *Network) Peers(name string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var peers []string
	for _, other := range n.order {
		if other != name {
			peers = append(peers, n.nodes[other].Address)
		}
	}
	return peers
}

// PlayDRBD writes, for every node, the played DRBD of resources replicated on all of them
// (drbdplay.WriteConfig, in the node's DRBDDir), also with no resource: an agent built for the
// local site plays their connections over this network (--site-drbd-dir). Call it once, before
// PlaceDRBD: a second call numbers its resources anew, and may give one the number of a
// resource written before (drbdadm then refuses the node's configuration).
func (n *Network) PlayDRBD(resources ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	nodes := n.drbdNodes(n.order)
	for _, name := range n.order {
		if err := drbdplay.WriteConfig(n.nodes[name].DRBDDir, name, nodes, resources...); err != nil {
			return err
		}
	}
	if n.drbdSlots == nil {
		n.drbdSlots = map[string]int{}
	}
	for i, r := range resources {
		n.drbdSlots[r] = i // WriteConfig's
	}
	return nil
}

// placedSlots is where the slots of the resources PlaceDRBD places first start, above those
// PlayDRBD gives its resources.
const placedSlots = 1000

// PlaceDRBD places resource's replicas on exactly nodes, as LINSTOR's satellites do: each of
// them gets the resource's file (drbdplay.WriteResource) naming them all, every other node
// loses it, and drops it from its play file (so that an agent started again does not play it).
// No nodes removes the resource everywhere. The played kernels of running agents follow
// (drbdplay.Kernel.ConfigDir). A resource keeps its minor and port across calls.
func (n *Network) PlaceDRBD(resource string, nodes ...string) error {
	return n.PlaceDRBDDiskless(resource, nodes, nil)
}

// PlaceDRBDDiskless is PlaceDRBD with some nodes holding the resource without a disk (a
// tiebreaker, a client): diskful hold it with data, diskless without.
func (n *Network) PlaceDRBDDiskless(resource string, diskful, diskless []string) error {
	nodes := append(slices.Clone(diskful), diskless...)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.drbdSlots == nil {
		return fmt.Errorf("placing DRBD resource %s: PlayDRBD has not written the nodes' played DRBD yet", resource)
	}
	for _, name := range nodes {
		if n.nodes[name] == nil {
			return fmt.Errorf("placing DRBD resource %s: %s is not a node of the network", resource, name)
		}
	}
	holders := slices.DeleteFunc(slices.Clone(n.order), func(name string) bool { return !slices.Contains(nodes, name) })
	slot, ok := n.drbdSlots[resource]
	if !ok {
		slot = placedSlots
		for _, s := range n.drbdSlots {
			slot = max(slot, s+1)
		}
		n.drbdSlots[resource] = slot
	}
	var errs []error
	for _, name := range n.order {
		dir := n.nodes[name].DRBDDir
		if slices.Contains(holders, name) {
			held := n.drbdNodes(holders)
			for i := range held {
				held[i].Diskless = slices.Contains(diskless, held[i].Name)
			}
			errs = append(errs, drbdplay.WriteResource(dir, resource, slot, held))
			continue
		}
		errs = append(errs, drbdplay.RemoveResource(dir, resource), unplay(dir, resource))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("placing DRBD resource %s on %v: %w", resource, nodes, err)
	}
	return nil
}

// drbdNodes are the named nodes of the played DRBD; the caller holds n.mu.
func (n *Network) drbdNodes(names []string) []drbdplay.Node {
	var out []drbdplay.Node
	for _, name := range names {
		out = append(out, drbdplay.Node{Name: name, Address: n.nodes[name].Address})
	}
	return out
}

// unplay drops resource from the play file of dir.
func unplay(dir, resource string) error {
	p, err := drbdplay.ReadPlay(dir)
	if err != nil || !slices.Contains(p.Resources, resource) {
		return err
	}
	p.Resources = slices.DeleteFunc(p.Resources, func(r string) bool { return r == resource })
	return drbdplay.WritePlay(dir, p)
}

// Expect sets the modes the switch's port for node carries.
func (n *Network) Expect(node string, modes ...nwv1.BondMode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[node].expect = modes
}

// NeverCarry is the fault hook: the node's port never carries mode, whatever it expects.
func (n *Network) NeverCarry(node string, mode nwv1.BondMode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes[node].never = mode
}

// Command runs argv in node's network namespace.
func (n *Network) Command(node string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Node(node).Namespace}, argv...)...)
}

// Run is the switch: until ctx ends, it keeps each port forwarding exactly when the node's
// played bond runs a mode the port carries. It looks every 20 ms, and at once when a played
// bond tells it of a change (through the socket in the node's bond directory), answering once
// the port is set.
func (n *Network) Run(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	n.mu.Lock()
	for _, name := range n.order {
		node := n.nodes[name]
		_ = os.Remove(node.Bond.SwitchSocket())
		ln, err := net.Listen("unix", node.Bond.SwitchSocket())
		if err != nil {
			continue // the ticker still sees the change
		}
		go func() { <-ctx.Done(); _ = ln.Close() }()
		go n.serve(ln)
	}
	n.mu.Unlock()
	for {
		n.look()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// serve answers the played bonds' notices of a change once the ports are set.
func (n *Network) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			n.look()
			_, _ = c.Write([]byte("set\n"))
		}()
	}
}

// look sets every port as its node's mode asks.
func (n *Network) look() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range n.order {
		node := n.nodes[name]
		raw, _ := os.ReadFile(node.Bond.ModeFile(Bond))
		mode := nwv1.BondMode(strings.TrimSpace(string(raw)))
		want := "disabled"
		if slices.Contains(node.expect, mode) && mode != node.never {
			want = "forwarding"
		}
		if want == node.state {
			continue
		}
		// The port is taken down on the switch's side: the kernel never brings an
		// administratively down link up by itself (a bridge port's forwarding state, it
		// would reset when the node's link flaps).
		updown := map[string]string{"disabled": "down", "forwarding": "up"}[want]
		if err := exec.Command("ip", "-n", n.sw, "link", "set", "dev", node.port, updown).Run(); err == nil {
			node.state = want
		}
	}
}

// Carrying reports whether the switch's port for node forwards.
func (n *Network) Carrying(node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[node].state == "forwarding"
}

// APIServer is ServeAPI for a test: it writes the kubeconfig in the test's directory.
func (n *Network) APIServer(t testing.TB, kubeconfig string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig-nodes")
	if err := n.ServeAPI(kubeconfig, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// ServeAPI starts a forwarder on the host's storage address to the API server of the
// kubeconfig at from, for the nodes' addresses alone, and writes to path a kubeconfig for the nodes that reaches it there
// (verifying the API server's certificate for its own host name).
func (n *Network) ServeAPI(from, path string) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	target := strings.TrimPrefix(cluster.Server, "https://")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostAddress, "0"))
	if err != nil {
		return err
	}
	p := &proxy{ln: ln, target: target, addrs: map[string]string{}, conns: map[string]map[net.Conn]bool{}, cut: map[string]bool{}}
	n.mu.Lock()
	for _, name := range n.order {
		p.addrs[n.nodes[name].Address] = name
	}
	n.proxy = p
	n.mu.Unlock()
	go p.serve()
	cluster.Server = "https://" + ln.Addr().String()
	cluster.TLSServerName = host
	return clientcmd.WriteToFile(*cfg, path)
}

// CutAPIServer cuts node off the API server alone: its connections are closed and new ones
// refused, while its storage network still carries everything else.
func (n *Network) CutAPIServer(node string, cut bool) {
	n.mu.Lock()
	p := n.proxy
	n.mu.Unlock()
	p.setCut(node, cut)
}

// proxy forwards TCP connections from the nodes to the API server.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	addrs  map[string]string // node address -> node
	conns  map[string]map[net.Conn]bool
	cut    map[string]bool
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	p.mu.Lock()
	node, known := p.addrs[host]
	cut := p.cut[node]
	p.mu.Unlock()
	// Only the nodes are served: the host's address on the network is a local address of the
	// machine, which a packet from elsewhere could be routed to.
	if cut || !known {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut[node] { // cut while dialling
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	if p.conns[node] == nil {
		p.conns[node] = map[net.Conn]bool{}
	}
	p.conns[node][c], p.conns[node][up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns[node], c)
	delete(p.conns[node], up)
	p.mu.Unlock()
}

func (p *proxy) setCut(node string, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[node] = cut
	if cut {
		for c := range p.conns[node] {
			_ = c.Close()
		}
		p.conns[node] = nil
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range p.conns {
		for c := range cs {
			_ = c.Close()
		}
	}
}

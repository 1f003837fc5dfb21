package netsite

import (
	"context"
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

	port   string // the switch's port for the node
	expect []nwv1.BondMode
	never  nwv1.BondMode
	cut    bool
	state  string // the port's bridge state as last set
}

// New builds the network with nodes, each bond in mode, every port expecting it. It needs
// root and iproute2 (ip, bridge); it skips the test without root unless
// NODEWRIGHT_REQUIRE_NETNS is set. Everything it made is removed at the test's end.
func New(t testing.TB, mode nwv1.BondMode, nodes ...string) *Network {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
			t.Fatal("the played network needs root: it creates network namespaces")
		}
		t.Skip("the played network needs root: it creates network namespaces")
	}
	for _, tool := range []string{"ip", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the played network needs iproute2's %s: %v", tool, err)
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
	t.Cleanup(n.remove)
	n.must(t, "ip", "netns", "add", n.sw)
	n.must(t, "ip", "-n", n.sw, "link", "add", "br0", "type", "bridge")
	n.must(t, "ip", "-n", n.sw, "link", "set", "br0", "up")
	// The host's port.
	n.must(t, "ip", "link", "add", n.host, "type", "veth", "peer", "name", "host", "netns", n.sw)
	n.must(t, "ip", "-n", n.sw, "link", "set", "host", "master", "br0", "up")
	n.must(t, "ip", "addr", "add", n.HostAddress+"/24", "dev", n.host)
	n.must(t, "ip", "link", "set", n.host, "up")
	for i, name := range nodes {
		node := &Node{
			Name:      name,
			Namespace: fmt.Sprintf("%s-%d", n.id, i+1),
			Address:   fmt.Sprintf("%s.%d", n.subnet, i+1),
			port:      fmt.Sprintf("p%d", i+1),
			expect:    []nwv1.BondMode{mode},
			state:     "forwarding",
		}
		dir := t.TempDir()
		node.Bond, node.Root = PlayedBond{Dir: filepath.Join(dir, "bond")}, filepath.Join(dir, "root")
		for _, d := range []string{node.Bond.Dir, node.Root} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(node.Bond.ModeFile(Bond), []byte(string(mode)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		n.must(t, "ip", "netns", "add", node.Namespace)
		n.must(t, "ip", "-n", n.sw, "link", "add", node.port, "type", "veth", "peer", "name", Bond, "netns", node.Namespace)
		n.must(t, "ip", "-n", n.sw, "link", "set", node.port, "master", "br0", "up")
		n.must(t, "ip", "-n", node.Namespace, "link", "set", "lo", "up")
		n.must(t, "ip", "-n", node.Namespace, "addr", "add", node.Address+"/24", "dev", Bond)
		n.must(t, "ip", "-n", node.Namespace, "link", "set", Bond, "up")
		n.nodes[name] = node
		n.order = append(n.order, name)
	}
	return n
}

func (n *Network) must(t testing.TB, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// remove deletes the namespaces (their veths go with them) and the host's veth.
func (n *Network) remove() {
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
// played bond runs a mode the port carries. It checks every 20 ms.
func (n *Network) Run(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n.mu.Lock()
		for _, name := range n.order {
			node := n.nodes[name]
			raw, _ := os.ReadFile(node.Bond.ModeFile(Bond))
			mode := nwv1.BondMode(strings.TrimSpace(string(raw)))
			want := "disabled"
			if slices.Contains(node.expect, mode) && mode != node.never && !node.cut {
				want = "forwarding"
			}
			if want != node.state {
				state := map[string]string{"disabled": "0", "forwarding": "3"}[want]
				if err := exec.Command("bridge", "-n", n.sw, "link", "set", "dev", node.port, "state", state).Run(); err == nil {
					node.state = want
				}
			}
		}
		n.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Carrying reports whether the switch's port for node forwards.
func (n *Network) Carrying(node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[node].state == "forwarding"
}

// APIServer starts a forwarder on the host's storage address to the API server of the
// kubeconfig at path, and writes a kubeconfig for the nodes that reaches it there (verifying
// the API server's certificate for its own host name). It returns the new kubeconfig's path.
func (n *Network) APIServer(t testing.TB, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	target := strings.TrimPrefix(cluster.Server, "https://")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostAddress, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, addrs: map[string]string{}, conns: map[string][]net.Conn{}, cut: map[string]bool{}}
	n.mu.Lock()
	for _, name := range n.order {
		p.addrs[n.nodes[name].Address] = name
	}
	n.proxy = p
	n.mu.Unlock()
	go p.serve()
	cluster.Server = "https://" + ln.Addr().String()
	cluster.TLSServerName = host
	path := filepath.Join(t.TempDir(), "kubeconfig-nodes")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
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
	conns  map[string][]net.Conn
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
	node := p.addrs[host]
	if p.cut[node] {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns[node] = append(p.conns[node], c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

func (p *proxy) setCut(node string, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[node] = cut
	if cut {
		for _, c := range p.conns[node] {
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
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

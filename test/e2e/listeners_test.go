package e2e

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// listeningComponents are the site's processes that serve something: finding no listening
// socket for one of them means the check went blind, not that the site is safe.
var listeningComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager",
	"kube-scheduler", "kwok-controller", "operator", "site"}

// expectLoopbackOnly fails for every TCP socket a process of the site listens on that is not
// 127.0.0.1 or ::1: anyone on the machine's network could reach it (etcd has no TLS and no
// authentication here).
func (s *site) expectLoopbackOnly(t *testing.T) {
	t.Helper()
	procs := s.processes(t)
	storage, played := s.storageNetwork(t)
	components := listeningComponents
	if played {
		// The storage network (LINSTOR's stand-in, the forwarder to the API server) and the
		// LINSTOR gate serve too.
		components = append(slices.Clone(components), "net", "linstor-gate")
	}
	listening := map[string]bool{}
	pids := make([]int, 0, len(procs))
	for pid := range procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		name := procs[pid]
		addrs, err := listenersOf(pid)
		if err != nil {
			if alive(pid) {
				t.Errorf("the listening sockets of %s (pid %d): %v", name, pid, err)
			}
			continue
		}
		for _, a := range addrs {
			t.Logf("%s (pid %d) listens on %s", name, pid, a)
			listening[name] = true
			switch {
			case loopbackOnly(a.Addr()):
			case played && storage.Contains(a.Addr().Unmap()):
				// The played storage network's addresses: the nodes' own, in their network
				// namespaces, and the host's port on it, whose forwarder serves the nodes'
				// addresses alone (netsite's TestTheAPIServerIsServedToTheNodesAlone).
			default:
				t.Errorf("%s (pid %d) listens on %s; the local site listens on 127.0.0.1 or ::1 only (and on its played storage network %s)", name, pid, a, storage)
			}
		}
	}
	for _, name := range components {
		if !listening[name] {
			t.Errorf("found no listening socket of the site's %s among %v: the check cannot see it", name, procs)
		}
	}
}

// storageNetwork is the subnet of the site's played storage network, when it runs one: that
// of the address its nodes reach the API server at.
func (s *site) storageNetwork(t *testing.T) (netip.Prefix, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dir, "net", "nodes.kubeconfig"))
	if os.IsNotExist(err) {
		return netip.Prefix{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if server, ok := strings.CutPrefix(strings.TrimSpace(line), "server: https://"); ok {
			ap, err := netip.ParseAddrPort(server)
			if err != nil {
				t.Fatalf("the storage network's kubeconfig: server %q: %v", server, err)
			}
			p, err := ap.Addr().Prefix(24)
			if err != nil {
				t.Fatal(err)
			}
			return p, true
		}
	}
	t.Fatalf("the storage network's kubeconfig names no server:\n%s", data)
	return netip.Prefix{}, false
}

func loopbackOnly(a netip.Addr) bool {
	a = a.Unmap()
	return a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || a == netip.IPv6Loopback()
}

// processes names the site's running processes by PID: those whose PIDs kwokctl and
// hack/demo.sh record, and any other whose command line names the site's folder (every
// process the site starts is given a path in it).
func (s *site) processes(t *testing.T) map[int]string {
	t.Helper()
	procs := map[int]string{}
	kwokPIDs, _ := filepath.Glob(filepath.Join(s.dir, "kwok", "clusters", "*", "pids", "*.pid"))
	demoPIDs, _ := filepath.Glob(filepath.Join(s.dir, "*.pid"))
	for _, f := range append(kwokPIDs, demoPIDs...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("pid file: %v", err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("pid file %s: %v", f, err)
		}
		procs[pid] = strings.TrimSuffix(filepath.Base(f), ".pid")
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || procs[pid] != "" {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(data), s.dir+"/") {
			continue
		}
		procs[pid] = filepath.Base(strings.SplitN(string(data), "\x00", 2)[0])
	}
	return procs
}

// listenersOf returns the TCP addresses process pid listens on: the sockets of its network
// namespace (/proc/PID/net/tcp and tcp6) that are in the LISTEN state and open in the
// process (a socket:[inode] link in /proc/PID/fd).
func listenersOf(pid int) ([]netip.AddrPort, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	var addrs []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if os.IsNotExist(err) && table == "tcp6" {
			continue // a kernel without IPv6
		}
		if err != nil {
			return nil, err
		}
		byInode, err := parseListening(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/net/%s: %w", pid, table, err)
		}
		for inode, addr := range byInode {
			if inodes[inode] {
				addrs = append(addrs, addr)
			}
		}
	}
	return addrs, nil
}

// socketInodes are the inodes of the sockets process pid has open.
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue // closed since the directory was read
		}
		if rest, ok := strings.CutPrefix(target, "socket:["); ok {
			if inode, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
				inodes[inode] = true
			}
		}
	}
	return inodes, nil
}

// tcpListen is the LISTEN state in /proc/net/tcp (include/net/tcp_states.h).
const tcpListen = "0A"

// parseListening reads a /proc/net/tcp or tcp6 table and returns the local address of each
// socket in the LISTEN state, by inode.
func parseListening(r io.Reader) (map[uint64]netip.AddrPort, error) {
	byInode := map[uint64]netip.AddrPort{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if n == 1 {
			continue // the header
		}
		if len(fields) < 10 {
			return nil, fmt.Errorf("line %d: %d fields, want at least 10", n, len(fields))
		}
		if fields[3] != tcpListen {
			continue
		}
		addr, err := parseProcAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: local address %q: %w", n, fields[1], err)
		}
		inode, err := strconv.ParseUint(fields[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: inode %q: %w", n, fields[9], err)
		}
		byInode[inode] = addr
	}
	return byInode, sc.Err()
}

// parseProcAddr parses ADDR:PORT as /proc/net/tcp prints it: the address as 32-bit words in
// hexadecimal, each in the machine's byte order, and the port in hexadecimal.
func parseProcAddr(s string) (netip.AddrPort, error) {
	host, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no ':' before the port")
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port: %w", err)
	}
	if len(host) != 8 && len(host) != 32 {
		return netip.AddrPort{}, fmt.Errorf("address of %d hexadecimal digits, want 8 or 32", len(host))
	}
	raw, err := hex.DecodeString(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address: %w", err)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

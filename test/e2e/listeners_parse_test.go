package e2e

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

const tcpHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// TestParseListening reads tables as a little-endian Linux prints them: the words of each
// address are in the machine's byte order.
func TestParseListening(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the tables below are a little-endian machine's")
	}
	tests := []struct {
		name, table string
		want        map[uint64]string
		err         string
	}{{
		name: "IPv4: listeners only, by inode",
		table: tcpHeader +
			"   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n" +
			"   1: 00000000:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000000000000000 100 0 0 10 0\n" +
			"   2: 020200C0:DC80 507100CB:01BB 01 00000000:00000000 03:00000252 00000000     0        0 4244 3 0000000000000000\n",
		want: map[uint64]string{4242: "127.0.0.1:3306", 4243: "0.0.0.0:2379"},
	}, {
		name: "IPv6: loopback, every address, mapped IPv4",
		table: tcpHeader +
			"   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51 1 0000000000000000 100 0 0 10 0\n" +
			"   1: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 52 1 0000000000000000 100 0 0 10 0\n" +
			"   2: 0000000000000000FFFF00000100007F:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 53 1 0000000000000000 100 0 0 10 0\n" +
			"   3: 0000000000000000FFFF00000100007F:1F92 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 54 1 0000000000000000 100 0 0 10 0\n",
		want: map[uint64]string{51: "[::1]:8080", 52: "[::]:8081", 53: "[::ffff:127.0.0.1]:8082"},
	}, {
		name:  "header only",
		table: tcpHeader,
		want:  map[uint64]string{},
	}, {
		name:  "a short line",
		table: tcpHeader + "   0: 0100007F:0CEA 00000000:0000 0A\n",
		err:   "line 2: 4 fields, want at least 10",
	}, {
		name:  "an address that is not hexadecimal",
		table: tcpHeader + "   0: 0100007G:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1\n",
		err:   `line 2: local address "0100007G:0CEA": address: encoding/hex: invalid byte`,
	}, {
		name:  "an address of the wrong length",
		table: tcpHeader + "   0: 0100007F00:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1\n",
		err:   "address of 10 hexadecimal digits, want 8 or 32",
	}, {
		name:  "a port out of range",
		table: tcpHeader + "   0: 0100007F:10000 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1\n",
		err:   `line 2: local address "0100007F:10000": port: strconv.ParseUint: parsing "10000": value out of range`,
	}, {
		name:  "no port",
		table: tcpHeader + "   0: 0100007F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1\n",
		err:   `no ':' before the port`,
	}, {
		name:  "an inode that is not a number",
		table: tcpHeader + "   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 x1 1\n",
		err:   `line 2: inode "x1"`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseListening(strings.NewReader(tc.table))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotText := map[uint64]string{}
			for inode, addr := range got {
				gotText[inode] = addr.String()
			}
			if len(gotText) != len(tc.want) {
				t.Fatalf("got %v, want %v", gotText, tc.want)
			}
			for inode, want := range tc.want {
				if gotText[inode] != want {
					t.Errorf("inode %d: got %q, want %q", inode, gotText[inode], want)
				}
			}
		})
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1":        true,
		"::1":              true,
		"::ffff:127.0.0.1": true,
		"127.0.0.2":        false, // loopback, but nothing of the site is meant to be there
		"0.0.0.0":          false,
		"::":               false,
		"192.0.2.2":        false,
		"fd00::2":          false,
	} {
		if got := loopbackOnly(netip.MustParseAddr(addr)); got != want {
			t.Errorf("loopbackOnly(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestListenersOfThisProcess checks the whole path on the kernel's own tables: the test's
// listeners are found with their addresses, its connected sockets are not.
func TestListenersOfThisProcess(t *testing.T) {
	want := []string{"127.0.0.1:0", "0.0.0.0:0"}
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		_ = l.Close()
		want = append(want, "[::1]:0", "[::]:0")
	}
	var listening []netip.AddrPort
	for _, addr := range want {
		network := "tcp4"
		if strings.HasPrefix(addr, "[") {
			network = "tcp6"
		}
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		listening = append(listening, l.Addr().(*net.TCPAddr).AddrPort())
	}
	client, err := net.Dial("tcp", listening[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()

	got, err := listenersOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listening {
		if !slices.ContainsFunc(got, func(a netip.AddrPort) bool { return a.Addr().Unmap() == l.Addr().Unmap() && a.Port() == l.Port() }) {
			t.Errorf("listener %s not found; got %v", l, got)
		}
	}
	clientPort := client.LocalAddr().(*net.TCPAddr).AddrPort().Port()
	for _, a := range got {
		if a.Port() == clientPort {
			t.Errorf("the connected socket %s is reported as a listener", a)
		}
	}
}

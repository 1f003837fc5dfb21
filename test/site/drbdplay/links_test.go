package drbdplay

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

// okRunner accepts every drbdadm command, as drbd-utils' dry run does a valid one.
type okRunner struct{}

func (okRunner) Run(context.Context, []string) (drbd.Result, error) { return drbd.Result{}, nil }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// played is one node's kernel and links.
type played struct {
	kernel *Kernel
	cancel context.CancelFunc
}

func start(t *testing.T, self, addr, peer, peerAddr string) *played {
	t.Helper()
	k := &Kernel{Real: okRunner{}, Self: self, SyncTime: 300 * time.Millisecond}
	k.Links = &Links{Self: self, Listen: addr, Peers: map[string]string{peer: peerAddr}, Paused: k.PausedTowards}
	k.AddResource("r0", peer)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = k.Links.Run(ctx) }()
	t.Cleanup(cancel)
	return &played{kernel: k, cancel: cancel}
}

// state is "<connection> <replication> <peer disk> <own disk>" of r0.
func state(t *testing.T, k *Kernel) string {
	t.Helper()
	res, err := k.Run(context.Background(), []string{"drbdsetup", "status", "r0", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	var out []drbd.Resource
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		t.Fatal(err)
	}
	c := out[0].Connections[0]
	return fmt.Sprintf("%s %s %s %s", c.ConnectionState, c.PeerDevices[0].ReplicationState, c.PeerDevices[0].PeerDiskState, out[0].Devices[0].DiskState)
}

func until(t *testing.T, k *Kernel, want string) {
	t.Helper()
	got := ""
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got = state(t, k); got == want {
			return
		}
	}
	t.Fatalf("%s: %s; want %s", k.Self, got, want)
}

// TestLinksPlayAConnectionLostAndFound: two nodes connect over TCP; one stops answering and
// both see Connecting; it answers again and the resync runs, the greater name the target,
// held while the source has paused it, then both are in sync.
func TestLinksPlayAConnectionLostAndFound(t *testing.T) {
	aAddr, bAddr := freeAddr(t), freeAddr(t)
	a := start(t, "node-a", aAddr, "node-b", bAddr)
	b := start(t, "node-b", bAddr, "node-a", aAddr)
	until(t, a.kernel, "Connected Established UpToDate UpToDate")
	until(t, b.kernel, "Connected Established UpToDate UpToDate")

	b.cancel()
	until(t, a.kernel, "Connecting Off DUnknown UpToDate")
	if _, err := a.kernel.Run(context.Background(), []string{"drbdadm", "pause-sync", "r0:node-b"}); err != nil {
		t.Fatal(err)
	}
	b = start(t, "node-b", bAddr, "node-a", aAddr)
	state(t, b.kernel) // b reads while a is still out of its reach
	until(t, a.kernel, "Connected PausedSyncS Inconsistent UpToDate")
	until(t, b.kernel, "Connected PausedSyncT UpToDate Inconsistent")
	if _, err := a.kernel.Run(context.Background(), []string{"drbdadm", "resume-sync", "r0:node-b"}); err != nil {
		t.Fatal(err)
	}
	until(t, a.kernel, "Connected Established UpToDate UpToDate")
	until(t, b.kernel, "Connected Established UpToDate UpToDate")
}

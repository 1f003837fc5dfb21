package drbdplay

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// TestTheConfigurationIsOneDrbdadmReads: drbd-utils' own drbdadm, in its dry-run mode as the
// node, accepts a pause of each resource towards each peer of the written configuration, and
// refuses a peer that is not one.
func TestTheConfigurationIsOneDrbdadmReads(t *testing.T) {
	path := drbdadmPath(t)
	dir := t.TempDir()
	nodes := edges
	if err := WriteConfig(dir, "edge-2", nodes, "pvc-one", "pvc-two"); err != nil {
		t.Fatal(err)
	}
	run := func(arg string) error {
		cmd := exec.Command(path, "-d", "-c", filepath.Join(dir, ConfigFile), "pause-sync", arg)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DRBD_DRIVER_VERSION_OVERRIDE=9.2.12",
			"__DRBD_NODE__=edge-2", "FAKE_DRBDSETUP_SHOW=" + os.DevNull}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	for _, r := range []string{"pvc-one", "pvc-two"} {
		for _, peer := range []string{"edge-1", "edge-3"} {
			if err := run(r + ":" + peer); err != nil {
				t.Errorf("pause-sync %s:%s: %v", r, peer, err)
			}
		}
	}
	if err := run("pvc-one:edge-9"); err == nil {
		t.Error("drbdadm accepted a peer that is not one")
	}
	p, err := ReadPlay(dir)
	if err != nil || p.Listen != "10.0.0.2:7789" || len(p.Peers) != 2 || p.Peers["edge-3"] != "10.0.0.3:7789" {
		t.Errorf("play %+v (%v)", p, err)
	}
}

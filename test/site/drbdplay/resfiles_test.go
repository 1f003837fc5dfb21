package drbdplay

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/drbd"
)

var edges = []Node{{Name: "edge-1", Address: "10.0.0.1"}, {Name: "edge-2", Address: "10.0.0.2"}, {Name: "edge-3", Address: "10.0.0.3"}}

// drbdadmPath is drbd-utils' own drbdadm; the test skips without it unless
// NODEWRIGHT_REQUIRE_DRBD_UTILS is set.
func drbdadmPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("drbdadm")
	if err != nil {
		path = "/usr/sbin/drbdadm"
		if _, err := os.Stat(path); err != nil {
			if os.Getenv("NODEWRIGHT_REQUIRE_DRBD_UTILS") != "" {
				t.Fatal("drbdadm is not installed and NODEWRIGHT_REQUIRE_DRBD_UTILS is set")
			}
			t.Skip("drbdadm is not installed (Debian's drbd-utils; make drbd-utils installs it)")
		}
	}
	return path
}

// siteNode is one node's played kernel on dir, as the agent built for the site runs it: its
// drbdadm is real, in its dry-run mode as the node.
type siteNode struct {
	t       *testing.T
	kernel  *Kernel
	drbdadm []string
}

func newSiteNode(t *testing.T, self, dir string) *siteNode {
	real := drbd.ExecRunner{Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C",
		"DRBD_DRIVER_VERSION_OVERRIDE=9.2.12", "__DRBD_NODE__=" + self, "FAKE_DRBDSETUP_SHOW=" + os.DevNull}}
	return &siteNode{t: t, kernel: &Kernel{Real: real, Self: self, ConfigDir: dir},
		drbdadm: []string{drbdadmPath(t), "-d", "-c", filepath.Join(dir, ConfigFile)}}
}

// run runs drbdadm with args through the kernel.
func (n *siteNode) run(args ...string) error {
	res, err := n.kernel.Run(context.Background(), append(slices.Clone(n.drbdadm), args...))
	if err != nil {
		return fmt.Errorf("%w: %s", err, res.Stderr)
	}
	return nil
}

// resources are the played resources, by name, each its connections as
// "<peer> <connection> <replication>", read as the agent does (drbdsetup status --json).
func (n *siteNode) resources() map[string][]string {
	n.t.Helper()
	res, err := n.kernel.Run(context.Background(), []string{"drbdsetup", "status", "--json"})
	if err != nil {
		n.t.Fatal(err)
	}
	var status []drbd.Resource
	if err := json.Unmarshal(res.Stdout, &status); err != nil {
		n.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, r := range status {
		out[r.Name] = []string{}
		for _, c := range r.Connections {
			out[r.Name] = append(out[r.Name], c.Name+" "+c.ConnectionState+" "+c.PeerDevices[0].ReplicationState)
		}
	}
	return out
}

func (n *siteNode) want(step string, want map[string][]string) {
	n.t.Helper()
	if got := n.resources(); fmt.Sprint(got) != fmt.Sprint(want) {
		n.t.Fatalf("%s: resources %v; want %v", step, got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestTheKernelFollowsTheResourceFiles: a replica placed on the node while it runs (its
// resource file written) is played towards the other hosts of the file; hosts added and
// removed change its peers, the links to peers that stay keeping their state; a file of
// another node's is not played; the file removed drops the resource. A resource the play
// file listed stays until a file takes it over.
func TestTheKernelFollowsTheResourceFiles(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteConfig(dir, "edge-2", edges))
	n := newSiteNode(t, "edge-2", dir)
	n.kernel.AddResource("pvc-played", "edge-1")
	up := func(peer string) string { return peer + " Connected Established" }
	n.want("without resource files", map[string][]string{"pvc-played": {up("edge-1")}})

	must(t, WriteResource(dir, "pvc-a", 1, edges[:2]))
	n.want("placed on edge-1 and edge-2", map[string][]string{"pvc-a": {up("edge-1")}, "pvc-played": {up("edge-1")}})
	must(t, n.run("pause-sync", "pvc-a:edge-1"))
	if err := n.run("pause-sync", "pvc-a:edge-3"); err == nil {
		t.Fatal("drbdadm paused pvc-a towards edge-3, which does not hold it")
	}

	// Rewritten at once: the kernel must not trust the modification time it read last.
	must(t, WriteResource(dir, "pvc-a", 1, edges))
	n.want("edge-3 added", map[string][]string{"pvc-a": {up("edge-1"), up("edge-3")}, "pvc-played": {up("edge-1")}})
	if got := n.kernel.PausedTowards("edge-1"); !slices.Equal(got, []string{"pvc-a"}) {
		t.Errorf("paused towards edge-1 after edge-3 joined: %v; want the pause of pvc-a kept", got)
	}
	must(t, n.run("pause-sync", "pvc-a:edge-3"))

	// The same size and modification time as before (as on a file system whose timestamps
	// are coarse): only the contents say that the replica on edge-1 moved to edge-4.
	before, err := os.Stat(filepath.Join(dir, "pvc-a.res"))
	must(t, err)
	must(t, WriteResource(dir, "pvc-a", 1, []Node{{Name: "edge-4", Address: "10.0.0.4"}, edges[1], edges[2]}))
	must(t, os.Chtimes(filepath.Join(dir, "pvc-a.res"), before.ModTime(), before.ModTime()))
	n.want("edge-1 moved to edge-4", map[string][]string{"pvc-a": {up("edge-3"), up("edge-4")}, "pvc-played": {up("edge-1")}})
	if got := n.kernel.PausedTowards("edge-1"); len(got) != 0 {
		t.Errorf("paused towards edge-1 after it left pvc-a: %v", got)
	}
	if got := n.kernel.PausedTowards("edge-4"); len(got) != 0 {
		t.Errorf("paused towards edge-4, a new peer: %v", got)
	}
	if got := n.kernel.PausedTowards("edge-3"); !slices.Equal(got, []string{"pvc-a"}) {
		t.Errorf("paused towards edge-3: %v; want pvc-a", got)
	}

	must(t, WriteResource(dir, "pvc-other", 2, []Node{edges[0], edges[2]}))
	n.want("another node's resource", map[string][]string{"pvc-a": {up("edge-3"), up("edge-4")}, "pvc-played": {up("edge-1")}})

	must(t, WriteResource(dir, "pvc-played", 3, edges))
	n.want("the played resource's file", map[string][]string{"pvc-a": {up("edge-3"), up("edge-4")}, "pvc-played": {up("edge-1"), up("edge-3")}})

	must(t, RemoveResource(dir, "pvc-a"))
	must(t, RemoveResource(dir, "pvc-played"))
	n.want("files removed", map[string][]string{})
	if err := n.run("verify", "pvc-a"); err == nil {
		t.Error("drbdadm verified pvc-a after its file was removed")
	}
	must(t, RemoveResource(dir, "pvc-a")) // removed twice: no error
}

// TestTheKernelSkipsAResourceFileItCannotParse: a file that is not a resource file, or is cut
// short, neither adds a resource nor changes or drops the one it stood for, and the kernel
// still answers (drbdadm itself refuses the configuration).
func TestTheKernelSkipsAResourceFileItCannotParse(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteConfig(dir, "edge-2", edges, "pvc-a"))
	n := newSiteNode(t, "edge-2", dir)
	both := map[string][]string{"pvc-a": {"edge-1 Connected Established", "edge-3 Connected Established"}}
	n.want("from WriteConfig", both)

	must(t, os.WriteFile(filepath.Join(dir, "pvc-bad.res"), []byte("garbage\n"), 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "pvc-dir.res"), 0o755))
	raw, err := os.ReadFile(filepath.Join(dir, "pvc-a.res"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "pvc-a.res"), raw[:len(raw)/2], 0o644))
	n.want("a garbage file, a directory, and pvc-a cut short", both)
	if err := n.run("verify", "pvc-a"); err == nil {
		t.Error("drbdadm accepted a configuration with a garbage file")
	}

	must(t, os.WriteFile(filepath.Join(dir, "pvc-a.res"), []byte(strings.ReplaceAll(string(raw), "edge-1", "edge-9")), 0o644))
	n.want("pvc-a whole again, edge-9 for edge-1", map[string][]string{"pvc-a": {"edge-3 Connected Established", "edge-9 Connected Established"}})
}

// TestAResourceFileIsOneDrbdadmReads: drbd-utils' own drbdadm, in its dry-run mode, verifies a
// resource written by WriteResource on a node that holds it, next to another in its own slot,
// and refuses it on a node that does not.
func TestAResourceFileIsOneDrbdadmReads(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteConfig(dir, "edge-1", edges))
	must(t, WriteResource(dir, "pvc-two", 5, edges[:2]))
	must(t, WriteResource(dir, "pvc-all", 6, edges))
	for _, self := range []string{"edge-1", "edge-2"} {
		if err := newSiteNode(t, self, dir).run("verify", "pvc-two"); err != nil {
			t.Errorf("verify pvc-two as %s: %v", self, err)
		}
	}
	if err := newSiteNode(t, "edge-3", dir).run("verify", "pvc-two"); err == nil {
		t.Error("drbdadm verified pvc-two on edge-3, which does not hold it")
	}
	if err := newSiteNode(t, "edge-3", dir).run("verify", "pvc-all"); err != nil {
		t.Errorf("verify pvc-all as edge-3: %v", err)
	}
	for _, bad := range []string{"", ".hidden", "../escape", `a\b`} {
		if err := WriteResource(dir, bad, 7, edges); err == nil {
			t.Errorf("WriteResource wrote a resource named %q", bad)
		}
	}
	if err := WriteResource(dir, "pvc-far", MaxSlot+1, edges); err == nil {
		t.Error("WriteResource took a slot whose port is not one")
	}
}

func TestOnHostsReadsWhatWriteResourceWrites(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteResource(dir, "pvc-a", 0, edges))
	raw, err := os.ReadFile(filepath.Join(dir, "pvc-a.res"))
	must(t, err)
	for _, tc := range []struct {
		conf string
		want []string
	}{
		{string(raw), []string{"edge-1", "edge-2", "edge-3"}},
		{"resource r { on a { } on \"b\" { device minor 1; } # on c {\n}", []string{"a", "b"}},
		{"resource r { on a b { } connection { host a; host b; } }", []string{"a", "b"}},
		{"resource r { disk on; on a { } }", []string{"a"}},
		{"", nil},
		{"garbage", nil},
		{"resource r { on a { }", nil},
		{"resource r { on \"a { } }", nil},
		{"resource r { on { } }", nil},
		{"resource r { on \"\" { } }", nil},
		{"resource r { on a; }", nil},
		{"resource r { } }", nil},
		{string(raw[:len(raw)-3]), nil},
	} {
		got, _, err := onSections([]byte(tc.conf))
		if !slices.Equal(got, tc.want) || (err == nil) != (tc.want != nil) {
			t.Errorf("onSections(%q) = %q, %v; want %q", tc.conf, got, err, tc.want)
		}
	}
}

func FuzzOnHosts(f *testing.F) {
	for _, seed := range []string{"resource r { on \"a\" { } }", "resource r { on a b { } }", "garbage", "\"", "on"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		hosts, _, err := onSections(raw)
		if err == nil && (len(hosts) == 0 || slices.Contains(hosts, "")) {
			t.Errorf("onSections(%q) = %q without error", raw, hosts)
		}
	})
}

// TestADisklessHostHasNoDisk: a resource file that gives a host no disk (disk none, as LINSTOR
// writes a tiebreaker's or a client's) plays that host diskless: its own volume Diskless and a
// client, and its peers see it so; drbdadm takes the file.
func TestADisklessHostHasNoDisk(t *testing.T) {
	dir := t.TempDir()
	must(t, WriteConfig(dir, "edge-3", edges))
	nodes := []Node{edges[0], {Name: "edge-3", Address: "10.0.0.3", Diskless: true}}
	must(t, WriteResource(dir, "pvc-tie", 7, nodes))
	n := newSiteNode(t, "edge-3", dir)
	must(t, n.run("adjust", "pvc-tie"))
	status := func(k *Kernel) drbd.Resource {
		t.Helper()
		res, err := k.Run(context.Background(), []string{"drbdsetup", "status", "pvc-tie", "--json"})
		must(t, err)
		var out []drbd.Resource
		must(t, json.Unmarshal(res.Stdout, &out))
		if len(out) != 1 {
			t.Fatalf("status of pvc-tie: %s", res.Stdout)
		}
		return out[0]
	}
	if r := status(n.kernel); r.Devices[0].DiskState != "Diskless" || !r.Devices[0].Client {
		t.Errorf("edge-3's own volume %+v; want Diskless, a client", r.Devices[0])
	}
	peer := &Kernel{Real: n.kernel.Real, Self: "edge-1", ConfigDir: dir}
	r := status(peer)
	if pd := r.Connections[0].PeerDevices[0]; r.Devices[0].DiskState != "UpToDate" || pd.PeerDiskState != "Diskless" || !pd.PeerClient {
		t.Errorf("edge-1 sees its own disk %s and edge-3's %+v; want UpToDate, and Diskless, a client", r.Devices[0].DiskState, pd)
	}
	hosts, diskless, err := onSections(mustRead(t, filepath.Join(dir, "pvc-tie"+ResourceSuffix)))
	if err != nil || !slices.Equal(hosts, []string{"edge-1", "edge-3"}) || !slices.Equal(diskless, []string{"edge-3"}) {
		t.Errorf("onSections = %v, %v, %v; want edge-1 and edge-3, edge-3 diskless", hosts, diskless, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	return raw
}

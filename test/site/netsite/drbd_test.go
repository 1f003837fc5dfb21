package netsite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
)

// filesOnly is a network of nodes a, b and c with their files under a test's directory and no
// namespaces: PlayDRBD and PlaceDRBD touch only the files.
func filesOnly(t *testing.T) *Network {
	dir := t.TempDir()
	n := &Network{nodes: map[string]*Node{}}
	for i, name := range []string{"a", "b", "c"} {
		n.nodes[name] = &Node{Name: name, Address: fmt.Sprintf("10.9.9.%d", i+1), DRBDDir: filepath.Join(dir, name, "drbd")}
		n.order = append(n.order, name)
	}
	return n
}

// drbdadm runs drbd-utils' own drbdadm, in its dry-run mode as node, on its played DRBD.
func drbdadm(t *testing.T, node *Node, args ...string) error {
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
	cmd := exec.Command(path, append([]string{"-d", "-c", filepath.Join(node.DRBDDir, drbdplay.ConfigFile)}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DRBD_DRIVER_VERSION_OVERRIDE=9.2.12",
		"__DRBD_NODE__=" + node.Name, "FAKE_DRBDSETUP_SHOW=" + os.DevNull}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("drbdadm %v as %s: %w: %s", args, node.Name, err, out)
	}
	return nil
}

// placed lists the nodes holding resource's file, and the minor the files give it.
func placed(t *testing.T, n *Network, resource string) ([]string, string) {
	t.Helper()
	var holders, minors []string
	for _, name := range n.order {
		raw, err := os.ReadFile(filepath.Join(n.nodes[name].DRBDDir, resource+drbdplay.ResourceSuffix))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, name)
		minors = append(minors, regexp.MustCompile(`minor \d+`).FindAllString(string(raw), -1)...)
	}
	slices.Sort(minors)
	if minors = slices.Compact(minors); len(minors) > 1 {
		t.Fatalf("%s's files give it minors %v", resource, minors)
	}
	return holders, fmt.Sprint(minors)
}

// peersOf are the peers of resource in the played kernel.
func peersOf(t *testing.T, k *drbdplay.Kernel, resource string) []string {
	t.Helper()
	res, err := k.Run(context.Background(), []string{"drbdsetup", "status", resource, "--json"})
	if err != nil {
		t.Fatal(err)
	}
	var status []drbd.Resource
	if err := json.Unmarshal(res.Stdout, &status); err != nil {
		t.Fatal(err)
	}
	peers := []string{}
	for _, r := range status {
		for _, c := range r.Connections {
			peers = append(peers, c.Name)
		}
	}
	return peers
}

// TestPlaceDRBDPlacesTheReplicas: after PlayDRBD of no resource, PlaceDRBD writes a resource's
// file on exactly the nodes that hold it, which drbdadm accepts there, and a running node's
// played kernel follows; placed again elsewhere, the resource leaves the other nodes and keeps
// its minor, and a second resource gets another.
func TestPlaceDRBDPlacesTheReplicas(t *testing.T) {
	n := filesOnly(t)
	if err := n.PlaceDRBD("pvc-x", "a", "b"); err == nil {
		t.Fatal("PlaceDRBD placed a resource before PlayDRBD")
	}
	if err := n.PlayDRBD(); err != nil {
		t.Fatal(err)
	}
	for _, name := range n.order {
		if p, err := drbdplay.ReadPlay(n.nodes[name].DRBDDir); err != nil || p.Self != name || len(p.Peers) != 2 {
			t.Fatalf("%s's play file after PlayDRBD(): %+v (%v)", name, p, err)
		}
	}
	b := &drbdplay.Kernel{Real: drbd.ExecRunner{}, Self: "b", ConfigDir: n.nodes["b"].DRBDDir}

	if err := n.PlaceDRBD("pvc-x", "a", "b"); err != nil {
		t.Fatal(err)
	}
	holders, minor := placed(t, n, "pvc-x")
	if !slices.Equal(holders, []string{"a", "b"}) {
		t.Fatalf("pvc-x placed on a and b is on %v", holders)
	}
	for _, name := range holders {
		if err := drbdadm(t, n.nodes[name], "verify", "pvc-x"); err != nil {
			t.Error(err)
		}
	}
	if got := peersOf(t, b, "pvc-x"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("b's peers of pvc-x: %v; want a", got)
	}

	if err := n.PlaceDRBD("pvc-x", "c", "b"); err != nil {
		t.Fatal(err)
	}
	if holders, again := placed(t, n, "pvc-x"); !slices.Equal(holders, []string{"b", "c"}) || again != minor {
		t.Fatalf("pvc-x placed on b and c: on %v with %s; want b and c with %s", holders, again, minor)
	}
	if got := peersOf(t, b, "pvc-x"); !slices.Equal(got, []string{"c"}) {
		t.Errorf("b's peers of pvc-x: %v; want c", got)
	}
	if err := n.PlaceDRBD("pvc-y", "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	if _, other := placed(t, n, "pvc-y"); other == minor {
		t.Errorf("pvc-y has pvc-x's %s", minor)
	}
	for _, r := range []string{"pvc-x", "pvc-y"} {
		if err := drbdadm(t, n.nodes["b"], "verify", r); err != nil {
			t.Error(err)
		}
	}

	if err := n.PlaceDRBD("pvc-x", "b", "z"); err == nil {
		t.Error("PlaceDRBD placed a replica on a node that is not one")
	}
	if holders, _ := placed(t, n, "pvc-x"); !slices.Equal(holders, []string{"b", "c"}) {
		t.Errorf("a failed PlaceDRBD moved pvc-x to %v", holders)
	}
	if err := n.PlaceDRBD("pvc-x"); err != nil {
		t.Fatal(err)
	}
	if holders, _ := placed(t, n, "pvc-x"); len(holders) != 0 {
		t.Errorf("pvc-x removed is still on %v", holders)
	}
	if got := peersOf(t, b, "pvc-x"); len(got) != 0 {
		t.Errorf("b still plays pvc-x, towards %v", got)
	}
}

// TestPlaceDRBDUnplaysAPlayedResource: a resource PlayDRBD replicated everywhere, placed on
// fewer nodes, leaves the play files of the others (an agent started again would play it)
// and keeps its minor.
func TestPlaceDRBDUnplaysAPlayedResource(t *testing.T) {
	n := filesOnly(t)
	if err := n.PlayDRBD("pvc-one", "pvc-two"); err != nil {
		t.Fatal(err)
	}
	_, minor := placed(t, n, "pvc-two")
	if err := n.PlaceDRBD("pvc-two", "a", "b"); err != nil {
		t.Fatal(err)
	}
	if holders, again := placed(t, n, "pvc-two"); !slices.Equal(holders, []string{"a", "b"}) || again != minor {
		t.Errorf("pvc-two placed on a and b: on %v with %s; want %s", holders, again, minor)
	}
	for name, want := range map[string][]string{"a": {"pvc-one", "pvc-two"}, "c": {"pvc-one"}} {
		if p, err := drbdplay.ReadPlay(n.nodes[name].DRBDDir); err != nil || !slices.Equal(p.Resources, want) {
			t.Errorf("%s plays %v (%v); want %v", name, p.Resources, err, want)
		}
	}
	if err := drbdadm(t, n.nodes["c"], "verify", "pvc-one"); err != nil {
		t.Error(err)
	}
}

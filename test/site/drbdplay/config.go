package drbdplay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The played DRBD of one node, as the agent built for the local site reads it
// (--site-drbd-dir): the drbd-utils configuration its real drbdadm reads in dry-run mode, and
// what the played kernel needs.
const (
	// ConfigFile is the drbd-utils configuration in the directory.
	ConfigFile = "drbd.conf"
	// PlayFile says who the node is, where it listens and its peers (Play, in JSON).
	PlayFile = "play.json"
	// Port is where each node's played DRBD listens on the storage network.
	Port = 7789
)

// Play is one node's played DRBD.
type Play struct {
	Self      string            `json:"self"`
	Listen    string            `json:"listen"`
	Peers     map[string]string `json:"peers"`
	Resources []string          `json:"resources"`
}

// Node is a node of the played resources: its name and storage address, and whether it holds
// the resource diskless (no data: a DRBD client or a tiebreaker).
type Node struct {
	Name, Address string
	Diskless      bool
}

// WriteConfig writes, in dir, self's played DRBD: resources replicated on every node of nodes,
// in the shape of LINSTOR's resource files (WriteResource, the i-th resource in slot i), for
// drbdadm to read, and the play file.
func WriteConfig(dir, self string, nodes []Node, resources ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := "global { usage-count no; }\ninclude \"*.res\";\n"
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(conf), 0o644); err != nil {
		return err
	}
	play := Play{Self: self, Peers: map[string]string{}, Resources: resources}
	for _, n := range nodes {
		addr := fmt.Sprintf("%s:%d", n.Address, Port)
		if n.Name == self {
			play.Listen = addr
		} else {
			play.Peers[n.Name] = addr
		}
	}
	if play.Listen == "" {
		return fmt.Errorf("%s is not one of the nodes", self)
	}
	for i, r := range resources {
		if err := WriteResource(dir, r, i, nodes); err != nil {
			return err
		}
	}
	return WritePlay(dir, play)
}

// The resource files' numbers: a resource in slot s has the device minor minorBase+s and
// listens on port portBase+s. drbdadm refuses a configuration in which two resources share
// either, so the slots of a node's resources must differ.
const (
	minorBase = 1000
	portBase  = 7000
	// MaxSlot keeps the port a port.
	MaxSlot = 65535 - portBase
)

// WriteResource writes, in dir, the resource file of name held by nodes, in the shape of
// LINSTOR's (a volume on each node, a connection between each pair), as a satellite writes it
// when a replica of the resource is placed, moved or removed: the node-ids follow the order of
// nodes; slot numbers the resource's minor and port. The file is written aside and renamed into
// place, so that a reader (drbdadm, Kernel) never sees half of it. The play file is left as
// it is.
func WriteResource(dir, name string, slot int, nodes []Node) error {
	if err := checkName(name); err != nil {
		return err
	}
	if slot < 0 || slot > MaxSlot {
		return fmt.Errorf("resource %s: slot %d is outside 0..%d (its port would not be one)", name, slot, MaxSlot)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("resource %s: no node holds it (RemoveResource removes a resource)", name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Played for the local site in the shape of LINSTOR's resource files.\nresource %q\n{\n", name)
	for id, n := range nodes {
		disk := "disk        /dev/null;\n            meta-disk   internal;"
		if n.Diskless {
			// LINSTOR's file of a diskless resource (a client, a tiebreaker).
			disk = "disk        none;"
		}
		fmt.Fprintf(&b, "    on %q\n    {\n        volume 0\n        {\n            %s\n            device      minor %d;\n        }\n        node-id    %d;\n    }\n", n.Name, disk, minorBase+slot, id)
	}
	for a := range nodes {
		for z := a + 1; z < len(nodes); z++ {
			fmt.Fprintf(&b, "    connection\n    {\n        host %q address ipv4 %s:%d;\n        host %q address ipv4 %s:%d;\n    }\n",
				nodes[a].Name, nodes[a].Address, portBase+slot, nodes[z].Name, nodes[z].Address, portBase+slot)
		}
	}
	b.WriteString("}\n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The name aside does not end in .res: drbd.conf includes *.res.
	aside := filepath.Join(dir, "."+name+".res.new")
	if err := os.WriteFile(aside, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(aside, resourceFile(dir, name)); err != nil {
		_ = os.Remove(aside)
		return err
	}
	return nil
}

// RemoveResource removes, from dir, the resource file of name, as a satellite does when the
// node's replica is removed; a file already gone is no error.
func RemoveResource(dir, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := os.Remove(resourceFile(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ResourceSuffix ends the name of every resource file, as drbd.conf includes them.
const ResourceSuffix = ".res"

func resourceFile(dir, name string) string { return filepath.Join(dir, name+ResourceSuffix) }

// checkName refuses a resource name that would put its file elsewhere than in the directory,
// or hide it.
func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, ".") || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("resource name %q cannot name a resource file (empty, hidden, or a path)", name)
	}
	return nil
}

// WritePlay writes the play file of dir.
func WritePlay(dir string, p Play) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, PlayFile), raw, 0o644)
}

// ReadPlay reads the play file of dir.
func ReadPlay(dir string) (Play, error) {
	var p Play
	raw, err := os.ReadFile(filepath.Join(dir, PlayFile))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Join(dir, PlayFile), err)
	}
	return p, nil
}

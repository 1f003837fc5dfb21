package drbdplay

import (
	"encoding/json"
	"fmt"
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

// Node is a node of the played resources: its name and storage address.
type Node struct{ Name, Address string }

// WriteConfig writes, in dir, self's played DRBD: resources replicated on every node of nodes,
// in the shape of LINSTOR's resource files (a volume on each node, a connection between each
// pair), for drbdadm to read, and the play file.
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
		var b strings.Builder
		fmt.Fprintf(&b, "# Played for the local site in the shape of LINSTOR's resource files.\nresource %q\n{\n", r)
		for id, n := range nodes {
			fmt.Fprintf(&b, "    on %q\n    {\n        volume 0\n        {\n            disk        /dev/null;\n            meta-disk   internal;\n            device      minor %d;\n        }\n        node-id    %d;\n    }\n", n.Name, 1000+i, id)
		}
		for a := range nodes {
			for z := a + 1; z < len(nodes); z++ {
				fmt.Fprintf(&b, "    connection\n    {\n        host %q address ipv4 %s:%d;\n        host %q address ipv4 %s:%d;\n    }\n",
					nodes[a].Name, nodes[a].Address, 7000+i, nodes[z].Name, nodes[z].Address, 7000+i)
			}
		}
		b.WriteString("}\n")
		if err := os.WriteFile(filepath.Join(dir, r+".res"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(play)
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

package linstor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	lapi "github.com/LINBIT/golinstor/client"
)

// Node is a LINSTOR node, as the controller sees its satellite.
type Node struct {
	Name string
	// Type is Satellite, Combined, Controller or Auxiliary.
	Type string
	// ConnectionStatus is the controller's view of the satellite: ONLINE, OFFLINE,
	// CONNECTED, VERSION_MISMATCH...
	ConnectionStatus string
	// Address is the address of the satellite's active network interface.
	Address string
	Props   map[string]string
}

// Online reports whether the satellite is connected and answering: LINSTOR only places
// resources on, and reports the state of, an ONLINE node.
func (n Node) Online() bool { return strings.EqualFold(n.ConnectionStatus, "ONLINE") }

// Version is what the controller says of itself.
type Version struct {
	// Version is LINSTOR's version, RESTAPI the version of its REST API.
	Version, RESTAPI string
}

// minRESTAPI is the REST API version from which a volume's state reports replication_states.
const minRESTAPI = "1.25.0"

// Version asks the controller its version and refuses one whose REST API predates
// replication_states (1.25.0), which a replication upgrade reads its progress from.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v lapi.ControllerVersion
	err := c.call(ctx, "read the controller's version", func(ctx context.Context) (err error) {
		v, err = c.api.Controller.GetVersion(ctx)
		return err
	})
	if err != nil {
		return Version{}, err
	}
	out := Version{Version: v.Version, RESTAPI: v.RestApiVersion}
	if older(out.RESTAPI, minRESTAPI) {
		return out, &Error{Op: "read the controller's version", Reason: fmt.Sprintf("REST API %q is older than %s, which added the replication states a replication upgrade reads", out.RESTAPI, minRESTAPI)}
	}
	return out, nil
}

// older reports whether version a precedes b (dotted numbers); an unreadable a is older.
func older(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range pb {
		var x, y int
		if i < len(pa) {
			if _, err := fmt.Sscanf(pa[i], "%d", &x); err != nil {
				return true
			}
		}
		_, _ = fmt.Sscanf(pb[i], "%d", &y)
		if x != y {
			return x < y
		}
	}
	return false
}

// Nodes lists the nodes LINSTOR knows; with names, only those (in LINSTOR's order).
func (c *Client) Nodes(ctx context.Context, names ...string) ([]Node, error) {
	var nodes []lapi.Node
	op := "list nodes"
	var opts []*lapi.ListOpts
	if len(names) > 0 {
		op = fmt.Sprintf("list nodes %q", names)
		opts = append(opts, &lapi.ListOpts{Node: names})
	}
	err := c.call(ctx, op, func(ctx context.Context) (err error) {
		nodes, err = c.api.Nodes.GetAll(ctx, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, nodeOf(n))
	}
	return out, nil
}

// Node reads one node; an *Error matching ErrNotFound when LINSTOR has none by the name.
func (c *Client) Node(ctx context.Context, name string) (Node, error) {
	op := fmt.Sprintf("read node %q", name)
	if err := checkName("node", name); err != nil {
		return Node{}, &RefusedError{Op: op, Reason: err.Error()}
	}
	nodes, err := c.Nodes(ctx, name)
	if err != nil {
		return Node{}, err
	}
	for _, n := range nodes {
		if strings.EqualFold(n.Name, name) {
			return n, nil
		}
	}
	return Node{}, &Error{Op: op, Reason: "LINSTOR has no node by this name", Err: ErrNotFound}
}

func nodeOf(n lapi.Node) Node {
	out := Node{Name: n.Name, Type: n.Type, ConnectionStatus: n.ConnectionStatus, Props: n.Props}
	for _, nif := range n.NetInterfaces {
		if nif.IsActive || out.Address == "" {
			out.Address = nif.Address.String()
		}
	}
	return out
}

// Satellite is a node to register where LINSTOR is not run by Piraeus (which registers its
// satellites itself, from LinstorSatellite objects).
type Satellite struct {
	Name string
	// Address is where the satellite listens: its node's address on the storage network.
	Address string
	// Port is the satellite's port; LINSTOR's default (3366 plain, 3367 SSL) when zero.
	Port int32
	// SSL: the controller connects to the satellite over SSL (LINSTOR's encryption type SSL).
	SSL bool
}

// RegisterNode registers a satellite with the controller, as `linstor node create` does. It is
// idempotent: a node registered already with the same address is success, one with another
// address an error matching ErrExists. The node is ONLINE once the controller reached the
// satellite; Node tells.
func (c *Client) RegisterNode(ctx context.Context, s Satellite) error {
	op := fmt.Sprintf("register node %q at %s", s.Name, s.Address)
	if err := checkName("node", s.Name); err != nil {
		return &RefusedError{Op: op, Reason: err.Error()}
	}
	ip := net.ParseIP(s.Address)
	if ip == nil {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("address %q is not an IP address", s.Address)}
	}
	if s.Port < 0 || s.Port > 65535 {
		return &RefusedError{Op: op, Reason: fmt.Sprintf("port %d is outside 0..65535", s.Port)}
	}
	nif := lapi.NetInterface{Name: "default", Address: ip, SatellitePort: s.Port, SatelliteEncryptionType: "PLAIN", IsActive: true}
	if s.SSL {
		nif.SatelliteEncryptionType = "SSL"
	}
	// The document's enum is Satellite; LINSTOR reads the type case-insensitively.
	err := c.call(ctx, op, func(ctx context.Context) error {
		return c.api.Nodes.Create(ctx, lapi.Node{Name: s.Name, Type: "Satellite", NetInterfaces: []lapi.NetInterface{nif}})
	})
	if err == nil || !errors.Is(err, ErrExists) {
		return err
	}
	existing, readErr := c.Node(ctx, s.Name)
	if readErr != nil {
		return err
	}
	if existing.Address != ip.String() {
		return &Error{Op: op, Reason: fmt.Sprintf("node %q is registered already, at %s", s.Name, existing.Address), Err: ErrExists}
	}
	return nil
}

// checkName refuses a name that cannot be one of LINSTOR's objects, before it reaches a URL.
func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("the %s name is empty", kind)
	case len(name) > 253:
		return fmt.Errorf("the %s name is %d characters, more than 253", kind, len(name))
	case strings.ContainsAny(name, "/?#%\\ \t\r\n"):
		return fmt.Errorf("the %s name %q holds a character LINSTOR names never do", kind, name)
	}
	return nil
}

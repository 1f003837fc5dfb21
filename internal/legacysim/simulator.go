// Package legacysim plays the legacy node-init DaemonSet against a real API server, exactly as
// its contract says (the state ConfigMap, per-node heartbeats, Events), so the demo, the
// end-to-end tests and benchmarks have a legacy site to observe. It can also break the contract
// on purpose: silence a node, write an unknown state, make a forbidden jump, jump the
// generation, write garbage. The state machine itself is internal/legacy's; nothing here
// re-declares it.
package legacysim

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// SilencedAnnotation is on the state ConfigMap and lists, comma-separated, the nodes whose
// heartbeats the simulator holds back. It is the simulator's own bookkeeping, not part of the
// DaemonSet's contract: keeping it in the cluster lets a one-shot `legacy-sim silence` be
// honoured by a `legacy-sim run` that is heartbeating in another process.
const SilencedAnnotation = "legacy-sim.nodewright.spectrocloud.com/silenced"

// DefaultImage is the DaemonSet's image. Nothing pulls it: kwok only pretends to run pods.
const DefaultImage = "registry.local/node-init:demo"

// NodeSpec is one node of the simulated fleet.
type NodeSpec struct {
	Name string
	Role nwv1.NodeRole
	// BondMode is written as node.<name>.bondMode when the node joins; empty writes none.
	BondMode nwv1.BondMode
}

// Config says which objects the simulated DaemonSet owns and which nodes it manages.
type Config struct {
	// Client must reach a real API server; it needs the core and apps types.
	Client client.Client
	// ConfigMap is the state ConfigMap.
	ConfigMap types.NamespacedName
	// DaemonSet is the DaemonSet object Setup creates.
	DaemonSet types.NamespacedName
	// Component is the Events' source.component and reportingComponent.
	Component string
	// Nodes is the fleet. The first is the primary and the only node a new site boots with;
	// the others join later (JoinNode, or a scenario's join steps).
	Nodes []NodeSpec
	// Image is the DaemonSet's container image; DefaultImage when empty.
	Image string
	// Log gets one line per write; nothing is logged when nil.
	Log *slog.Logger
}

// Simulator plays the legacy DaemonSet. Its methods are safe to call from several goroutines
// and processes at once: every write is a read-modify-write on the ConfigMap's
// resourceVersion, retried on conflict.
type Simulator struct {
	cfg Config
	log *slog.Logger
}

// New checks the configuration and returns a Simulator; it does not touch the cluster.
func New(cfg Config) (*Simulator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Simulator{cfg: cfg, log: log}, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("no client"))
	}
	errs = append(errs, checkName("ConfigMap namespace", c.ConfigMap.Namespace, validation.IsDNS1123Label),
		checkName("ConfigMap name", c.ConfigMap.Name, validation.IsDNS1123Subdomain),
		checkName("DaemonSet namespace", c.DaemonSet.Namespace, validation.IsDNS1123Label),
		checkName("DaemonSet name", c.DaemonSet.Name, validation.IsDNS1123Subdomain))
	if c.Component == "" {
		errs = append(errs, errors.New("event component is empty"))
	}
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("no nodes: the fleet needs at least its primary"))
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if err := n.validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[n.Name] {
			errs = append(errs, fmt.Errorf("node %q is listed twice", n.Name))
		}
		seen[n.Name] = true
	}
	return errors.Join(errs...)
}

func (n NodeSpec) validate() error {
	if err := checkNode(n.Name); err != nil {
		return err
	}
	switch n.Role {
	case nwv1.NodeRolePrimary, nwv1.NodeRoleSecondary, nwv1.NodeRoleTiebreaker:
		return nil
	}
	return fmt.Errorf("node %q: role %q is not primary, secondary or tiebreaker", n.Name, n.Role)
}

// checkNode accepts what the contract's parser accepts as a node name.
func checkNode(name string) error {
	return checkName("node name", name, validation.IsDNS1123Subdomain)
}

func checkName(what, value string, check func(string) []string) error {
	if value == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if msgs := check(value); len(msgs) > 0 {
		return fmt.Errorf("%s %q: %s", what, value, strings.Join(msgs, "; "))
	}
	return nil
}

// Primary is the fleet's first node, the one a new site boots with.
func (s *Simulator) Primary() NodeSpec { return s.cfg.Nodes[0] }

// fleetNode finds a configured node by name.
func (s *Simulator) fleetNode(name string) (NodeSpec, error) {
	for _, n := range s.cfg.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return NodeSpec{}, fmt.Errorf("node %q is not in the simulator's fleet", name)
}

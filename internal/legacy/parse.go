package legacy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
)

// The ConfigMap keys of the contract.
const (
	KeyState         = "state"
	KeyPreviousState = "previousState"
	KeyStateSince    = "stateSince"
	KeyGeneration    = "generation"
	KeyNodes         = "nodes"
)

// NodeKey is the ConfigMap key of one of a node's fields: node.<node>.<field>.
func NodeKey(node, field string) string { return "node." + node + "." + field }

// The per-node fields.
const (
	FieldHeartbeat = "heartbeat"
	FieldRole      = "role"
	FieldDRBD      = "drbd"
	FieldBondMode  = "bondMode"
)

// Problem is one thing wrong in the ConfigMap: which key, which value, and why.
type Problem struct {
	Key    string
	Value  string
	Reason string
}

// maxShownValue bounds how much of a bad value a message repeats: the ConfigMap is written by
// another program and a garbage value can be large.
const maxShownValue = 64

func (p Problem) Error() string {
	return fmt.Sprintf("key %q, value %q: %s", p.Key, shorten(p.Value), p.Reason)
}

// shorten cuts s to maxShownValue bytes for a message, between characters.
func shorten(s string) string { return audit.Shorten(s, maxShownValue) }

// DRBD is a node's DRBD health as the DaemonSet reports it.
type DRBD struct {
	Resources    int32 `json:"resources"`
	Connected    int32 `json:"connected"`
	UpToDate     int32 `json:"upToDate"`
	OutOfSyncKiB int64 `json:"outOfSyncKiB"`
}

// Node is one managed node as the ConfigMap describes it. Absent keys leave fields zero: a
// node without a heartbeat yet is simply stale.
type Node struct {
	Name      string
	Heartbeat time.Time
	Role      nwv1.NodeRole
	DRBD      *DRBD
	BondMode  nwv1.BondMode
}

// Observation is the ConfigMap's content, typed.
type Observation struct {
	State State
	// PreviousState is one of the 21 states, or empty: at first, or when the key holds a name
	// that is not one of them (then in UnknownPreviousState).
	PreviousState State
	// UnknownPreviousState is previousState's value when it is not one of the 21 states. It
	// is not a Problem: the phase follows state alone, and such a value only means that this
	// one transition cannot be checked (Check reports it).
	UnknownPreviousState string
	Since                time.Time
	Generation           int64
	Nodes                []Node
}

// Parse turns the ConfigMap's data into an Observation. It never fails outright: every key it
// cannot use is reported as a Problem and left zero in the Observation, so the caller can
// report exactly what is wrong while still showing what could be read. previousState is the
// exception: it decides nothing but whether a transition can be checked, so an unknown name
// there is kept in UnknownPreviousState for Check, not reported as a Problem.
func Parse(data map[string]string) (Observation, []Problem) {
	p := parser{data: data}
	obs := Observation{
		State:      p.state(),
		Since:      p.time(KeyStateSince, true),
		Generation: p.generation(),
	}
	if prev := State(data[KeyPreviousState]); Known(prev) {
		obs.PreviousState = prev
	} else if prev != "" {
		obs.UnknownPreviousState = string(prev)
	}
	for _, name := range p.nodeNames() {
		obs.Nodes = append(obs.Nodes, p.node(name))
	}
	return obs, p.problems
}

type parser struct {
	data     map[string]string
	problems []Problem
}

func (p *parser) report(key, value, reason string) {
	p.problems = append(p.problems, Problem{Key: key, Value: value, Reason: reason})
}

func (p *parser) lookup(key string, required bool) (string, bool) {
	value, ok := p.data[key]
	if !ok && required {
		p.report(key, "", "missing")
	}
	return value, ok
}

func (p *parser) state() State {
	value, ok := p.lookup(KeyState, true)
	if !ok {
		return ""
	}
	if !Known(State(value)) {
		p.report(KeyState, value, "not one of the 21 states")
		return ""
	}
	return State(value)
}

func (p *parser) time(key string, required bool) time.Time {
	value, ok := p.lookup(key, required)
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		p.report(key, value, "not an RFC 3339 time")
		return time.Time{}
	}
	return t
}

func (p *parser) generation() int64 {
	value, ok := p.lookup(KeyGeneration, true)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil || n < 0 {
		p.report(KeyGeneration, value, "not a non-negative decimal integer")
		return 0
	}
	return n
}

// nodeNames reads the comma-separated node list, keeping the valid, distinct names.
func (p *parser) nodeNames() []string {
	value, ok := p.lookup(KeyNodes, false)
	if !ok || strings.TrimSpace(value) == "" {
		return nil
	}
	var names []string
	for _, raw := range strings.Split(value, ",") {
		name := strings.TrimSpace(raw)
		switch {
		case name == "":
			p.report(KeyNodes, value, "empty node name in the list")
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			p.report(KeyNodes, value, fmt.Sprintf("%q is not a valid node name", shorten(name)))
		case slices.Contains(names, name):
			p.report(KeyNodes, value, fmt.Sprintf("node %q is listed twice", shorten(name)))
		default:
			names = append(names, name)
		}
	}
	return names
}

func (p *parser) node(name string) Node {
	n := Node{Name: name, Heartbeat: p.time(NodeKey(name, FieldHeartbeat), false)}
	if value, ok := p.lookup(NodeKey(name, FieldRole), false); ok {
		switch role := nwv1.NodeRole(value); role {
		case nwv1.NodeRolePrimary, nwv1.NodeRoleSecondary, nwv1.NodeRoleTiebreaker:
			n.Role = role
		default:
			p.report(NodeKey(name, FieldRole), value, "not primary, secondary or tiebreaker")
		}
	}
	if value, ok := p.lookup(NodeKey(name, FieldBondMode), false); ok {
		if mode := nwv1.BondMode(value); slices.Contains(bondModes, mode) {
			n.BondMode = mode
		} else {
			p.report(NodeKey(name, FieldBondMode), value, "not a Linux bonding mode")
		}
	}
	if value, ok := p.lookup(NodeKey(name, FieldDRBD), false); ok {
		n.DRBD = p.drbd(NodeKey(name, FieldDRBD), value)
	}
	return n
}

var bondModes = []nwv1.BondMode{nwv1.BondModeBalanceRR, nwv1.BondModeActiveBackup,
	nwv1.BondModeBalanceXOR, nwv1.BondModeBroadcast, nwv1.BondMode8023AD,
	nwv1.BondModeBalanceTLB, nwv1.BondModeBalanceALB}

func (p *parser) drbd(key, value string) *DRBD {
	var d DRBD
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		p.report(key, value, "not the DRBD JSON object {resources, connected, upToDate, outOfSyncKiB}: "+err.Error())
		return nil
	}
	if dec.More() {
		p.report(key, value, "trailing data after the DRBD JSON object")
		return nil
	}
	switch {
	case d.Resources < 0 || d.Connected < 0 || d.UpToDate < 0 || d.OutOfSyncKiB < 0:
		p.report(key, value, "counts must not be negative")
	case d.Connected > d.Resources || d.UpToDate > d.Resources:
		p.report(key, value, "connected and upToDate cannot exceed resources")
	default:
		return &d
	}
	return nil
}

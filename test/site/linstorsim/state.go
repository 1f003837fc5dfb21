package linstorsim

import (
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// The names LINSTOR gives what it creates by itself.
const (
	// DisklessPool is the diskless storage pool LINSTOR gives every node.
	DisklessPool = "DfltDisklessStorPool"
	// DefaultPool is the pool a resource is created in when its create names none.
	DefaultPool = "DfltStorPool"
	// DefaultGroup is the resource group a definition belongs to when it names none.
	DefaultGroup = "DfltRscGrp"
)

// Node is a LINSTOR node (a satellite) to seed the stand-in with.
type Node struct {
	Name string
	// Address is the satellite's address; 10.0.0.x when empty.
	Address string
	// Offline: the satellite is not connected (the fault hook SetOnline changes it later).
	Offline bool
}

// Pool is a storage pool on a node.
type Pool struct {
	Node, Name string
	// Provider is LINSTOR's provider kind: LVM_THIN when empty.
	Provider string
	// TotalKiB and FreeKiB are the pool's capacity; FreeKiB shrinks by a volume's size for
	// every replica placed in it.
	TotalKiB, FreeKiB int64
}

// Group is a resource group.
type Group struct {
	Name string
	// PlaceCount is the select filter's place_count (0: unset).
	PlaceCount int32
	// StoragePool is the select filter's storage_pool (empty: unset).
	StoragePool string
	Props       map[string]string
}

// Definition is a resource definition with its volume definitions.
type Definition struct {
	Name string
	// Group is its resource group; DfltRscGrp when empty.
	Group string
	// SizesKiB are its volumes' sizes, volume 0 first; one volume of 1 GiB when empty.
	SizesKiB []int64
	Props    map[string]string
}

// Resource is a resource (a replica) of a definition on a node, seeded UpToDate.
type Resource struct {
	Definition, Node string
	// Pool is the storage pool of a diskful resource; the diskless pool is used when Diskless.
	Pool     string
	Diskless bool
	// InUse: the resource is open (Primary) on its node, as under a running VM.
	InUse bool
}

type nodeKey struct{ node, name string }
type rscKey struct{ def, node string }

type node struct {
	name, address string
	online        bool
	props         map[string]string
	uuid          string
}

type pool struct {
	node, name, provider string
	total, free          int64
	uuid                 string
}

type group struct {
	name, description string
	filter            map[string]any
	props             map[string]string
	uuid              string
}

type definition struct {
	name, group string
	props       map[string]string
	sizes       []int64
	port        int32
	uuid        string
}

type resource struct {
	def, node, pool string
	diskless        bool
	flags           []string
	deleting        bool
	inUse           bool
	nodeID          int32
	created         time.Time
	// sync is set while the resource is a SyncTarget; standAlone: it never connected.
	sync       *resync
	standAlone bool
	props      map[string]string
	uuid       string
}

// resync is the progress of a new replica's initial synchronisation.
type resync struct {
	done float64
	last time.Time
}

// state is LINSTOR's in-memory world. Every method expects the server's lock held.
type state struct {
	nodes       map[string]*node
	pools       map[nodeKey]*pool
	groups      map[string]*group
	definitions map[string]*definition
	resources   map[rscKey]*resource
	ctrlProps   map[string]string
	// satellites are satellites that run but are not registered: name → address.
	satellites  map[string]string
	nextPort    int32
	lastBalance time.Time
	lastCreated time.Time
}

func newState() *state {
	s := &state{
		nodes:       map[string]*node{},
		pools:       map[nodeKey]*pool{},
		groups:      map[string]*group{},
		definitions: map[string]*definition{},
		resources:   map[rscKey]*resource{},
		ctrlProps:   map[string]string{},
		satellites:  map[string]string{},
		nextPort:    7000,
	}
	s.groups[DefaultGroup] = &group{name: DefaultGroup, filter: map[string]any{}, props: map[string]string{}, uuid: newUUID()}
	return s
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (st *state) addNode(name, address string, online bool) *node {
	n := &node{name: name, address: address, online: online, props: map[string]string{}, uuid: newUUID()}
	st.nodes[name] = n
	st.pools[nodeKey{name, DisklessPool}] = &pool{node: name, name: DisklessPool, provider: "DISKLESS", uuid: newUUID()}
	return n
}

// groupOf returns the definition's resource group.
func (st *state) groupOf(d *definition) *group { return st.groups[d.group] }

// resourcesOf returns the definition's resources, sorted by node.
func (st *state) resourcesOf(def string) []*resource {
	var out []*resource
	for k, r := range st.resources {
		if k.def == def {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node < out[j].node })
	return out
}

func (st *state) diskfulCount(def string) int {
	n := 0
	for _, r := range st.resourcesOf(def) {
		if !r.diskless && !r.deleting {
			n++
		}
	}
	return n
}

func (d *definition) totalKiB() int64 {
	var sum int64
	for _, size := range d.sizes {
		sum += size
	}
	return sum
}

func (st *state) nextNodeID(def string) int32 {
	used := map[int32]bool{}
	for _, r := range st.resourcesOf(def) {
		used[r.nodeID] = true
	}
	var id int32
	for used[id] {
		id++
	}
	return id
}

// placeCount is the group's place_count, or LINSTOR's default of 2 when unset.
func (g *group) placeCount() int32 {
	if n, ok := number(g.filter["place_count"]); ok && n > 0 {
		return int32(n)
	}
	return 2
}

// storagePools are the pools the group's filter allows, none meaning any.
func (g *group) storagePools() []string {
	var out []string
	if p, ok := g.filter["storage_pool"].(string); ok && p != "" {
		out = append(out, p)
	}
	if list, ok := g.filter["storage_pool_list"].([]any); ok {
		for _, item := range list {
			if p, ok := item.(string); ok && p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}

// State is what the stand-in holds, without times or progress: what a test compares before
// and after a workflow to say that LINSTOR is as it was.
type State struct {
	Nodes           map[string]NodeState
	Pools           map[string]PoolState // "node/pool"
	Groups          map[string]GroupState
	Definitions     map[string]DefinitionState
	Resources       map[string]ResourceState // "definition/node"
	ControllerProps map[string]string
}

// NodeState is a node as State shows it.
type NodeState struct {
	Online bool
	Props  map[string]string
}

// PoolState is a pool as State shows it.
type PoolState struct {
	Provider          string
	TotalKiB, FreeKiB int64
}

// GroupState is a resource group as State shows it.
type GroupState struct {
	SelectFilter map[string]any
	Props        map[string]string
}

// DefinitionState is a resource definition as State shows it.
type DefinitionState struct {
	Group    string
	SizesKiB []int64
	Props    map[string]string
}

// ResourceState is a resource as State shows it.
type ResourceState struct {
	Pool     string
	Diskless bool
	Deleting bool
	Props    map[string]string
}

func (st *state) snapshot() State {
	out := State{
		Nodes:           map[string]NodeState{},
		Pools:           map[string]PoolState{},
		Groups:          map[string]GroupState{},
		Definitions:     map[string]DefinitionState{},
		Resources:       map[string]ResourceState{},
		ControllerProps: maps.Clone(st.ctrlProps),
	}
	for name, n := range st.nodes {
		out.Nodes[name] = NodeState{Online: n.online, Props: maps.Clone(n.props)}
	}
	for k, p := range st.pools {
		out.Pools[k.node+"/"+k.name] = PoolState{Provider: p.provider, TotalKiB: p.total, FreeKiB: p.free}
	}
	for name, g := range st.groups {
		out.Groups[name] = GroupState{SelectFilter: cloneFilter(g.filter), Props: maps.Clone(g.props)}
	}
	for name, d := range st.definitions {
		out.Definitions[name] = DefinitionState{Group: d.group, SizesKiB: slices.Clone(d.sizes), Props: maps.Clone(d.props)}
	}
	for k, r := range st.resources {
		out.Resources[k.def+"/"+k.node] = ResourceState{Pool: r.pool, Diskless: r.diskless, Deleting: r.deleting, Props: maps.Clone(r.props)}
	}
	return out
}

func cloneFilter(f map[string]any) map[string]any {
	out := make(map[string]any, len(f))
	for k, v := range f {
		if list, ok := v.([]any); ok {
			v = slices.Clone(list)
		}
		out[k] = v
	}
	return out
}

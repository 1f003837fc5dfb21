package linstorsim

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// The seeding methods set up the world a test starts from, as if LINSTOR (and Piraeus) had
// made it: they are not requests, so nothing is validated, and they refuse what LINSTOR could
// not hold.

// AddNode registers a node, ONLINE unless n.Offline, with LINSTOR's diskless pool.
func (s *Server) AddNode(n Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.Name == "" {
		return fmt.Errorf("linstorsim: a node needs a name")
	}
	if s.st.nodes[n.Name] != nil {
		return fmt.Errorf("linstorsim: node %q exists", n.Name)
	}
	if n.Address == "" {
		n.Address = fmt.Sprintf("10.0.0.%d", len(s.st.nodes)+1)
	}
	s.st.addNode(n.Name, n.Address, !n.Offline)
	return nil
}

// AddSatellite plays a satellite that runs at address but is not registered with the
// controller: registering the node (POST /v1/nodes) with this address brings it ONLINE; a
// node registered with an address where no satellite runs stays OFFLINE.
func (s *Server) AddSatellite(name, address string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.satellites[name] = address
}

// AddStoragePool adds a storage pool to a registered node.
func (s *Server) AddStoragePool(p Pool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.nodes[p.Node] == nil {
		return fmt.Errorf("linstorsim: no node %q for pool %q", p.Node, p.Name)
	}
	if p.Name == "" || s.st.pools[nodeKey{p.Node, p.Name}] != nil {
		return fmt.Errorf("linstorsim: pool %q on %q is empty or exists", p.Name, p.Node)
	}
	if p.Provider == "" {
		p.Provider = "LVM_THIN"
	}
	if p.FreeKiB > p.TotalKiB || p.FreeKiB < 0 {
		return fmt.Errorf("linstorsim: pool %q on %q: free %d KiB outside 0..%d", p.Name, p.Node, p.FreeKiB, p.TotalKiB)
	}
	s.st.pools[nodeKey{p.Node, p.Name}] = &pool{node: p.Node, name: p.Name, provider: p.Provider, total: p.TotalKiB, free: p.FreeKiB, uuid: newUUID()}
	return nil
}

// AddResourceGroup adds a resource group, or sets DfltRscGrp's filter and properties.
func (s *Server) AddResourceGroup(g Group) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.Name == "" {
		return fmt.Errorf("linstorsim: a resource group needs a name")
	}
	if s.st.groups[g.Name] != nil && g.Name != DefaultGroup {
		return fmt.Errorf("linstorsim: resource group %q exists", g.Name)
	}
	filter := map[string]any{}
	if g.PlaceCount > 0 {
		filter["place_count"] = float64(g.PlaceCount)
	}
	if g.StoragePool != "" {
		filter["storage_pool"] = g.StoragePool
	}
	props := maps.Clone(g.Props)
	if props == nil {
		props = map[string]string{}
	}
	s.st.groups[g.Name] = &group{name: g.Name, filter: filter, props: props, uuid: newUUID()}
	return nil
}

// AddResourceDefinition adds a resource definition with its volume definitions.
func (s *Server) AddResourceDefinition(d Definition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Name == "" || s.st.definitions[d.Name] != nil {
		return fmt.Errorf("linstorsim: resource definition %q is unnamed or exists", d.Name)
	}
	if d.Group == "" {
		d.Group = DefaultGroup
	}
	if s.st.groups[d.Group] == nil {
		return fmt.Errorf("linstorsim: no resource group %q for %q", d.Group, d.Name)
	}
	sizes := slices.Clone(d.SizesKiB)
	if len(sizes) == 0 {
		sizes = []int64{1 << 20}
	}
	props := maps.Clone(d.Props)
	if props == nil {
		props = map[string]string{}
	}
	s.st.definitions[d.Name] = &definition{name: d.Name, group: d.Group, props: props, sizes: sizes, port: s.st.nextPort, uuid: newUUID()}
	s.st.nextPort++
	return nil
}

// AddResource places an UpToDate replica (or a diskless resource), taking its size from the
// pool.
func (s *Server) AddResource(r Resource) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.st.definitions[r.Definition]
	if d == nil {
		return fmt.Errorf("linstorsim: no resource definition %q", r.Definition)
	}
	if s.st.nodes[r.Node] == nil {
		return fmt.Errorf("linstorsim: no node %q", r.Node)
	}
	if s.st.resources[rscKey{r.Definition, r.Node}] != nil {
		return fmt.Errorf("linstorsim: %q is on %q already", r.Definition, r.Node)
	}
	pool, flags := r.Pool, []string(nil)
	if r.Diskless {
		pool, flags = DisklessPool, []string{"DRBD_DISKLESS"}
	}
	p := s.st.pools[nodeKey{r.Node, pool}]
	if p == nil {
		return fmt.Errorf("linstorsim: no pool %q on %q", pool, r.Node)
	}
	if !r.Diskless && p.free < d.totalKiB() {
		return fmt.Errorf("linstorsim: pool %q on %q has %d KiB free, %q needs %d", pool, r.Node, p.free, r.Definition, d.totalKiB())
	}
	placed := s.place(d, r.Node, pool, r.Diskless, flags, map[string]string{"StorPoolName": pool}, time.Now())
	placed.sync = nil
	placed.inUse = r.InUse
	return nil
}

// SetInUse opens (true) or closes the resource on its node, as a VM starting or stopping
// there would.
func (s *Server) SetInUse(definition, node string, inUse bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.resources[rscKey{definition, node}]
	if r == nil {
		return fmt.Errorf("linstorsim: %q is not on %q", definition, node)
	}
	r.inUse = inUse
	return nil
}

// SetControllerProp sets a property of the controller, as an administrator would have.
func (s *Server) SetControllerProp(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.ctrlProps[key] = value
}

// State is what the stand-in holds now, for a test to compare.
func (s *Server) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(time.Now())
	return s.st.snapshot()
}

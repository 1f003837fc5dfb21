package linstorsim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

func (s *Server) syncTime() time.Duration {
	if s.opts.SyncTime > 0 {
		return s.opts.SyncTime
	}
	return 2 * time.Second
}

func (st *state) online(nodeName string) bool {
	n := st.nodes[nodeName]
	return n != nil && n.online
}

// sourceFor is the replica a SyncTarget synchronises from: the first, by node name, diskful
// replica of its definition that is in sync, connected and online. Nil when r is not a
// target or has no source.
func (st *state) sourceFor(r *resource) *resource {
	if r.sync == nil || r.standAlone {
		return nil
	}
	for _, p := range st.resourcesOf(r.def) {
		if p != r && !p.diskless && !p.deleting && p.sync == nil && !p.standAlone && st.online(p.node) {
			return p
		}
	}
	return nil
}

// stallAt is where a fault hook stops the synchronisation of def on node, if one does.
func (s *Server) stallAt(def, node string) (float64, bool) {
	for _, stall := range s.opts.StalledSyncs {
		if (stall.Resource == "" || stall.Resource == def) && (stall.Node == "" || stall.Node == node) {
			return stall.AtPercent, true
		}
	}
	return 0, false
}

// advance moves the played world on to now: synchronisations progress while their target and
// source are online, and the balance task runs when it is due. It is called with the lock
// held, at every request, so what a client reads is always current.
func (s *Server) advance(now time.Time) {
	st := s.st
	for _, k := range sortedRscKeys(st.resources) {
		r := st.resources[k]
		if r.sync == nil {
			continue
		}
		elapsed := now.Sub(r.sync.last)
		r.sync.last = now
		if r.standAlone || !st.online(r.node) || st.sourceFor(r) == nil || elapsed <= 0 {
			continue
		}
		r.sync.done += 100 * elapsed.Seconds() / s.syncTime().Seconds()
		if limit, stalled := s.stallAt(r.def, r.node); stalled && r.sync.done >= limit {
			r.sync.done = limit
			continue
		}
		if r.sync.done >= 100 {
			r.sync = nil
		}
	}
	if s.opts.BalanceInterval > 0 && st.ctrlProps["BalanceResourcesEnabled"] != "false" && now.Sub(st.lastBalance) >= s.opts.BalanceInterval {
		st.lastBalance = now
		for _, name := range sortedKeys(st.definitions) {
			d := st.definitions[name]
			if missing := int(st.groupOf(d).placeCount()) - st.diskfulCount(name); missing > 0 {
				_ = s.autoplace(d, missing, now)
			}
		}
	}
}

func sortedRscKeys(m map[rscKey]*resource) []rscKey {
	keys := make([]rscKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].def != keys[j].def {
			return keys[i].def < keys[j].def
		}
		return keys[i].node < keys[j].node
	})
	return keys
}

// place creates the resource of d on a node. A diskful replica takes its size from the pool
// and, when the definition already has a diskful replica, starts as a SyncTarget at 0 %.
func (s *Server) place(d *definition, nodeName, poolName string, diskless bool, flags []string, props map[string]string, now time.Time) *resource {
	st := s.st
	// LINSTOR creates one resource after the other: no two share a creation time, to the
	// millisecond its create_timestamp has.
	created := now.Truncate(time.Millisecond)
	if !created.After(st.lastCreated) {
		created = st.lastCreated.Add(time.Millisecond)
	}
	st.lastCreated = created
	r := &resource{
		def: d.name, node: nodeName, pool: poolName, diskless: diskless, flags: flags,
		nodeID: st.nextNodeID(d.name), created: created, props: props, uuid: newUUID(),
	}
	if r.props == nil {
		r.props = map[string]string{}
	}
	if !diskless {
		st.pools[nodeKey{nodeName, poolName}].free -= d.totalKiB()
		if st.diskfulCount(d.name) > 0 {
			r.sync = &resync{last: now}
		}
	}
	st.resources[rscKey{d.name, nodeName}] = r
	return r
}

// unplace removes a resource and gives its pool back its size.
func (st *state) unplace(r *resource) {
	if !r.diskless {
		if p := st.pools[nodeKey{r.node, r.pool}]; p != nil {
			p.free += st.definitions[r.def].totalKiB()
		}
	}
	delete(st.resources, rscKey{r.def, r.node})
}

// candidates are the nodes autoplace may put a new replica of d on, best first: online, not
// holding d yet, with a pool the group allows (any diskful pool when it names none) holding
// the definition's size; the pool with the most free space on each, the nodes by it.
func (st *state) candidates(d *definition) []nodeKey {
	allowed := st.groupOf(d).storagePools()
	type choice struct {
		key  nodeKey
		free int64
	}
	var out []choice
	for _, n := range sortedKeys(st.nodes) {
		if !st.online(n) || st.resources[rscKey{d.name, n}] != nil {
			continue
		}
		var best *pool
		for k, p := range st.pools {
			if k.node != n || p.provider == "DISKLESS" || p.free < d.totalKiB() {
				continue
			}
			if len(allowed) > 0 && !contains(allowed, p.name) {
				continue
			}
			if best == nil || p.free > best.free || (p.free == best.free && p.name < best.name) {
				best = p
			}
		}
		if best != nil {
			out = append(out, choice{nodeKey{n, best.name}, best.free})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].free > out[j].free })
	keys := make([]nodeKey, len(out))
	for i, c := range out {
		keys[i] = c.key
	}
	return keys
}

func contains(list []string, v string) bool {
	for _, item := range list {
		if item == v {
			return true
		}
	}
	return false
}

// autoplace adds count diskful replicas of d, all or none, as LINSTOR's autoplacer does, and
// answers as it does.
func (s *Server) autoplace(d *definition, count int, now time.Time) answer {
	var a answer
	chosen := s.st.candidates(d)
	if len(chosen) < count {
		rc := a.add(maskError|maskRsc|maskCrt|codeNotEnoughNodes, "Not enough available nodes")
		rc.Details = fmt.Sprintf("Not enough nodes fulfilling the following auto-place criteria:\n * has a deployed storage pool named %v\n * the storage pools have to have at least '%d' free space\n * the node is online\n\nAuto-placing resource: %s",
			s.st.groupOf(d).storagePools(), d.totalKiB(), d.name)
		return a
	}
	var nodes []string
	for _, k := range chosen[:count] {
		s.place(d, k.node, k.name, false, nil, map[string]string{"StorPoolName": k.name}, now)
		nodes = append(nodes, k.node)
	}
	rc := a.add(maskRsc|maskCrt|codeCreated, fmt.Sprintf("Resource '%s' successfully autoplaced on %d nodes", d.name, count))
	rc.Details = fmt.Sprintf("Used nodes: '%s'", strings.Join(nodes, "', '"))
	return a
}

// SetOnline is a fault hook: the node's satellite connects (true) or goes offline (false).
// While it is offline the node is OFFLINE, its resources' state is unknown (no state), its
// peers see it Connecting (replication Off), and every synchronisation to or from it stops;
// it resumes where it stopped once the satellite is back, and resources deleted meanwhile
// are gone then.
func (s *Server) SetOnline(nodeName string, online bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.advance(now)
	n := s.st.nodes[nodeName]
	if n == nil {
		return fmt.Errorf("linstorsim: no node %q", nodeName)
	}
	n.online = online
	if online {
		for _, r := range s.st.resources {
			if r.node == nodeName && r.deleting {
				s.st.unplace(r)
			}
		}
	}
	return nil
}

package linstorsim

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// handlers are the operations the stand-in plays, by the document's operationId. Any other
// operation of the document is answered 501 and recorded as a violation.
var handlers = map[string]handler{
	"controllerVersion":        locked(controllerVersion),
	"controllerPropertyList":   locked(controllerPropertyList),
	"controllerPropertyModify": locked(controllerPropertyModify),
	"nodeList":                 locked(nodeList),
	"nodeAdd":                  locked(nodeAdd),
	"nodeStoragePoolCreate":    locked(nodeStoragePoolCreate),
	"viewStoragePools":         locked(viewStoragePools),
	"resourceGroupList":        locked(resourceGroupList),
	"resourceGroupModify":      resourceGroupModify,
	"resourceDefinitionList":   locked(resourceDefinitionList),
	"resourceDefinitionModify": locked(resourceDefinitionModify),
	"viewResources":            locked(viewResources),
	"resourceCreateOnNode":     locked(resourceCreateOnNode),
	"resourceDelete":           locked(resourceDelete),
}

// lockedHandler answers with the lock held, the world advanced to now.
type lockedHandler func(s *Server, c *call, now time.Time) (int, any)

func locked(h lockedHandler) handler {
	return func(s *Server, c *call) (int, any) {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := time.Now()
		s.advance(now)
		return h(s, c, now)
	}
}

// badBody answers a body that validated against the document but does not decode into what
// the stand-in reads: the stand-in's own mistake, recorded.
func (s *Server) badBody(c *call, err error) (int, any) {
	msg := fmt.Sprintf("%s: the stand-in cannot read a body the document allows: %v", c.operation, err)
	s.violations = append(s.violations, msg)
	var a answer
	a.add(maskError|codeInvldProp, msg)
	return http.StatusInternalServerError, a
}

// unplayed answers a request for something the stand-in does not play, recorded.
func (s *Server) unplayed(c *call, what string) (int, any) {
	msg := fmt.Sprintf("%s: the stand-in does not play %s", c.operation, what)
	s.violations = append(s.violations, msg)
	var a answer
	a.add(maskError|codeInvldProp, msg)
	return http.StatusInternalServerError, a
}

func matches(filter []string, name string) bool {
	if len(filter) == 0 {
		return true
	}
	for _, f := range filter {
		if strings.EqualFold(f, name) {
			return true
		}
	}
	return false
}

func controllerVersion(s *Server, _ *call, _ time.Time) (int, any) {
	return http.StatusOK, map[string]string{
		"version":          "0.0.0-linstorsim",
		"git_hash":         "0000000000000000000000000000000000000000",
		"build_time":       "1970-01-01T00:00:00+00:00",
		"rest_api_version": s.spec.doc.Info.Version,
	}
}

func controllerPropertyList(s *Server, _ *call, _ time.Time) (int, any) {
	return http.StatusOK, maps.Clone(s.st.ctrlProps)
}

func controllerPropertyModify(s *Server, c *call, _ time.Time) (int, any) {
	var m propsModify
	if err := c.decode(&m); err != nil {
		return s.badBody(c, err)
	}
	if a := checkProps(m, onController, maskCtrlConf); a.failed() {
		return a.status(http.StatusCreated), a
	}
	m.apply(s.st.ctrlProps)
	var a answer
	a.add(maskCtrlConf|maskMod|codeModified, "Successfully updated controller config")
	return http.StatusCreated, a
}

func nodeList(s *Server, c *call, _ time.Time) (int, any) {
	filter := c.query("nodes")
	out := []nodeJSON{}
	for _, name := range sortedKeys(s.st.nodes) {
		if matches(filter, name) {
			out = append(out, s.nodeView(s.st.nodes[name]))
		}
	}
	return http.StatusOK, out
}

func nodeAdd(s *Server, c *call, _ time.Time) (int, any) {
	var body struct {
		Name          string `json:"name"`
		Type          string `json:"type"`
		NetInterfaces []struct {
			Name    string `json:"name"`
			Address string `json:"address"`
		} `json:"net_interfaces"`
	}
	if err := c.decode(&body); err != nil {
		return s.badBody(c, err)
	}
	var a answer
	if s.st.nodes[body.Name] != nil {
		a.add(maskError|maskNode|maskCrt|codeExistsNode, fmt.Sprintf("Name '%s' is already in use by a node.", body.Name))
		return a.status(http.StatusCreated), a
	}
	if body.Type != "Satellite" && body.Type != "Combined" {
		rc := a.add(maskError|maskNode|maskCrt|codeInvldNodeType, fmt.Sprintf("Node type '%s' is not played: the stand-in plays satellites.", body.Type))
		rc.Correction = "Register the node as a Satellite."
		return a.status(http.StatusCreated), a
	}
	if len(body.NetInterfaces) == 0 || net.ParseIP(body.NetInterfaces[0].Address) == nil {
		rc := a.add(maskError|maskNode|maskCrt|codeInvldNetAddr, fmt.Sprintf("Node '%s' needs a network interface with a valid IP address.", body.Name))
		rc.Correction = "Give the satellite's address in net_interfaces."
		return a.status(http.StatusCreated), a
	}
	address := body.NetInterfaces[0].Address
	online := s.st.satellites[body.Name] == address
	n := s.st.addNode(body.Name, address, online)
	rc := a.add(maskNode|maskCrt|codeCreated, fmt.Sprintf("New node '%s' registered.", body.Name))
	rc.Details = fmt.Sprintf("Node '%s' UUID is: %s", body.Name, n.uuid)
	if !online {
		rc := a.add(maskWarn|maskNode|maskCrt|codeWarnNotConn, fmt.Sprintf("No active connection to satellite '%s'", body.Name))
		rc.Details = "The controller is trying to (re-) establish a connection to the satellite."
	}
	return http.StatusCreated, a
}

// nodeStoragePoolCreate creates a storage pool on a node, as LINSTOR does: of any provider
// kind, backed by what its StorDriver properties name on the node (a volume group, a folder),
// which the stand-in does not look at. It plays no capacity: the pool is empty.
func nodeStoragePoolCreate(s *Server, c *call, _ time.Time) (int, any) {
	var body struct {
		Name     string            `json:"storage_pool_name"`
		Provider string            `json:"provider_kind"`
		Props    map[string]string `json:"props"`
	}
	if err := c.decode(&body); err != nil {
		return s.badBody(c, err)
	}
	var a answer
	nodeName := c.params["node"]
	if s.st.nodes[nodeName] == nil {
		a.add(maskError|maskStorPool|maskCrt|codeNotFoundNode, fmt.Sprintf("Node '%s' not found.", nodeName))
		return a.status(http.StatusCreated), a
	}
	if s.st.pools[nodeKey{nodeName, body.Name}] != nil {
		a.add(maskError|maskStorPool|maskCrt|codeExistsStorPool, fmt.Sprintf("A storage pool with the name '%s' already exists on node '%s'.", body.Name, nodeName))
		return a.status(http.StatusCreated), a
	}
	p := &pool{node: nodeName, name: body.Name, provider: body.Provider, uuid: newUUID()}
	s.st.pools[nodeKey{nodeName, body.Name}] = p
	rc := a.add(maskStorPool|maskCrt|codeCreated, fmt.Sprintf("Storage pool '%s' on node '%s' registered.", body.Name, nodeName))
	rc.Details = fmt.Sprintf("Storage pool '%s' on node '%s' UUID is: %s", body.Name, nodeName, p.uuid)
	return http.StatusCreated, a
}

func viewStoragePools(s *Server, c *call, _ time.Time) (int, any) {
	nodes, pools := c.query("nodes"), c.query("storage_pools")
	out := []poolJSON{}
	for _, n := range sortedKeys(s.st.nodes) {
		if !matches(nodes, n) {
			continue
		}
		var names []string
		for k := range s.st.pools {
			if k.node == n {
				names = append(names, k.name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			if matches(pools, name) {
				out = append(out, poolView(s.st.pools[nodeKey{n, name}]))
			}
		}
	}
	return http.StatusOK, out
}

func resourceGroupList(s *Server, c *call, _ time.Time) (int, any) {
	filter := c.query("resource_groups")
	out := []groupJSON{}
	for _, name := range sortedKeys(s.st.groups) {
		if matches(filter, name) {
			out = append(out, groupView(s.st.groups[name]))
		}
	}
	return http.StatusOK, out
}

func resourceDefinitionList(s *Server, c *call, _ time.Time) (int, any) {
	filter := c.query("resource_definitions")
	withVolumes := c.req.URL.Query().Get("with_volume_definitions") == "true"
	out := []definitionJSON{}
	for _, name := range sortedKeys(s.st.definitions) {
		if matches(filter, name) {
			out = append(out, definitionView(s.st.definitions[name], withVolumes))
		}
	}
	return http.StatusOK, out
}

func resourceDefinitionModify(s *Server, c *call, _ time.Time) (int, any) {
	var body struct {
		propsModify
		DrbdPort      *int32   `json:"drbd_port"`
		DrbdPeerSlots *int32   `json:"drbd_peer_slots"`
		LayerStack    []string `json:"layer_stack"`
		ResourceGroup string   `json:"resource_group"`
	}
	if err := c.decode(&body); err != nil {
		return s.badBody(c, err)
	}
	if body.DrbdPort != nil || body.DrbdPeerSlots != nil || len(body.LayerStack) > 0 || body.ResourceGroup != "" {
		return s.unplayed(c, "changes to a resource definition other than its properties")
	}
	var a answer
	name := c.params["resource"]
	d := s.st.definitions[name]
	if d == nil {
		a.add(maskError|maskRscDfn|maskMod|codeNotFoundRscDfn, fmt.Sprintf("Resource definition '%s' not found.", name))
		return a.status(http.StatusOK), a
	}
	if a := checkProps(body.propsModify, onDefinition, maskRscDfn); a.failed() {
		return a.status(http.StatusOK), a
	}
	body.apply(d.props)
	rc := a.add(maskRscDfn|maskMod|codeModified, fmt.Sprintf("Resource definition '%s' modified.", name))
	rc.Details = fmt.Sprintf("Resource definition '%s' UUID is: %s", name, d.uuid)
	return http.StatusOK, a
}

func viewResources(s *Server, c *call, _ time.Time) (int, any) {
	nodes, rscs, pools := c.query("nodes"), c.query("resources"), c.query("storage_pools")
	out := []resourceJSON{}
	for _, k := range sortedRscKeys(s.st.resources) {
		r := s.st.resources[k]
		if matches(nodes, r.node) && matches(rscs, r.def) && matches(pools, r.pool) {
			out = append(out, s.resourceView(r))
		}
	}
	return http.StatusOK, out
}

func resourceCreateOnNode(s *Server, c *call, now time.Time) (int, any) {
	var body struct {
		Resource struct {
			Name     string            `json:"name"`
			NodeName string            `json:"node_name"`
			Props    map[string]string `json:"props"`
			Flags    []string          `json:"flags"`
		} `json:"resource"`
		DrbdNodeID *int32 `json:"drbd_node_id"`
	}
	if err := c.decode(&body); err != nil {
		return s.badBody(c, err)
	}
	if body.DrbdNodeID != nil {
		return s.unplayed(c, "a chosen DRBD node id")
	}
	var a answer
	name, nodeName := c.params["resource"], c.params["node"]
	if body.Resource.Name != "" && body.Resource.Name != name || body.Resource.NodeName != "" && body.Resource.NodeName != nodeName {
		rc := a.add(maskError|maskRsc|maskCrt|codeInvldProp, fmt.Sprintf("The body names resource '%s' on node '%s', the path '%s' on '%s'.", body.Resource.Name, body.Resource.NodeName, name, nodeName))
		rc.Correction = "Name the same resource and node in the path and the body."
		return a.status(http.StatusCreated), a
	}
	d := s.st.definitions[name]
	if d == nil {
		a.add(maskError|maskRsc|maskCrt|codeNotFoundRscDfn, fmt.Sprintf("Resource definition '%s' not found.", name))
		return a.status(http.StatusCreated), a
	}
	n := s.st.nodes[nodeName]
	if n == nil {
		a.add(maskError|maskRsc|maskCrt|codeNotFoundNode, fmt.Sprintf("Node '%s' not found.", nodeName))
		return a.status(http.StatusCreated), a
	}
	if existing := s.st.resources[rscKey{name, nodeName}]; existing != nil {
		rc := a.add(maskError|maskRsc|maskCrt|codeExistsRsc, fmt.Sprintf("A resource with the name '%s' already exists on node '%s'.", name, nodeName))
		rc.Details = fmt.Sprintf("Resource '%s' on node '%s' UUID is: %s", name, nodeName, existing.uuid)
		return a.status(http.StatusCreated), a
	}
	diskless := slices.Contains(body.Resource.Flags, "DISKLESS") || slices.Contains(body.Resource.Flags, "DRBD_DISKLESS")
	for _, f := range body.Resource.Flags {
		if f != "DISKLESS" && f != "DRBD_DISKLESS" {
			return s.unplayed(c, fmt.Sprintf("the resource flag %q", f))
		}
	}
	poolName := body.Resource.Props["StorPoolName"]
	switch {
	case diskless:
		poolName = DisklessPool
	case poolName == "":
		poolName = DefaultPool
	}
	p := s.st.pools[nodeKey{nodeName, poolName}]
	if p == nil {
		rc := a.add(maskError|maskRsc|maskCrt|codeNotFoundStorPl, fmt.Sprintf("Storage pool '%s' on node '%s' not found.", poolName, nodeName))
		rc.Correction = "Name a storage pool the node has in the resource's StorPoolName property."
		return a.status(http.StatusCreated), a
	}
	if diskless != (p.provider == "DISKLESS") {
		a.add(maskError|maskRsc|maskCrt|codeInvldProp, fmt.Sprintf("Storage pool '%s' on node '%s' does not hold a %s resource.", poolName, nodeName, map[bool]string{true: "diskless", false: "diskful"}[diskless]))
		return a.status(http.StatusCreated), a
	}
	if !diskless && p.free < d.totalKiB() {
		rc := a.add(maskError|maskRsc|maskCrt|codeInvldVlmSize, fmt.Sprintf("Not enough free space available for volume 0 of resource '%s'.", name))
		rc.Details = fmt.Sprintf("Resource: %s, node: %s, storage pool: %s, free: %d KiB, needed: %d KiB", name, nodeName, poolName, p.free, d.totalKiB())
		return a.status(http.StatusCreated), a
	}
	props := maps.Clone(body.Resource.Props)
	if props == nil {
		props = map[string]string{}
	}
	props["StorPoolName"] = poolName
	r := s.place(d, nodeName, poolName, diskless, slices.Clone(body.Resource.Flags), props, now)
	rc := a.add(maskRsc|maskCrt|codeCreated, fmt.Sprintf("New resource '%s' on node '%s' registered.", name, nodeName))
	rc.Details = fmt.Sprintf("Resource '%s' on node '%s' UUID is: %s", name, nodeName, r.uuid)
	if !n.online {
		rc := a.add(maskWarn|maskRsc|maskCrt|codeWarnNotConn, fmt.Sprintf("No active connection to satellite '%s'", nodeName))
		rc.Details = "The resource will be deployed once the satellite is connected."
	} else {
		a.add(maskRsc|maskCrt|codeCreated, fmt.Sprintf("Resource '%s' on '%s' ready", name, nodeName))
	}
	return http.StatusCreated, a
}

func resourceDelete(s *Server, c *call, _ time.Time) (int, any) {
	var a answer
	name, nodeName := c.params["resource"], c.params["node"]
	r := s.st.resources[rscKey{name, nodeName}]
	if r == nil {
		a.add(maskWarn|maskRsc|maskDel|codeWarnNotFound, fmt.Sprintf("Resource '%s' on node '%s' not found.", name, nodeName))
		return http.StatusOK, a
	}
	if r.inUse {
		rc := a.add(maskError|maskRsc|maskDel|codeInUse, fmt.Sprintf("Resource '%s' is still in use.", name))
		rc.Cause = "Resource is mounted/in use."
		rc.Correction = fmt.Sprintf("Un-mount resource '%s' on the node '%s'.", name, nodeName)
		return a.status(http.StatusOK), a
	}
	if !r.diskless && s.st.diskfulCount(name) == 1 && hasDiskless(s.st, name) {
		rc := a.add(maskError|maskRsc|maskDel|codeInUse, fmt.Sprintf("Last resource of '%s' with disk still has diskless resources attached.", name))
		rc.Cause = "Resource still has diskless users."
		rc.Correction = "Before deleting this resource, delete the diskless resources attached to it."
		return a.status(http.StatusOK), a
	}
	if !s.st.online(nodeName) {
		r.deleting = true
		rc := a.add(maskRsc|maskDel|codeDeleted, fmt.Sprintf("Resource '%s' on node '%s' preparing for deletion.", name, nodeName))
		rc.Details = fmt.Sprintf("Resource '%s' on node '%s' UUID is: %s", name, nodeName, r.uuid)
		a.add(maskWarn|maskRsc|maskDel|codeWarnNotConn, fmt.Sprintf("No active connection to satellite '%s'", nodeName))
		return http.StatusOK, a
	}
	s.st.unplace(r)
	rc := a.add(maskRsc|maskDel|codeDeleted, fmt.Sprintf("Resource '%s' on node '%s' deletion complete.", name, nodeName))
	rc.Details = fmt.Sprintf("Resource '%s' on node '%s' UUID was: %s", name, nodeName, r.uuid)
	return http.StatusOK, a
}

func hasDiskless(st *state, def string) bool {
	for _, r := range st.resourcesOf(def) {
		if r.diskless && !r.deleting {
			return true
		}
	}
	return false
}

package linstorsim

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// The JSON the stand-in writes, shaped by the document's schemas (its names, its enums).

type netInterfaceJSON struct {
	Name           string `json:"name"`
	Address        string `json:"address"`
	SatellitePort  int    `json:"satellite_port"`
	EncryptionType string `json:"satellite_encryption_type"`
	IsActive       bool   `json:"is_active"`
	UUID           string `json:"uuid"`
}

type nodeJSON struct {
	Name             string             `json:"name"`
	Type             string             `json:"type"`
	Flags            []string           `json:"flags"`
	Props            map[string]string  `json:"props"`
	NetInterfaces    []netInterfaceJSON `json:"net_interfaces"`
	ConnectionStatus string             `json:"connection_status"`
	UUID             string             `json:"uuid"`
	StorageProviders []string           `json:"storage_providers"`
	ResourceLayers   []string           `json:"resource_layers"`
}

type poolJSON struct {
	Name              string            `json:"storage_pool_name"`
	Node              string            `json:"node_name"`
	Provider          string            `json:"provider_kind"`
	Props             map[string]string `json:"props"`
	StaticTraits      map[string]string `json:"static_traits"`
	FreeCapacity      *int64            `json:"free_capacity,omitempty"`
	TotalCapacity     *int64            `json:"total_capacity,omitempty"`
	FreeSpaceMgrName  string            `json:"free_space_mgr_name"`
	UUID              string            `json:"uuid"`
	SupportsSnapshots bool              `json:"supports_snapshots"`
	ExternalLocking   bool              `json:"external_locking"`
}

type groupJSON struct {
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Props        map[string]string `json:"props"`
	SelectFilter map[string]any    `json:"select_filter"`
	UUID         string            `json:"uuid"`
}

type drbdRscDfnJSON struct {
	PeerSlots int32  `json:"peer_slots"`
	AlStripes int32  `json:"al_stripes"`
	Port      int32  `json:"port"`
	Transport string `json:"transport_type"`
	Down      bool   `json:"down"`
}

type rscDfnLayerJSON struct {
	Type string         `json:"type"`
	Data drbdRscDfnJSON `json:"data"`
}

type volumeDefinitionJSON struct {
	VolumeNumber int32             `json:"volume_number"`
	SizeKiB      int64             `json:"size_kib"`
	Props        map[string]string `json:"props"`
	Flags        []string          `json:"flags"`
	UUID         string            `json:"uuid"`
}

type definitionJSON struct {
	Name              string                 `json:"name"`
	Props             map[string]string      `json:"props"`
	Flags             []string               `json:"flags"`
	LayerData         []rscDfnLayerJSON      `json:"layer_data"`
	UUID              string                 `json:"uuid"`
	ResourceGroupName string                 `json:"resource_group_name"`
	VolumeDefinitions []volumeDefinitionJSON `json:"volume_definitions,omitempty"`
}

type drbdConnectionJSON struct {
	Connected bool   `json:"connected"`
	Message   string `json:"message"`
}

type drbdResourceJSON struct {
	NodeID      int32                         `json:"node_id"`
	PeerSlots   int32                         `json:"peer_slots"`
	Flags       []string                      `json:"flags"`
	Connections map[string]drbdConnectionJSON `json:"connections"`
	MayPromote  bool                          `json:"may_promote"`
}

type resourceLayerJSON struct {
	Type     string              `json:"type"`
	Children []resourceLayerJSON `json:"children,omitempty"`
	Drbd     *drbdResourceJSON   `json:"drbd,omitempty"`
}

type replicationStateJSON struct {
	State       string   `json:"replication_state"`
	DonePercent *float64 `json:"done_percentage,omitempty"`
}

type volumeStateJSON struct {
	DiskState         string                          `json:"disk_state,omitempty"`
	ReplicationStates map[string]replicationStateJSON `json:"replication_states,omitempty"`
}

type volumeJSON struct {
	VolumeNumber     int32             `json:"volume_number"`
	StoragePoolName  string            `json:"storage_pool_name"`
	ProviderKind     string            `json:"provider_kind"`
	DevicePath       string            `json:"device_path"`
	AllocatedSizeKiB int64             `json:"allocated_size_kib"`
	UsableSizeKiB    int64             `json:"usable_size_kib"`
	Props            map[string]string `json:"props"`
	Flags            []string          `json:"flags"`
	State            volumeStateJSON   `json:"state"`
	UUID             string            `json:"uuid"`
	Reports          []apiCallRc       `json:"reports"`
}

type resourceStateJSON struct {
	InUse bool `json:"in_use"`
}

type resourceJSON struct {
	Name            string             `json:"name"`
	NodeName        string             `json:"node_name"`
	Props           map[string]string  `json:"props"`
	Flags           []string           `json:"flags"`
	LayerObject     resourceLayerJSON  `json:"layer_object"`
	State           *resourceStateJSON `json:"state,omitempty"`
	UUID            string             `json:"uuid"`
	CreateTimestamp int64              `json:"create_timestamp"`
	Volumes         []volumeJSON       `json:"volumes"`
}

func (s *Server) nodeView(n *node) nodeJSON {
	status := "ONLINE"
	if !n.online {
		status = "OFFLINE"
	}
	return nodeJSON{
		Name:  n.name,
		Type:  "Satellite",
		Flags: []string{},
		Props: maps.Clone(n.props),
		NetInterfaces: []netInterfaceJSON{{
			Name: "default", Address: n.address, SatellitePort: 3366, EncryptionType: "PLAIN", IsActive: true, UUID: n.uuid,
		}},
		ConnectionStatus: status,
		UUID:             n.uuid,
		StorageProviders: []string{"DISKLESS", "LVM", "LVM_THIN", "ZFS", "ZFS_THIN", "FILE", "FILE_THIN"},
		ResourceLayers:   []string{"DRBD", "STORAGE"},
	}
}

func poolView(p *pool) poolJSON {
	out := poolJSON{
		Name:              p.name,
		Node:              p.node,
		Provider:          p.provider,
		Props:             map[string]string{},
		StaticTraits:      map[string]string{"Provisioning": "Thin"},
		FreeSpaceMgrName:  p.node + ";" + p.name,
		UUID:              p.uuid,
		SupportsSnapshots: p.provider == "LVM_THIN" || p.provider == "ZFS_THIN" || p.provider == "ZFS",
	}
	switch p.provider {
	case "DISKLESS":
		out.StaticTraits = map[string]string{"SupportsSnapshots": "false"}
	case "LVM", "ZFS", "FILE":
		out.StaticTraits = map[string]string{"Provisioning": "Fat"}
		fallthrough
	default:
		free, total := p.free, p.total
		out.FreeCapacity, out.TotalCapacity = &free, &total
	}
	return out
}

func groupView(g *group) groupJSON {
	return groupJSON{Name: g.name, Description: g.description, Props: maps.Clone(g.props), SelectFilter: cloneFilter(g.filter), UUID: g.uuid}
}

func definitionView(d *definition, withVolumes bool) definitionJSON {
	out := definitionJSON{
		Name:              d.name,
		Props:             maps.Clone(d.props),
		Flags:             []string{},
		LayerData:         []rscDfnLayerJSON{{Type: "DRBD", Data: drbdRscDfnJSON{PeerSlots: 7, AlStripes: 1, Port: d.port, Transport: "IP"}}},
		UUID:              d.uuid,
		ResourceGroupName: d.group,
	}
	if withVolumes {
		out.VolumeDefinitions = []volumeDefinitionJSON{}
		for i, size := range d.sizes {
			out.VolumeDefinitions = append(out.VolumeDefinitions, volumeDefinitionJSON{
				VolumeNumber: int32(i), SizeKiB: size, Props: map[string]string{}, Flags: []string{}, UUID: fmt.Sprintf("%s-v%d", d.uuid, i),
			})
		}
	}
	return out
}

// resourceView is a resource with its volumes as the controller reports them: the state the
// satellite last sent, nothing while the satellite is offline.
func (s *Server) resourceView(r *resource) resourceJSON {
	st := s.st
	d := st.definitions[r.def]
	online := st.nodes[r.node] != nil && st.nodes[r.node].online
	flags := append([]string{}, r.flags...)
	if r.diskless && !slices.Contains(flags, "DRBD_DISKLESS") {
		flags = append(flags, "DRBD_DISKLESS")
	}
	if r.deleting {
		flags = append(flags, "DELETE", "DRBD_DELETE")
	}
	connections := map[string]drbdConnectionJSON{}
	peers := st.resourcesOf(r.def)
	for _, p := range peers {
		if p == r {
			continue
		}
		peerOnline := st.nodes[p.node] != nil && st.nodes[p.node].online
		switch {
		case r.standAlone || p.standAlone:
			connections[p.node] = drbdConnectionJSON{Connected: false, Message: "StandAlone"}
		case !peerOnline:
			connections[p.node] = drbdConnectionJSON{Connected: false, Message: "Connecting"}
		default:
			connections[p.node] = drbdConnectionJSON{Connected: true, Message: "Connected"}
		}
	}
	layer := resourceLayerJSON{Type: "DRBD", Drbd: &drbdResourceJSON{
		NodeID: r.nodeID, PeerSlots: 7, Flags: []string{}, Connections: connections, MayPromote: !r.inUse && online,
	}}
	if !r.diskless {
		layer.Children = []resourceLayerJSON{{Type: "STORAGE"}}
	}
	out := resourceJSON{
		Name:            r.def,
		NodeName:        r.node,
		Props:           maps.Clone(r.props),
		Flags:           flags,
		LayerObject:     layer,
		UUID:            r.uuid,
		CreateTimestamp: r.created.UnixMilli(),
		Volumes:         []volumeJSON{},
	}
	if online {
		out.State = &resourceStateJSON{InUse: r.inUse}
	}
	source := st.sourceFor(r)
	for i, size := range d.sizes {
		v := volumeJSON{
			VolumeNumber:     int32(i),
			StoragePoolName:  r.pool,
			ProviderKind:     st.pools[nodeKey{r.node, r.pool}].provider,
			DevicePath:       fmt.Sprintf("/dev/drbd%d", 1000+int(d.port-7000)*8+i),
			AllocatedSizeKiB: size,
			UsableSizeKiB:    size,
			Props:            map[string]string{},
			Flags:            []string{},
			UUID:             fmt.Sprintf("%s-v%d", r.uuid, i),
			Reports:          []apiCallRc{},
		}
		if r.diskless {
			v.AllocatedSizeKiB = 0
		}
		if online {
			v.State = s.volumeState(r, source, peers)
		}
		out.Volumes = append(out.Volumes, v)
	}
	return out
}

// volumeState is the disk state of r's volume and its replication towards every peer.
func (s *Server) volumeState(r, source *resource, peers []*resource) volumeStateJSON {
	st := s.st
	state := volumeStateJSON{DiskState: "UpToDate", ReplicationStates: map[string]replicationStateJSON{}}
	switch {
	case r.diskless:
		state.DiskState = "Diskless"
	case r.sync != nil || r.standAlone:
		state.DiskState = "Inconsistent"
	}
	for _, p := range peers {
		if p == r {
			continue
		}
		peerOnline := st.nodes[p.node] != nil && st.nodes[p.node].online
		var rs replicationStateJSON
		switch {
		case r.standAlone || p.standAlone || !peerOnline:
			rs.State = "Off"
		case r.sync != nil && p == source:
			done := r.sync.done
			rs = replicationStateJSON{State: "SyncTarget", DonePercent: &done}
		case p.sync != nil && st.sourceFor(p) == r:
			done := p.sync.done
			rs = replicationStateJSON{State: "SyncSource", DonePercent: &done}
		default:
			rs.State = "Established"
		}
		state.ReplicationStates[p.node] = rs
	}
	return state
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

package drbd

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The bounds of one `drbdsetup status --json` answer. A node of a small edge cluster holds some
// tens of resources, each a few KiB of JSON; anything far beyond that is not drbdsetup talking.
const (
	// MaxStatusBytes is the largest answer ParseStatus reads.
	MaxStatusBytes = 8 << 20
	// MaxStatusResources is the most resources ParseStatus accepts in one answer.
	MaxStatusResources = 1000
)

// Resource is one DRBD resource as this node sees it. The JSON names are drbdsetup's, so that
// a parsed answer encodes back into one ParseStatus reads again.
type Resource struct {
	// Name is the resource's name; LINSTOR names them after the volume (pvc-...).
	Name string `json:"name"`
	// NodeID is this node's node-id in the resource (-1 when the kernel has none yet).
	NodeID int `json:"node-id"`
	// Role is this node's role: Primary, Secondary or Unknown.
	Role string `json:"role"`
	// Suspended is true while I/O on the resource is suspended, for any reason.
	Suspended bool `json:"suspended"`
	// Devices are the resource's volumes on this node.
	Devices []Device `json:"devices"`
	// Connections are this node's connections to the resource's peers.
	Connections []Connection `json:"connections"`
}

// Device is one volume of a resource on this node.
type Device struct {
	// Volume is the volume number within the resource.
	Volume int `json:"volume"`
	// Minor is the device's minor number (/dev/drbd<minor>).
	Minor int `json:"minor"`
	// DiskState is the local disk's state: UpToDate, Inconsistent, Outdated, Diskless...
	DiskState string `json:"disk-state"`
	// Client is true when the volume is diskless on purpose (a DRBD client or a tiebreaker).
	Client bool `json:"client"`
	// Quorum is true while the device has quorum.
	Quorum bool `json:"quorum"`
	// SizeKiB, ReadKiB and WrittenKiB are the device's size and the data read from and
	// written to it. drbdsetup prints them only when the kernel reports the device's
	// statistics; they are nil otherwise.
	SizeKiB    *uint64 `json:"size,omitempty"`
	ReadKiB    *uint64 `json:"read,omitempty"`
	WrittenKiB *uint64 `json:"written,omitempty"`
}

// Connection is this node's connection to one peer of a resource.
type Connection struct {
	// PeerNodeID is the peer's node-id in the resource.
	PeerNodeID int `json:"peer-node-id"`
	// Name is the connection's name: the peer's host name in the resource file, the name
	// drbdadm takes after the colon in "resource:peer".
	Name string `json:"name"`
	// ConnectionState is Connected, Connecting, StandAlone, Disconnecting...
	ConnectionState string `json:"connection-state"`
	// PeerRole is the peer's role: Primary, Secondary, or Unknown while not connected.
	PeerRole string `json:"peer-role"`
	// PeerDevices are the peer's side of each volume.
	PeerDevices []PeerDevice `json:"peer_devices"`
}

// PeerDevice is one volume as seen over one connection.
type PeerDevice struct {
	// Volume is the volume number within the resource.
	Volume int `json:"volume"`
	// ReplicationState is Established when in sync, SyncSource or SyncTarget during a
	// resynchronisation, PausedSyncS or PausedSyncT while it is paused, VerifyS or VerifyT
	// during an online verify, Off while not connected.
	ReplicationState string `json:"replication-state"`
	// PeerDiskState is the peer's disk state as this node knows it (DUnknown while not
	// connected).
	PeerDiskState string `json:"peer-disk-state"`
	// PeerClient is true when the peer is diskless on purpose (a client or a tiebreaker).
	PeerClient bool `json:"peer-client"`
	// OutOfSyncKiB is how much of the volume this node knows differs from the peer.
	OutOfSyncKiB uint64 `json:"out-of-sync"`
	// ResyncDonePercent is the progress of a running resynchronisation or online verify,
	// 0 to 100. drbdsetup prints it only while one runs; it is nil otherwise.
	ResyncDonePercent *float64 `json:"percent-resync-done,omitempty"`
}

// StatusError is a `drbdsetup status --json` answer ParseStatus refused: Path names the JSON
// value (resources[1].connections[0].connection-state) and Reason says what is wrong with it.
type StatusError struct {
	Path   string
	Reason string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("drbdsetup status --json: %s: %s", e.Path, e.Reason)
}

// ParseStatus reads the output of `drbdsetup status --json` (DRBD 9). Fields it does not know
// are ignored, so a newer drbdsetup that prints more still parses; a field it needs that is
// missing or of the wrong type is an error naming the field's path. The bare nan and inf
// that older drbdsetup versions print in statistics (estimated-seconds-to-finish during a
// resync, drbd-utils 9.6) are read as null: no field ParseStatus keeps is ever one of them.
func ParseStatus(data []byte) ([]Resource, error) {
	if len(data) > MaxStatusBytes {
		return nil, &StatusError{Path: "resources", Reason: fmt.Sprintf("the answer is %d bytes, more than the %d this parser reads", len(data), MaxStatusBytes)}
	}
	data = nullNonFiniteNumbers(data)
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, &StatusError{Path: "resources", Reason: "not valid JSON: " + describeSyntaxError(err)}
	}
	items, err := arrayOf(raw, "resources")
	if err != nil {
		return nil, err
	}
	if len(items) > MaxStatusResources {
		return nil, &StatusError{Path: "resources", Reason: fmt.Sprintf("%d resources, more than the %d this parser accepts", len(items), MaxStatusResources)}
	}
	resources := make([]Resource, 0, len(items))
	for i, item := range items {
		resource, err := parseResource(item, fmt.Sprintf("resources[%d]", i))
		if err != nil {
			return nil, err
		}
		resources = append(resources, resource)
	}
	return resources, nil
}

func describeSyntaxError(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("%s (at byte %d)", syntax.Error(), syntax.Offset)
	}
	return err.Error()
}

func parseResource(raw json.RawMessage, path string) (Resource, error) {
	fields, err := objectOf(raw, path)
	if err != nil {
		return Resource{}, err
	}
	var r Resource
	if r.Name, err = fields.text("name"); err != nil {
		return Resource{}, err
	}
	if r.NodeID, err = fields.integer("node-id", -1); err != nil {
		return Resource{}, err
	}
	if r.Role, err = fields.text("role"); err != nil {
		return Resource{}, err
	}
	if r.Suspended, err = fields.boolean("suspended"); err != nil {
		return Resource{}, err
	}
	devices, err := fields.array("devices")
	if err != nil {
		return Resource{}, err
	}
	r.Devices = make([]Device, 0, len(devices))
	for i, item := range devices {
		device, err := parseDevice(item, fmt.Sprintf("%s.devices[%d]", path, i))
		if err != nil {
			return Resource{}, err
		}
		r.Devices = append(r.Devices, device)
	}
	connections, err := fields.array("connections")
	if err != nil {
		return Resource{}, err
	}
	r.Connections = make([]Connection, 0, len(connections))
	for i, item := range connections {
		connection, err := parseConnection(item, fmt.Sprintf("%s.connections[%d]", path, i))
		if err != nil {
			return Resource{}, err
		}
		r.Connections = append(r.Connections, connection)
	}
	return r, nil
}

func parseDevice(raw json.RawMessage, path string) (Device, error) {
	fields, err := objectOf(raw, path)
	if err != nil {
		return Device{}, err
	}
	var d Device
	if d.Volume, err = fields.integer("volume", 0); err != nil {
		return Device{}, err
	}
	if d.Minor, err = fields.integer("minor", 0); err != nil {
		return Device{}, err
	}
	if d.DiskState, err = fields.text("disk-state"); err != nil {
		return Device{}, err
	}
	if d.Client, err = fields.boolean("client"); err != nil {
		return Device{}, err
	}
	if d.Quorum, err = fields.boolean("quorum"); err != nil {
		return Device{}, err
	}
	if d.SizeKiB, err = fields.optionalCounter("size"); err != nil {
		return Device{}, err
	}
	if d.ReadKiB, err = fields.optionalCounter("read"); err != nil {
		return Device{}, err
	}
	if d.WrittenKiB, err = fields.optionalCounter("written"); err != nil {
		return Device{}, err
	}
	return d, nil
}

func parseConnection(raw json.RawMessage, path string) (Connection, error) {
	fields, err := objectOf(raw, path)
	if err != nil {
		return Connection{}, err
	}
	var c Connection
	if c.PeerNodeID, err = fields.integer("peer-node-id", 0); err != nil {
		return Connection{}, err
	}
	if c.Name, err = fields.text("name"); err != nil {
		return Connection{}, err
	}
	if c.ConnectionState, err = fields.text("connection-state"); err != nil {
		return Connection{}, err
	}
	if c.PeerRole, err = fields.text("peer-role"); err != nil {
		return Connection{}, err
	}
	peerDevices, err := fields.array("peer_devices")
	if err != nil {
		return Connection{}, err
	}
	c.PeerDevices = make([]PeerDevice, 0, len(peerDevices))
	for i, item := range peerDevices {
		peerDevice, err := parsePeerDevice(item, fmt.Sprintf("%s.peer_devices[%d]", path, i))
		if err != nil {
			return Connection{}, err
		}
		c.PeerDevices = append(c.PeerDevices, peerDevice)
	}
	return c, nil
}

func parsePeerDevice(raw json.RawMessage, path string) (PeerDevice, error) {
	fields, err := objectOf(raw, path)
	if err != nil {
		return PeerDevice{}, err
	}
	var p PeerDevice
	if p.Volume, err = fields.integer("volume", 0); err != nil {
		return PeerDevice{}, err
	}
	if p.ReplicationState, err = fields.text("replication-state"); err != nil {
		return PeerDevice{}, err
	}
	if p.PeerDiskState, err = fields.text("peer-disk-state"); err != nil {
		return PeerDevice{}, err
	}
	if p.PeerClient, err = fields.boolean("peer-client"); err != nil {
		return PeerDevice{}, err
	}
	if p.OutOfSyncKiB, err = fields.counter("out-of-sync"); err != nil {
		return PeerDevice{}, err
	}
	if p.ResyncDonePercent, err = fields.optionalNumber("percent-resync-done"); err != nil {
		return PeerDevice{}, err
	}
	return p, nil
}

package linstorgate

import (
	"net/http"
	"regexp"
	"strconv"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

// Value is what a query parameter or a property may hold.
type Value string

// The values the allowlist names.
const (
	// Name is a LINSTOR object's name: a letter, digit or underscore, then those, dots and
	// dashes, at most 253 characters.
	Name Value = "name"
	// Bool is true or false.
	Bool Value = "true|false"
	// QuorumValue is DRBD's quorum: off, majority, all or 1 to 32.
	QuorumValue Value = "off|majority|all|1-32"
	// OnNoQuorumValue is DRBD's on-no-quorum: io-error or suspend-io.
	OnNoQuorumValue Value = "io-error|suspend-io"
	// Count is a number from 0 to 100000 (golinstor's paging, offset and limit, 0 for all).
	Count Value = "0-100000"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$`)

// Allows reports whether v is a value of the kind.
func (k Value) Allows(v string) bool {
	switch k {
	case Name:
		return nameRE.MatchString(v)
	case Bool:
		return v == "true" || v == "false"
	case QuorumValue:
		if v == "off" || v == "majority" || v == "all" {
			return true
		}
		n, err := strconv.Atoi(v)
		return err == nil && n >= 1 && n <= 32 && strconv.Itoa(n) == v
	case OnNoQuorumValue:
		return v == "io-error" || v == "suspend-io"
	case Count:
		n, err := strconv.Atoi(v)
		return err == nil && n >= 0 && n <= 100000 && strconv.Itoa(n) == v
	}
	return false
}

// Body is what a request's body may be; each has its own parser, which refuses any field
// it does not name and rebuilds the body the gate forwards from what it read, so that LINSTOR
// never parses the operator's bytes.
type Body string

// The bodies of the allowlist.
const (
	// NoBody: the request has none.
	NoBody Body = ""
	// PropsModify is LINSTOR's GenericPropsModify: override_props and delete_props, each
	// key one of the rule's Props (no delete_namespaces).
	PropsModify Body = "override_props, delete_props"
	// GroupModify is a ResourceGroupModify: PropsModify and select_filter with place_count
	// 1 to 32 alone (no description, no other filter field, no peer slots).
	GroupModify Body = "override_props, delete_props, select_filter.place_count"
	// ResourceCreate is a ResourceCreate of one resource: resource.name and
	// resource.node_name as the path names them (or empty), resource.props the rule's Props,
	// resource.flags DRBD_DISKLESS or none (no layer list, no DRBD node id).
	ResourceCreate Body = "resource.name, resource.node_name, resource.props, resource.flags"
	// NodeCreate is a Node of type Satellite with one network interface: name, address,
	// satellite_port (0, or LINSTOR's 3366 plain and 3367 SSL), satellite_encryption_type
	// PLAIN or SSL, is_active; no properties, no flags.
	NodeCreate Body = "name, type Satellite, net_interfaces[1]"
)

// Check is what the gate verifies against LINSTOR's and Kubernetes' state, beyond the
// request itself, before it forwards the request.
type Check string

// The checks of the allowlist.
const (
	// NoCheck: the request alone decides.
	NoCheck Check = ""
	// Stamp: the gate sets linstor.GateStampProp on the resource it creates (the request
	// cannot: the property is not among the rule's Props).
	Stamp Check = "the gate stamps the resource it creates"
	// StampedNotLastCopy: the resource carries the gate's stamp (the gate created it), and
	// if it is diskful, another diskful replica of the definition stays, known UpToDate
	// unless the one deleted is known not to be.
	StampedNotLastCopy Check = "only a resource the gate created, never the last copy"
	// KubernetesNode: node registration is on (--register-nodes), and the node is a
	// Kubernetes Node registered at one of its InternalIP addresses, as the gate reads it.
	KubernetesNode Check = "a Kubernetes Node at its InternalIP, with --register-nodes"
)

// Rule is one operation of LINSTOR's REST API the gate forwards.
type Rule struct {
	// Method and Path are the operation as LINSTOR's OpenAPI document names it, the path a
	// template whose {parameters} are LINSTOR names.
	Method, Path string
	// Query are the query parameters the request may carry, and their values.
	Query map[string]Value
	// Body is what its body may be.
	Body Body
	// Props are the property keys the body may set or delete, and their values.
	Props map[string]Value
	// Check is what the gate verifies before forwarding.
	Check Check
	// For says which of ReplicationUpgrade's calls (internal/linstor) it serves.
	For string
}

// Allowlist is every operation the gate forwards: what a ReplicationUpgrade asks of LINSTOR
// (internal/linstor's calls), and nothing else. Every (method, path) is an operation of
// LINSTOR's OpenAPI document (allowlist_test.go checks it against the document), and every
// query parameter one of the operation's.
var Allowlist = []Rule{
	{Method: http.MethodGet, Path: "/v1/controller/version", For: "Version"},
	{Method: http.MethodGet, Path: "/v1/controller/properties", For: "ControllerProps, BalanceResourcesEnabled"},
	{Method: http.MethodPost, Path: "/v1/controller/properties", Body: PropsModify,
		Props: map[string]Value{linstor.PropBalanceResourcesEnabled: Bool},
		For:   "SetBalanceResourcesEnabled, ModifyControllerProps (the balance task paused and put back)"},
	{Method: http.MethodGet, Path: "/v1/nodes", Query: map[string]Value{"nodes": Name, "offset": Count, "limit": Count}, For: "Nodes, Node"},
	{Method: http.MethodPost, Path: "/v1/nodes", Body: NodeCreate, Check: KubernetesNode,
		For: "RegisterNode (EdgeProfile storage.linstor.satellites: Nodewright)"},
	{Method: http.MethodGet, Path: "/v1/view/storage-pools", Query: map[string]Value{"nodes": Name, "storage_pools": Name, "offset": Count, "limit": Count},
		For: "StoragePools"},
	{Method: http.MethodGet, Path: "/v1/resource-groups", Query: map[string]Value{"resource_groups": Name}, For: "ResourceGroups, ResourceGroup"},
	{Method: http.MethodPut, Path: "/v1/resource-groups/{resource_group}", Body: GroupModify,
		Props: map[string]Value{linstor.PropQuorum: QuorumValue, linstor.PropOnNoQuorum: OnNoQuorumValue},
		For:   "SetPlaceCount, SetResourceGroupQuorum, ModifyResourceGroupProps (quorum and on-no-quorum put back)"},
	{Method: http.MethodGet, Path: "/v1/resource-definitions", Query: map[string]Value{"resource_definitions": Name, "with_volume_definitions": Bool},
		For: "ResourceDefinitions, ResourceDefinition"},
	{Method: http.MethodGet, Path: "/v1/view/resources", Query: map[string]Value{"nodes": Name, "resources": Name, "storage_pools": Name}, For: "Resources"},
	{Method: http.MethodPost, Path: "/v1/resource-definitions/{resource}/resources/{node}", Body: ResourceCreate, Check: Stamp,
		Props: map[string]Value{"StorPoolName": Name}, For: "PlaceReplica, PlaceTiebreaker"},
	{Method: http.MethodDelete, Path: "/v1/resource-definitions/{resource}/resources/{node}", Check: StampedNotLastCopy,
		For: "DeleteAddedReplica, DeleteTiebreaker"},
}

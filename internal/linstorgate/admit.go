package linstorgate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

// The reasons of a refusal, in its rule field and in the audit trail.
const (
	ReasonOperationNotAllowed = "OperationNotAllowed"
	ReasonQueryNotAllowed     = "QueryNotAllowed"
	ReasonBodyNotAllowed      = "BodyNotAllowed"
	ReasonPropertyNotAllowed  = "PropertyNotAllowed"
	ReasonValueNotAllowed     = "ValueNotAllowed"
	ReasonNameNotAllowed      = "NameNotAllowed"
	ReasonNotPlacedByTheGate  = "NotPlacedByTheGate"
	ReasonLastCopy            = "LastCopy"
	ReasonNodeRegistrationOff = "NodeRegistrationOff"
	ReasonNotAKubernetesNode  = "NotAKubernetesNode"
	ReasonNotTheNodesAddress  = "NotTheNodesAddress"
	ReasonUnauthenticated     = "Unauthenticated"
	ReasonNotTheOperator      = "NotTheOperator"
)

// Refusal is the gate's answer to a request it does not forward: JSON naming the method, the
// path, the rule that refused it and the property, query parameter or field at fault. Its
// message member is also what LINSTOR's ApiCallRc calls its text, so that a LINSTOR client
// (golinstor, internal/linstor) quotes it in its error.
type Refusal struct {
	RefusedBy string `json:"refused_by"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Rule      string `json:"rule"`
	// Property is the property key, query parameter or body field at fault, when one is.
	Property string `json:"property,omitempty"`
	Message  string `json:"message"`
	// Status is the HTTP status: 401 for a request without the operator's valid token,
	// 403 otherwise.
	Status int `json:"-"`
}

func (r *Refusal) Error() string { return r.Message }

// Refused is the name every refusal gives as its refused_by.
const Refused = "nodewright-linstor-gate"

func refuse(method, path, rule, property, format string, args ...any) *Refusal {
	msg := fmt.Sprintf("nodewright-linstor-gate refused %s %s (%s): %s", method, path, rule, fmt.Sprintf(format, args...))
	return &Refusal{RefusedBy: Refused, Method: method, Path: path, Rule: rule, Property: property, Message: msg, Status: 403}
}

// Admitted is a request the allowlist admits, as the gate forwards it: the path and query
// rebuilt from what was read, and the body re-encoded (nil when none).
type Admitted struct {
	Rule *Rule
	// Params are the path's parameters by the document's names (resource, node,
	// resource_group).
	Params map[string]string
	Path   string
	Query  url.Values
	Body   []byte
	// Node is what a node registration names, for the KubernetesNode check.
	Node *NodeRegistration
}

// NodeRegistration is what a node registration asks for.
type NodeRegistration struct {
	Name, Address string
}

// maxBody bounds a request body: LINSTOR's requests the allowlist admits are small.
const maxBody = 64 << 10

// Admit checks a request against the allowlist: its method and path, its query and its body.
// It reads nothing else (the rule's Check is the gate's, against LINSTOR and Kubernetes).
// registerNodes is whether node registration is on.
func Admit(method, path, rawQuery string, body []byte, registerNodes bool) (*Admitted, *Refusal) {
	rule, params, refusal := match(method, path)
	if refusal != nil {
		return nil, refusal
	}
	out := &Admitted{Rule: rule, Params: params, Path: expand(rule.Path, params)}
	if out.Query, refusal = admitQuery(rule, method, path, rawQuery); refusal != nil {
		return nil, refusal
	}
	if rule.Check == KubernetesNode && !registerNodes {
		return nil, refuse(method, path, ReasonNodeRegistrationOff, "", "node registration is off: the gate runs without --register-nodes (the chart's linstor.gate.registerNodes), as where Piraeus registers the satellites")
	}
	var err *Refusal
	switch rule.Body {
	case NoBody:
		if len(bytes.TrimSpace(body)) > 0 {
			return nil, refuse(method, path, ReasonBodyNotAllowed, "", "the operation takes no body")
		}
	case PropsModify, GroupModify:
		out.Body, err = admitPropsModify(rule, method, path, body)
	case ResourceCreate:
		out.Body, err = admitResourceCreate(rule, method, path, params, body)
	case NodeCreate:
		out.Body, out.Node, err = admitNodeCreate(method, path, body)
	default:
		err = refuse(method, path, ReasonBodyNotAllowed, "", "the gate reads no body of kind %q", rule.Body)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// match finds the rule of method and path; the path is the request's, still escaped.
func match(method, path string) (*Rule, map[string]string, *Refusal) {
	segments := strings.Split(path, "/")
	for i := range Allowlist {
		rule := &Allowlist[i]
		if rule.Method != method {
			continue
		}
		tmpl := strings.Split(rule.Path, "/")
		if len(tmpl) != len(segments) {
			continue
		}
		params := map[string]string{}
		ok := true
		var bad *Refusal
		for j, t := range tmpl {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				v, err := url.PathUnescape(segments[j])
				if err != nil || !Name.Allows(v) {
					bad = refuse(method, path, ReasonNameNotAllowed, t[1:len(t)-1], "%q is not a LINSTOR name (%s)", segments[j], nameRE)
					continue
				}
				params[t[1:len(t)-1]] = v
				continue
			}
			if t != segments[j] {
				ok = false
				break
			}
		}
		if ok && bad != nil {
			return nil, nil, bad
		}
		if ok {
			return rule, params, nil
		}
	}
	return nil, nil, refuse(method, path, ReasonOperationNotAllowed, "", "the operation is not one a ReplicationUpgrade makes (the gate's allowlist, docs/linstor.md)")
}

// expand is the template with its parameters, escaped.
func expand(tmpl string, params map[string]string) string {
	parts := strings.Split(tmpl, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			parts[i] = url.PathEscape(params[p[1:len(p)-1]])
		}
	}
	return strings.Join(parts, "/")
}

func admitQuery(rule *Rule, method, path, raw string) (url.Values, *Refusal) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, refuse(method, path, ReasonQueryNotAllowed, "", "the query does not parse: %v", err)
	}
	out := url.Values{}
	for _, key := range slices.Sorted(maps.Keys(q)) {
		kind, ok := rule.Query[key]
		if !ok {
			return nil, refuse(method, path, ReasonQueryNotAllowed, key, "query parameter %q is not allowed (allowed: %s)", key, strings.Join(slices.Sorted(maps.Keys(rule.Query)), ", "))
		}
		for _, v := range q[key] {
			if v == "" {
				continue
			}
			if !kind.Allows(v) {
				return nil, refuse(method, path, ReasonValueNotAllowed, key, "query parameter %s=%q is not %s", key, v, kind)
			}
			out.Add(key, v)
		}
	}
	return out, nil
}

// fields decodes a JSON object into its members, refusing anything but an object with
// members named in allowed, and anything after it.
func fields(method, path, where string, data []byte, allowed ...string) (map[string]json.RawMessage, *Refusal) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, refuse(method, path, ReasonBodyNotAllowed, where, "%s is not a JSON object: %v", describe(where), err)
	}
	if dec.More() {
		return nil, refuse(method, path, ReasonBodyNotAllowed, where, "%s: something follows the JSON object", describe(where))
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			field := k
			if where != "" {
				field = where + "." + k
			}
			return nil, refuse(method, path, ReasonBodyNotAllowed, field, "field %s is not allowed (allowed: %s)", field, strings.Join(allowed, ", "))
		}
	}
	return m, nil
}

func describe(where string) string {
	if where == "" {
		return "the body"
	}
	return where
}

// isNull reports whether a member is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// admitProps reads override_props and delete_props, each key one of the rule's Props.
func admitProps(rule *Rule, method, path string, m map[string]json.RawMessage, where string) (map[string]string, []string, *Refusal) {
	var set map[string]string
	var del []string
	if raw := m["override_props"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &set); err != nil {
			return nil, nil, refuse(method, path, ReasonBodyNotAllowed, where+"override_props", "override_props is not a map of strings: %v", err)
		}
	}
	if raw := m["delete_props"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &del); err != nil {
			return nil, nil, refuse(method, path, ReasonBodyNotAllowed, where+"delete_props", "delete_props is not a list of strings: %v", err)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(set)) {
		kind, ok := rule.Props[key]
		if !ok {
			return nil, nil, refuse(method, path, ReasonPropertyNotAllowed, key, "property %s is not allowed here (allowed: %s)", key, strings.Join(slices.Sorted(maps.Keys(rule.Props)), ", "))
		}
		if !kind.Allows(set[key]) {
			return nil, nil, refuse(method, path, ReasonValueNotAllowed, key, "property %s=%q is not %s", key, set[key], kind)
		}
	}
	for _, key := range del {
		if _, ok := rule.Props[key]; !ok {
			return nil, nil, refuse(method, path, ReasonPropertyNotAllowed, key, "deleting property %s is not allowed (allowed: %s)", key, strings.Join(slices.Sorted(maps.Keys(rule.Props)), ", "))
		}
		if _, both := set[key]; both {
			return nil, nil, refuse(method, path, ReasonBodyNotAllowed, key, "property %s is both set and deleted", key)
		}
	}
	slices.Sort(del)
	return set, slices.Compact(del), nil
}

// propsModify is the body forwarded for PropsModify and GroupModify.
type propsModify struct {
	OverrideProps map[string]string `json:"override_props,omitempty"`
	DeleteProps   []string          `json:"delete_props,omitempty"`
	SelectFilter  *placeCount       `json:"select_filter,omitempty"`
}

type placeCount struct {
	PlaceCount int32 `json:"place_count"`
}

func admitPropsModify(rule *Rule, method, path string, body []byte) ([]byte, *Refusal) {
	allowed := []string{"override_props", "delete_props"}
	if rule.Body == GroupModify {
		allowed = append(allowed, "select_filter")
	}
	m, refusal := fields(method, path, "", body, allowed...)
	if refusal != nil {
		return nil, refusal
	}
	out := propsModify{}
	if out.OverrideProps, out.DeleteProps, refusal = admitProps(rule, method, path, m, ""); refusal != nil {
		return nil, refusal
	}
	if raw := m["select_filter"]; !isNull(raw) {
		filter, refusal := fields(method, path, "select_filter", raw, "place_count")
		if refusal != nil {
			return nil, refusal
		}
		if raw := filter["place_count"]; !isNull(raw) {
			var n int32
			if err := json.Unmarshal(raw, &n); err != nil || n < 1 || n > 32 {
				return nil, refuse(method, path, ReasonValueNotAllowed, "select_filter.place_count", "place_count %s is not 1 to 32", raw)
			}
			out.SelectFilter = &placeCount{PlaceCount: n}
		}
	}
	if len(out.OverrideProps) == 0 && len(out.DeleteProps) == 0 && out.SelectFilter == nil {
		return nil, refuse(method, path, ReasonBodyNotAllowed, "", "the body changes nothing")
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, refuse(method, path, ReasonBodyNotAllowed, "", "the body cannot be encoded again: %v", err)
	}
	return data, nil
}

// resourceCreate is the body forwarded for a resource create.
type resourceCreate struct {
	Resource struct {
		Name     string            `json:"name"`
		NodeName string            `json:"node_name"`
		Props    map[string]string `json:"props,omitempty"`
		Flags    []string          `json:"flags,omitempty"`
	} `json:"resource"`
}

// disklessFlag is the one flag a resource create may carry: a diskless tiebreaker.
const disklessFlag = "DRBD_DISKLESS"

func admitResourceCreate(rule *Rule, method, path string, params map[string]string, body []byte) ([]byte, *Refusal) {
	top, refusal := fields(method, path, "", body, "resource")
	if refusal != nil {
		return nil, refusal
	}
	m, refusal := fields(method, path, "resource", top["resource"], "name", "node_name", "props", "flags")
	if refusal != nil {
		return nil, refusal
	}
	var name, node string
	var props map[string]string
	var flags []string
	for _, f := range []struct {
		key  string
		into any
	}{{"name", &name}, {"node_name", &node}, {"props", &props}, {"flags", &flags}} {
		if raw := m[f.key]; !isNull(raw) {
			if err := json.Unmarshal(raw, f.into); err != nil {
				return nil, refuse(method, path, ReasonBodyNotAllowed, "resource."+f.key, "resource.%s does not decode: %v", f.key, err)
			}
		}
	}
	if name != "" && name != params["resource"] {
		return nil, refuse(method, path, ReasonBodyNotAllowed, "resource.name", "resource.name %q is not the path's %q", name, params["resource"])
	}
	if node != "" && node != params["node"] {
		return nil, refuse(method, path, ReasonBodyNotAllowed, "resource.node_name", "resource.node_name %q is not the path's %q", node, params["node"])
	}
	for _, key := range slices.Sorted(maps.Keys(props)) {
		kind, ok := rule.Props[key]
		if !ok {
			return nil, refuse(method, path, ReasonPropertyNotAllowed, key, "property %s is not allowed on a resource the gate creates (allowed: %s)", key, strings.Join(slices.Sorted(maps.Keys(rule.Props)), ", "))
		}
		if !kind.Allows(props[key]) {
			return nil, refuse(method, path, ReasonValueNotAllowed, key, "property %s=%q is not %s", key, props[key], kind)
		}
	}
	for _, f := range flags {
		if f != disklessFlag {
			return nil, refuse(method, path, ReasonBodyNotAllowed, "resource.flags", "flag %q is not allowed (allowed: %s)", f, disklessFlag)
		}
	}
	out := resourceCreate{}
	out.Resource.Name, out.Resource.NodeName = params["resource"], params["node"]
	out.Resource.Props = map[string]string{linstor.GateStampProp: linstor.GateStampValue}
	maps.Copy(out.Resource.Props, props)
	if len(flags) > 0 {
		out.Resource.Flags = []string{disklessFlag}
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, refuse(method, path, ReasonBodyNotAllowed, "", "the body cannot be encoded again: %v", err)
	}
	return data, nil
}

// nodeCreate is the body forwarded for a node registration.
type nodeCreate struct {
	Name          string         `json:"name"`
	Type          string         `json:"type"`
	NetInterfaces []netInterface `json:"net_interfaces"`
}

type netInterface struct {
	Name                    string `json:"name"`
	Address                 string `json:"address"`
	SatellitePort           int32  `json:"satellite_port,omitempty"`
	SatelliteEncryptionType string `json:"satellite_encryption_type"`
	IsActive                bool   `json:"is_active"`
}

func admitNodeCreate(method, path string, body []byte) ([]byte, *NodeRegistration, *Refusal) {
	m, refusal := fields(method, path, "", body, "name", "type", "net_interfaces")
	if refusal != nil {
		return nil, nil, refusal
	}
	var out nodeCreate
	var ifaces []json.RawMessage
	for _, f := range []struct {
		key  string
		into any
	}{{"name", &out.Name}, {"type", &out.Type}, {"net_interfaces", &ifaces}} {
		if err := json.Unmarshal(m[f.key], f.into); err != nil || isNull(m[f.key]) {
			return nil, nil, refuse(method, path, ReasonBodyNotAllowed, f.key, "%s is missing or does not decode", f.key)
		}
	}
	if !Name.Allows(out.Name) {
		return nil, nil, refuse(method, path, ReasonNameNotAllowed, "name", "%q is not a LINSTOR name", out.Name)
	}
	if !strings.EqualFold(out.Type, "Satellite") {
		return nil, nil, refuse(method, path, ReasonValueNotAllowed, "type", "node type %q: only a Satellite is registered", out.Type)
	}
	out.Type = "Satellite"
	if len(ifaces) != 1 {
		return nil, nil, refuse(method, path, ReasonBodyNotAllowed, "net_interfaces", "%d network interfaces: a satellite is registered with one", len(ifaces))
	}
	nif, refusal := fields(method, path, "net_interfaces[0]", ifaces[0], "name", "address", "satellite_port", "satellite_encryption_type", "is_active")
	if refusal != nil {
		return nil, nil, refusal
	}
	var iface netInterface
	for _, f := range []struct {
		key  string
		into any
	}{{"name", &iface.Name}, {"address", &iface.Address}, {"satellite_port", &iface.SatellitePort}, {"satellite_encryption_type", &iface.SatelliteEncryptionType}, {"is_active", &iface.IsActive}} {
		if raw := nif[f.key]; !isNull(raw) {
			if err := json.Unmarshal(raw, f.into); err != nil {
				return nil, nil, refuse(method, path, ReasonBodyNotAllowed, "net_interfaces[0]."+f.key, "net_interfaces[0].%s does not decode: %v", f.key, err)
			}
		}
	}
	if !Name.Allows(iface.Name) {
		return nil, nil, refuse(method, path, ReasonNameNotAllowed, "net_interfaces[0].name", "%q is not a LINSTOR name", iface.Name)
	}
	switch enc := strings.ToUpper(iface.SatelliteEncryptionType); {
	case (enc == "" || enc == "PLAIN") && (iface.SatellitePort == 0 || iface.SatellitePort == 3366):
		iface.SatelliteEncryptionType = "PLAIN"
	case enc == "SSL" && (iface.SatellitePort == 0 || iface.SatellitePort == 3367):
		iface.SatelliteEncryptionType = "SSL"
	default:
		return nil, nil, refuse(method, path, ReasonValueNotAllowed, "net_interfaces[0].satellite_port", "satellite port %d with encryption %q: LINSTOR's own port, 3366 plain or 3367 SSL, or none", iface.SatellitePort, iface.SatelliteEncryptionType)
	}
	out.NetInterfaces = []netInterface{iface}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, nil, refuse(method, path, ReasonBodyNotAllowed, "", "the body cannot be encoded again: %v", err)
	}
	return data, &NodeRegistration{Name: out.Name, Address: iface.Address}, nil
}

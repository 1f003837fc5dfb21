package linstorgate_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate"
)

// FuzzAdmit: whatever the operator sends, Admit neither panics nor hangs; a request it admits
// is forwarded as the gate's own encoding, which Admit admits again unchanged (the stamp
// aside), whose properties are only the rule's, and whose path holds only LINSTOR names.
func FuzzAdmit(f *testing.F) {
	seeds := []struct{ method, path, query, body string }{
		{"GET", "/v1/nodes", "nodes=n1&limit=0&offset=0", ""},
		{"GET", "/v1/view/resources", "resources=pvc-1&nodes=n2", ""},
		{"POST", "/v1/controller/properties", "", `{"override_props":{"BalanceResourcesEnabled":"false"}}`},
		{"POST", "/v1/controller/properties", "", `{"override_props":{"` + handler + `":"x"}}`},
		{"PUT", "/v1/resource-groups/sc", "", `{"select_filter":{"place_count":2}}`},
		{"PUT", "/v1/resource-groups/sc", "", `{"override_props":{"DrbdOptions/Resource/quorum":"majority"},"delete_props":["DrbdOptions/Resource/on-no-quorum"],"select_filter":{}}`},
		{"POST", "/v1/resource-definitions/pvc-1/resources/n2", "", `{"resource":{"name":"pvc-1","node_name":"n2","props":{"StorPoolName":"thin"}}}`},
		{"POST", "/v1/resource-definitions/pvc-1/resources/n3", "", `{"resource":{"flags":["DRBD_DISKLESS"]}}`},
		{"DELETE", "/v1/resource-definitions/pvc-1/resources/n2", "", ""},
		{"POST", "/v1/nodes", "", `{"name":"n4","type":"Satellite","net_interfaces":[{"name":"default","address":"10.0.0.4","satellite_encryption_type":"PLAIN","is_active":true}]}`},
		{"POST", "/v1/nodes/n1/storage-pools", "", `{"storage_pool_name":"x"}`},
		{"PUT", "/v1/resource-groups/%2e%2e", "", `{"select_filter":{"place_count":2}}`},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, []byte(s.body), true)
	}
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte, registerNodes bool) {
		adm, refusal := linstorgate.Admit(method, path, query, body, registerNodes)
		if refusal != nil {
			if refusal.Rule == "" || refusal.Message == "" || adm != nil {
				t.Fatalf("a refusal without a rule or message: %+v, %+v", refusal, adm)
			}
			return
		}
		for _, seg := range strings.Split(strings.TrimPrefix(adm.Path, "/"), "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "%?#\\ ") {
				t.Fatalf("forwarded path %q has segment %q", adm.Path, seg)
			}
		}
		if adm.Body == nil {
			return
		}
		// Forwarding the forwarded body again: the same request.
		again, refusal := linstorgate.Admit(method, adm.Path, adm.Query.Encode(), withoutStamp(t, adm.Body), registerNodes)
		if refusal != nil {
			t.Fatalf("the forwarded body %s is refused when sent again: %s", adm.Body, refusal.Message)
		}
		if !bytes.Equal(again.Body, adm.Body) {
			t.Fatalf("forwarding is not stable: %s, then %s", adm.Body, again.Body)
		}
		for key := range propsOf(t, adm.Body) {
			if _, ok := adm.Rule.Props[key]; !ok && key != linstor.GateStampProp {
				t.Fatalf("forwarded property %s, not one of the rule's: %s", key, adm.Body)
			}
		}
	})
}

// withoutStamp is a forwarded resource create as the operator would send it: without the stamp.
func withoutStamp(t *testing.T, body []byte) []byte {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("the forwarded body %s is not JSON: %v", body, err)
	}
	if r, ok := m["resource"].(map[string]any); ok {
		if p, ok := r["props"].(map[string]any); ok {
			delete(p, linstor.GateStampProp)
		}
	}
	out, _ := json.Marshal(m)
	return out
}

// propsOf are the property keys a forwarded body sets or deletes.
func propsOf(t *testing.T, body []byte) map[string]bool {
	var m struct {
		OverrideProps map[string]string `json:"override_props"`
		DeleteProps   []string          `json:"delete_props"`
		Resource      *struct {
			Props map[string]string `json:"props"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("the forwarded body %s does not decode: %v", body, err)
	}
	out := map[string]bool{}
	for k := range m.OverrideProps {
		out[k] = true
	}
	for _, k := range m.DeleteProps {
		out[k] = true
	}
	if m.Resource != nil {
		for k := range m.Resource.Props {
			out[k] = true
		}
	}
	return out
}

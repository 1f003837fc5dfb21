package clusterspec_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/clusterspec"
)

// validSpec is a spec.yaml as the chart writes it, and parsedSpec what it means.
const validSpec = `legacy:
  configMapRef:
    namespace: edge
    name: node-init-state
  daemonSetRef:
    namespace: edge
    name: node-init
  eventComponent: node-init
heartbeatStaleAfter: 30s
`

var parsedSpec = nwv1.NodewrightClusterSpec{
	Legacy: nwv1.LegacySource{
		ConfigMapRef:   nwv1.NamespacedObjectReference{Namespace: "edge", Name: "node-init-state"},
		DaemonSetRef:   nwv1.NamespacedObjectReference{Namespace: "edge", Name: "node-init"},
		EventComponent: "node-init",
	},
	HeartbeatStaleAfter: metav1.Duration{Duration: 30 * time.Second},
}

func TestParseReadsTheSpec(t *testing.T) {
	got, err := clusterspec.Parse(validSpec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, parsedSpec) {
		t.Errorf("Parse = %+v\nwant    %+v", got, parsedSpec)
	}

	// What it leaves out stays unset (the CRD defaults it); what it adds is read.
	withoutThreshold := strings.Replace(validSpec, "heartbeatStaleAfter: 30s\n", "profileRef: {name: site-a}\n", 1)
	got, err = clusterspec.Parse(withoutThreshold)
	if err != nil {
		t.Fatal(err)
	}
	want := parsedSpec
	want.HeartbeatStaleAfter = metav1.Duration{}
	want.ProfileRef = &nwv1.ProfileReference{Name: "site-a"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v\nwant    %+v", got, want)
	}

	// JSON is YAML too.
	asJSON, err := yaml.YAMLToJSON([]byte(validSpec))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := clusterspec.Parse(string(asJSON)); err != nil || !reflect.DeepEqual(got, parsedSpec) {
		t.Errorf("Parse(%s) = %+v, %v", asJSON, got, err)
	}
}

// TestParseRefusesNamingTheProblem: every refusal starts with the ConfigMap key and names
// the field at fault, the way the API server would name it.
func TestParseRefusesNamingTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"empty", "", []string{"spec.yaml: empty"}},
		{"not YAML", "legacy: [unclosed\n", []string{"spec.yaml: ", "yaml: line 1"}},
		{"not a mapping", "- a\n- b\n", []string{"spec.yaml: ", "array"}},
		{"a typo in a key's case", strings.Replace(validSpec, "configMapRef:", "configmapref:", 1),
			[]string{"spec.yaml: ", `unknown field "legacy.configmapref"`}},
		{"a key that is not a field", strings.Replace(validSpec, "configMapRef:", "configMapRefs:", 1),
			[]string{"spec.yaml: ", `unknown field "legacy.configMapRefs"`}},
		{"the status", validSpec + "status: {phase: MultiNode}\n", []string{"spec.yaml: ", `unknown field "status"`}},
		{"a key twice", validSpec + "heartbeatStaleAfter: 45s\n", []string{"spec.yaml: ", "heartbeatStaleAfter"}},
		{"a duration that is not one", strings.Replace(validSpec, "30s", "thirty seconds", 1), []string{"spec.yaml: ", "thirty seconds"}},
		{"a name that is a number", strings.Replace(validSpec, "name: node-init\n", "name: 42\n", 1),
			[]string{"spec.yaml: ", "legacy.daemonSetRef.name"}},
		{"no eventComponent", strings.Replace(validSpec, "  eventComponent: node-init\n", "", 1),
			[]string{"spec.yaml: legacy.eventComponent is required"}},
		{"no configMapRef", strings.Replace(validSpec, "  configMapRef:\n    namespace: edge\n    name: node-init-state\n", "", 1),
			[]string{"spec.yaml: legacy.configMapRef.namespace is required"}},
		{"no DaemonSet name", strings.Replace(validSpec, "    name: node-init\n", "", 1),
			[]string{"spec.yaml: legacy.daemonSetRef.name is required"}},
		{"no legacy", "heartbeatStaleAfter: 30s\n", []string{"spec.yaml: legacy.configMapRef.namespace is required"}},
		{"null", "null\n", []string{"spec.yaml: legacy.configMapRef.namespace is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clusterspec.Parse(tc.text)
			if err == nil {
				t.Fatalf("Parse(%q) = nil error", tc.text)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Parse(%q) = %q; want it to say %q", tc.text, err, want)
				}
			}
			if !strings.HasPrefix(err.Error(), clusterspec.Key+": ") {
				t.Errorf("%q does not start with the key %s", err, clusterspec.Key)
			}
		})
	}
}

// FuzzParse: Parse reads what a person wrote into a ConfigMap. It never panics; a refusal
// names the key it read; what it accepts has every required legacy field, and reads back the
// same once written out again, as the controller writes it to the API server.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		validSpec,
		strings.Replace(validSpec, "heartbeatStaleAfter: 30s\n", "profileRef: {name: site-a}\n", 1),
		strings.Replace(validSpec, "configMapRef:", "configmapref:", 1),
		strings.Replace(validSpec, "30s", "1h30m", 1),
		strings.Replace(validSpec, "30s", "-5s", 1),
		validSpec + "heartbeatStaleAfter: 45s\n",
		`{"legacy":{"configMapRef":{"namespace":"a","name":"b"},"daemonSetRef":{"namespace":"a","name":"c"},"eventComponent":"x"}}`,
		"legacy: &a {configMapRef: *a}\n",
		"a: &a [*a, *a]\n",
		"---\n---\n",
		"legacy: null\n",
		"{}",
		"",
		"~",
		"\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		spec, err := clusterspec.Parse(text)
		if err != nil {
			if !strings.Contains(err.Error(), clusterspec.Key) {
				t.Fatalf("Parse(%q): %q does not name %s", text, err, clusterspec.Key)
			}
			return
		}
		l := spec.Legacy
		for _, v := range []string{l.ConfigMapRef.Namespace, l.ConfigMapRef.Name, l.DaemonSetRef.Namespace, l.DaemonSetRef.Name, l.EventComponent} {
			if v == "" {
				t.Fatalf("Parse(%q) accepted a spec without a required legacy field: %+v", text, spec)
			}
		}
		out, err := yaml.Marshal(spec)
		if err != nil {
			t.Fatalf("writing %+v out: %v", spec, err)
		}
		again, err := clusterspec.Parse(string(out))
		if err != nil {
			t.Fatalf("Parse(%q) accepted a spec it refuses written out again (%q): %v", text, out, err)
		}
		if !reflect.DeepEqual(again, spec) {
			t.Fatalf("Parse(%q) = %+v, but written out and read again %+v", text, spec, again)
		}
	})
}

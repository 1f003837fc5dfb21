package fleetsim

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// differences compares a and b as their JSON and names each field that differs, by its path:
// "items[2].metadata.labels.app: real \"x\", sim \"y\"".
func differences(real, sim any) []string {
	var a, b any
	for _, p := range []struct {
		from any
		to   *any
	}{{real, &a}, {sim, &b}} {
		data, err := json.Marshal(p.from)
		if err != nil {
			return []string{"encoding: " + err.Error()}
		}
		if err := json.Unmarshal(data, p.to); err != nil {
			return []string{"decoding: " + err.Error()}
		}
	}
	var out []string
	diffValue("", a, b, &out)
	return out
}

func diffValue(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			diffValue(strings.TrimPrefix(path+"."+k, "."), av[k], bv[k], out)
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		if len(av) != len(bv) {
			*out = append(*out, fmt.Sprintf("%s: real has %d items, sim %d: real %s, sim %s", path, len(av), len(bv), short(a), short(b)))
			return
		}
		for i := range av {
			diffValue(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], out)
		}
		return
	}
	if short(a) != short(b) {
		*out = append(*out, fmt.Sprintf("%s: real %s, sim %s", path, short(a), short(b)))
	}
}

func short(v any) string {
	data, _ := json.Marshal(v)
	if len(data) > 200 {
		return string(data[:200]) + "..."
	}
	return string(data)
}

// same fails the test with every field where what the real API server and the simulator
// answered differ.
func same(t testing.TB, what string, real, sim any) {
	t.Helper()
	if d := differences(real, sim); len(d) > 0 {
		t.Errorf("%s differs between the real API server and the simulator:\n  %s", what, strings.Join(d, "\n  "))
	}
}

func TestDifferencesNamesTheField(t *testing.T) {
	t.Parallel()
	got := differences(map[string]any{"a": map[string]any{"b": 1, "c": []int{1}}}, map[string]any{"a": map[string]any{"b": 2, "c": []int{1, 2}}})
	want := []string{"a.b: real 1, sim 2", "a.c: real has 1 items, sim 2: real [1], sim [1,2]"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("differences = %q, want %q", got, want)
	}
	if d := differences(map[string]int{"x": 1}, map[string]int{"x": 1}); d != nil {
		t.Fatalf("equal values differ: %q", d)
	}
}

package kubelite_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/spectrocloud/nodewright/internal/kubelite"
)

// applyMergePatch applies patch to target as RFC 7386 says.
func applyMergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = applyMergePatch(t[k], v)
	}
	return t
}

// withoutNulls is v as a merge patch's result has it: no member of an object is null.
func withoutNulls(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, x := range m {
		if x != nil {
			out[k] = withoutNulls(x)
		}
	}
	return out
}

func decode(t *testing.T, data []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
		return nil, false
	}
	return m, true
}

// checkMergePatch checks that MergePatch(a, b) applied to a gives b, a null member as good as
// none (the API server keeps none).
func checkMergePatch(t *testing.T, a, b []byte) {
	t.Helper()
	am, okA := decode(t, a)
	bm, okB := decode(t, b)
	if !okA || !okB {
		return
	}
	patch, err := kubelite.MergePatch(json.RawMessage(a), json.RawMessage(b), "")
	if err != nil {
		t.Fatalf("MergePatch(%s, %s): %v", a, b, err)
	}
	pm, ok := decode(t, patch)
	if !ok {
		t.Fatalf("the patch %s is not a JSON object", patch)
	}
	if got, want := withoutNulls(applyMergePatch(am, pm)), withoutNulls(bm); !reflect.DeepEqual(got, want) {
		t.Errorf("MergePatch(%s, %s) = %s, which makes %v, not %v", a, b, patch, got, want)
	}
}

func TestMergePatch(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{`{}`, `{}`, `{}`},
		{`{"a":1}`, `{"a":1}`, `{}`},
		{`{"a":1}`, `{"a":2}`, `{"a":2}`},
		{`{"a":1,"b":2}`, `{"a":1}`, `{"b":null}`},
		{`{"a":{"x":1,"y":2}}`, `{"a":{"x":1,"y":3,"z":4}}`, `{"a":{"y":3,"z":4}}`},
		{`{"a":{"x":1}}`, `{"a":null}`, `{"a":null}`},
		{`{"a":null}`, `{}`, `{}`},
		{`{}`, `{"a":null}`, `{}`},
		{`{"a":[1,2]}`, `{"a":[1,3]}`, `{"a":[1,3]}`},
		{`{"a":"s"}`, `{"a":{"x":1}}`, `{"a":{"x":1}}`},
		{`{"n":9007199254740993}`, `{"n":9007199254740995}`, `{"n":9007199254740995}`},
	} {
		patch, err := kubelite.MergePatch(json.RawMessage(tc.a), json.RawMessage(tc.b), "")
		if err != nil || string(patch) != tc.want {
			t.Errorf("MergePatch(%s, %s) = %s, %v; want %s", tc.a, tc.b, patch, err, tc.want)
		}
		checkMergePatch(t, []byte(tc.a), []byte(tc.b))
	}
	patch, err := kubelite.MergePatch(json.RawMessage(`{"metadata":{"name":"x"},"a":1}`), json.RawMessage(`{"metadata":{"name":"x"},"a":2}`), "42")
	if err != nil || string(patch) != `{"a":2,"metadata":{"resourceVersion":"42"}}` {
		t.Errorf("with a resourceVersion: %s, %v", patch, err)
	}
	if _, err := kubelite.MergePatch([]int{1}, map[string]int{}, ""); err == nil {
		t.Error("a list is not an object, and no error")
	}
}

// FuzzMergePatch: for any two JSON objects a and b, the patch turns a into b.
func FuzzMergePatch(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":{"b":{"c":[1,{"d":null}]}}}`, `{"a":{"b":null,"e":true}}`},
		{`{"status":{"phase":"Running","error":{"reason":"X"}}}`, `{"status":{"phase":"Failed"}}`},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) { checkMergePatch(t, a, b) })
}

package kubelite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// MergePatch is the JSON merge patch (RFC 7386) that turns base into modified, each encoded
// with encoding/json: what changed, and null for what modified no longer has. With a
// resourceVersion, the patch carries it too (metadata.resourceVersion), and the API server
// refuses it with a Conflict if the object changed since that version: controller-runtime's
// MergeFromWithOptimisticLock.
func MergePatch(base, modified any, resourceVersion string) ([]byte, error) {
	a, err := asObject(base)
	if err != nil {
		return nil, fmt.Errorf("the object before: %w", err)
	}
	b, err := asObject(modified)
	if err != nil {
		return nil, fmt.Errorf("the object after: %w", err)
	}
	patch := diff(a, b)
	if resourceVersion != "" {
		meta, _ := patch["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			patch["metadata"] = meta
		}
		meta["resourceVersion"] = resourceVersion
	}
	return json.Marshal(patch)
}

// asObject is v encoded and decoded again as a JSON object, its numbers kept as written (an
// int64 past 2^53 would not survive a float64).
func asObject(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%s is not a JSON object", data)
	}
	return m, nil
}

// diff is the merge patch from a to b. A null in b is as good as its absence, as applying a
// merge patch makes it.
func diff(a, b map[string]any) map[string]any {
	patch := map[string]any{}
	for k, bv := range b {
		av, ok := a[k]
		if !ok {
			if bv != nil {
				patch[k] = bv
			}
			continue
		}
		am, aIsObject := av.(map[string]any)
		bm, bIsObject := bv.(map[string]any)
		switch {
		case aIsObject && bIsObject:
			if d := diff(am, bm); len(d) > 0 {
				patch[k] = d
			}
		case !reflect.DeepEqual(av, bv):
			patch[k] = bv
		}
	}
	for k, av := range a {
		if _, ok := b[k]; !ok && av != nil {
			patch[k] = nil
		}
	}
	return patch
}

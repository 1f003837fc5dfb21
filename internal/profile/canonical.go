// Package profile reads, checks, canonicalises, signs and verifies EdgeProfiles, compatibly with
// cosign sign-blob and verify-blob for key files. It has no Kubernetes client: the webhook, the
// controller and the nodewright-profile command all call it. See docs/profile.md.
package profile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// EncodingVersion is the version of the canonical encoding Canonical produces. A signature made
// over version 1 must keep verifying, so a new encoding gets a new version and a new function
// instead of changing this one.
const EncodingVersion = 1

// The defaults the CRD schema applies (the +kubebuilder:default markers of ProfileThresholds;
// those of storage.linstor, when it is given, are Piraeus and suspend-io).
// The API server fills them in before any webhook sees the object, so the signer must sign the
// defaulted spec.
const (
	DefaultHeartbeatStaleAfter = 30 * time.Second
	DefaultDRBDSyncTimeout     = 6 * time.Hour
)

// WithDefaults returns spec with the CRD schema's defaults applied: an absent (zero) duration in
// thresholds takes its default, and so do storage.linstor's satellites and onNoQuorum when
// storage.linstor is given. The spec passed in is not changed.
func WithDefaults(spec v1alpha1.EdgeProfileSpec) v1alpha1.EdgeProfileSpec {
	if spec.Thresholds.HeartbeatStaleAfter.Duration == 0 {
		spec.Thresholds.HeartbeatStaleAfter = metav1.Duration{Duration: DefaultHeartbeatStaleAfter}
	}
	if spec.Thresholds.DRBDSyncTimeout.Duration == 0 {
		spec.Thresholds.DRBDSyncTimeout = metav1.Duration{Duration: DefaultDRBDSyncTimeout}
	}
	if l := spec.Storage.LINSTOR; l != nil {
		l = l.DeepCopy()
		if l.Satellites == "" {
			l.Satellites = v1alpha1.SatellitesPiraeus
		}
		if l.OnNoQuorum == "" {
			l.OnNoQuorum = v1alpha1.OnNoQuorumSuspendIO
		}
		spec.Storage.LINSTOR = l
	}
	return spec
}

// Canonical returns the canonical encoding (version 1) of spec, the bytes a signature covers:
// the defaulted spec as the API serves it in JSON, serialised by RFC 8785 (JSON Canonicalization
// Scheme). Durations are written by metav1.Duration, so "1h30m" and "1h30m0s" encode the same
// ("1h30m0s"). docs/profile.md has the exact definition.
func Canonical(spec v1alpha1.EdgeProfileSpec) ([]byte, error) {
	spec = WithDefaults(spec)
	if path := firstInvalidUTF8(reflect.ValueOf(spec), "spec"); path != "" {
		return nil, fmt.Errorf("%s: not valid UTF-8, which the canonical encoding cannot represent", path)
	}
	// encoding/json applies the API type's own field names and omitempty/omitzero rules, so the
	// canonical form follows the type: an optional field left empty is absent, as the API server
	// serves it.
	plain, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the spec: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("re-reading the encoded spec: %w", err)
	}
	var out bytes.Buffer
	if err := writeJCS(&out, tree); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Digest is "sha256:" and the hex SHA-256 of the canonical encoding of spec: a short name for
// exactly what a signature covers.
func Digest(spec v1alpha1.EdgeProfileSpec) (string, error) {
	blob, err := Canonical(spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(blob)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// writeJCS writes v, a tree decoded by encoding/json with UseNumber, as RFC 8785 does.
func writeJCS(out *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case json.Number:
		// The spec holds only integers. RFC 8785 writes numbers as ECMAScript does, which for an
		// integer of at most 2^53 in magnitude is its plain decimal form.
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n > 1<<53 || n < -(1<<53) {
			return fmt.Errorf("canonical encoding v1 has no form for the number %s", v)
		}
		out.WriteString(strconv.FormatInt(n, 10))
	case string:
		writeJCSString(out, v)
	case []any:
		out.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeJCS(out, item); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		// RFC 8785 orders keys by their UTF-16 code units.
		slices.SortFunc(keys, compareUTF16)
		out.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				out.WriteByte(',')
			}
			writeJCSString(out, k)
			out.WriteByte(':')
			if err := writeJCS(out, v[k]); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	default:
		return fmt.Errorf("canonical encoding v1 has no form for %T", v)
	}
	return nil
}

// writeJCSString writes s as ECMAScript's JSON.stringify does (RFC 8785 section 3.2.2.2): the
// two-character escapes for \b \t \n \f \r " and \, \u00xx (lower-case hex) for the other
// control characters, and every other character as itself in UTF-8.
func writeJCSString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\t':
			out.WriteString(`\t`)
		case '\n':
			out.WriteString(`\n`)
		case '\f':
			out.WriteString(`\f`)
		case '\r':
			out.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
			} else {
				out.WriteRune(r)
			}
		}
	}
	out.WriteByte('"')
}

func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// firstInvalidUTF8 returns the JSON path of the first string in v that is not valid UTF-8, or
// "". encoding/json would silently replace the bad bytes with U+FFFD; the canonical encoding
// refuses them instead, so a signature never covers text other than what was written.
func firstInvalidUTF8(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return firstInvalidUTF8(v.Elem(), path)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if p := firstInvalidUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if p := firstInvalidUTF8(v.Field(i), path+"."+name); p != "" {
				return p
			}
		}
	}
	return ""
}

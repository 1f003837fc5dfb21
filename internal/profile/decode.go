package profile

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"

	"github.com/spectrocloud/nodewright/api/v1alpha1"
)

// MaxFileSize is the largest profile file Decode reads. A profile is a few hundred bytes; the
// limit only keeps a wrong file from being parsed at length.
const MaxFileSize = 1 << 20

// The apiVersion and kind a profile file must declare.
var (
	APIVersion = v1alpha1.GroupVersion.String()
	Kind       = "EdgeProfile"
)

// Decode reads one EdgeProfile from YAML or JSON, strictly: an unknown or duplicate field, a
// value of the wrong type, a wrong apiVersion or kind, or a spec the CRD schema would refuse is
// an error naming the field. Errors about fields are FieldErrors. The spec is returned as
// written, without defaults (Canonical applies them).
func Decode(data []byte) (*v1alpha1.EdgeProfile, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("the file has %d bytes; a profile has at most %d", len(data), MaxFileSize)
	}
	if n := countYAMLDocuments(data); n > 1 {
		return nil, fmt.Errorf("the file holds %d YAML documents; give one EdgeProfile per file", n)
	}
	// YAMLToJSONStrict refuses duplicate keys; JSON is YAML, so both go through it.
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("reading YAML: %w", err)
	}
	if t := bytes.TrimSpace(doc); bytes.Equal(t, []byte("null")) {
		return nil, errors.New("the file is empty")
	} else if len(t) == 0 || t[0] != '{' {
		return nil, errors.New("the file is not an object (apiVersion, kind, metadata, spec)")
	}

	// Exact keys, as the API server reads them: a decoded map, not a struct (encoding/json
	// matches struct fields case-insensitively).
	var top map[string]any
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, fmt.Errorf("reading the profile: %w", err)
	}
	// Which kind of file this is comes first: a file of another kind would otherwise be reported
	// as a list of unknown fields.
	var errs FieldErrors
	if v := top["apiVersion"]; v != APIVersion {
		errs = append(errs, FieldError{Field: "apiVersion", Reason: fmt.Sprintf("must be %s, got %s", APIVersion, describeValue(v))})
	}
	if v := top["kind"]; v != Kind {
		errs = append(errs, FieldError{Field: "kind", Reason: fmt.Sprintf("must be %s, got %s", Kind, describeValue(v))})
	}
	if len(errs) > 0 {
		return nil, errs
	}

	// The durations as written, before metav1.Duration reads them: the CRD checks the text, which
	// time.ParseDuration reads more loosely ("-5s", "0", ".5s"), and metav1.Duration's own errors
	// do not say which field they are about.
	spec, _ := top["spec"].(map[string]any)
	thresholds, _ := spec["thresholds"].(map[string]any)
	for _, d := range []struct {
		key, field string
		lo, hi     time.Duration
	}{
		{"heartbeatStaleAfter", "spec.thresholds.heartbeatStaleAfter", minHeartbeatStale, maxHeartbeatStale},
		{"drbdSyncTimeout", "spec.thresholds.drbdSyncTimeout", minDRBDSyncTimeout, maxDRBDSyncTimeout},
	} {
		if v, ok := thresholds[d.key]; ok {
			if fe := validateDurationValue(d.field, v, d.lo, d.hi); fe != nil {
				errs = append(errs, *fe)
			}
		}
	}
	// The CRD reads base64 as a string; decoding it into []byte would say only "illegal base64".
	if sig, ok := top["signature"].(string); ok {
		if _, err := base64.StdEncoding.DecodeString(sig); err != nil {
			errs = append(errs, FieldError{Field: "signature", Reason: fmt.Sprintf("not base64 (%v); put cosign sign-blob's output here as it is printed", err)})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}

	// apimachinery's strict JSON decoder reads as the API server does: field names are
	// case-sensitive, and its strict errors name the path of every unknown or duplicate field.
	// Into a type its (empty) scheme does not know, it decodes directly.
	var p v1alpha1.EdgeProfile
	if _, _, err := strictDecoder.Decode(doc, nil, &p); err != nil {
		strictErr, ok := runtime.AsStrictDecodingError(err)
		if !ok {
			return nil, decodeError(err)
		}
		for _, se := range strictErr.Errors() {
			errs = append(errs, strictFieldError(se))
		}
		return nil, errs
	}

	if err := Validate(p.Spec); err != nil {
		var specErrs FieldErrors
		if !errors.As(err, &specErrs) {
			return nil, err
		}
		errs = append(errs, specErrs...)
	}
	if err := validateSignatureField(p.Signature); err != nil {
		var sigErrs FieldErrors
		if !errors.As(err, &sigErrs) {
			return nil, err
		}
		errs = append(errs, sigErrs...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &p, nil
}

var strictDecoder = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory,
	runtime.NewScheme(), runtime.NewScheme(), serializerjson.SerializerOptions{Strict: true})

func strictFieldError(err error) FieldError {
	var fe interface{ FieldPath() string }
	if !errors.As(err, &fe) {
		return FieldError{Field: "(file)", Reason: err.Error()}
	}
	reason := err.Error()
	for _, kind := range []string{"unknown field", "duplicate field"} {
		if strings.HasPrefix(reason, kind) {
			reason = kind
		}
	}
	return FieldError{Field: fe.FieldPath(), Reason: reason}
}

// decodeError names the field of a value of the wrong type, as the API server would.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" && typeErr.Type != nil {
		reason := fmt.Sprintf("must be %s, got %s", describeType(typeErr.Type), typeErr.Value)
		if typeErr.Type.Kind() == reflect.String && strings.HasPrefix(typeErr.Value, "number") {
			// YAML reads version: 1.4 as a number.
			reason += " (quote it)"
		}
		return FieldErrors{{Field: typeErr.Field, Reason: reason}}
	}
	return fmt.Errorf("reading the profile: %w", err)
}

func describeType(t reflect.Type) string {
	if t == reflect.TypeFor[[]byte]() {
		return "base64 text"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer that fits " + t.Kind().String()
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return t.String()
}

// describeValue writes a decoded JSON value for a message.
func describeValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}

// countYAMLDocuments counts the documents of a YAML stream that hold anything but comments.
// YAMLToJSON reads only the first, and a second profile in the same file would be silently
// ignored.
func countYAMLDocuments(data []byte) int {
	docs, content := 0, false
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(make([]byte, 0, 64*1024), MaxFileSize+1)
	for scanner.Scan() {
		line := scanner.Text()
		if isDocumentMarker(line) {
			if content {
				docs++
			}
			content = false
			// "--- key: value" starts a document with content on the marker's line.
			rest := strings.TrimSpace(strings.TrimLeft(line, "-."))
			if rest != "" && !strings.HasPrefix(rest, "#") {
				content = true
			}
			continue
		}
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") && !strings.HasPrefix(line, "%") {
			content = true
		}
	}
	if content {
		docs++
	}
	return docs
}

func isDocumentMarker(line string) bool {
	for _, m := range []string{"---", "..."} {
		if line == m || strings.HasPrefix(line, m+" ") || strings.HasPrefix(line, m+"\t") {
			return true
		}
	}
	return false
}

package drbd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// fields is one JSON object of the status answer, kept raw so that every value is checked
// where it is read and every error can name its path.
type fields struct {
	path   string
	values map[string]json.RawMessage
}

func objectOf(raw json.RawMessage, path string) (fields, error) {
	if kind := jsonKind(raw); kind != "an object" {
		return fields{}, &StatusError{Path: path, Reason: "want an object, got " + kind}
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(raw, &values); err != nil {
		return fields{}, &StatusError{Path: path, Reason: err.Error()}
	}
	return fields{path: path, values: values}, nil
}

func arrayOf(raw json.RawMessage, path string) ([]json.RawMessage, error) {
	if kind := jsonKind(raw); kind != "an array" {
		return nil, &StatusError{Path: path, Reason: "want an array, got " + kind}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, &StatusError{Path: path, Reason: err.Error()}
	}
	return items, nil
}

// required returns the value of a field that must be there and must not be null.
func (f fields) required(key, want string) (json.RawMessage, error) {
	raw, ok := f.values[key]
	if !ok {
		return nil, f.fail(key, "missing")
	}
	if kind := jsonKind(raw); kind != want {
		return nil, f.fail(key, "want "+want+", got "+kind)
	}
	return raw, nil
}

// optional returns the value of a field drbdsetup prints only sometimes; absent and null are
// both "not reported".
func (f fields) optional(key, want string) (json.RawMessage, bool, error) {
	raw, ok := f.values[key]
	if !ok || jsonKind(raw) == "null" {
		return nil, false, nil
	}
	if kind := jsonKind(raw); kind != want {
		return nil, false, f.fail(key, "want "+want+", got "+kind)
	}
	return raw, true, nil
}

func (f fields) text(key string) (string, error) {
	raw, err := f.required(key, "a string")
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", f.fail(key, err.Error())
	}
	return s, nil
}

func (f fields) boolean(key string) (bool, error) {
	raw, err := f.required(key, "a boolean")
	if err != nil {
		return false, err
	}
	return bytes.Equal(bytes.TrimSpace(raw), []byte("true")), nil
}

// integer reads a small whole number (a volume, a minor, a node-id) no lower than minimum.
func (f fields) integer(key string, minimum int) (int, error) {
	raw, err := f.required(key, "a number")
	if err != nil {
		return 0, err
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < int64(minimum) || n > math.MaxInt32 {
		return 0, f.fail(key, fmt.Sprintf("want an integer from %d to %d, got %s", minimum, math.MaxInt32, literal(raw)))
	}
	return int(n), nil
}

// counter reads a non-negative count of KiB.
func (f fields) counter(key string) (uint64, error) {
	raw, err := f.required(key, "a number")
	if err != nil {
		return 0, err
	}
	return f.decodeCounter(key, raw)
}

func (f fields) optionalCounter(key string) (*uint64, error) {
	raw, ok, err := f.optional(key, "a number")
	if err != nil || !ok {
		return nil, err
	}
	n, err := f.decodeCounter(key, raw)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func (f fields) decodeCounter(key string, raw json.RawMessage) (uint64, error) {
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, f.fail(key, "want a non-negative integer, got "+literal(raw))
	}
	return n, nil
}

func (f fields) optionalNumber(key string) (*float64, error) {
	raw, ok, err := f.optional(key, "a number")
	if err != nil || !ok {
		return nil, err
	}
	var x float64
	if err := json.Unmarshal(raw, &x); err != nil {
		return nil, f.fail(key, "want a number a float64 holds, got "+literal(raw))
	}
	return &x, nil
}

func (f fields) array(key string) ([]json.RawMessage, error) {
	if _, err := f.required(key, "an array"); err != nil {
		return nil, err
	}
	return arrayOf(f.values[key], f.path+"."+key)
}

func (f fields) fail(key, reason string) error {
	return &StatusError{Path: f.path + "." + key, Reason: reason}
}

// jsonKind names the kind of a JSON value by its first byte; the value is already known to be
// valid JSON.
func jsonKind(raw json.RawMessage) string {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 {
		return "nothing"
	}
	switch trimmed[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// literal quotes a JSON value for an error message, cut short so that a hostile answer cannot
// make the message long.
func literal(raw json.RawMessage) string {
	const most = 40
	s := string(bytes.TrimSpace(raw))
	if len(s) > most {
		s = s[:most] + "..."
	}
	return s
}

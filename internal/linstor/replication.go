package linstor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// ReplicationState is a volume's replication towards one peer, from LINSTOR's
// VolumeState.replication_states (REST API 1.25.0 and later), which golinstor does not decode.
type ReplicationState struct {
	// State is DRBD's replication state towards the peer: Established when in sync,
	// SyncSource or SyncTarget during a resynchronisation, PausedSyncS or PausedSyncT while
	// it is paused, VerifyS or VerifyT during an online verify, Off while not connected.
	State string `json:"replication_state"`
	// DonePercent is the resynchronisation's progress, 0 to 100, while one runs; nil when
	// LINSTOR reports none.
	DonePercent *float64 `json:"done_percentage,omitempty"`
}

// Syncing reports whether a resynchronisation runs (or is paused) towards the peer.
func (r ReplicationState) Syncing() bool {
	switch r.State {
	case "SyncSource", "SyncTarget", "PausedSyncS", "PausedSyncT", "StartingSyncS", "StartingSyncT", "WFBitMapS", "WFBitMapT", "WFSyncUUID":
		return true
	}
	return false
}

// Target reports whether this side is the resynchronisation's target: its data is not yet
// whole.
func (r ReplicationState) Target() bool {
	switch r.State {
	case "SyncTarget", "PausedSyncT", "StartingSyncT", "WFBitMapT", "WFSyncUUID":
		return true
	}
	return false
}

// The bounds of one replication_states map: a DRBD resource has at most 32 nodes, so at most
// 31 peers; anything beyond is not LINSTOR talking.
const (
	maxPeers        = 31
	maxPeerName     = 253
	maxReplicaState = 64
)

// ReplicationError is a replication_states value DecodeReplicationStates refused: Path names
// the JSON value (replication_states["n2"].done_percentage) and Reason says what is wrong.
type ReplicationError struct {
	Path   string
	Reason string
}

func (e *ReplicationError) Error() string { return fmt.Sprintf("%s: %s", e.Path, e.Reason) }

// DecodeReplicationStates reads a volume state's replication_states: an object mapping each
// peer's node name to {replication_state, done_percentage}, as LINSTOR's OpenAPI document
// declares it (ReplicationStates). Absent or null is no peer. Fields it does not know are
// ignored; a peer name that is empty or too long, a state that is not a string, or a
// done_percentage that is not a number from 0 to 100 is an error naming the value.
func DecodeReplicationStates(raw json.RawMessage) (map[string]ReplicationState, error) {
	const path = "replication_states"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return map[string]ReplicationState{}, nil
	}
	if raw[0] != '{' {
		return nil, &ReplicationError{Path: path, Reason: "want an object, got " + jsonKind(raw)}
	}
	var peers map[string]json.RawMessage
	if err := strictUnmarshal(raw, &peers); err != nil {
		return nil, &ReplicationError{Path: path, Reason: err.Error()}
	}
	if len(peers) > maxPeers {
		return nil, &ReplicationError{Path: path, Reason: fmt.Sprintf("%d peers, more than the %d a DRBD resource has", len(peers), maxPeers)}
	}
	names := make([]string, 0, len(peers))
	for name := range peers {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]ReplicationState, len(peers))
	for _, name := range names {
		at := fmt.Sprintf("%s[%q]", path, name)
		if name == "" || len(name) > maxPeerName {
			return nil, &ReplicationError{Path: at, Reason: fmt.Sprintf("a peer's node name must be 1 to %d bytes", maxPeerName)}
		}
		state, err := decodeReplicationState(peers[name], at)
		if err != nil {
			return nil, err
		}
		out[name] = state
	}
	return out, nil
}

func decodeReplicationState(raw json.RawMessage, path string) (ReplicationState, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return ReplicationState{}, &ReplicationError{Path: path, Reason: "want an object, got " + jsonKind(raw)}
	}
	var fields map[string]json.RawMessage
	if err := strictUnmarshal(raw, &fields); err != nil {
		return ReplicationState{}, &ReplicationError{Path: path, Reason: err.Error()}
	}
	var out ReplicationState
	if v, ok := fields["replication_state"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &out.State); err != nil {
			return ReplicationState{}, &ReplicationError{Path: path + ".replication_state", Reason: "want a string, got " + jsonKind(v)}
		}
		if len(out.State) > maxReplicaState {
			return ReplicationState{}, &ReplicationError{Path: path + ".replication_state", Reason: fmt.Sprintf("%d bytes, more than the %d of any DRBD state", len(out.State), maxReplicaState)}
		}
	}
	if v, ok := fields["done_percentage"]; ok && !isNull(v) {
		var done float64
		if err := json.Unmarshal(v, &done); err != nil {
			return ReplicationState{}, &ReplicationError{Path: path + ".done_percentage", Reason: "want a number, got " + jsonKind(v)}
		}
		if math.IsNaN(done) || done < 0 || done > 100 {
			return ReplicationState{}, &ReplicationError{Path: path + ".done_percentage", Reason: fmt.Sprintf("%v is outside 0 to 100", done)}
		}
		out.DonePercent = &done
	}
	return out, nil
}

// strictUnmarshal decodes a JSON object refusing a key given twice, which encoding/json would
// silently let the last one win.
func strictUnmarshal(raw json.RawMessage, out *map[string]json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("want an object")
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("want a key")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if _, dup := m[key]; dup {
			return fmt.Errorf("key %q given twice", key)
		}
		m[key] = value
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("trailing data after the object")
	}
	*out = m
	return nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// jsonKind names the kind of a JSON value for an error.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
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

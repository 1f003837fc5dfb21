package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Witnessed is a checkpoint of the chain countersigned by a witness: a receiver that holds its
// own copy of the chain and countersigns a checkpoint only once that checkpoint is an entry of
// its copy, verified there (linked to every entry before it, and signed by the trail's key).
// The copy only ever grows, so every checkpoint one witness countersigns extends the ones it
// countersigned before. A rewritten trail, re-signed with the trail's own key, is a fork of
// that copy, and the witness never countersigns it (docs/audit.md, "The witness").
type Witnessed struct {
	// Entry is the checkpoint entry as the chain holds it: Entry.Checkpoint is set.
	Entry Entry
	// KeyID names the witness's key (KeyID of its public key).
	KeyID string
	// Time is when the witness countersigned.
	Time      time.Time
	Signature []byte
	line      []byte
}

// Checkpoint is the checkpoint the witness countersigned.
func (w *Witnessed) Checkpoint() *Checkpoint { return w.Entry.Checkpoint }

// Line is the witnessed checkpoint's canonical encoding, one line without its newline: what a
// receiver hands back, and what `nodewright-audit verify --witnessed-checkpoint` reads.
func (w *Witnessed) Line() []byte { return w.line }

// witnessDomain starts every message a witness signs, so that a countersignature can never be
// taken for a checkpoint signature, or anything else, made with the same key.
const witnessDomain = "nodewright-audit witness\n"

// MaxWitnessedBytes bounds a witnessed checkpoint's line: a checkpoint entry and a
// countersignature are well under a kilobyte.
const MaxWitnessedBytes = 64 << 10

// witnessMessage is what a witness signs: the domain line, then
// {"v":1,"seq":S,"hash":H,"keyId":s,"time":T}: the checkpoint entry's seq and hash (which
// cover the checkpoint, its signature and its link to the chain) and the witness's own key ID
// and time.
func witnessMessage(seq uint64, hash Hash, keyID string, at time.Time) []byte {
	m := append([]byte(witnessDomain), `{"v":`...)
	m = strconv.AppendInt(m, FormatVersion, 10)
	m = append(m, `,"seq":`...)
	m = strconv.AppendUint(m, seq, 10)
	m = append(m, `,"hash":"`...)
	m = append(m, hash.String()...)
	m = append(m, `","keyId":`...)
	m = appendString(m, keyID)
	m = append(m, `,"time":`...)
	m = appendTime(m, at)
	return append(m, '}')
}

// encodeWitnessed writes the canonical line:
// {"v":1,"witnessed":<the checkpoint entry's line>,"witness":{"keyId":s,"time":T,"sig":B}}.
func encodeWitnessed(w *Witnessed) []byte {
	b := append([]byte(`{"v":`), strconv.Itoa(FormatVersion)...)
	b = append(b, `,"witnessed":`...)
	b = append(b, w.Entry.line...)
	b = append(b, `,"witness":{"keyId":`...)
	b = appendString(b, w.KeyID)
	b = append(b, `,"time":`...)
	b = appendTime(b, w.Time)
	b = append(b, `,"sig":"`...)
	b = base64.StdEncoding.AppendEncode(b, w.Signature)
	return append(b, `"}}`...)
}

// Countersign makes the witnessed checkpoint of e, a checkpoint entry of the chain the caller
// holds and has verified, signed with this key at the given time.
func (s *Signer) Countersign(e Entry, at time.Time) (*Witnessed, error) {
	if e.Checkpoint == nil {
		return nil, errors.New("countersigning: the entry is a record, not a checkpoint")
	}
	w := &Witnessed{Entry: e, KeyID: s.keyID, Time: at.UTC()}
	w.Entry.line = bytes.Clone(e.line)
	w.Signature = ed25519.Sign(s.key, witnessMessage(e.Seq, e.Hash, w.KeyID, w.Time))
	w.line = encodeWitnessed(w)
	return w, nil
}

// VerifyWitness checks the countersignature against the witness key its KeyID names among
// keys, and that the checkpoint describes the chain it stands in (its size is its own seq, its
// head its own link). The checkpoint's own signature is the trail key's, checked apart.
func (w *Witnessed) VerifyWitness(keys []ed25519.PublicKey) error {
	var pub ed25519.PublicKey
	for _, k := range keys {
		if KeyID(k) == w.KeyID {
			pub = k
		}
	}
	if pub == nil {
		return fmt.Errorf("witnessed checkpoint: countersigned by witness key %q, which is not among the witness keys", w.KeyID)
	}
	if !ed25519.Verify(pub, witnessMessage(w.Entry.Seq, w.Entry.Hash, w.KeyID, w.Time), w.Signature) {
		return fmt.Errorf("witnessed checkpoint: the countersignature by witness key %q does not verify", w.KeyID)
	}
	if c := w.Entry.Checkpoint; c.Size != w.Entry.Seq || c.Head != w.Entry.Prev {
		return fmt.Errorf("witnessed checkpoint: a checkpoint of size %d at seq %d does not describe the chain before it", c.Size, w.Entry.Seq)
	}
	return nil
}

// VerifyCheckpoint checks the checkpoint's own signature, by the trail's key, among keys.
func (w *Witnessed) VerifyCheckpoint(keys []ed25519.PublicKey) error {
	m := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		m[KeyID(k)] = k
	}
	switch known, valid := verifySignature(w.Entry.Checkpoint, m); {
	case !known:
		return fmt.Errorf("witnessed checkpoint: the checkpoint is signed by key %q, which is not among the public keys", w.Entry.Checkpoint.KeyID)
	case !valid:
		return errors.New("witnessed checkpoint: the checkpoint's signature does not verify")
	}
	return nil
}

// wireWitnessed is the decoding shape of a witnessed line; encoding never goes through it.
type wireWitnessed struct {
	V         *int            `json:"v"`
	Witnessed json.RawMessage `json:"witnessed"`
	Witness   *struct {
		KeyID string    `json:"keyId"`
		Time  time.Time `json:"time"`
		Sig   string    `json:"sig"`
	} `json:"witness"`
}

// ParseWitnessed reads a witnessed checkpoint's line (a trailing newline, or surrounding
// whitespace, is ignored) and checks its form: the one canonical encoding, holding a
// checkpoint entry that is itself canonical and hashes to its hash. The signatures are left to
// VerifyWitness and VerifyCheckpoint.
func ParseWitnessed(line []byte) (*Witnessed, error) {
	if len(line) > MaxWitnessedBytes {
		return nil, fmt.Errorf("witnessed checkpoint: %d bytes, over the limit of %d", len(line), MaxWitnessedBytes)
	}
	line = bytes.TrimSpace(line)
	var w wireWitnessed
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, fmt.Errorf("witnessed checkpoint: %w", err)
	}
	switch {
	case w.V == nil:
		return nil, errors.New(`witnessed checkpoint: no format version "v"`)
	case *w.V != FormatVersion:
		return nil, fmt.Errorf("witnessed checkpoint: format version %d, this reader knows %d", *w.V, FormatVersion)
	case w.Witnessed == nil || w.Witness == nil:
		return nil, errors.New(`witnessed checkpoint: "witnessed" and "witness" are required`)
	}
	e, err := ParseLine(w.Witnessed)
	if err != nil {
		return nil, fmt.Errorf("witnessed checkpoint: the checkpoint entry: %w", err)
	}
	if e.Checkpoint == nil {
		return nil, errors.New("witnessed checkpoint: the entry is a record, not a checkpoint")
	}
	sig, err := base64.StdEncoding.DecodeString(w.Witness.Sig)
	if err != nil {
		return nil, fmt.Errorf("witnessed checkpoint: the countersignature: %w", err)
	}
	out := &Witnessed{Entry: e, KeyID: w.Witness.KeyID, Time: w.Witness.Time, Signature: sig}
	out.line = encodeWitnessed(out)
	if !bytes.Equal(out.line, line) {
		return nil, fmt.Errorf("witnessed checkpoint: differs from the canonical encoding at byte %d", firstDifference(out.line, line))
	}
	return out, nil
}

// ReadWitnessed reads a file holding one witnessed checkpoint line.
func ReadWitnessed(path string) (*Witnessed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the witnessed checkpoint: %w", err)
	}
	w, err := ParseWitnessed(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

package audit

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ProblemKind names what is wrong with a stream.
type ProblemKind string

const (
	ProblemMalformed          ProblemKind = "malformed"           // a line that is not an entry
	ProblemUnknownVersion     ProblemKind = "unknown-version"     // a format version this verifier does not know
	ProblemHashMismatch       ProblemKind = "hash-mismatch"       // an entry edited in place
	ProblemNonCanonical       ProblemKind = "non-canonical"       // an entry re-encoded, or edited and re-hashed by a tool
	ProblemTornLine           ProblemKind = "torn-line"           // the input ends inside a line
	ProblemMissingStart       ProblemKind = "missing-start"       // the chain does not start at seq 0
	ProblemGap                ProblemKind = "gap"                 // entries deleted
	ProblemDuplicate          ProblemKind = "duplicate"           // an entry repeated
	ProblemOutOfOrder         ProblemKind = "out-of-order"        // entries reordered
	ProblemConflict           ProblemKind = "conflict"            // two different entries claim one seq: an insertion
	ProblemPrevMismatch       ProblemKind = "prev-mismatch"       // the link to the entry before is broken
	ProblemDuplicateID        ProblemKind = "duplicate-id"        // one record ID at two places
	ProblemCheckpointMismatch ProblemKind = "checkpoint-mismatch" // a checkpoint that does not describe the chain before it
	ProblemBadSignature       ProblemKind = "bad-signature"       // a checkpoint signature that does not verify
	ProblemUnknownKey         ProblemKind = "unknown-key"         // a checkpoint signed by a key the verifier was not given
	ProblemTruncated          ProblemKind = "truncated"           // entries missing from the end, below a trusted checkpoint
	ProblemFork               ProblemKind = "fork"                // the chain differs from a trusted checkpoint
)

// Problem is one finding, placed as precisely as it can be: the line it is about (for
// truncated, the line just after the end of the last file, where the missing entries belong)
// and the seq of the entry there, nil when the line is too damaged to tell.
type Problem struct {
	Kind    ProblemKind `json:"kind"`
	File    string      `json:"file"`
	Line    int         `json:"line"` // 1-based
	Seq     *uint64     `json:"seq,omitempty"`
	Message string      `json:"message"`
}

// String is "FILE:LINE seq N: KIND: MESSAGE", with "seq ?" when the seq cannot be read, so that
// every problem splits the same way.
func (p Problem) String() string {
	seq := "?"
	if p.Seq != nil {
		seq = strconv.FormatUint(*p.Seq, 10)
	}
	return fmt.Sprintf("%s:%d seq %s: %s: %s", p.File, p.Line, seq, p.Kind, p.Message)
}

// CheckpointSeen is a checkpoint found in the stream and where.
type CheckpointSeen struct {
	Size  uint64    `json:"size"`
	Head  string    `json:"head"`
	Time  time.Time `json:"time"`
	KeyID string    `json:"keyId"`
	File  string    `json:"file"`
	Line  int       `json:"line"`
}

// Report is the outcome of a verification. OK is true exactly when Problems is empty.
type Report struct {
	OK          bool     `json:"ok"`
	Files       []string `json:"files"`
	Entries     uint64   `json:"entries"` // lines accepted into the chain
	Records     uint64   `json:"records"`
	Checkpoints uint64   `json:"checkpoints"`
	FirstSeq    uint64   `json:"firstSeq"`
	LastSeq     uint64   `json:"lastSeq"`
	// LastCheckpoint is the newest checkpoint; nil if there is none.
	LastCheckpoint *CheckpointSeen `json:"lastCheckpoint,omitempty"`
	// Unsigned counts the entries after the last checkpoint: the window in which deletion from
	// the end, or a rewrite of the end, cannot be told from the stream alone.
	Unsigned        uint64    `json:"unsigned"`
	Problems        []Problem `json:"problems"`
	ProblemsOmitted int       `json:"problemsOmitted,omitempty"`
	Warnings        []string  `json:"warnings,omitempty"`
}

// maxProblems caps the report: a badly damaged stream would otherwise repeat one finding per line.
const maxProblems = 1000

// VerifyOptions says what the stream is checked against.
type VerifyOptions struct {
	// PublicKeys verify checkpoint signatures; several are allowed across a key rotation.
	PublicKeys []ed25519.PublicKey
	// Trusted is a checkpoint kept outside the stream (published elsewhere when it was made).
	// The stream must reach its size with its head; it is what detects deletion from the end.
	Trusted *Checkpoint
	// AllowPartial accepts a chain that starts after seq 0, when older files were removed on
	// purpose; the first entry's link is then taken on trust.
	AllowPartial bool
	// Witnessed is a checkpoint countersigned by a witness, the receiver that holds a copy of
	// the chain (ReceiverOptions.Witness): the stream must reach it with its head, as for
	// Trusted, and a stream that differs from it forks from the witness's copy. Its
	// countersignature is checked with WitnessKeys, its own signature with PublicKeys.
	Witnessed   *Witnessed
	WitnessKeys []ed25519.PublicKey
}

// trustedName is what a report calls VerifyOptions.Trusted.
const trustedName = "the trusted checkpoint"

// trustedCheckpoint is a checkpoint kept outside the stream, and what to call it in a report.
type trustedCheckpoint struct {
	*Checkpoint
	name    string // "the trusted checkpoint", "the witness's checkpoint"
	reached bool
}

// VerifyFiles verifies files holding one chain, in order.
func VerifyFiles(opts VerifyOptions, paths ...string) (*Report, error) {
	inputs := make([]Input, 0, len(paths))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			for _, in := range inputs {
				_ = in.Reader.(*os.File).Close()
			}
			return nil, fmt.Errorf("opening audit file: %w", err)
		}
		inputs = append(inputs, Input{Name: p, Reader: f})
	}
	defer func() {
		for _, in := range inputs {
			_ = in.Reader.(*os.File).Close()
		}
	}()
	return Verify(opts, inputs...)
}

// Verify checks that the inputs, in order, hold one unbroken chain whose checkpoints are signed
// by one of the keys. Tampering is reported in the Report; the error is for input that cannot
// be checked at all (no key, an unreadable stream, a trusted checkpoint that does not verify).
func Verify(opts VerifyOptions, inputs ...Input) (*Report, error) {
	if len(opts.PublicKeys) == 0 {
		return nil, errors.New("verifying an audit trail needs at least one public key")
	}
	if len(inputs) == 0 {
		return nil, errors.New("verifying an audit trail needs at least one file")
	}
	v := newVerifier(opts)
	if t := opts.Trusted; t != nil {
		known, valid := verifySignature(t, v.keys)
		if !known {
			return nil, fmt.Errorf("trusted checkpoint: signed by key %q, which is not among the public keys", t.KeyID)
		}
		if !valid {
			return nil, errors.New("trusted checkpoint: the signature does not verify")
		}
	}
	if w := opts.Witnessed; w != nil {
		if len(opts.WitnessKeys) == 0 {
			return nil, errors.New("a witnessed checkpoint needs the witness's public key")
		}
		if err := w.VerifyWitness(opts.WitnessKeys); err != nil {
			return nil, err
		}
		if err := w.VerifyCheckpoint(opts.PublicKeys); err != nil {
			return nil, err
		}
	}
	return v.run(inputs)
}

type verifier struct {
	opts            VerifyOptions
	keys            map[string]ed25519.PublicKey // nil: signatures are not checked
	report          Report
	started         bool
	expect          uint64 // the next seq the chain needs
	head            Hash   // hash of seq expect-1
	unreadable      uint64 // lines since the last accepted entry that could not be read at all
	ids             *idSet
	sinceCheckpoint uint64
	trusted         []*trustedCheckpoint
	lastCheckpoint  Entry // the newest checkpoint entry, its line a view of the input
	lastInput       string
	lastLine        int // the number of the last line seen in lastInput
}

func newVerifier(opts VerifyOptions) *verifier {
	v := &verifier{opts: opts, ids: newIDSet()}
	if len(opts.PublicKeys) > 0 {
		v.keys = map[string]ed25519.PublicKey{}
		for _, k := range opts.PublicKeys {
			v.keys[KeyID(k)] = k
		}
	}
	if opts.Trusted != nil {
		v.trusted = append(v.trusted, &trustedCheckpoint{Checkpoint: opts.Trusted, name: trustedName})
	}
	if w := opts.Witnessed; w != nil {
		v.trusted = append(v.trusted, &trustedCheckpoint{Checkpoint: w.Checkpoint(),
			name: fmt.Sprintf("the witness's checkpoint (witness key %s, countersigned %s)", w.KeyID, w.Time.Format(time.RFC3339))})
	}
	return v
}

func (v *verifier) run(inputs []Input) (*Report, error) {
	for _, in := range inputs {
		v.report.Files = append(v.report.Files, in.Name)
	}
	if err := readLines(inputs, v.visit); err != nil {
		return nil, err
	}
	v.finish()
	return &v.report, nil
}

func (v *verifier) problem(kind ProblemKind, file string, line int, seq *uint64, format string, args ...any) {
	if len(v.report.Problems) >= maxProblems {
		v.report.ProblemsOmitted++
		return
	}
	v.report.Problems = append(v.report.Problems, Problem{Kind: kind, File: file, Line: line, Seq: seq, Message: fmt.Sprintf(format, args...)})
}

func seqPtr(s uint64) *uint64 { return &s }

func (v *verifier) visit(p parsedLine) {
	fileStart := p.input != v.lastInput
	v.lastInput, v.lastLine = p.input, p.line
	e := p.entry
	if p.torn {
		v.problem(ProblemTornLine, p.input, p.line, nil, "%v", errTorn)
		v.unreadable++
		return
	}
	if p.err != nil {
		var le *LineError
		if !errors.As(p.err, &le) {
			v.problem(ProblemMalformed, p.input, p.line, nil, "%v", p.err)
			v.unreadable++
			return
		}
		var seq *uint64
		if le.HasSeq {
			seq = seqPtr(le.Seq)
		}
		v.problem(ProblemKind(le.Kind), p.input, p.line, seq, "%s", le.Detail)
		if le.Kind != LineHashMismatch && le.Kind != LineNonCanonical {
			v.unreadable++
			return
		}
		// An entry edited in place still carries its links; follow them so that the edit is
		// reported once and the rest of the chain is still checked.
	}
	s := e.Seq
	if !v.started {
		v.started = true
		v.report.FirstSeq = s
		switch {
		case s != 0 && !v.opts.AllowPartial && s > v.unreadable:
			v.problem(ProblemMissingStart, p.input, p.line, seqPtr(s), "the chain starts at seq %d: entries 0..%d are missing (deleted, or an older file not given)", s, s-1)
		case s == 0 && e.Prev != (Hash{}):
			v.problem(ProblemPrevMismatch, p.input, p.line, seqPtr(s), "the first entry must link to the zero hash, it links to %s", e.Prev)
		}
		v.accept(p, e)
		return
	}
	// Unreadable lines since the last entry were reported already, each once. They may have
	// been put in between two entries, or stand where entries were: either way the entry after
	// them is judged against the last entry that could be read.
	switch {
	case s == v.expect:
		if e.Prev != v.head {
			v.problem(ProblemPrevMismatch, p.input, p.line, seqPtr(s), "links to %s but seq %d hashes to %s: seq %d was replaced or an entry inserted before this one", e.Prev, s-1, v.head, s-1)
		}
	case s > v.expect && s-v.expect <= v.unreadable:
		// The unreadable lines stand where seq v.expect..s-1 were; their link cannot be checked.
	case s > v.expect:
		where := ""
		if fileStart {
			where = " (at the start of this file: a file may be missing, or the previous one cut)"
		}
		if v.unreadable == 0 {
			v.problem(ProblemGap, p.input, p.line, seqPtr(s), "seq %d..%d missing: %d entries deleted%s", v.expect, s-1, s-v.expect, where)
		} else {
			v.problem(ProblemGap, p.input, p.line, seqPtr(s), "seq %d..%d missing: the %d unreadable lines before this one can stand for %d of them, so at least %d entries were deleted%s",
				v.expect, s-1, v.unreadable, v.unreadable, s-v.expect-v.unreadable, where)
		}
	case s+1 == v.expect && e.Hash == v.head:
		v.problem(ProblemDuplicate, p.input, p.line, seqPtr(s), "seq %d repeated: the same entry appears twice", s)
		return
	case s+1 == v.expect:
		v.problem(ProblemConflict, p.input, p.line, seqPtr(s), "a second, different entry claims seq %d: an entry was inserted or replaced", s)
		return
	default:
		v.problem(ProblemOutOfOrder, p.input, p.line, seqPtr(s), "seq %d after seq %d: entries reordered or re-inserted", s, v.expect-1)
		return
	}
	v.accept(p, e)
}

// accept makes e the chain's latest entry.
func (v *verifier) accept(p parsedLine, e Entry) {
	s := e.Seq
	v.expect, v.head, v.unreadable = s+1, e.Hash, 0
	v.report.Entries++
	v.report.LastSeq = s
	for _, t := range v.trusted {
		if t.Size > 0 && s == t.Size-1 {
			t.reached = true
			if e.Hash != t.Head {
				v.problem(ProblemFork, p.input, p.line, seqPtr(s), "hashes to %s, %s says %s: the chain was rewritten at or before seq %d", e.Hash, t.name, t.Head, s)
			}
		}
	}
	if e.Record != nil {
		v.report.Records++
		v.sinceCheckpoint++
		if first, dup := v.ids.get(e.Record.ID); dup {
			v.problem(ProblemDuplicateID, p.input, p.line, seqPtr(s), "record %s is already at seq %d", e.Record.ID, first)
		} else {
			v.ids.put(e.Record.ID, s)
		}
		return
	}
	c := e.Checkpoint
	v.lastCheckpoint = e
	v.report.Checkpoints++
	v.sinceCheckpoint = 0
	if c.Size != s || c.Head != e.Prev {
		v.problem(ProblemCheckpointMismatch, p.input, p.line, seqPtr(s), "checkpoint of size %d head %s stands at seq %d after %s", c.Size, c.Head, s, e.Prev)
	}
	if v.keys != nil {
		known, valid := verifySignature(c, v.keys)
		switch {
		case !known:
			v.problem(ProblemUnknownKey, p.input, p.line, seqPtr(s), "checkpoint signed by key %q, which is not among the public keys", c.KeyID)
		case !valid:
			v.problem(ProblemBadSignature, p.input, p.line, seqPtr(s), "checkpoint signature by key %q does not verify", c.KeyID)
		}
	}
	v.report.LastCheckpoint = &CheckpointSeen{Size: c.Size, Head: c.Head.String(), Time: c.Time, KeyID: c.KeyID, File: p.input, Line: p.line}
}

func (v *verifier) finish() {
	r := &v.report
	r.Unsigned = v.sinceCheckpoint
	for _, t := range v.trusted {
		if t.Size > 0 && !t.reached {
			v.trustedNotReached(t)
		}
	}
	switch {
	case !v.started && v.lastInput == "":
		r.Warnings = append(r.Warnings, "no entries: an empty trail is a valid chain; only a trusted checkpoint (--trusted-checkpoint) tells it from a wiped one")
	case !v.started:
		// Every line was unreadable, and reported.
	case r.LastCheckpoint == nil:
		r.Warnings = append(r.Warnings, "no checkpoint: nothing in the stream is signed, so a rewrite of the whole stream cannot be detected")
	case r.Unsigned > 0:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d entries after the last checkpoint (seq %d..%d) are covered by the hash chain only: deleting or rewriting them is detectable only against a later or trusted checkpoint", r.Unsigned, r.LastSeq-r.Unsigned+1, r.LastSeq))
	}
	r.OK = len(r.Problems) == 0 && r.ProblemsOmitted == 0
	if r.Problems == nil {
		r.Problems = []Problem{} // "problems": [] in JSON, not null
	}
}

// trustedNotReached reports a trail that never got to the trusted checkpoint's last entry.
func (v *verifier) trustedNotReached(t *trustedCheckpoint) {
	if v.started && v.expect >= t.Size {
		// Past it, but its entry was not read: unreadable or missing, and reported as such, or
		// before the first file given (--allow-partial).
		lastEntry := "the last entry of " + t.name
		if t.name == trustedName {
			lastEntry = trustedName + "'s last entry"
		}
		v.report.Warnings = append(v.report.Warnings, fmt.Sprintf("%s, seq %d, is not among the entries read, so it was not checked", lastEntry, t.Size-1))
		return
	}
	// Placed where the missing entries belong: after the last line of the last file.
	file, line := v.report.Files[len(v.report.Files)-1], 1
	if v.lastInput == file {
		line = v.lastLine + 1
	}
	switch {
	case v.started:
		v.problem(ProblemTruncated, file, line, seqPtr(v.expect), "%s covers seq 0..%d but the trail ends at seq %d: entries %d..%d deleted from the end", t.name, t.Size-1, v.expect-1, v.expect, t.Size-1)
	case v.lastInput == "":
		v.problem(ProblemTruncated, file, line, seqPtr(0), "%s covers seq 0..%d but the trail is empty: it was wiped, or these are not its files", t.name, t.Size-1)
	default:
		v.problem(ProblemTruncated, file, line, seqPtr(0), "%s covers seq 0..%d but no entry of the trail could be read", t.name, t.Size-1)
	}
}

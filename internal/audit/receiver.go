package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultMaxBodyBytes bounds one batch a Receiver accepts. It is above the longest line the
// reader accepts (MaxLineBytes), so that any single entry can always be delivered.
const DefaultMaxBodyBytes = 8 << 20

// ReceiverOptions tune a Receiver; zero values take the defaults.
type ReceiverOptions struct {
	// MaxFileBytes is where the receiver's own files rotate (FileSinkOptions.MaxFileBytes).
	MaxFileBytes int64
	// MaxBodyBytes bounds one request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// Token, when set, must come as "Authorization: Bearer <token>" on every request.
	Token string
	// PublicKeys, when set, check each checkpoint's signature on arrival, so that the copy only
	// ever holds checkpoints a verifier will accept. Give every key of a rotation. Without keys
	// signatures are checked only when the copy is verified.
	PublicKeys []ed25519.PublicKey
	// Witness, when set, makes the receiver a witness: it countersigns with this key, its own,
	// the newest checkpoint of its copy once it stored and verified it there (PublicKeys are
	// then required, so that it only countersigns checkpoints whose signature it checked), and
	// every answer that states its head carries that witnessed checkpoint. Give each receiver,
	// that is each copy, a key of its own (docs/audit.md, "The witness").
	Witness *Signer
}

// Receiver is the other end of a Shipper: an http.Handler that keeps a copy of one chain in a
// FileSink directory of its own. GET answers its head; POST appends a batch that starts exactly
// at its head and verifies as the chain's continuation, and refuses anything else whole, with
// its head in the answer (docs/audit.md, "Shipping to an HTTP endpoint").
type Receiver struct {
	dir  string
	opts ReceiverOptions

	mu        sync.Mutex // serialises appends: the chain has one order
	sink      *FileSink  // nil when the directory could not be recovered after a failed write
	broken    error
	head      ChainHead
	ids       *idSet
	witnessed *Witnessed // the newest checkpoint of the copy, countersigned; nil without one
}

// OpenReceiver opens (creating it if needed) the directory, recovering the copy already there
// as OpenFileSink does: a torn last line is cut, and a broken chain is refused.
func OpenReceiver(dir string, opts ReceiverOptions) (*Receiver, error) {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Witness != nil && len(opts.PublicKeys) == 0 {
		return nil, errors.New("audit receiver: a witness needs the trail's public keys: it countersigns only checkpoints whose signature it checked")
	}
	r := &Receiver{dir: dir, opts: opts}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Receiver) open() error {
	sink, err := OpenFileSink(r.dir, FileSinkOptions{MaxFileBytes: r.opts.MaxFileBytes})
	if err != nil {
		return err
	}
	st := sink.State()
	r.sink, r.broken = sink, nil
	r.head = ChainHead{Next: st.Next, Head: st.Head}
	r.ids = st.ids
	if r.ids == nil {
		r.ids = newIDSet()
	}
	r.witnessed = nil
	if r.opts.Witness != nil && st.lastCheckpoint != nil {
		// The chain was checked on opening, signatures aside: the newest checkpoint is
		// countersigned again only if the key it names is still one of the trail's keys.
		e, err := ParseLine(st.lastCheckpoint)
		if err == nil {
			err = r.countersign(e)
		}
		if err != nil {
			r.witnessed = nil // the next checkpoint that arrives and verifies is countersigned
		}
	}
	return nil
}

// countersign makes the witnessed checkpoint of e, a checkpoint entry of the copy, after
// checking its signature.
func (r *Receiver) countersign(e Entry) error {
	keys := map[string]ed25519.PublicKey{}
	for _, k := range r.opts.PublicKeys {
		keys[KeyID(k)] = k
	}
	if known, valid := verifySignature(e.Checkpoint, keys); !known || !valid {
		return fmt.Errorf("the checkpoint at seq %d is not signed by one of the trail's keys", e.Seq)
	}
	w, err := r.opts.Witness.Countersign(e, time.Now())
	if err != nil {
		return err
	}
	r.witnessed = w
	return nil
}

// Witnessed is the newest checkpoint of the copy, countersigned; nil when the receiver is not
// a witness or its copy holds no checkpoint yet.
func (r *Receiver) Witnessed() *Witnessed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.witnessed
}

// state is what an answer states: the head and the witnessed checkpoint's line. The caller
// holds r.mu.
func (r *Receiver) state() (ChainHead, []byte) {
	if r.witnessed == nil {
		return r.head, nil
	}
	return r.head, r.witnessed.Line()
}

// snapshot is state, taking the lock.
func (r *Receiver) snapshot() (ChainHead, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state()
}

// Head is where the copy stands.
func (r *Receiver) Head() ChainHead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.head
}

// Close closes the directory's current file; every accepted batch was already synced.
func (r *Receiver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sink == nil {
		return nil
	}
	err := r.sink.Close()
	r.sink, r.broken = nil, ErrClosed
	return err
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(req) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="nodewright-audit"`)
		writeRefusal(w, http.StatusUnauthorized, "a bearer token is required")
		return
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		head, witnessed := r.snapshot()
		r.answer(w, http.StatusOK, head, witnessed, "")
	case http.MethodPost:
		r.post(w, req)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeRefusal(w, http.StatusMethodNotAllowed, "GET the head or POST a batch")
	}
}

func (r *Receiver) authorized(req *http.Request) bool {
	if r.opts.Token == "" {
		return true
	}
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(token), []byte(r.opts.Token)) == 1
}

func (r *Receiver) post(w http.ResponseWriter, req *http.Request) {
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != BatchContentType {
		writeRefusal(w, http.StatusUnsupportedMediaType, "a batch is "+BatchContentType)
		return
	}
	first, err := parseFirstSeq(req.Header.Get(FirstSeqHeader))
	if err != nil {
		head, witnessed := r.snapshot()
		r.answer(w, http.StatusBadRequest, head, witnessed, err.Error())
		return
	}
	// The body is read before taking the lock, so that a slow client holds up no one else.
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			writeRefusal(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a batch is at most %d bytes", mbe.Limit))
			return
		}
		head, witnessed := r.snapshot()
		r.answer(w, http.StatusBadRequest, head, witnessed, fmt.Sprintf("reading the batch: %v", err))
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sink == nil {
		writeRefusal(w, http.StatusServiceUnavailable, fmt.Sprintf("the receiver cannot store: %v", r.broken))
		return
	}
	if first != r.head.Next {
		// Already held (the answer to an earlier send was lost), or ahead of the copy: either
		// way nothing is stored, and the head tells the shipper where to go on.
		head, witnessed := r.state()
		r.answer(w, http.StatusConflict, head, witnessed, fmt.Sprintf("the batch starts at seq %d, this copy continues at seq %d", first, r.head.Next))
		return
	}
	entries, err := checkBatch(r.head, r.ids, r.opts.PublicKeys, body)
	if err != nil {
		head, witnessed := r.state()
		r.answer(w, http.StatusUnprocessableEntity, head, witnessed, err.Error())
		return
	}
	// Not the request's context: once the write starts it finishes, or the copy's state on
	// disk is not known, whether or not the client is still waiting.
	if err := r.sink.Append(context.Background(), entries); err != nil {
		// Part of the batch may be on disk: take the state from there, as a restart would.
		_ = r.sink.Close()
		if rerr := r.open(); rerr != nil {
			r.sink, r.broken = nil, rerr
			writeRefusal(w, http.StatusServiceUnavailable, fmt.Sprintf("storing the batch: %v; recovering: %v", err, rerr))
			return
		}
		head, witnessed := r.state()
		r.answer(w, http.StatusInternalServerError, head, witnessed, fmt.Sprintf("storing the batch: %v", err))
		return
	}
	newest := -1
	for i := range entries {
		if rec := entries[i].Record; rec != nil {
			r.ids.put(rec.ID, entries[i].Seq)
		} else {
			newest = i
		}
	}
	last := entries[len(entries)-1]
	r.head = ChainHead{Next: last.Seq + 1, Head: last.Hash}
	if r.opts.Witness != nil && newest >= 0 {
		// Stored, and verified as the continuation of the copy, its signature included.
		if err := r.countersign(entries[newest]); err != nil {
			head, witnessed := r.state()
			r.answer(w, http.StatusInternalServerError, head, witnessed, fmt.Sprintf("stored, but not countersigned: %v", err))
			return
		}
	}
	head, witnessed := r.state()
	r.answer(w, http.StatusOK, head, witnessed, "")
}

// answer writes an answer that states the head and, from a witness, the witnessed checkpoint.
func (r *Receiver) answer(w http.ResponseWriter, status int, h ChainHead, witnessed []byte, problem string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(encodeAnswer(h, problem, witnessed)) // a client gone away is the client's problem
}

// writeRefusal answers without the head: to a client not yet authenticated, or when the head
// is beside the point.
func writeRefusal(w http.ResponseWriter, status int, problem string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "{\"error\":%s}\n", appendString(nil, problem))
}

// errEmptyBatch refuses a POST without lines.
var errEmptyBatch = errors.New("the batch holds no lines")

// checkBatch reads a batch as the continuation of the chain at head, with the verifier's own
// reader and rules: every line whole, canonical and hashing to its hash; each linked to the one
// before, the first to head; checkpoints describing the chain before them (and signed by one of
// keys, when keys are given); no record ID already in ids or twice in the batch. It returns the
// entries to store, or the first reason to refuse the batch whole.
func checkBatch(head ChainHead, ids *idSet, keys []ed25519.PublicKey, body []byte) ([]Entry, error) {
	if len(body) == 0 {
		return nil, errEmptyBatch
	}
	v := newVerifier(VerifyOptions{PublicKeys: keys})
	v.started, v.expect, v.head = true, head.Next, head.Head
	var entries []Entry
	err := readLines([]Input{{Name: "batch", Reader: bytes.NewReader(body)}}, func(p parsedLine) {
		v.visit(p)
		if p.err != nil || p.torn {
			return
		}
		if rec := p.entry.Record; rec != nil {
			if first, dup := ids.get(rec.ID); dup {
				v.problem(ProblemDuplicateID, p.input, p.line, seqPtr(p.entry.Seq), "record %s is already at seq %d", rec.ID, first)
			}
		}
		entries = append(entries, p.entry)
	})
	if err != nil {
		return nil, err // a bytes.Reader does not fail; kept for the reader's contract
	}
	if n := len(v.report.Problems) + v.report.ProblemsOmitted; n > 0 {
		return nil, fmt.Errorf("the batch does not continue the chain at seq %d (%d problems): %s", head.Next, n, v.report.Problems[0])
	}
	return entries, nil
}

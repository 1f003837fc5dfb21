package audit

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// The shipping protocol between a Shipper and a Receiver (docs/audit.md, "Shipping to an HTTP
// endpoint"). The receiver holds a copy of the chain and is the one authority on how far that
// copy reaches: every answer carries its head, and the shipper only ever sends the batch that
// starts there. A batch that does not start at the head is refused whole, so however often a
// batch is sent (after a timeout, a reset connection, an error answered after storing), the
// copy never gets an entry twice and never skips one.
const (
	// BatchContentType is the media type of a batch: complete JSON Lines, each ending in "\n".
	BatchContentType = "application/x-ndjson"
	// FirstSeqHeader names the seq of a batch's first line; it must equal the receiver's head.
	FirstSeqHeader = "Nodewright-Audit-First-Seq"
)

// ChainHead is where a copy of the chain stands: Next entries held, the last hashing to Head
// (zero when the copy is empty).
type ChainHead struct {
	Next uint64
	Head Hash
}

func (h ChainHead) String() string { return fmt.Sprintf("next seq %d, head %s", h.Next, h.Head) }

// headAnswer is the body of every answer that states the receiver's head:
// {"next":N,"head":"<64 hex>"} and, on a refusal, "error". A receiver that is a witness adds
// "witnessed": the line of the newest checkpoint of its copy, countersigned (Witnessed).
type headAnswer struct {
	Next      *uint64 `json:"next"`
	Head      *string `json:"head"`
	Error     string  `json:"error,omitempty"`
	Witnessed string  `json:"witnessed,omitempty"`
}

func encodeHeadAnswer(h ChainHead, problem string) []byte { return encodeAnswer(h, problem, nil) }

func encodeAnswer(h ChainHead, problem string, witnessed []byte) []byte {
	head := h.Head.String()
	b, _ := json.Marshal(headAnswer{Next: &h.Next, Head: &head, Error: problem, Witnessed: string(witnessed)}) // cannot fail: plain fields
	return append(b, '\n')
}

// parseAnswerWitnessed reads the witnessed checkpoint an answer carries, if any. The
// receiver is across the network: the line is checked as ParseWitnessed does, and it must lie
// within the copy the answer's head describes.
func parseAnswerWitnessed(body []byte, h ChainHead) (*Witnessed, error) {
	var a headAnswer
	if json.Unmarshal(body, &a) != nil || a.Witnessed == "" {
		return nil, nil // none: the head, read apart, says whether the answer is usable
	}
	w, err := ParseWitnessed([]byte(a.Witnessed))
	if err != nil {
		return nil, fmt.Errorf("the receiver's answer: %w", err)
	}
	if w.Entry.Seq >= h.Next {
		return nil, fmt.Errorf("the receiver's witnessed checkpoint is at seq %d, beyond its copy (next seq %d)", w.Entry.Seq, h.Next)
	}
	return w, nil
}

// maxAnswerBytes bounds what a shipper reads of an answer: a head is under 200 bytes.
const maxAnswerBytes = 64 << 10

// parseHeadAnswer reads a receiver's answer. The receiver is across the network, so nothing is
// taken on trust: both members must be present and the head must be 64 lowercase hex digits.
// Unknown members are ignored, so that a later receiver may say more.
func parseHeadAnswer(body []byte) (ChainHead, string, error) {
	var a headAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return ChainHead{}, "", fmt.Errorf("the receiver's answer is not a head: %w", err)
	}
	if a.Next == nil || a.Head == nil {
		return ChainHead{}, a.Error, errors.New(`the receiver's answer lacks "next" or "head"`)
	}
	h := ChainHead{Next: *a.Next}
	if err := decodeHash(*a.Head, &h.Head); err != nil || hex.EncodeToString(h.Head[:]) != *a.Head {
		return ChainHead{}, a.Error, fmt.Errorf("the receiver's head %q is not 64 lowercase hex digits", *a.Head)
	}
	if h.Next == 0 && h.Head != (Hash{}) {
		return ChainHead{}, a.Error, errors.New("the receiver claims an empty chain with a non-zero head")
	}
	return h, a.Error, nil
}

// parseFirstSeq reads the FirstSeqHeader value: a decimal seq, no sign, no leading zeros.
func parseFirstSeq(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != v {
		return 0, fmt.Errorf("header %s: %q is not a sequence number", FirstSeqHeader, v)
	}
	return n, nil
}

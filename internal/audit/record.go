// Package audit builds the records of Nodewright's audit trail: who did what to which object,
// when, from which state to which, and why. Every decision the operator makes goes through
// the one builder here, so every record has the same shape and a stable identity.
//
// The package also keeps the trail tamper-evident: records are hash-chained in a canonical
// encoding, signed checkpoints are written into the stream, sinks store it, and Verify names
// any change. docs/audit.md specifies the format.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Subject is the object a record is about.
type Subject struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation,omitempty"`
}

// Detail is one named fact attached to a record (a digest, a PVC name, an error).
type Detail struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Record is one entry of the audit trail.
type Record struct {
	// ID is stable: building the record of the same transition again (after a crash, say)
	// gives the same ID, so that appending it twice is recognisably one record.
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Actor   string    `json:"actor"`
	Subject Subject   `json:"subject"`
	Action  string    `json:"action"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"`
	Message string    `json:"message,omitempty"`
	Details []Detail  `json:"details,omitempty"`
}

// Transition builds the record of subject moving from one state to another. occurrence tells
// apart transitions that can legitimately repeat between the same two states (the legacy
// machine's generation, say); pass "" where a transition happens at most once in a subject's
// life, as a workflow's steps do.
func Transition(subject Subject, actor, action, from, to, reason, message, occurrence string, at time.Time, details ...Detail) Record {
	return Record{
		ID:      recordID(subject.UID, action, from, to, occurrence),
		Time:    at.UTC(),
		Actor:   actor,
		Subject: subject,
		Action:  action,
		From:    from,
		To:      to,
		Reason:  reason,
		Message: message,
		Details: details,
	}
}

// contentDomain starts what ContentID hashes, so that a content ID never equals a
// Transition ID by construction.
const contentDomain = "nodewright-audit record content\n"

// ContentID is an ID made of everything r says (its canonical encoding, r.ID aside): two
// records that differ in any member, the time included, get different IDs, and the same
// record built again, with the same time, gets the same one. It is the identity of a record
// that has no transition of its own to be named after, such as one written by a script.
func ContentID(r Record) string {
	r.ID = ""
	h := sha256.New()
	h.Write([]byte(contentDomain))
	h.Write(appendRecord(nil, &r))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// recordID hashes the fields that identify a transition, with a separator no field contains
// unescaped, so that different field splits never collide.
func recordID(uid types.UID, action, from, to, occurrence string) string {
	escape := strings.NewReplacer(`\`, `\\`, "|", `\|`)
	h := sha256.New()
	for _, part := range []string{string(uid), action, from, to, occurrence} {
		h.Write([]byte(escape.Replace(part)))
		h.Write([]byte("|"))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

package ui

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// maxTrailRecords is how many of the newest records the page gets.
const maxTrailRecords = 1000

// trail reads a local copy of an audit trail and verifies it.
type trail struct {
	dir  string
	keys []ed25519.PublicKey
}

func newTrail(dir string, keyFiles []string) (*trail, error) {
	t := &trail{dir: dir}
	for _, f := range keyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading the trail's public key: %w", err)
		}
		k, err := audit.ParsePublicKey(data)
		if err != nil {
			return nil, fmt.Errorf("the trail's public key %s: %w", f, err)
		}
		t.keys = append(t.keys, k)
	}
	return t, nil
}

func (t *trail) given() bool { return t.dir != "" }

// trailView is what the audit page shows.
type trailView struct {
	Given        bool           `json:"given"`
	Dir          string         `json:"dir,omitempty"`
	Files        []string       `json:"files,omitempty"`
	Verification *verification  `json:"verification,omitempty"`
	Records      []audit.Record `json:"records"`
	// Total counts every record in the trail; Records holds the newest of them.
	Total int    `json:"total"`
	Error string `json:"error,omitempty"`
}

// verification is audit.Verify's report, as the page words it.
type verification struct {
	// Status is "verified", "failed" (tampering or damage found) or "unverified" (no
	// public key was given, so only the records are shown).
	Status         string     `json:"status"`
	Keys           int        `json:"keys"`
	Entries        uint64     `json:"entries"`
	Checkpoints    uint64     `json:"checkpoints"`
	Unsigned       uint64     `json:"unsigned"`
	LastCheckpoint *time.Time `json:"lastCheckpoint,omitempty"`
	Problems       []string   `json:"problems,omitempty"`
	Notes          []string   `json:"notes,omitempty"`
}

// read reads the trail's files, newest records first, and verifies the chain. A last line
// still being written (no newline yet) is left for the next read rather than reported as torn.
func (t *trail) read() trailView {
	view := trailView{Given: t.given(), Dir: t.dir, Records: []audit.Record{}}
	if !t.given() {
		return view
	}
	files, err := filepath.Glob(filepath.Join(t.dir, "audit-*.jsonl"))
	if err != nil {
		view.Error = err.Error()
		return view
	}
	slices.Sort(files)
	view.Files = files
	if len(files) == 0 {
		if _, err := os.Stat(t.dir); err != nil {
			view.Error = fmt.Sprintf("the trail folder cannot be read: %v", err)
		} else {
			view.Error = "the trail folder holds no audit-*.jsonl files yet"
		}
		return view
	}
	contents := make([][]byte, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			view.Error = err.Error()
			return view
		}
		if i == len(files)-1 {
			data = data[:bytes.LastIndexByte(data, '\n')+1]
		}
		contents[i] = data
	}
	for _, data := range contents {
		for line := range bytes.Lines(data) {
			e, err := audit.ParseLine(bytes.TrimSuffix(line, []byte("\n")))
			if err != nil || e.Record == nil {
				continue
			}
			view.Records = append(view.Records, *e.Record)
		}
	}
	view.Total = len(view.Records)
	slices.Reverse(view.Records)
	if len(view.Records) > maxTrailRecords {
		view.Records = view.Records[:maxTrailRecords]
	}
	view.Verification = t.verify(files, contents)
	return view
}

func (t *trail) verify(files []string, contents [][]byte) *verification {
	v := &verification{Keys: len(t.keys)}
	if len(t.keys) == 0 {
		v.Status = "unverified"
		return v
	}
	inputs := make([]audit.Input, len(files))
	for i := range files {
		inputs[i] = audit.Input{Name: filepath.Base(files[i]), Reader: bytes.NewReader(contents[i])}
	}
	report, err := audit.Verify(audit.VerifyOptions{PublicKeys: t.keys}, inputs...)
	if err != nil {
		v.Status = "failed"
		v.Problems = []string{err.Error()}
		return v
	}
	v.Status = "verified"
	if !report.OK {
		v.Status = "failed"
	}
	v.Entries, v.Checkpoints, v.Unsigned = report.Entries, report.Checkpoints, report.Unsigned
	if cp := report.LastCheckpoint; cp != nil {
		at := cp.Time
		v.LastCheckpoint = &at
	}
	for i, p := range report.Problems {
		if i == 20 {
			v.Problems = append(v.Problems, fmt.Sprintf("and %d more", len(report.Problems)-20+report.ProblemsOmitted))
			break
		}
		v.Problems = append(v.Problems, p.String())
	}
	v.Notes = report.Warnings
	return v
}

// watch calls changed, a quarter of a second after a change and at most that often, while files in the trail's folder
// change, until ctx ends.
func (t *trail) watch(ctx context.Context, changed func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(t.dir); err != nil {
		return
	}
	const settle = 250 * time.Millisecond
	timer := time.NewTimer(settle)
	timer.Stop()
	defer timer.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			if !pending {
				pending = true
				timer.Reset(settle)
			}
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
		case <-timer.C:
			pending = false
			changed()
		}
	}
}

// trailRecords serves the trail's newest records and its verification.
func (s *server) trailRecords(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.trail.read())
}

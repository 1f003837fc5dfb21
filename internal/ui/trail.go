package ui

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// maxTrailRecords is how many of the newest records the page gets.
const maxTrailRecords = 1000

// trail reads a local copy of an audit trail and verifies it. The view the pages get is
// computed once per change of the files and shared by every page; the files are read
// incrementally (each from where the last read stopped, the newest records kept in a ring),
// and read again from the start only when one was replaced, shortened or rewritten, or the
// verification fails. The verification itself reads the whole chain (internal/audit verifies
// a stream from its start), once per change.
type trail struct {
	dir  string
	keys []ed25519.PublicKey

	// computations counts the views computed; the tests count them.
	computations atomic.Int64

	mu    sync.Mutex
	stale bool   // the files may have changed since view was computed
	view  []byte // the trailView as JSON; nil until computed
	files []trailFile
	// newest is a ring of the newest maxTrailRecords records; next is where the next goes.
	newest []audit.Record
	next   int
	total  int
	// failed: the last verification failed, so the next read starts from the beginning.
	failed bool
}

// trailFile is how far one file was read.
type trailFile struct {
	path string
	info os.FileInfo // to notice another file put in its place
	// offset counts the bytes read: whole lines of the last file (a line still being written
	// waits for the next read), everything of the files before it.
	offset int64
	// last is the last line read, to notice the file rewritten under the same name.
	last []byte
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

// invalidate says the files may have changed: the next view is computed afresh.
func (t *trail) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale = true
}

// refresh computes the view now, after a change of the files.
func (t *trail) refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.computeLocked()
}

// viewJSON is the view as the pages get it: the one computed after the last change.
func (t *trail) viewJSON() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.view == nil || t.stale {
		t.computeLocked()
	}
	return t.view
}

func (t *trail) computeLocked() {
	t.computations.Add(1)
	t.stale = false
	data, err := json.Marshal(t.readLocked())
	if err != nil {
		data, _ = json.Marshal(trailView{Given: t.given(), Dir: t.dir, Records: []audit.Record{}, Error: err.Error()})
	}
	t.view = data
}

// readLocked reads what is new in the trail's files and verifies the chain. A last line still
// being written (no newline yet) is left for the next read rather than reported as torn.
func (t *trail) readLocked() trailView {
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
		t.resetLocked()
		if _, err := os.Stat(t.dir); err != nil {
			view.Error = fmt.Sprintf("the trail folder cannot be read: %v", err)
		} else {
			view.Error = "the trail folder holds no audit-*.jsonl files yet"
		}
		return view
	}
	// Without a key nothing would notice a record rewritten in place, so the files are read
	// from the start each time; with one, the verification notices, and after a failure the
	// next read starts afresh too.
	fromStart := len(t.keys) == 0 || t.failed || !t.continuesLocked(files)
	if fromStart {
		t.resetLocked()
	}
	if err := t.readNewLocked(files); err != nil {
		t.resetLocked()
		view.Error = err.Error()
		return view
	}
	view.Verification = t.verifyLocked()
	if view.Verification.Status == "failed" && !fromStart {
		// Changed in place, perhaps: show the records the files hold now.
		t.resetLocked()
		if err := t.readNewLocked(files); err != nil {
			t.resetLocked()
			view.Error = err.Error()
			return view
		}
		view.Verification = t.verifyLocked()
	}
	t.failed = view.Verification.Status == "failed"
	view.Records = t.newestFirstLocked()
	view.Total = t.total
	return view
}

// continuesLocked tells whether files are the files read so far, unchanged but for lines
// appended to the last of them, followed by new ones.
func (t *trail) continuesLocked(files []string) bool {
	if len(files) < len(t.files) {
		return false
	}
	for i, f := range t.files {
		if files[i] != f.path {
			return false
		}
		info, err := os.Stat(f.path)
		if err != nil || !os.SameFile(info, f.info) || info.Size() < f.offset {
			return false
		}
		if i < len(t.files)-1 && info.Size() != f.offset {
			return false // an older file grew: its lines would come out of order
		}
		if !stillEndsWith(f.path, f.offset, f.last) {
			return false
		}
	}
	return true
}

// stillEndsWith tells whether the file still holds line just before offset.
func stillEndsWith(path string, offset int64, line []byte) bool {
	if len(line) == 0 {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	got := make([]byte, len(line))
	_, err = f.ReadAt(got, offset-int64(len(line)))
	return err == nil && bytes.Equal(got, line)
}

// readNewLocked reads each file from where the last read stopped.
func (t *trail) readNewLocked(files []string) error {
	for i, path := range files {
		if i == len(t.files) {
			info, err := os.Stat(path)
			if err != nil {
				return err
			}
			t.files = append(t.files, trailFile{path: path, info: info})
		}
		f := &t.files[i]
		data, err := readFrom(path, f.offset)
		if err != nil {
			return err
		}
		if i == len(files)-1 {
			data = data[:bytes.LastIndexByte(data, '\n')+1]
		}
		for line := range bytes.Lines(data) {
			f.last = line
			e, err := audit.ParseLine(bytes.TrimSuffix(line, []byte("\n")))
			if err != nil || e.Record == nil {
				continue
			}
			t.pushLocked(*e.Record)
		}
		if len(data) > 0 {
			f.last = slices.Clone(f.last)
		}
		f.offset += int64(len(data))
	}
	return nil
}

func readFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func (t *trail) pushLocked(r audit.Record) {
	t.total++
	if len(t.newest) < maxTrailRecords {
		t.newest = append(t.newest, r)
		return
	}
	t.newest[t.next] = r
	t.next = (t.next + 1) % maxTrailRecords
}

func (t *trail) newestFirstLocked() []audit.Record {
	n := len(t.newest)
	out := make([]audit.Record, n)
	for i := range n {
		out[i] = t.newest[(t.next-1-i+2*n)%n]
	}
	return out
}

func (t *trail) resetLocked() {
	t.files, t.newest, t.next, t.total, t.failed = nil, nil, 0, 0, false
}

// verifyLocked verifies the chain as far as it was read: the same bytes as the records shown.
func (t *trail) verifyLocked() *verification {
	v := &verification{Keys: len(t.keys)}
	if len(t.keys) == 0 {
		v.Status = "unverified"
		return v
	}
	inputs := make([]audit.Input, 0, len(t.files))
	defer func() {
		for _, in := range inputs {
			_ = in.Reader.(*limitedFile).Close()
		}
	}()
	for _, f := range t.files {
		fh, err := os.Open(f.path)
		if err != nil {
			v.Status = "failed"
			v.Problems = []string{err.Error()}
			return v
		}
		inputs = append(inputs, audit.Input{Name: filepath.Base(f.path), Reader: &limitedFile{Reader: io.LimitReader(fh, f.offset), Closer: fh}})
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

// limitedFile reads a file up to a point.
type limitedFile struct {
	io.Reader
	io.Closer
}

// trailRetry is how often watch tries again to watch a folder it could not (one that does
// not exist yet, say). A variable for the tests.
var trailRetry = time.Second

// watch follows the trail's folder until ctx ends: a quarter of a second after a change of its
// files, and at most that often, it recomputes the view, then calls changed. A folder that
// does not exist (yet) or cannot be watched is reported through problem, rather than never
// updating silently, and tried again every trailRetry; problem("") once it is watched.
func (t *trail) watch(ctx context.Context, changed func(), problem func(string)) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		problem(fmt.Sprintf("the audit trail folder %s cannot be watched (%v): the audit page shows it as it was when opened, and does not update", t.dir, err))
		return
	}
	defer func() { _ = w.Close() }()
	for {
		if !t.waitForFolder(ctx, w, problem) {
			return
		}
		problem("")
		// What changed before the watch began.
		t.refresh()
		changed()
		if !t.follow(ctx, w, changed) {
			return
		}
		// The folder went: say so, and wait for it again.
		t.refresh()
		changed()
	}
}

// waitForFolder watches the folder, trying again every trailRetry until it can or ctx ends.
func (t *trail) waitForFolder(ctx context.Context, w *fsnotify.Watcher, problem func(string)) bool {
	for {
		err := w.Add(t.dir)
		if err == nil {
			return true
		}
		if errors.Is(err, fs.ErrNotExist) {
			problem(fmt.Sprintf("the audit trail folder %s does not exist: the audit page will update once it does", t.dir))
		} else {
			problem(fmt.Sprintf("the audit trail folder %s cannot be watched (%v): the audit page will update once it can", t.dir, err))
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(trailRetry):
		}
	}
}

// follow recomputes the view and calls changed after each change in the watched folder. It
// returns true when the folder itself was removed or moved away, false when ctx ended.
func (t *trail) follow(ctx context.Context, w *fsnotify.Watcher, changed func()) bool {
	const settle = 250 * time.Millisecond
	timer := time.NewTimer(settle)
	timer.Stop()
	defer timer.Stop()
	pending := false
	dir := filepath.Clean(t.dir)
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.Events:
			if !ok {
				return false
			}
			if filepath.Clean(ev.Name) == dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
				_ = w.Remove(t.dir)
				return true
			}
			if !pending {
				pending = true
				timer.Reset(settle)
			}
		case _, ok := <-w.Errors:
			if !ok {
				return false
			}
		case <-timer.C:
			pending = false
			t.refresh()
			changed()
		}
	}
}

// trailRecords serves the trail's newest records and its verification, as computed after
// the last change.
func (s *server) trailRecords(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.trail.viewJSON())
}

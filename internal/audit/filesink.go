package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultMaxFileBytes is the size at which a FileSink starts a new file.
const DefaultMaxFileBytes = 64 << 20

const (
	filePrefix = "audit-"
	fileSuffix = ".jsonl"
)

// FileSink stores the chain as JSON Lines files in one directory, audit-00000001.jsonl,
// audit-00000002.jsonl, ...: a new file when the current one would pass MaxFileBytes. Files
// only split the stream: the chain runs on across them, so verification reads them in order.
// Each Append is written and fsynced before it returns.
type FileSink struct {
	dir      string
	maxBytes int64
	f        *os.File
	index    int   // number in the current file's name
	size     int64 // bytes in the current file
	buf      []byte
	state    ChainState
	repaired int64
}

// FileSinkOptions tune a FileSink; zero values take the defaults.
type FileSinkOptions struct {
	MaxFileBytes int64
}

// OpenFileSink opens (creating it if needed) the directory and recovers where its chain stands.
// A last line cut by a crash is removed: it was never reported durable, so it was never
// acknowledged, and the log rewrites whatever it held. A chain that does not verify (apart
// from signatures, which need the public key) is refused: appending to it would hide the break.
func OpenFileSink(dir string, opts FileSinkOptions) (*FileSink, error) {
	s := &FileSink{dir: dir, maxBytes: opts.MaxFileBytes}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxFileBytes
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the audit directory: %w", err)
	}
	files, err := ChainFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return s, s.openNext(1)
	}
	last := files[len(files)-1]
	if s.repaired, err = cutTornTail(last); err != nil {
		return nil, err
	}
	v := newVerifier(VerifyOptions{AllowPartial: true})
	report, err := v.run(openAll(files))
	if err != nil {
		return nil, fmt.Errorf("recovering the audit chain in %s: %w", dir, err)
	}
	if !report.OK {
		return nil, fmt.Errorf("the audit chain in %s is broken, not appending to it: %s", dir, report.Problems[0])
	}
	if v.started {
		s.state = ChainState{Next: v.expect, Head: v.head, ids: v.ids, SinceCheckpoint: v.sinceCheckpoint}
		if v.lastCheckpoint.Checkpoint != nil {
			s.state.lastCheckpoint = bytes.Clone(v.lastCheckpoint.line) // not a view of the reader's buffers
		}
	}
	if _, err := fmt.Sscanf(strings.TrimPrefix(filepath.Base(last), filePrefix), "%d", &s.index); err != nil {
		return nil, fmt.Errorf("audit file %s: no number in its name: %w", last, err)
	}
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the audit file: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("audit file %s: %w", last, err)
	}
	s.f, s.size = f, info.Size()
	return s, nil
}

// ChainFiles lists a FileSink directory's files in chain order.
func ChainFiles(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, filePrefix+"*"+fileSuffix))
	if err != nil {
		return nil, fmt.Errorf("listing audit files in %s: %w", dir, err)
	}
	// The numbers are zero-padded to a fixed width, so name order is number order.
	slices.Sort(matches)
	return matches, nil
}

func openAll(paths []string) []Input {
	inputs := make([]Input, len(paths))
	for i, p := range paths {
		inputs[i] = Input{Name: p, Reader: &lazyFile{path: p}}
	}
	return inputs
}

// lazyFile opens its file on the first read and closes it at the end, so that a long list of
// rotated files never holds more than one descriptor.
type lazyFile struct {
	path string
	f    *os.File
	done bool
}

func (l *lazyFile) Read(p []byte) (int, error) {
	if l.done {
		return 0, io.EOF
	}
	if l.f == nil {
		f, err := os.Open(l.path)
		if err != nil {
			return 0, fmt.Errorf("opening audit file: %w", err)
		}
		l.f = f
	}
	n, err := l.f.Read(p)
	if errors.Is(err, io.EOF) {
		l.done = true
		_ = l.f.Close()
	}
	return n, err
}

// cutTornTail truncates the file after its last newline and says how many bytes it removed.
func cutTornTail(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("opening the audit file: %w", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("audit file %s: %w", path, err)
	}
	size := info.Size()
	keep := size
	// A torn line is at most one line long; look back far enough for any real one.
	buf := make([]byte, 64<<10)
	for keep > 0 {
		start := max(0, keep-int64(len(buf)))
		chunk := buf[:keep-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return 0, fmt.Errorf("reading the end of audit file %s: %w", path, err)
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			keep = start + int64(i) + 1
			break
		}
		keep = start
	}
	if keep == size {
		return 0, nil
	}
	if err := f.Truncate(keep); err != nil {
		return 0, fmt.Errorf("removing the torn last line of audit file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("syncing audit file %s: %w", path, err)
	}
	return size - keep, nil
}

// State is where the chain in the directory stood when it was opened.
func (s *FileSink) State() ChainState { return s.state }

// Repaired is how many bytes of a torn last line OpenFileSink removed.
func (s *FileSink) Repaired() int64 { return s.repaired }

// Append writes the entries, starting new files as needed, and fsyncs before returning.
func (s *FileSink) Append(ctx context.Context, entries []Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.buf = s.buf[:0]
	for i := range entries {
		n := int64(len(entries[i].line) + 1)
		if s.size+int64(len(s.buf)) > 0 && s.size+int64(len(s.buf))+n > s.maxBytes {
			if err := s.write(); err != nil {
				return err
			}
			if err := s.rotate(); err != nil {
				return err
			}
		}
		s.buf = append(s.buf, entries[i].line...)
		s.buf = append(s.buf, '\n')
	}
	if err := s.write(); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing audit file %s: %w", s.f.Name(), err)
	}
	return nil
}

func (s *FileSink) write() error {
	if len(s.buf) == 0 {
		return nil
	}
	n, err := s.f.Write(s.buf)
	s.size += int64(n)
	s.buf = s.buf[:0]
	if err != nil {
		return fmt.Errorf("writing audit file %s: %w", s.f.Name(), err)
	}
	return nil
}

// rotate makes the current file durable and starts the next.
func (s *FileSink) rotate() error {
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing audit file %s: %w", s.f.Name(), err)
	}
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("closing audit file %s: %w", s.f.Name(), err)
	}
	return s.openNext(s.index + 1)
}

// openNext creates file number index, and fsyncs the directory so that the new name survives a
// crash along with the entries about to be written into it.
func (s *FileSink) openNext(index int) error {
	path := filepath.Join(s.dir, fmt.Sprintf("%s%08d%s", filePrefix, index, fileSuffix))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("creating audit file: %w", err)
	}
	d, err := os.Open(s.dir)
	if err == nil {
		err = d.Sync()
		_ = d.Close()
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing audit directory %s: %w", s.dir, err)
	}
	s.f, s.index, s.size = f, index, 0
	return nil
}

// Close closes the current file; every Append was already synced.
func (s *FileSink) Close() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("closing audit file %s: %w", s.f.Name(), err)
	}
	return nil
}

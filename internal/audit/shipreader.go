package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// shipPosition is a place in a FileSink directory: entry next starts at offset in file, and prev
// is the hash of entry next-1 (zero for next 0). file is a base name; "" before any file exists.
type shipPosition struct {
	file   string
	offset int64
	next   uint64
	prev   Hash
}

// shipBatch is a run of complete lines read from one chain file, checked to link on from where
// it starts, and made durable on disk before it is sent.
type shipBatch struct {
	body    []byte
	first   uint64
	entries int
	end     shipPosition // after the batch's last line
}

// chainReader reads a FileSink directory the way a shipper needs: complete lines from a
// position, following the files as the log appends and rotates them. It only reads; the one
// write-like call is an fsync of what it read, so that nothing the next power cut could still
// take away is ever sent.
type chainReader struct {
	dir string
	f   *os.File // open on the file last read
}

func (c *chainReader) close() {
	if c.f != nil {
		_ = c.f.Close()
		c.f = nil
	}
}

func (c *chainReader) open(name string) (*os.File, error) {
	path := filepath.Join(c.dir, name)
	if c.f != nil && c.f.Name() == path {
		return c.f, nil
	}
	c.close()
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit file: %w", err)
	}
	c.f = f
	return f, nil
}

// nextFile is the name of the file the sink starts after name. The sink creates it only after
// its last write to name, so once it exists, name is complete.
func nextFile(name string) (string, bool) {
	var index int
	if _, err := fmt.Sscanf(strings.TrimPrefix(name, filePrefix), "%d", &index); err != nil {
		return "", false
	}
	return fmt.Sprintf("%s%08d%s", filePrefix, index+1, fileSuffix), true
}

func (c *chainReader) exists(name string) (bool, error) {
	_, err := os.Stat(filepath.Join(c.dir, name))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("audit file: %w", err)
	}
}

// firstFile names the oldest chain file, or "" when there is none yet.
func (c *chainReader) firstFile() (string, error) {
	files, err := ChainFiles(c.dir)
	if err != nil || len(files) == 0 {
		return "", err
	}
	return filepath.Base(files[0]), nil
}

// completeAt reads up to max bytes at offset and returns the complete lines there (ending in
// "\n"), and whether bytes without a newline follow them. A first line longer than max is read
// on its own, up to MaxLineBytes.
func (c *chainReader) completeAt(name string, offset int64, limit int) (lines []byte, partial bool, err error) {
	f, err := c.open(name)
	if err != nil {
		return nil, false, err
	}
	info, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("audit file %s: %w", f.Name(), err)
	}
	avail := info.Size() - offset
	long := false // the first line is longer than limit: take it alone
	for avail > 0 {
		buf := make([]byte, min(int64(limit), avail))
		n, err := f.ReadAt(buf, offset)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("reading audit file %s: %w", f.Name(), err)
		}
		end := bytes.LastIndexByte(buf[:n], '\n')
		if long {
			end = bytes.IndexByte(buf[:n], '\n')
		}
		if end >= 0 {
			return buf[:end+1], false, nil
		}
		if int64(n) == avail || n < len(buf) {
			return nil, n > 0, nil // all there is, and no newline in it yet
		}
		if long {
			return nil, false, fmt.Errorf("audit file %s at byte %d: a line longer than %d bytes", f.Name(), offset, MaxLineBytes)
		}
		limit, long = MaxLineBytes+1, true
	}
	return nil, false, nil
}

// batch reads the complete lines at pos, up to maxEntries lines and maxBytes bytes (always at
// least one line), all from one file. An empty batch means nothing more has been written yet.
func (c *chainReader) batch(pos shipPosition, maxEntries, maxBytes int) (shipBatch, error) {
	for {
		if pos.file == "" {
			first, err := c.firstFile()
			if err != nil || first == "" {
				return shipBatch{end: pos}, err
			}
			pos.file = first
		}
		data, _, err := c.completeAt(pos.file, pos.offset, maxBytes)
		if err != nil {
			return shipBatch{}, err
		}
		if len(data) > 0 {
			return c.cut(pos, data, maxEntries)
		}
		next, ok := nextFile(pos.file)
		if !ok {
			return shipBatch{}, fmt.Errorf("audit file %s: no number in its name", pos.file)
		}
		if rotated, err := c.exists(next); err != nil || !rotated {
			return shipBatch{end: pos}, err
		}
		// The file is complete now; read it once more, since lines may have come in between.
		data, partial, err := c.completeAt(pos.file, pos.offset, maxBytes)
		switch {
		case err != nil:
			return shipBatch{}, err
		case len(data) > 0:
			return c.cut(pos, data, maxEntries)
		case partial:
			return shipBatch{}, fmt.Errorf("audit file %s ends inside a line at byte %d, and %s follows it: the chain is broken", pos.file, pos.offset, next)
		}
		pos = shipPosition{file: next, next: pos.next, prev: pos.prev}
	}
}

// cut takes up to maxEntries of the complete lines data, read at pos, checking that each is a
// valid entry linked to the one before; then it syncs the file, so that what is sent is durable.
// A line over MaxLineBytes ends the batch before it, and is reported once it is first: the
// receiver would refuse it, and every later batch with it, for ever.
func (c *chainReader) cut(pos shipPosition, data []byte, maxEntries int) (shipBatch, error) {
	b := shipBatch{first: pos.next, end: pos}
	used := 0
	for used < len(data) && b.entries < maxEntries {
		n := bytes.IndexByte(data[used:], '\n')
		if n > MaxLineBytes {
			if b.entries > 0 {
				break
			}
			return shipBatch{}, fmt.Errorf("audit file %s at byte %d: a line of %d bytes, over the limit of %d bytes (MaxLineBytes)",
				pos.file, b.end.offset, n, MaxLineBytes)
		}
		line := data[used : used+n]
		e, err := parseLine(line, new(Record))
		if err != nil {
			return shipBatch{}, fmt.Errorf("audit file %s at byte %d: %w", pos.file, b.end.offset, err)
		}
		if e.Seq != b.end.next || e.Prev != b.end.prev {
			return shipBatch{}, fmt.Errorf("audit file %s at byte %d: seq %d linked to %s, expected seq %d after %s: the local chain is broken",
				pos.file, b.end.offset, e.Seq, e.Prev, b.end.next, b.end.prev)
		}
		used += n + 1
		b.entries++
		b.end.offset += int64(n + 1)
		b.end.next, b.end.prev = e.Seq+1, e.Hash
	}
	// Written is not yet durable: the log may not have synced these lines. Syncing them here
	// means a power cut can no longer take back what the receiver is about to hold.
	if err := c.f.Sync(); err != nil {
		return shipBatch{}, fmt.Errorf("syncing audit file %s: %w", c.f.Name(), err)
	}
	b.body = data[:used]
	return b, nil
}

// errNotHeldLocally means the entry asked for is older than the oldest local file.
var errNotHeldLocally = errors.New("no longer held in the local files")

// errAheadOfLocal means the receiver has more entries than the local chain.
var errAheadOfLocal = errors.New("beyond the local chain")

// seek finds the position of seq target: reading forward from start when start is at or
// before it, otherwise from the newest file that begins at or before it.
func (c *chainReader) seek(start shipPosition, target uint64) (shipPosition, error) {
	if start.file != "" && start.next <= target {
		return c.scan(start, target)
	}
	files, err := ChainFiles(c.dir)
	if err != nil {
		return shipPosition{}, err
	}
	oldest := uint64(0)
	found := false
	for i := len(files) - 1; i >= 0; i-- {
		name := filepath.Base(files[i])
		first, ok, err := c.firstSeq(name)
		if err != nil {
			return shipPosition{}, err
		}
		if !ok {
			continue // a file the sink has just created
		}
		oldest, found = first, true
		if first <= target {
			return c.scan(shipPosition{file: name, next: first, prev: Hash{}}, target)
		}
	}
	switch {
	case !found && target == 0:
		first := ""
		if len(files) > 0 {
			first = filepath.Base(files[0])
		}
		return shipPosition{file: first}, nil
	case !found:
		return shipPosition{}, fmt.Errorf("seq %d is %w: the local chain is empty", target, errAheadOfLocal)
	default:
		return shipPosition{}, fmt.Errorf("seq %d is %w: the oldest is seq %d", target, errNotHeldLocally, oldest)
	}
}

func (c *chainReader) firstSeq(name string) (uint64, bool, error) {
	data, _, err := c.completeAt(name, 0, 4096)
	if err != nil || len(data) == 0 {
		return 0, false, err
	}
	seq, ok := lineSeq(data[:bytes.IndexByte(data, '\n')])
	if !ok {
		return 0, false, fmt.Errorf("audit file %s: the first line is not an entry", name)
	}
	return seq, true, nil
}

// scan reads forward from start to the line of seq target, or to the end of the chain when
// target is the next entry to be written. start.prev may be unknown (zero) when start is the
// beginning of a file; it is taken from the lines read.
func (c *chainReader) scan(start shipPosition, target uint64) (shipPosition, error) {
	pos := start
	for {
		f, err := c.open(pos.file)
		if err != nil {
			return shipPosition{}, err
		}
		r := bufio.NewReaderSize(io.NewSectionReader(f, pos.offset, 1<<62), MaxLineBytes+1)
		for {
			line, err := r.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				return shipPosition{}, fmt.Errorf("audit file %s at byte %d: a line longer than %d bytes (MaxLineBytes)", pos.file, pos.offset, MaxLineBytes)
			}
			if errors.Is(err, io.EOF) { // with or without a partial line after the last whole one
				break
			}
			if err != nil {
				return shipPosition{}, fmt.Errorf("reading audit file %s: %w", pos.file, err)
			}
			seq, prev, hash, ok := lineLinks(line[:len(line)-1])
			if !ok || seq != pos.next {
				return shipPosition{}, fmt.Errorf("audit file %s at byte %d: not the entry of seq %d: the local chain is broken", pos.file, pos.offset, pos.next)
			}
			if seq == target {
				return shipPosition{file: pos.file, offset: pos.offset, next: seq, prev: prev}, nil
			}
			pos.offset += int64(len(line))
			pos.next, pos.prev = seq+1, hash
		}
		next, ok := nextFile(pos.file)
		if !ok {
			return shipPosition{}, fmt.Errorf("audit file %s: no number in its name", pos.file)
		}
		rotated, err := c.exists(next)
		if err != nil {
			return shipPosition{}, err
		}
		if !rotated {
			if pos.next == target {
				return pos, nil
			}
			return shipPosition{}, fmt.Errorf("seq %d is %w, which ends at seq %d", target, errAheadOfLocal, int64(pos.next)-1)
		}
		pos = shipPosition{file: next, next: pos.next, prev: pos.prev}
	}
}

// lineSeq reads the seq of a line without checking the rest.
func lineSeq(line []byte) (uint64, bool) {
	c := cursor{b: line, ok: true}
	c.lit(`{"v":1,"seq":`)
	seq := c.uint()
	return seq, c.ok
}

// lineLinks reads a line's seq, prev and hash without checking the rest: enough to find a
// place in the chain. What is then sent is checked in full by cut.
func lineLinks(line []byte) (seq uint64, prev, hash Hash, ok bool) {
	c := cursor{b: line, ok: true}
	c.lit(`{"v":1,"seq":`)
	seq = c.uint()
	c.lit(`,"prev":`)
	prev = c.hash()
	if !c.ok || len(line) < hashSuffixLen {
		return 0, Hash{}, Hash{}, false
	}
	c.i = len(line) - hashSuffixLen
	c.lit(`,"hash":`)
	hash = c.hash()
	c.lit(`}`)
	return seq, prev, hash, c.ok
}

// localNext is how many entries the directory holds: one past the seq of the last complete
// line of the newest file that has one.
func (c *chainReader) localNext() (uint64, error) {
	files, err := ChainFiles(c.dir)
	if err != nil {
		return 0, err
	}
	for i := len(files) - 1; i >= 0; i-- {
		line, err := lastLine(files[i])
		if err != nil {
			return 0, err
		}
		if line == nil {
			continue
		}
		seq, ok := lineSeq(line)
		if !ok {
			return 0, fmt.Errorf("audit file %s: the last line is not an entry", files[i])
		}
		return seq + 1, nil
	}
	return 0, nil
}

// lastLine reads the last complete line of a file (without its newline), nil if it has none.
func lastLine(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening audit file: %w", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit file %s: %w", path, err)
	}
	nl, err := lastNewline(f, info.Size())
	if err != nil || nl < 0 {
		return nil, err
	}
	return lineEndingAt(f, nl+1)
}

// lineEndingAt reads the line whose newline is the byte before end (without the newline).
func lineEndingAt(f *os.File, end int64) ([]byte, error) {
	var last [1]byte
	if end <= 0 {
		return nil, fmt.Errorf("audit file %s: no line ends at byte %d", f.Name(), end)
	}
	if _, err := f.ReadAt(last[:], end-1); err != nil {
		return nil, fmt.Errorf("reading audit file %s: %w", f.Name(), err)
	}
	if last[0] != '\n' {
		return nil, fmt.Errorf("audit file %s: no line ends at byte %d", f.Name(), end)
	}
	nl, err := lastNewline(f, end-1)
	if err != nil {
		return nil, err
	}
	line := make([]byte, end-1-(nl+1))
	if _, err := f.ReadAt(line, nl+1); err != nil {
		return nil, fmt.Errorf("reading audit file %s: %w", f.Name(), err)
	}
	return line, nil
}

// lastNewline finds the last newline in f before end, looking back at most one line's length;
// -1 when the file has none before end.
func lastNewline(f *os.File, end int64) (int64, error) {
	limit := max(0, end-MaxLineBytes-1)
	for chunkEnd := end; chunkEnd > limit; {
		start := max(limit, chunkEnd-64<<10)
		buf := make([]byte, chunkEnd-start)
		if _, err := f.ReadAt(buf, start); err != nil {
			return 0, fmt.Errorf("reading audit file %s: %w", f.Name(), err)
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			return start + int64(i), nil
		}
		chunkEnd = start
	}
	if limit > 0 {
		return 0, fmt.Errorf("audit file %s: a line longer than %d bytes before byte %d", f.Name(), MaxLineBytes, end)
	}
	return -1, nil
}

// holds reports whether pos really is the place of entry pos.next: the line ending just before
// it is entry next-1 and hashes to prev or, at the start of a file, the line there is entry next
// and links to prev.
func (c *chainReader) holds(pos shipPosition) bool {
	if pos.file == "" {
		return false
	}
	if pos.offset == 0 {
		data, _, err := c.completeAt(pos.file, 0, 4096)
		if err != nil || len(data) == 0 {
			return false
		}
		seq, prev, _, ok := lineLinks(data[:bytes.IndexByte(data, '\n')])
		return ok && seq == pos.next && prev == pos.prev
	}
	f, err := c.open(pos.file)
	if err != nil {
		return false
	}
	line, err := lineEndingAt(f, pos.offset)
	if err != nil {
		return false
	}
	seq, _, hash, ok := lineLinks(line)
	return ok && seq+1 == pos.next && hash == pos.prev
}

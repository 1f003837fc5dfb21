package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// MaxLineBytes bounds one line of the trail, its newline not counted. A record is a few hundred
// bytes, so anything near this is not an entry, and reading it whole would let a damaged file
// exhaust memory. The verifier reports a longer line as malformed, the receiver refuses it and
// Log.Append never writes one (ErrLineTooLong).
const MaxLineBytes = 1 << 20

// Input is one stream of the chain, named for the report (usually its file name).
type Input struct {
	Name   string
	Reader io.Reader
}

// lineBatch is a run of consecutive lines of one input, parsed by a worker and consumed in order.
type lineBatch struct {
	input     string
	firstLine int     // 1-based number of lines[0]
	arena     []byte  // the lines' bytes
	ends      []int   // lines[i] is arena[ends[i-1]:ends[i]]
	tooLong   []int   // the length of a line over MaxLineBytes, which was not kept; 0 for the others
	torn      bool    // the last line of the batch ended the input without a newline
	entries   []Entry // parse results
	errs      []error // parse errors
	done      chan struct{}
	readError error // set on a batch that only carries a read failure
}

func (b *lineBatch) line(i int) []byte {
	start := 0
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.arena[start:b.ends[i]]
}

const batchLines = 2048

// parsedLine is one line as the chain check sees it.
type parsedLine struct {
	input string
	line  int
	entry Entry
	err   error // *LineError, or a torn or overlong line
	torn  bool
}

// errTorn describes a line that never reaches ParseLine whole.
var errTorn = errors.New("the input ends inside this line (no newline): a torn write or a cut file")

func errTooLong(size int) error {
	return &LineError{Kind: LineMalformed, Detail: fmt.Sprintf("a line of %d bytes, over the limit of %d bytes (MaxLineBytes)", size, MaxLineBytes)}
}

// readLines parses the inputs' lines on every core and hands them to visit in order. Hashing and
// decoding are the cost of verification and are independent per line; only linking is serial.
func readLines(inputs []Input, visit func(parsedLine)) error {
	workers := runtime.GOMAXPROCS(0)
	work := make(chan *lineBatch, workers)
	ordered := make(chan *lineBatch, 2*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				parseBatch(b)
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(work)
		for _, in := range inputs {
			if err := splitInput(in, func(b *lineBatch) {
				ordered <- b
				work <- b
			}); err != nil {
				b := &lineBatch{input: in.Name, readError: err, done: make(chan struct{})}
				close(b.done)
				ordered <- b
				return
			}
		}
	}()
	var readErr error
	for b := range ordered {
		<-b.done
		if b.readError != nil {
			readErr = b.readError
			continue
		}
		for i := range b.ends {
			p := parsedLine{input: b.input, line: b.firstLine + i, entry: b.entries[i], err: b.errs[i]}
			if b.torn && i == len(b.ends)-1 {
				p.torn = true
			}
			visit(p)
		}
	}
	wg.Wait()
	return readErr
}

func parseBatch(b *lineBatch) {
	b.entries = make([]Entry, len(b.ends))
	b.errs = make([]error, len(b.ends))
	records := make([]Record, len(b.ends)) // one allocation for the batch's records
	for i := range b.ends {
		if b.tooLong[i] > 0 {
			b.errs[i] = errTooLong(b.tooLong[i])
			continue
		}
		b.entries[i], b.errs[i] = parseLine(b.line(i), &records[i]) // the arena is never written again
	}
	close(b.done)
}

// splitInput cuts one input into batches of lines.
func splitInput(in Input, emit func(*lineBatch)) error {
	r := bufio.NewReaderSize(in.Reader, 256<<10)
	lineNo := 1
	arenaSize := 64 << 10
	newBatch := func() *lineBatch {
		return &lineBatch{input: in.Name, firstLine: lineNo, arena: make([]byte, 0, arenaSize), done: make(chan struct{})}
	}
	b := newBatch()
	for {
		start := len(b.arena)
		size, ended := 0, false // size: the line's bytes so far, its newline not counted
		for {
			chunk, err := r.ReadSlice('\n')
			text := chunk
			if err == nil {
				text = chunk[:len(chunk)-1]
			}
			size += len(text)
			if size <= MaxLineBytes {
				b.arena = append(b.arena, text...)
			} else {
				b.arena = b.arena[:start] // too long: only its size is kept
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				ended = true
				break
			}
			return fmt.Errorf("reading %s after line %d: %w", in.Name, lineNo-1, err)
		}
		tooLong := 0
		if size > MaxLineBytes {
			tooLong = size
		}
		if ended {
			if size > 0 {
				b.ends = append(b.ends, len(b.arena))
				b.tooLong = append(b.tooLong, tooLong)
				b.torn = true
			}
			if len(b.ends) > 0 {
				emit(b)
			}
			return nil
		}
		b.ends = append(b.ends, len(b.arena))
		b.tooLong = append(b.tooLong, tooLong)
		lineNo++
		if len(b.ends) == batchLines {
			// Size the next batch's arena on this one, so it is not grown by copying.
			arenaSize = len(b.arena) + len(b.arena)/8
			emit(b)
			b = newBatch()
		}
	}
}

//go:build linux

// Command nodewright-copy copies a block device or file to another and
// proves the copy identical; see docs/nodewright-copy.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

const usage = `usage:
  nodewright-copy copy   --src PATH --dst PATH [flags]
  nodewright-copy verify --src PATH --dst PATH [flags]

Exit codes: 0 ok, 1 verification failed, 2 bad input, 3 I/O error, 4 cancelled.
Run "nodewright-copy copy -h" for the flags.
`

func main() {
	// Nearly all of the heap is the long-lived chunk buffers; at the
	// default GOGC the little garbage hashing makes could grow to their size
	// again before a collection, doubling RSS for nothing.
	debug.SetGCPercent(20)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// settings are the parsed command line.
type settings struct {
	command          string
	request          blockcopy.Request
	hash             string
	json             bool
	progress         bool
	progressInterval time.Duration
	terminationLog   string
}

// run is the whole program minus process setup, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return blockcopy.ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodewright-copy: %v\n", err)
		return blockcopy.ExitBadInput
	}

	// The engine validates the algorithm and options and reports them like
	// any other bad input, so the JSON result covers them too.
	s.request.Options.Algorithm = blockcopy.Algorithm(s.hash)
	stopProgress := func() {}
	if s.progress {
		s.request.Options.Progress, stopProgress = startProgress(s.progressInterval, stderr)
	}
	var result blockcopy.Result
	if s.command == "copy" {
		result = blockcopy.RunCopy(ctx, s.request)
	} else {
		result = blockcopy.RunVerify(ctx, s.request)
	}
	stopProgress()
	report(result, s, stdout, stderr)
	return result.ExitCode
}

func parseArgs(args []string, stderr io.Writer) (settings, error) {
	var s settings
	if len(args) == 0 || (args[0] != "copy" && args[0] != "verify") {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return s, errors.New("missing command")
		}
		return s, fmt.Errorf("unknown command %q", args[0])
	}
	s.command = args[0]
	fs := flag.NewFlagSet("nodewright-copy "+s.command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.request.Source, "src", "", "source file or block device (required)")
	fs.StringVar(&s.request.Target, "dst", "", "target file or block device, at least as large as the source (required)")
	fs.StringVar(&s.hash, "hash", string(blockcopy.BLAKE3), "digest algorithm: blake3 or sha256")
	fs.BoolVar(&s.json, "json", false, "print one JSON result on stdout")
	fs.BoolVar(&s.progress, "progress", false, "print JSON progress lines on stderr")
	fs.DurationVar(&s.progressInterval, "progress-interval", 2*time.Second, "time between progress lines")
	fs.StringVar(&s.terminationLog, "termination-log", "/dev/termination-log", "file to also write the JSON result to, if it exists")
	fs.IntVar(&s.request.Options.ChunkSize, "chunk-size", blockcopy.DefaultChunkSize, "bytes per read and write, a multiple of 4096")
	fs.IntVar(&s.request.Options.Buffers, "buffers", blockcopy.DefaultBuffers, "chunks in flight")
	if s.command == "copy" {
		fs.BoolVar(&s.request.TargetZeroed, "target-zeroed", false, "the target block device reads as zeros (e.g. after a discard), so holes and zero chunks need not be written")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if s.progressInterval <= 0 {
		return s, fmt.Errorf("--progress-interval %s: must be positive", s.progressInterval)
	}
	return s, nil
}

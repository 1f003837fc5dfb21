//go:build linux

package blockcopy

import (
	"context"
	"fmt"
	"time"
)

// Request is what the copy and verify commands are asked to do.
type Request struct {
	Source string
	Target string
	// TargetZeroed vouches that the target reads as zeros, which only
	// matters for block devices: files are checked.
	TargetZeroed bool
	Options      Options
}

// Flags that Request fields come from, named in error messages.
const (
	sourceFlag = "--src"
	targetFlag = "--dst"
)

// RunCopy copies, syncs, reads the target back and compares digests. The
// result is a success only if every step did.
func RunCopy(ctx context.Context, req Request) Result {
	started := time.Now()
	res := Result{Command: "copy", Source: req.Source, Target: req.Target, Algorithm: algorithmOf(req.Options), Incomplete: true}
	err := runCopy(ctx, req, &res)
	res.Seconds = roundSeconds(time.Since(started).Seconds())
	res.finish(err)
	return res
}

func runCopy(ctx context.Context, req Request, res *Result) error {
	engine, err := NewEngine(req.Options)
	if err != nil {
		return err
	}
	src, err := OpenSource(sourceFlag, req.Source)
	if err != nil {
		return err
	}
	defer src.release()
	dst, state, err := OpenTarget(targetFlag, req.Target, src, req.TargetZeroed)
	if err != nil {
		return err
	}
	defer dst.release()
	res.TargetZeroed = state.Zeroed
	res.BytesTotal = src.Size()

	stats, err := engine.Copy(ctx, src, dst, state.Zeroed)
	res.BytesWritten, res.BytesSkipped = stats.BytesWritten, stats.BytesSkipped
	res.DirectIO = src.DirectIO() && dst.DirectIO()
	if err != nil {
		return err
	}
	res.Incomplete = false
	res.SourceDigest = stats.SourceDigest
	dst.DropCache()

	readback, err := OpenSource(targetFlag, req.Target)
	if err != nil {
		return err
	}
	defer readback.release()
	res.TargetDigest, err = engine.Digest(ctx, readback, src.Size())
	res.DirectIO = res.DirectIO && readback.DirectIO()
	if err != nil {
		return err
	}
	if res.TargetDigest != res.SourceDigest {
		return fmt.Errorf("%w: target read back as %s, source was %s", ErrMismatch, res.TargetDigest, res.SourceDigest)
	}
	return nil
}

// RunVerify compares the source with the first bytes of the target without
// writing anything.
func RunVerify(ctx context.Context, req Request) Result {
	started := time.Now()
	res := Result{Command: "verify", Source: req.Source, Target: req.Target, Algorithm: algorithmOf(req.Options)}
	err := runVerify(ctx, req, &res)
	res.Seconds = roundSeconds(time.Since(started).Seconds())
	res.finish(err)
	return res
}

func runVerify(ctx context.Context, req Request, res *Result) error {
	engine, err := NewEngine(req.Options)
	if err != nil {
		return err
	}
	src, err := OpenSource(sourceFlag, req.Source)
	if err != nil {
		return err
	}
	defer src.release()
	dst, err := OpenSource(targetFlag, req.Target)
	if err != nil {
		return err
	}
	defer dst.release()
	if dst.Size() < src.Size() {
		return badInput(targetFlag, req.Target, fmt.Sprintf("is %d bytes, smaller than the source's %d bytes", dst.Size(), src.Size()))
	}
	res.BytesTotal = src.Size()
	stats, err := engine.Compare(ctx, src, dst, src.Size())
	res.DirectIO = src.DirectIO() && dst.DirectIO()
	res.SourceDigest, res.TargetDigest = stats.SourceDigest, stats.TargetDigest
	return err
}

func algorithmOf(o Options) Algorithm {
	if o.Algorithm == "" {
		return BLAKE3
	}
	return o.Algorithm
}

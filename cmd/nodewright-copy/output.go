//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

// report prints the result for a person, or as JSON, and hands it to the
// termination log so the controller can read it from the pod status.
func report(r blockcopy.Result, s settings, stdout, stderr io.Writer) {
	encoded, err := json.Marshal(r)
	if err != nil {
		// Result holds only strings, numbers and booleans.
		panic(err)
	}
	if s.json {
		fmt.Fprintf(stdout, "%s\n", encoded)
	} else if r.ExitCode == blockcopy.ExitOK {
		printHuman(r, stdout)
	}
	if r.Error != "" {
		fmt.Fprintf(stderr, "nodewright-copy: %s %s (exit %d): %s\n", r.Command, r.Status, r.ExitCode, r.Error)
	}
	if err := writeTerminationLog(s.terminationLog, encoded); err != nil {
		fmt.Fprintf(stderr, "nodewright-copy: writing termination log: %v\n", err)
	}
}

func printHuman(r blockcopy.Result, w io.Writer) {
	if r.Command == "copy" {
		fmt.Fprintf(w, "copied and verified %d bytes in %.2fs: %d written, %d skipped as holes or zeros (direct I/O: %t)\n",
			r.BytesTotal, r.Seconds, r.BytesWritten, r.BytesSkipped, r.DirectIO)
	} else {
		fmt.Fprintf(w, "verified %d bytes identical in %.2fs (direct I/O: %t)\n", r.BytesTotal, r.Seconds, r.DirectIO)
	}
	fmt.Fprintf(w, "source %s\ntarget %s\n", r.SourceDigest, r.TargetDigest)
}

// writeTerminationLog writes only to an existing file: Kubernetes creates
// /dev/termination-log in the container, and anywhere else the absence of
// the file means nobody is listening.
func writeTerminationLog(path string, encoded []byte) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(append(encoded, '\n'))
	return errors.Join(err, f.Close())
}

// startProgress prints a JSON progress line every interval and at the end
// of each phase until the returned stop function is called, which prints
// the final state.
func startProgress(interval time.Duration, w io.Writer) (p *blockcopy.Progress, stop func()) {
	var mu sync.Mutex
	emit := func(r blockcopy.ProgressReport) {
		line, err := json.Marshal(r)
		if err != nil {
			panic(err) // ProgressReport holds only strings and numbers
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s\n", line)
	}
	p = blockcopy.NewProgress(emit)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case now := <-ticker.C:
				emit(p.Report(now))
			case <-done:
				emit(p.Report(time.Now()))
				return
			}
		}
	})
	return p, func() {
		close(done)
		wg.Wait()
	}
}

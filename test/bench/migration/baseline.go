package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spectrocloud/nodewright/internal/blockcopy"
)

// baseline runs what the migration is compared with on the source volume's file.
type baseline struct {
	binary string
	dir    string
	source string
	size   int64
	digest string // of the source, which every copy must report
	// dropErr is why the page cache could not be dropped, once it could not.
	dropErr error
}

// baselineRun is one run of nodewright-copy alone.
type baselineRun struct {
	wall   time.Duration     // process start to exit
	result *blockcopy.Result // its JSON result
}

// measure times nodewright-copy from a cold page cache onto a fresh target, removed afterwards.
func (b *baseline) measure() (*baselineRun, error) {
	b.dropCaches()
	wall, result, err := b.copy()
	if err != nil {
		return nil, err
	}
	return &baselineRun{wall: wall, result: result}, nil
}

// copy runs nodewright-copy with the arguments of the migration's Job (newDataJob; the site's
// kubelet adds --termination-log) onto a fresh sparse file of the source's size, as the site
// provisions the target volume.
func (b *baseline) copy() (time.Duration, *blockcopy.Result, error) {
	target := filepath.Join(b.dir, "baseline-target.img")
	termLog := filepath.Join(b.dir, "baseline.termination-log")
	defer func() { _ = os.Remove(target); _ = os.Remove(termLog) }()
	if err := createSparse(target, b.size); err != nil {
		return 0, nil, err
	}
	// nodewright-copy writes its result only into a termination log that exists.
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		return 0, nil, err
	}
	progress, err := os.Create(filepath.Join(b.dir, "baseline.progress"))
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = progress.Close() }()
	cmd := exec.Command(b.binary, "copy", "--src", b.source, "--dst", target,
		"--hash", "blake3", "--json", "--progress", "--progress-interval", "2s", "--termination-log="+termLog)
	cmd.Dir, cmd.Stdout, cmd.Stderr = b.dir, io.Discard, progress
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if err != nil {
		return 0, nil, fmt.Errorf("nodewright-copy alone: %w (progress and errors in %s)", err, progress.Name())
	}
	raw, err := os.ReadFile(termLog)
	if err != nil {
		return 0, nil, err
	}
	var result blockcopy.Result
	if err := json.Unmarshal(raw, &result); err != nil {
		return 0, nil, fmt.Errorf("nodewright-copy alone wrote no result: %w: %q", err, raw)
	}
	if result.Status != "ok" || result.SourceDigest != b.digest || result.TargetDigest != b.digest || result.BytesWritten != b.size {
		return 0, nil, fmt.Errorf("nodewright-copy alone: status %s, digests %s → %s (want %s), %d bytes written of %d",
			result.Status, result.SourceDigest, result.TargetDigest, b.digest, result.BytesWritten, b.size)
	}
	return wall, &result, nil
}

// dropCaches writes dirty pages out and drops the page cache, so the next run reads cold.
// It needs root; the first failure is kept for the report.
func (b *baseline) dropCaches() {
	unix.Sync()
	f, err := os.OpenFile("/proc/sys/vm/drop_caches", os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("3\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil && b.dropErr == nil {
		b.dropErr = err
	}
}

// dropped says whether every drop of the page cache worked.
func (b *baseline) dropped() string {
	if b.dropErr != nil {
		return fmt.Sprintf("no (%v; runs after the first read partly from memory)", b.dropErr)
	}
	return "yes"
}

func createSparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Truncate(size), f.Close())
}

// checkSpace fails early when the folder's file system has less than need bytes free.
func checkSpace(dir string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%s has %d MiB free; the benchmark needs %d MiB", dir, free>>20, need>>20)
	}
	return nil
}

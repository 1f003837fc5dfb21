// Command audit benchmarks the audit trail against its targets from issue 6 and prints each
// figure with PASS or FAIL and its ratio to the target:
//
//   - records appended per second to the file sink, each Append returning only once its
//     records are fsynced, with many writers as in the operator (target ≥ 5,000/s);
//   - seconds to verify a trail of 1,000,000 records, checkpoints and rotated files included
//     (target ≤ 5 s).
//
// BENCH_AUDIT_WINDOW (default 5s) sets the append window, BENCH_AUDIT_RECORDS (default
// 1000000) the size of the verified trail. The trail is written under $TMPDIR and removed.
package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spectrocloud/nodewright/internal/audit"
)

const (
	appendTarget = 5000.0          // durable records per second
	verifyTarget = 5 * time.Second // for verifyTargetRecords records
	writers      = 64              // concurrent appenders, as reconciles of many objects would be

	verifyTargetRecords = 1_000_000
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-audit: %v\n", err)
		os.Exit(1)
	}
	if missed {
		os.Exit(1)
	}
}

func run() error {
	window, err := envDuration("BENCH_AUDIT_WINDOW", 5*time.Second)
	if err != nil {
		return err
	}
	records, err := envInt("BENCH_AUDIT_RECORDS", verifyTargetRecords)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-audit-")
	if err != nil {
		return fmt.Errorf("creating a scratch directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		return fmt.Errorf("generating a key: %w", err)
	}
	signer := audit.NewSigner(key)

	fmt.Printf("audit trail (%s, %d CPUs, scratch %s)\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), dir)

	single, err := appendRate(filepath.Join(dir, "single"), signer, 1, window/5)
	if err != nil {
		return err
	}
	many, err := appendRate(filepath.Join(dir, "append"), signer, writers, window)
	if err != nil {
		return err
	}
	fmt.Printf("durable append to the file sink (every Append fsynced before it returns)\n")
	fmt.Printf("  1 writer    %8.0f records/s   (one fsync per record: the latency floor, for reference)\n", single)
	fmt.Printf("  %d writers  %8.0f records/s   (%.2f× the target; group commit, one fsync per batch)\n", writers, many, many/appendTarget)
	verdict(fmt.Sprintf("≥ %.0f durable records/s", appendTarget), many >= appendTarget)

	elapsed, files, bytes, err := verifyTime(filepath.Join(dir, "verify"), signer, records)
	if err != nil {
		return err
	}
	// The target is for a million records; a smaller run is scaled to it.
	scaled := time.Duration(float64(elapsed) * verifyTargetRecords / float64(records))
	fmt.Printf("\nverify %d records (%d files, %.0f MiB, a checkpoint every %d entries, from the page cache)\n",
		records, files, float64(bytes)/(1<<20), audit.DefaultCheckpointEvery)
	fmt.Printf("  %.2f s   (%.2f s per million, %.2f× the target; %.0f records/s)\n",
		elapsed.Seconds(), scaled.Seconds(), float64(scaled)/float64(verifyTarget), float64(records)/elapsed.Seconds())
	verdict(fmt.Sprintf("≤ %s per million records", verifyTarget), scaled <= verifyTarget)
	return nil
}

// appendRate appends records from n goroutines, one record per Append, for the window and
// reports durable records per second; it then checks that what was written verifies.
func appendRate(dir string, signer *audit.Signer, n int, window time.Duration) (float64, error) {
	sink, err := audit.OpenFileSink(dir, audit.FileSinkOptions{})
	if err != nil {
		return 0, err
	}
	l := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{})
	var appended atomic.Int64
	var failure atomic.Value
	deadline := time.Now().Add(window)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				if _, err := l.Append(context.Background(), record(w, i)); err != nil {
					failure.CompareAndSwap(nil, err)
					return
				}
				appended.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := l.Close(); err != nil {
		return 0, err
	}
	if err, _ := failure.Load().(error); err != nil {
		return 0, err
	}
	files, err := audit.ChainFiles(dir)
	if err != nil {
		return 0, err
	}
	report, err := audit.VerifyFiles(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{signer.PublicKey()}}, files...)
	if err != nil {
		return 0, err
	}
	if !report.OK || report.Records != uint64(appended.Load()) {
		return 0, fmt.Errorf("the appended trail does not verify: %d records of %d, problems %v", report.Records, appended.Load(), report.Problems)
	}
	return float64(appended.Load()) / elapsed.Seconds(), nil
}

// verifyTime writes a trail of n records in large batches (its writing is not measured) and
// times its verification.
func verifyTime(dir string, signer *audit.Signer, n int) (elapsed time.Duration, files int, size int64, err error) {
	sink, err := audit.OpenFileSink(dir, audit.FileSinkOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	l := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{})
	batch := make([]audit.Record, 0, 10000)
	for i := range n {
		batch = append(batch, record(0, i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := l.Append(context.Background(), batch...); err != nil {
				return 0, 0, 0, err
			}
			batch = batch[:0]
		}
	}
	if err := l.Close(); err != nil {
		return 0, 0, 0, err
	}
	paths, err := audit.ChainFiles(dir)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("audit file: %w", err)
		}
		size += info.Size()
	}
	runtime.GC() // the writing's garbage is not the verifier's cost
	start := time.Now()
	report, err := audit.VerifyFiles(audit.VerifyOptions{PublicKeys: []ed25519.PublicKey{signer.PublicKey()}}, paths...)
	elapsed = time.Since(start)
	if err != nil {
		return 0, 0, 0, err
	}
	if !report.OK || report.Records != uint64(n) {
		return 0, 0, 0, fmt.Errorf("the generated trail does not verify: %d records of %d, problems %v", report.Records, n, report.Problems)
	}
	return elapsed, len(paths), size, nil
}

// record is a realistic record: a workflow step of a VMVolumeMigration, with two details.
func record(writer, i int) audit.Record {
	subject := audit.Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration",
		Namespace: "vms", Name: "vm-" + strconv.Itoa(writer), UID: "3f0c6e9e-8a1b-4c55-9a5e-0d1c2b3a4f5e", Generation: 3}
	return audit.Transition(subject, "system:serviceaccount:nodewright-system:nodewright-operator", "Step", "Copy", "Repoint",
		"StepSucceeded", "copy verified identical", strconv.Itoa(writer)+"/"+strconv.Itoa(i), time.Now(),
		audit.Detail{Name: "digest", Value: "blake3:9f2c4e1a7b3d5f608e1c2a4b6d8f0e1c3a5b7d9f1e3c5a7b9d1f3e5c7a9b1d3f"},
		audit.Detail{Name: "targetPVC", Value: "vms/vm-disk-0-nodewright"})
}

// missed is set when a figure misses its target; the program then exits 1 after printing.
var missed bool

func verdict(target string, ok bool) {
	word := "PASS"
	if !ok {
		word, missed = "FAIL", true
	}
	fmt.Printf("  %s  %s\n", word, target)
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration", name, v)
	}
	return d, nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive whole number", name, v)
	}
	return n, nil
}

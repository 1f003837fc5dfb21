// Command migration benchmarks the orchestration overhead of a cold VMVolumeMigration: the
// end-to-end time of migrating a 1 GiB Block volume full of random data on the local site,
// against nodewright-copy alone on the same bytes, measured in the same run (goal: at most
// 5 s on top of the copy).
//
// It starts a local API server (envtest), the local site (test/site) serving the LINSTOR CSI
// driver, and the operator's controllers in-process, and then, with the page cache dropped
// before each run:
//
//  1. runs nodewright-copy alone with the flags the migration's Job passes, from the source
//     volume's backing file to a fresh file of the same size;
//  2. creates a Cold VMVolumeMigration to a new volume of the same class and times it from
//     create to phase Succeeded, noting when a watch saw each step start and finish, and each
//     VolumeSnapshot created and ready (the site's snapshots are file copies, where a real
//     CSI driver's are metadata operations: the report shows the overhead with and without);
//  3. runs nodewright-copy alone again; the baseline is the mean of the runs before and after.
//
// It then checks that the migration's checksums match and that the target holds the source's
// bytes, and fails otherwise.
//
// BENCH_MIGRATION_MIB (default 1024) sets the volume's size. Everything is written under one
// folder in $TMPDIR, removed at the end. Dropping the page cache needs root; without it the
// output says so.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/test/site"
)

// goal is the most the migration may take on top of the copy alone.
const goal = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-migration: %v\n", err)
		os.Exit(1)
	}
	if missed {
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// The site, the operator and client-go log to controller-runtime's logger and klog; the
	// benchmark prints only its figures.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	ctrllog.SetLogger(logr.Discard())

	sizeMiB, err := envInt("BENCH_MIGRATION_MIB", 1024)
	if err != nil {
		return err
	}
	size := int64(sizeMiB) << 20
	dir, err := os.MkdirTemp("", "bench-migration-")
	if err != nil {
		return fmt.Errorf("creating a scratch directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// The source, two snapshots, the target and the baseline's target.
	if err := checkSpace(dir, 5*size+size/4); err != nil {
		return err
	}
	copyBinary, err := site.CopyBinary()
	if err != nil {
		return err
	}

	env := testenv.New()
	if err := env.Start(); err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	l, err := startLab(ctx, env, filepath.Join(dir, "site"), copyBinary)
	if err != nil {
		return err
	}
	defer l.stop()
	source, err := l.prepare(ctx, size)
	if err != nil {
		return err
	}

	b := &baseline{binary: copyBinary, dir: dir, source: source.path, size: size, digest: source.digest}
	before, err := b.measure()
	if err != nil {
		return err
	}
	obs, err := l.migrate(ctx, b.dropCaches)
	if err != nil {
		return err
	}
	after, err := b.measure()
	if err != nil {
		return err
	}
	if err := l.verify(ctx, obs.final, source); err != nil {
		return err
	}

	fmt.Printf("cold VMVolumeMigration on the local site (%s, %d CPUs, %d MiB of random data, page cache dropped before each run: %s)\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), sizeMiB, b.dropped())
	report(before, after, obs)
	return nil
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 16 {
		return 0, fmt.Errorf("%s must be a whole number of at least 16, got %q", name, v)
	}
	return n, nil
}

package site

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Start runs a site for the test and stops it when the test ends; it returns once the site's
// controllers run. An empty Options.Dir is a folder of the test's own.
func Start(t testing.TB, cfg *rest.Config, opts Options) *Site {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the site stopped with an error: %v", err)
		}
	})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

var copyBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildCopy builds ./cmd/nodewright-copy once per test process and returns the binary's path
// (see CopyBinary), failing the test if it cannot.
func BuildCopy(t testing.TB) string {
	t.Helper()
	path, err := CopyBinary()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// CopyBinary builds ./cmd/nodewright-copy once per process and returns the binary's path,
// bin/site/nodewright-copy in the repository. The build goes to a folder of its own and is
// renamed into place, so processes that build at the same time do not collide.
func CopyBinary() (string, error) {
	copyBuild.once.Do(func() { copyBuild.path, copyBuild.err = buildCopy() })
	return copyBuild.path, copyBuild.err
}

func buildCopy() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "site")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.Command("go", "build", "-o", filepath.Join(tmp, copyCommand), "./cmd/nodewright-copy")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building nodewright-copy: %w\n%s", err, out)
	}
	path := filepath.Join(dir, copyCommand)
	if err := os.Rename(filepath.Join(tmp, copyCommand), path); err != nil {
		return "", err
	}
	return path, nil
}

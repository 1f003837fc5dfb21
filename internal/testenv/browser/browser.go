// Package browser starts the headless Chromium the browser tests drive: Debian's chromium
// package, never a browser a test downloads, with the flags this machine needs.
package browser

import (
	"os"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path is Chromium's program: $NODEWRIGHT_CHROMIUM, or Debian's /usr/bin/chromium. The test
// fails, saying how to install it, when it is missing.
func Path(t *testing.T) string {
	t.Helper()
	path := os.Getenv("NODEWRIGHT_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Chromium not found at %s (%v): run hack/chromium.sh, which installs Debian's chromium package (make test runs it first)", path, err)
	}
	return path
}

// Options are the allocator's options for a headless Chromium in a window of width × height,
// with a fresh profile of the test's: no sandbox (tests run as root), no GPU, no network of its
// own beyond the page it is sent to, colours as the screenshots in docs/ui are taken.
func Options(t *testing.T, width, height int) []chromedp.ExecAllocatorOption {
	t.Helper()
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
}

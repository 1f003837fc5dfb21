package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/client-go/rest"

	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/testenv/browser"
	"github.com/spectrocloud/nodewright/internal/testenv/operatortest"
	"github.com/spectrocloud/nodewright/internal/ui"
	"github.com/spectrocloud/nodewright/test/site"
)

// patience bounds every wait on observed state and every browser action: long enough for a
// busy CI machine, and no cost to a passing test, which goes on as soon as the state holds.
const patience = 2 * time.Minute

var (
	env = testenv.New().WithWebhooks()
	// copyBinary is nodewright-copy, which the sites' kubelet runs in the migrations' Jobs.
	copyBinary string
)

func TestMain(m *testing.M) {
	var err error
	if copyBinary, err = site.CopyBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(env.Run(m))
}

// user is who the UI's kubeconfig says the user is; the webhooks stamp it on what the page
// creates, and the trail names it.
const user = "ada@example.com"

// userConfig is the user's own credentials, as a kubeconfig would give them: the API server
// authenticates every request of the UI as user (a member of system:masters, so that every
// request reaches admission).
func userConfig() *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	return cfg
}

var (
	startOnce sync.Once
	startErr  error
	// trailDir and trailKey are the operator's audit trail and the public key of its
	// checkpoints.
	trailDir, trailKey string
)

// startOperator runs the operator once for the package, with its admission webhooks reached
// through the API server and an audit trail in a folder of its own (operatortest.Start).
func startOperator(t *testing.T) {
	t.Helper()
	startOnce.Do(func() { startErr = runOperator() })
	if startErr != nil {
		t.Fatal(startErr)
	}
}

func runOperator() error {
	op, err := operatortest.Start(env, operatortest.Options{TempPrefix: "nodewright-ui-test-", CheckpointInterval: 2 * time.Second})
	if err != nil {
		return err
	}
	trailDir, trailKey = op.TrailDir, op.PublicKeyFile
	return nil
}

// The storage the sites serve: LINSTOR (ReadWriteMany block, snapshots, clones) and TopoLVM
// (none of those).
const (
	linstorDriver = "linstor.csi.linbit.com"
	topolvmDriver = "topolvm.io"
	linstorClass  = "ui-linstor"
	topolvmClass  = "ui-topolvm"
	volumeSize    = 8 << 20
)

// newSite starts a local site in a namespace of the test's own, playing kubelet, KubeVirt and
// CSI there, with the VM "web" running on volume "root" (PVC web-root, full of data).
func newSite(t *testing.T, opts site.Options) string {
	t.Helper()
	ns := env.Namespace(t)
	operatortest.StorageClasses(t, env.Client, operatortest.Class{Name: linstorClass, Driver: linstorDriver},
		operatortest.Class{Name: topolvmClass, Driver: topolvmDriver})
	opts.Drivers = []string{linstorDriver, topolvmDriver}
	opts.CopyBinary = copyBinary
	opts.NodeName = "site-" + ns
	opts.Namespaces = []string{ns}
	s := site.Start(t, env.Config, opts)
	select {
	case <-s.Started():
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(patience):
		t.Fatal("the site did not start")
	}
	s.RunningVM(t, env.Client, ns, "web", linstorClass, volumeSize)
	return ns
}

// waitVMRunsOn waits until the VM "web" runs with volume "root" on claim.
func waitVMRunsOn(t *testing.T, ns, claim string) {
	t.Helper()
	site.WaitVMRunsOn(t, env.Client, ns, "web", claim)
}

// eventually polls cond until it holds, failing with its last message after timeout.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// printedURL is the URL `ui` prints: the token in its fragment.
var printedURL = regexp.MustCompile(`http://127\.0\.0\.1:\d+/#token=[A-Za-z0-9_-]+`)

// startUI runs the UI as `kubectl nodewright ui` does, with the user's credentials, until the
// test ends, and returns the URL it printed.
func startUI(t *testing.T, opts ui.Options) string {
	t.Helper()
	url, _ := runUI(t, opts)
	return url
}

// runUI is startUI that can also be stopped before the test ends.
func runUI(t *testing.T, opts ui.Options) (url string, stop func()) {
	t.Helper()
	return runUIAs(t, userConfig(), opts)
}

// runUIAs runs the UI with the credentials cfg gives, until the test ends or stop.
func runUIAs(t *testing.T, cfg *rest.Config, opts ui.Options) (url string, stop func()) {
	t.Helper()
	out := &testenv.SyncBuffer{}
	opts.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ui.Run(ctx, cfg, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the UI stopped with an error: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	eventually(t, "the UI to print its URL", patience, func() (bool, string) {
		url = printedURL.FindString(out.String())
		return url != "", fmt.Sprintf("output so far: %q", out.String())
	})
	return url, stop
}

// browserPage is one headless Chromium, with a fresh profile, showing the UI.
type browserPage struct {
	t   *testing.T
	ctx context.Context
}

// openPage starts Chromium with the flags this machine needs (no network of its own, no
// sandbox as root) and opens url in a window of width × height.
func openPage(t *testing.T, url string, width, height int) *browserPage {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browser.Options(t, width, height)...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	p := &browserPage{t: t, ctx: ctx}
	// The first run starts the browser, so it runs without a timeout (see chromedp.Run).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height)), chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening %s in Chromium: %v", url, err)
	}
	p.waitJS("the page to connect to its event stream", `document.getElementById('conn').textContent.includes('Live')`)
	return p
}

// goTo opens one of the page's pages (cluster, workflows, audit) from its navigation.
func (p *browserPage) goTo(page string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`nav a[data-page=%q]`, page))))
	p.waitJS("the "+page+" page", fmt.Sprintf(`!document.getElementById('page-%s').hidden`, page))
}

// do runs browser actions in order, each bounded. An action that finds an element by its
// selector and then acts on it holds the element's node id in between; when a re-render of the
// page replaces the element in that gap, the action fails before it has done anything, and is
// run again: it finds the new element.
func (p *browserPage) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, patience)
	defer cancel()
	for _, a := range actions {
		for {
			err := chromedp.Do(ctx, a)
			if err == nil {
				break
			}
			if !replacedNode(err) || ctx.Err() != nil {
				p.t.Fatalf("in the browser: %v", err)
			}
		}
	}
}

// replacedNode says whether err is Chromium's answer to a command on a node that is no longer
// in the document. The DevTools protocol tells it by these messages alone.
func replacedNode(err error) bool {
	for _, msg := range []string{"Could not find node with given id", "No node with given id found", "Node is detached from document"} {
		if strings.Contains(err.Error(), msg) {
			return true
		}
	}
	return false
}

// focus moves the keyboard focus to the element selector finds, in the page's own script: one
// step, so no re-render can come between finding the element and focusing it.
func (p *browserPage) focus(selector string) {
	p.t.Helper()
	p.waitJS("the keyboard focus on "+selector,
		`(() => { const el = `+query(selector)+`; if (!el) return false; el.focus(); return document.activeElement === el; })()`)
}

// press focuses the element selector finds and types keys: the page must keep the focus on it
// (on the element that replaces it, with the same data-key) across any re-render in between.
func (p *browserPage) press(selector, keys string) {
	p.t.Helper()
	p.focus(selector)
	p.do(chromedp.KeyEvent(keys))
}

// churn makes the page re-render without pause, as a stream of updates would, until stop is
// called: every element the test finds may be replaced before the test acts on it.
func (p *browserPage) churn() (stop func()) {
	p.t.Helper()
	p.do(chromedp.Evaluate[chromedp.Void](`window.nodewrightChurn = setInterval(render, 0)`))
	return func() {
		p.t.Helper()
		p.do(chromedp.Evaluate[chromedp.Void](`clearInterval(window.nodewrightChurn)`))
	}
}

func evaluate[T any](p *browserPage, js string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, patience)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// text is what the page shows, as a person reads it.
func (p *browserPage) text(selector string) string {
	p.t.Helper()
	s, err := evaluate[string](p, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ''}).innerText`, selector))
	if err != nil {
		p.t.Fatalf("reading %s: %v", selector, err)
	}
	return s
}

// waitJS waits until the expression is true in the page, failing with what the page shows.
func (p *browserPage) waitJS(what, js string) {
	p.t.Helper()
	p.waitJSFor(what, js, patience)
}

func (p *browserPage) waitJSFor(what, js string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := evaluate[bool](p, js)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			shown, _ := evaluate[string](p, `document.body.innerText`)
			p.t.Fatalf("timed out after %s waiting for %s (last error: %v); the page shows:\n%s", timeout, what, err, shown)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shot saves a screenshot of the whole page as name.png in the screenshot folder:
// $NODEWRIGHT_UI_SCREENSHOTS (docs/ui to regenerate the documentation's), or the test's
// temporary folder.
func (p *browserPage) shot(name string, width, height int) {
	p.t.Helper()
	dir := os.Getenv("NODEWRIGHT_UI_SCREENSHOTS")
	if dir == "" {
		dir = p.t.TempDir()
	}
	p.do(chromedp.EmulateViewport(int64(width), int64(height)))
	ctx, cancel := context.WithTimeout(p.ctx, patience)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// query is a script expression for the first element the CSS selector matches.
func query(selector string) string {
	return "document.querySelector(" + js(selector) + ")"
}

// js quotes s for a script.
func js(s string) string {
	return fmt.Sprintf("%q", s)
}

func contains(haystack string, needles ...string) bool {
	for _, n := range needles {
		if !strings.Contains(haystack, n) {
			return false
		}
	}
	return true
}

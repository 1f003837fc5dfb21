package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spectrocloud/nodewright/internal/testenv/browser"
)

// pressInUI opens the web UI at url in a headless Chromium, goes to the step's page, and
// presses the button whose text is the step's, as a reader would; with a screenshot name, it
// first saves the page as NAME.png in $NODEWRIGHT_UI_SCREENSHOTS (docs/ui to regenerate the
// documentation's). It fails when the page refuses the press, saying what the page said.
func pressInUI(t *testing.T, url string, st step) {
	t.Helper()
	const width, height = 1366, 944
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browser.Options(t, width, height)...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	// The first run starts the browser, so it runs without a timeout (see chromedp.Run).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height), chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening the web UI in Chromium: %v", err)
	}
	// Each wait is one script that finds what it needs and acts in the same turn of the page,
	// so a re-render of the page (it re-renders on every change it is told of) cannot replace
	// an element between finding and using it.
	until := func(what, script string) string {
		t.Helper()
		deadline := time.Now().Add(patience)
		for {
			rctx, rcancel := context.WithTimeout(ctx, patience)
			got, err := chromedp.Run(rctx, chromedp.Evaluate[string](script))
			rcancel()
			if err == nil && got != "" {
				return got
			}
			if time.Now().After(deadline) {
				shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Fatalf("the web UI: timed out after %s waiting for %s (last error: %v); the page shows:\n%s", patience, what, err, shown)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	until("the page to connect to its event stream", `document.getElementById('conn').textContent.includes('Live') ? 'yes' : ''`)
	until("the "+st.page+" page", fmt.Sprintf(`(() => {
		const a = document.querySelector('nav a[data-page=%[1]s]');
		if (!a) return '';
		if (document.getElementById('page-' + %[1]s).hidden) { a.click(); return ''; }
		return 'yes';
	})()`, strconv.Quote(st.page)))
	find := fmt.Sprintf(`[...document.querySelectorAll('#page-' + %s + ' button')].find(b => b.textContent.trim() === %s)`,
		strconv.Quote(st.page), strconv.Quote(st.press))
	until("the button "+strconv.Quote(st.press), `(`+find+`) ? 'yes' : ''`)
	if dir := os.Getenv("NODEWRIGHT_UI_SCREENSHOTS"); dir != "" && st.shot != "" {
		sctx, scancel := context.WithTimeout(ctx, patience)
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		scancel()
		if err != nil {
			t.Fatalf("screenshot %s: %v", st.shot, err)
		}
		if err := os.WriteFile(filepath.Join(dir, st.shot+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	until("the button "+strconv.Quote(st.press)+" to be pressed", `(() => {
		const b = `+find+`;
		if (!b) return '';
		b.click();
		return 'yes';
	})()`)
	// The press is done once the button is gone (the step went on) or the page answered it.
	result := until("the page's answer to the press", fmt.Sprintf(`(() => {
		const bad = document.querySelector('#page-' + %[1]s + ' .approve-feedback.tone-bad');
		if (bad) return 'refused: ' + bad.textContent;
		const ok = document.querySelector('#page-' + %[1]s + ' .approve-feedback.tone-ok, #page-' + %[1]s + ' .approved');
		if (ok) return 'ok';
		return (%[2]s) ? '' : 'ok';
	})()`, strconv.Quote(st.page), find))
	if result != "ok" {
		t.Fatalf("the web UI did not take the press of %q: %s", st.press, result)
	}
}

package ui_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/ui"
)

// TestBrowserIsOpenedThroughAPrivateFile lets `ui` open "the browser", a fake xdg-open that
// records its arguments: the arguments, which every user of the machine can read in
// /proc/<pid>/cmdline, do not hold the token; the file they name is the user's alone (0600, in
// a 0700 folder), leads to a working page, and is gone once the UI stops.
func TestBrowserIsOpenedThroughAPrivateFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the fake browser opener is xdg-open")
	}
	startOperator(t)
	ns := env.Namespace(t)
	bin := t.TempDir()
	argsFile := filepath.Join(t.TempDir(), "args")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$0\" \"$@\" > %[1]s.new && mv %[1]s.new %[1]s\n", argsFile)
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	printed, stop := runUI(t, ui.Options{Namespace: ns, OpenBrowser: true})
	token := printed[strings.Index(printed, "#token=")+len("#token="):]
	var argv []string
	eventually(t, "the browser to be opened", patience, func() (bool, string) {
		data, err := os.ReadFile(argsFile)
		argv = strings.Fields(string(data))
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("xdg-open was run as %q", argv)
	for _, a := range argv {
		if strings.Contains(a, token) {
			t.Fatalf("the token is in the browser opener's arguments, readable by every local user: %q", argv)
		}
	}
	if len(argv) != 2 {
		t.Fatalf("xdg-open got %d arguments, want one", len(argv)-1)
	}
	u, err := url.Parse(argv[1])
	if err != nil || u.Scheme != "file" {
		t.Fatalf("xdg-open got %q, want a file:// URL (%v)", argv[1], err)
	}
	file := u.Path
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("the file %s has mode %o, want 600", file, mode)
	}
	dir, err := os.Stat(filepath.Dir(file))
	if err != nil {
		t.Fatal(err)
	}
	if mode := dir.Mode().Perm(); mode != 0o700 {
		t.Errorf("its folder %s has mode %o, want 700", filepath.Dir(file), mode)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), printed) {
		t.Errorf("the file does not lead to the printed URL:\n%s", data)
	}

	// The browser follows the file to the page, which connects and drops the token from the
	// address bar.
	p := openPage(t, u.String(), laptopWidth, laptopHeight)
	if href, _ := evaluate[string](p, `location.href`); strings.Contains(href, token) || !strings.HasPrefix(href, "http://127.0.0.1:") {
		t.Errorf("the page's address is %s", href)
	}

	stop()
	if _, err := os.Stat(filepath.Dir(file)); !os.IsNotExist(err) {
		t.Errorf("the file's folder is still there after the UI stopped: %v", err)
	}
}

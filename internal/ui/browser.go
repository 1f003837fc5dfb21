package ui

import (
	"bytes"
	"fmt"
	"html/template"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// launcherPage sends the browser on to the page, the token in the URL's fragment. It is
// opened from a file so that the token is never in a command line: the arguments of xdg-open,
// open and the browser they start are readable by every user of the machine
// (/proc/<pid>/cmdline). Jupyter opens its notebooks the same way.
var launcherPage = template.Must(template.New("open").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={{.}}">
<title>Opening Nodewright…</title>
</head>
<body>
<p>Opening the Nodewright UI. If nothing happens, <a href="{{.}}">open it</a>.</p>
</body>
</html>
`))

// launcher is the file the browser is opened with.
type launcher struct {
	dir, file string
}

// writeLauncher writes the page that leads to pageURL into a new folder only the user may
// read (0700, the file 0600).
func writeLauncher(pageURL string) (*launcher, error) {
	var page bytes.Buffer
	// pageURL is the UI's own http://127.0.0.1 URL: trusted as a URL.
	if err := launcherPage.Execute(&page, template.URL(pageURL)); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodewright-ui-")
	if err != nil {
		return nil, fmt.Errorf("making a folder for the browser's start page: %w", err)
	}
	l := &launcher{dir: dir, file: filepath.Join(dir, "open.html")}
	// MkdirTemp makes the folder 0700; say so in case a umask or an old Go did otherwise.
	if err := os.Chmod(dir, 0o700); err != nil {
		l.remove()
		return nil, fmt.Errorf("making the folder for the browser's start page private: %w", err)
	}
	f, err := os.OpenFile(l.file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		l.remove()
		return nil, fmt.Errorf("writing the browser's start page: %w", err)
	}
	_, err = f.Write(page.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.remove()
		return nil, fmt.Errorf("writing the browser's start page: %w", err)
	}
	return l, nil
}

// url is the launcher's file:// URL: it names the file, and holds no secret.
func (l *launcher) url() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(l.file)}).String()
}

func (l *launcher) remove() { _ = os.RemoveAll(l.dir) }

// openBrowser opens the page in the user's browser through a launcher file, if the machine
// has a way to; it returns the launcher, which the caller removes when the server stops, or
// nil. A failure is not fatal: the URL is printed anyway.
func openBrowser(pageURL string) (*launcher, error) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, nil // no opener: the printed URL is the way in, as always
	}
	l, err := writeLauncher(pageURL)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, l.url())
	if err := cmd.Start(); err != nil {
		l.remove()
		return nil, fmt.Errorf("opening the browser with %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	return l, nil
}

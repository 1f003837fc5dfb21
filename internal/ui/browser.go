package ui

import (
	"os/exec"
	"runtime"
)

// openBrowser opens url in the user's browser, if the machine has a way to; failures are
// ignored, since the URL is printed anyway.
func openBrowser(url string) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return
	}
	cmd := exec.Command(path, url)
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}

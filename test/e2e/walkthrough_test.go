package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestWalkthrough runs the console blocks of docs/local-site.md as a newcomer pastes them, on
// sites of its own started as `make demo` starts them: the first steps the doc has a newcomer
// try and the first walkthrough on the default (replicated) site, each on its own, and the
// second walkthrough on a single-node one. Every command must succeed and print the lines the
// doc shows under it, in that order (see docWalk), so that the doc cannot rot; a button the
// walkthrough has the reader press in the web UI is pressed in a headless Chromium. It needs
// root, as the storage network does; without root it is skipped unless
// NODEWRIGHT_REQUIRE_NETNS is set. The doc's two sh blocks are not run: the one that starts the
// single-node site is what this test does itself, and the other runs on a second machine.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three whole local sites")
	}
	requireRoot(t, "the walkthrough")
	doc := readDoc(t, "local-site.md")
	for _, w := range []struct {
		name, section, storage string
	}{
		// The part before the walkthroughs: the site as make demo leaves it, a migration,
		// the site's files, a restart.
		{"first-steps", "# The local site\n", "replicated"},
		{"replicated", "## Walkthrough\n", "replicated"},
		{"single-node", "## Walkthrough: single-node storage made replicated\n", "single-node"},
	} {
		t.Run(w.name, func(t *testing.T) {
			steps, err := docWalk(doc, w.section)
			if err != nil {
				t.Fatalf("docs/local-site.md: %v", err)
			}
			s := newSite(t)
			s.env = append(s.env, "NODEWRIGHT_DEMO_STORAGE="+w.storage)
			// Down even when up fails part way: what it started would run on.
			t.Cleanup(func() {
				if t.Failed() {
					s.dumpLogs(t)
				}
				s.run(t, "down")
			})
			s.run(t, "up")
			s.walkSteps(t, steps)
		})
	}
}

// requireRoot skips the test (what) without root, which the storage network needs to create
// network namespaces, or fails it when NODEWRIGHT_REQUIRE_NETNS is set.
func requireRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("NODEWRIGHT_REQUIRE_NETNS") != "" {
			t.Fatal(what + " needs root: the storage network creates network namespaces")
		}
		t.Skip(what + " needs root: the storage network creates network namespaces")
	}
}

// readDoc returns docs/name of the repository.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// walkSteps runs the steps in order on the site, as a reader pastes them (each export kept for
// the commands after it): each must succeed and print the lines the doc shows under it. A
// command the doc runs in the background (ending in "&") must print its lines while it runs,
// and is stopped when the test ends. A press is done in a headless Chromium, on the URL the
// last background command printed (the web UI's).
func (s *site) walkSteps(t *testing.T, steps []step) {
	t.Helper()
	var exports []string
	var url string
	for _, st := range steps {
		if st.press != "" {
			if url == "" {
				t.Fatalf("the doc presses %q before any command printed the web UI's URL", st.press)
			}
			pressInUI(t, url, st)
			continue
		}
		command := s.local(st.command)
		if strings.HasPrefix(command, "export ") {
			exports = append(exports, command)
		}
		script := append(exports[:len(exports):len(exports)], command)
		if background, ok := strings.CutSuffix(command, " &"); ok {
			script[len(script)-1] = background
			out := s.walkInBackground(t, strings.Join(script, "\n"), st)
			url = uiURL.FindString(out)
			continue
		}
		out, err := s.walk(strings.Join(script, "\n"))
		if err != nil {
			t.Fatalf("$ %s\n%s\n%v", st.command, out, err)
		}
		if missing := unmatched(st.want, out); missing != "" {
			t.Fatalf("$ %s\nprinted:\n%s\nwhich lacks, in the doc's order, the line\n%s", st.command, out, missing)
		}
	}
}

// uiURL is the URL `kubectl nodewright ui` prints.
var uiURL = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/#token=[^\s]+`)

// walkInBackground starts script in the background, as a reader's shell runs a command ending
// in "&", waits until it has printed the lines st wants, and returns what it printed by then;
// the process group is ended when the test ends.
func (s *site) walkInBackground(t *testing.T, script string, st step) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = s.root
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("$ %s\n%v", st.command, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-exited
	})
	deadline := time.Now().Add(patience)
	for {
		printed := out.String()
		if unmatched(st.want, printed) == "" {
			return printed
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("$ %s\nended (%v) after printing:\n%s", st.command, err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("$ %s\nprinted, in %s:\n%s\nwhich lacks, in the doc's order, the line\n%s", st.command, patience, printed, unmatched(st.want, printed))
		}
	}
}

// step is one command of a walkthrough and the lines the doc shows under it, or a button the
// doc has the reader press in the web UI: the line
//
//	<!-- walkthrough: on the workflows page, press "Approve Node2" (screenshot flip-demo) -->
//
// outside a console block, the screenshot being optional.
type step struct {
	command string
	want    []string
	// page, press and shot are a press: the UI's page, the button's text, and the name of
	// the screenshot taken before the press ("" for none).
	page, press, shot string
}

// pressLine is the doc's line for a press.
var pressLine = regexp.MustCompile(`^<!-- walkthrough: on the ([a-z]+) page, press "([^"]+)"(?: \(screenshot ([a-z0-9-]+)\))? -->$`)

// docWalk reads the console blocks of the doc's section that starts with heading (up to the
// next "## "), or of the whole doc when heading is "": a line starting with "$ " is a command,
// the lines under it what it prints.
func docWalk(doc, heading string) ([]step, error) {
	section := doc
	if heading != "" {
		i := strings.Index(doc, heading)
		if i < 0 {
			return nil, fmt.Errorf("no section %q", strings.TrimSpace(heading))
		}
		section = doc[i+len(heading):]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
	}
	var steps []step
	in := false
	for _, line := range strings.Split(section, "\n") {
		if m := pressLine.FindStringSubmatch(line); m != nil && !in {
			steps = append(steps, step{page: m[1], press: m[2], shot: m[3]})
			continue
		}
		switch {
		case !in && strings.HasPrefix(line, "<!-- walkthrough:"):
			return nil, fmt.Errorf("section %q: %q is not a walkthrough line (%s)", strings.TrimSpace(heading), line, pressLine)
		case line == "```console":
			in = true
		case in && line == "```":
			in = false
		case in && strings.HasPrefix(line, "$ "):
			steps = append(steps, step{command: strings.TrimPrefix(line, "$ ")})
		case in && (len(steps) == 0 || steps[len(steps)-1].press != ""):
			return nil, fmt.Errorf("section %q: a console block starts with %q, not a command", strings.TrimSpace(heading), line)
		case in:
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("section %q has no console block", strings.TrimSpace(heading))
	}
	return steps, nil
}

// unmatched returns the first line of want that out lacks, each wanted line matched after the
// one before it; "" when out has them all. A line matches when its pieces between "..." appear
// in it in order, the first at its start and the last at its end unless "..." stands there;
// runs of spaces count as one. A line "..." alone matches any lines.
func unmatched(want []string, out string) string {
	got := strings.Split(out, "\n")
	next := 0
	for _, w := range want {
		if strings.TrimSpace(w) == "..." {
			continue
		}
		found := false
		for next < len(got) {
			line := got[next]
			next++
			if matchLine(w, line) {
				found = true
				break
			}
		}
		if !found {
			return w
		}
	}
	return ""
}

func matchLine(pattern, line string) bool {
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	pattern, line = squeeze(pattern), squeeze(line)
	pieces := strings.Split(pattern, "...")
	for i := range pieces {
		pieces[i] = strings.TrimSpace(pieces[i])
	}
	rest := line
	for i, p := range pieces {
		if p == "" {
			continue
		}
		k := strings.Index(rest, p)
		if k < 0 || (i == 0 && k != 0) {
			return false
		}
		rest = rest[k+len(p):]
		if i == len(pieces)-1 && rest != "" {
			return false
		}
	}
	return true
}

// local is a command of the doc for this site: the doc's .demo folder is the site's.
func (s *site) local(command string) string {
	command = strings.ReplaceAll(command, "$PWD/.demo/", s.dir+"/")
	return strings.ReplaceAll(command, ".demo/", s.dir+"/")
}

// walk runs script with bash at the repository root, in the site's environment (so
// hack/demo.sh is this site's), and returns what it printed; a command still running after
// twice patience is killed (the doc's waits give up after patience, saying why).
func (s *site) walk(script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = s.root
	cmd.Env = s.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("still running after %s: %w", 2*patience, err)
	}
	return out.String(), err
}

// TestWalkthroughMatching: the walkthrough's check fails on a line missing, out of order or
// different, and ignores what "..." stands for.
func TestWalkthroughMatching(t *testing.T) {
	out := "NAME      PHASE\nto-lacp   Running   12s\nResult: Succeeded after 54s: every node\nexit status 1\n"
	for _, c := range []struct {
		want    []string
		missing string
	}{
		{[]string{"NAME PHASE", "to-lacp Running ...", "Result: Succeeded after ...: every node"}, ""},
		{[]string{"...", "exit status 1"}, ""},
		{[]string{"Result: Succeeded after ...: every node", "to-lacp Running ..."}, "to-lacp Running ..."},
		{[]string{"to-lacp Running"}, "to-lacp Running"},
		{[]string{"Result: RolledBack after ..."}, "Result: RolledBack after ..."},
		{[]string{"... Running ..."}, ""},
		{[]string{"exit status 0"}, "exit status 0"},
	} {
		if got := unmatched(c.want, out); got != c.missing {
			t.Errorf("unmatched(%q) = %q, want %q", c.want, got, c.missing)
		}
	}
	if _, err := docWalk("## Walkthrough\n```console\nno command\n```\n", "## Walkthrough\n"); err == nil {
		t.Error("a console block without a command was read")
	}
	doc := "```console\n$ a\nA\n```\n## Two\n```sh\nnot run\n```\n```console\n$ b\n```\n"
	if steps, err := docWalk(doc, ""); err != nil || len(steps) != 2 || steps[0].command != "a" || steps[1].command != "b" {
		t.Errorf("the whole doc's console blocks: %+v, %v", steps, err)
	}
	if steps, err := docWalk(doc, "## Two\n"); err != nil || len(steps) != 1 || steps[0].command != "b" {
		t.Errorf("section Two's console blocks: %+v, %v", steps, err)
	}
	pressed := "```console\n$ ui &\nURL\n```\n<!-- walkthrough: on the workflows page, press \"Approve Node2\" (screenshot flip-demo) -->\n```console\n$ b\n```\n"
	steps, err := docWalk(pressed, "")
	if err != nil || len(steps) != 3 || steps[1].page != "workflows" || steps[1].press != "Approve Node2" || steps[1].shot != "flip-demo" {
		t.Errorf("a press between console blocks: %+v, %v", steps, err)
	}
	for _, bad := range []string{
		"<!-- walkthrough: press Approve -->\n",
		"<!-- walkthrough: on the workflows page, press \"Approve\" -->\n```console\nno command\n```\n",
	} {
		if _, err := docWalk("```console\n$ a\n```\n"+bad, ""); err == nil {
			t.Errorf("docWalk read %q", bad)
		}
	}
}

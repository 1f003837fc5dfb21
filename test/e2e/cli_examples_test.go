package e2e

import (
	"testing"
)

// TestCLIExamples runs the examples of docs/cli.md as a reader pastes them, in the page's
// order, on one replicated local site of its own started as `make demo` starts it: every
// command of its console blocks must succeed (those that fail on purpose say so with
// `|| echo "exit status $?"`) and print the lines the doc shows under it, in that order (see
// docWalk), so that the examples cannot drift from what the binaries print. The doc brings the
// site to the state its examples need itself (the handover before the flip). It needs root, as
// the storage network does; without root it is skipped unless NODEWRIGHT_REQUIRE_NETNS is set.
func TestCLIExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole local site")
	}
	requireRoot(t, "the CLI example run")
	steps, err := docWalk(readDoc(t, "cli.md"), "")
	if err != nil {
		t.Fatalf("docs/cli.md: %v", err)
	}
	s := startSite(t)
	s.walkSteps(t, steps)
}

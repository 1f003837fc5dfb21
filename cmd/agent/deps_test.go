package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden says whether the agent must not link pkg: client-go and controller-runtime (its
// package scheme aside, which the API types' SchemeBuilder is, a few lines) would triple the
// agent's memory (docs/agent.md); the agent's own client is internal/kubelite.
func forbidden(pkg string) bool {
	if pkg == "sigs.k8s.io/controller-runtime/pkg/scheme" {
		return false
	}
	for _, prefix := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime", "k8s.io/component-helpers"} {
		if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
			return true
		}
	}
	return false
}

// TestTheAgentLinksNoClientGo: the agent links neither client-go nor controller-runtime; the
// failure names the chain of imports that pulls one in. (Its build for the local site, tag
// nodewright_site, links client-go through the site's network harness, test/site/netsite; it
// is not what runs on a node.)
func TestTheAgentLinksNoClientGo(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	var root string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
		root = fields[0] // go list -deps prints the package itself last
	}
	// Breadth first from the agent: the shortest chain of imports to each package.
	via := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, imp := range imports[pkg] {
			if _, seen := via[imp]; !seen {
				via[imp] = pkg
				queue = append(queue, imp)
			}
		}
	}
	reported := map[string]bool{}
	for pkg := range via {
		if !forbidden(pkg) {
			continue
		}
		// The chain from the agent to its first forbidden package, reported once.
		chain := []string{pkg}
		for p := via[pkg]; p != ""; p = via[p] {
			chain = append([]string{p}, chain...)
		}
		first := pkg
		for i, p := range chain {
			if forbidden(p) {
				first, chain = p, chain[:i+1]
				break
			}
		}
		if !reported[first] {
			reported[first] = true
			t.Errorf("the agent links %s: %s", first, strings.Join(chain, " → "))
		}
	}
}

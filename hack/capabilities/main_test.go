package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/storage"
)

// TestPageIsCurrent fails when docs/capabilities.md is not what the code declares now.
func TestPageIsCurrent(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "capabilities.md"))
	if err != nil {
		t.Fatalf("reading docs/capabilities.md: %v; create it with: %s", err, command)
	}
	if string(got) == want {
		return
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		g, w := at(gotLines, i), at(wantLines, i)
		if g != w {
			t.Fatalf("docs/capabilities.md is out of date; regenerate it with: %s\nfirst difference, line %d:\n  file: %s\n  code: %s", command, i+1, g, w)
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// TestEveryCapabilityIsRendered fails when a method is added to storage.Backend or
// hostos.Provider without a row on the page, or a row names a method that is gone.
func TestEveryCapabilityIsRendered(t *testing.T) {
	var storageMethods []string
	for _, r := range storageRows {
		storageMethods = append(storageMethods, r.method)
	}
	var hostMethods []string
	for _, r := range hostRows {
		hostMethods = append(hostMethods, r.method)
	}
	for _, op := range hostOps {
		hostMethods = append(hostMethods, op.method)
	}
	for _, c := range []struct {
		iface    reflect.Type
		rendered []string
	}{
		{reflect.TypeFor[storage.Backend](), storageMethods},
		{reflect.TypeFor[hostos.Provider](), hostMethods},
	} {
		declared := []string{}
		for i := range c.iface.NumMethod() {
			// Name is the column heading; Facts reads the live host, which is no capability.
			if name := c.iface.Method(i).Name; name != "Name" && name != "Facts" {
				declared = append(declared, name)
			}
		}
		rendered := slices.Sorted(slices.Values(c.rendered))
		if !slices.Equal(declared, rendered) {
			t.Errorf("%s declares %v but the page renders %v", c.iface, declared, rendered)
		}
	}
}

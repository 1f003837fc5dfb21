package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/profile"
)

// The help promises the cosign commands of docs/profile.md; keep them in step.
func TestHelpMatchesTheDocs(t *testing.T) {
	docs, err := os.ReadFile("../../docs/profile.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{
		"cosign sign-blob --key cosign.key --tlog-upload=false munich.json",
		"nodewright-profile canonical munich.yaml > munich.json",
	} {
		if !strings.Contains(usage, cmd) || !strings.Contains(string(docs), cmd) {
			t.Errorf("%q is not in both the help and docs/profile.md", cmd)
		}
	}
	if profile.EncodingVersion != 1 || !strings.Contains(string(docs), "## Canonical encoding v1") {
		t.Error("docs/profile.md does not define the canonical encoding version the code writes")
	}
}
